//! The authorization matrix on the real API server: callers with
//! TokenRequest tokens of several RBAC shapes and with client certificates
//! of several subject shapes (signed by the CA the API server trusts for
//! client certificates, and kube-fanout too) ask Watch, List, Get and
//! ListResources of configmaps and secrets in two namespaces and
//! cluster-wide, full and metadata-only. Every cell is compared with the
//! API server's own answer to the same credential making the same request:
//! a leak (kube-fanout serves what the API server refuses, or more objects)
//! fails the test; what kube-fanout refuses and the API server serves (an
//! over-denial) is listed and must be the list expected. Each
//! certificate's user is also compared with the API server's own view of
//! it (SelfSubjectReview) and with kube-fanout's mapping.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use futures::{Stream, StreamExt};
use k8s_openapi::api::{
    authentication::v1::SelfSubjectReview,
    authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
    core::v1::{ConfigMap, Secret},
    rbac::v1::{PolicyRule, Subject},
};
use kube::{
    Resource,
    api::{Api, ListParams, PostParams, WatchEvent, WatchParams},
};
use kube_fanout::security::AuthOptions;
use kube_fanout_auth::x509::{CertificateUser, user_of};
use kube_fanout_client::{
    Client,
    proto::{GetRequest, ListRequest, WatchRequest},
};
use kube_fanout_listener::tls::TlsFiles;
use kube_fanout_tests::{
    clients::over_tls,
    controlplane::{ControlPlane, Options, pem_der},
    eventually::eventually,
    fanout::Fanout,
    pki::{
        Ca, Pair,
        subject::{
            BMP_STRING, COMMON_NAME, ORGANIZATION, PRINTABLE_STRING, T61_STRING, attribute, cn,
            name, o, uid,
        },
    },
    rbac::{grant, group, rule, service_account, user},
    support::{create_configmap, create_namespace, initial_keys, object_key},
};
use kube_fanout_x509::handshake;
use serde::de::DeserializeOwned;

/// The audience of the callers' tokens that kube-fanout accepts.
const AUDIENCE: &str = "kube-fanout";

/// The objects, `namespace/name`, by resource.
const CONFIGMAPS: &[(&str, &str)] = &[("a", "cm-1"), ("a", "cm-2"), ("b", "cm-1")];
const SECRETS: &[(&str, &str)] = &[("a", "s-1"), ("b", "s-1")];

/// Namespaces asked ("" is cluster-wide).
const SCOPES: &[&str] = &["a", "b", ""];

/// A caller: its credentials, and what the API server does with them.
struct Caller {
    name: String,
    token: Option<String>,
    certificate: Option<Pair>,
    /// The API server refuses the certificate at the TLS handshake.
    handshake_refused: bool,
}

/// An answer: allowed, with the objects (`namespace/name`) it showed, or
/// refused.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Allowed(BTreeSet<String>),
    Refused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Get,
    List,
    Watch,
}

/// One request of the matrix.
#[derive(Debug, Clone)]
struct Ask {
    verb: Verb,
    resource: &'static str,
    namespace: &'static str,
    name: &'static str,
    metadata_only: bool,
}

impl fmt::Display for Ask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {}", self.verb, self.resource)?;
        if self.verb == Verb::Get {
            write!(f, " {}/{}", self.namespace, self.name)?;
        } else {
            write!(f, " in {:?}", self.namespace)?;
        }
        if self.metadata_only {
            write!(f, " (metadata only)")?;
        }
        Ok(())
    }
}

/// Every request of the matrix.
fn asks() -> Vec<Ask> {
    let mut asks = Vec::new();
    for metadata_only in [false, true] {
        for (resource, objects) in [("configmaps", CONFIGMAPS), ("secrets", SECRETS)] {
            for &(namespace, name) in objects {
                asks.push(Ask {
                    verb: Verb::Get,
                    resource,
                    namespace,
                    name,
                    metadata_only,
                });
            }
            for verb in [Verb::List, Verb::Watch] {
                for &namespace in SCOPES {
                    asks.push(Ask {
                        verb,
                        resource,
                        namespace,
                        name: "",
                        metadata_only,
                    });
                }
            }
        }
    }
    asks
}

/// Waits until the API server's RBAC authorizer (fed by an informer, a
/// moment behind the writes) allows `user` in `groups` to `verb`.
async fn until_allowed(
    admin: &kube::Client,
    user: &str,
    groups: &[String],
    verb: &str,
    resource: &str,
    namespace: &str,
) -> Result<()> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(groups.to_vec()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                resource: Some(resource.into()),
                namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
                name: Some("cm-1".into()).filter(|_| verb == "get"),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(admin.clone());
    eventually(format!(
        "the API server allowing {user} to {verb} {resource} in {namespace:?}"
    ))
    .within(Duration::from_secs(20))
    .until(
        async || Ok(api.create(&PostParams::default(), &review).await?.status),
        |status| status.as_ref().is_some_and(|s| s.allowed),
    )
    .await?;
    Ok(())
}

fn object_name(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// The objects of a watch's initial events, up to the bookmark that ends
/// them.
async fn initial_events<T: Resource>(
    stream: impl Stream<Item = kube::Result<WatchEvent<T>>>,
) -> Result<BTreeSet<String>> {
    let mut stream = std::pin::pin!(stream);
    let mut seen = BTreeSet::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .context("no initial-events-end bookmark within 10 s")?
            .context("the watch ended")??;
        match event {
            WatchEvent::Added(o) => {
                seen.insert(object_name(o.meta()));
            }
            WatchEvent::Bookmark(b)
                if b.metadata
                    .annotations
                    .contains_key("k8s.io/initial-events-end") =>
            {
                return Ok(seen);
            }
            WatchEvent::Bookmark(_) => {}
            other => bail!("unexpected event in the initial events: {other:?}"),
        }
    }
}

/// The API server's answer to `ask` through `client`.
async fn api_answer<K>(client: &kube::Client, ask: &Ask, caller: &Caller) -> Result<Answer>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + fmt::Debug
        + 'static,
    K::DynamicType: Default,
{
    let api: Api<K> = if ask.namespace.is_empty() {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), ask.namespace)
    };
    let lp = ListParams::default();
    let wp = WatchParams::default().initial_events();
    let answer: kube::Result<BTreeSet<String>> = match (ask.verb, ask.metadata_only) {
        (Verb::Get, false) => api
            .get(ask.name)
            .await
            .map(|o| [object_name(o.meta())].into()),
        (Verb::Get, true) => api
            .get_metadata(ask.name)
            .await
            .map(|o| [object_name(o.meta())].into()),
        (Verb::List, false) => api
            .list(&lp)
            .await
            .map(|l| l.items.iter().map(|o| object_name(o.meta())).collect()),
        (Verb::List, true) => api
            .list_metadata(&lp)
            .await
            .map(|l| l.items.iter().map(|o| object_name(o.meta())).collect()),
        (Verb::Watch, false) => match api.watch(&wp, "").await {
            Ok(stream) => return Ok(Answer::Allowed(initial_events(stream).await?)),
            Err(err) => Err(err),
        },
        (Verb::Watch, true) => match api.watch_metadata(&wp, "").await {
            Ok(stream) => return Ok(Answer::Allowed(initial_events(stream).await?)),
            Err(err) => Err(err),
        },
    };
    match answer {
        Ok(objects) => Ok(Answer::Allowed(objects)),
        Err(kube::Error::Api(e)) if e.code == 401 || e.code == 403 => Ok(Answer::Refused),
        // A certificate the API server cannot parse fails the handshake:
        // no HTTP answer at all, a refusal all the same.
        Err(err) if caller.handshake_refused => {
            tracing::debug!(caller = caller.name, error = %err, "refused at the handshake");
            Ok(Answer::Refused)
        }
        Err(err) => Err(anyhow::Error::from(err).context(format!("{} {ask}", caller.name))),
    }
}

/// kube-fanout's answer to `ask` by `caller` (`None`: its connection
/// failed at the handshake).
async fn fanout_answer(client: Option<&mut Client>, ask: &Ask, caller: &Caller) -> Result<Answer> {
    let Some(client) = client else {
        return Ok(Answer::Refused);
    };
    let resource = Some(kube_fanout_client::resource(&format!(
        "v1/{}",
        ask.resource
    ))?);
    let grpc = client.grpc();
    let answer = match ask.verb {
        Verb::Get => grpc
            .get(GetRequest {
                resource,
                namespace: ask.namespace.into(),
                name: ask.name.into(),
                metadata_only: ask.metadata_only,
            })
            .await
            .map(|r| object_key(&r.into_inner().object).map(|o| [o].into())),
        Verb::List => grpc
            .list(ListRequest {
                resource,
                namespace: ask.namespace.into(),
                metadata_only: ask.metadata_only,
                ..ListRequest::default()
            })
            .await
            .map(|r| {
                r.into_inner()
                    .objects
                    .iter()
                    .map(|o| object_key(o))
                    .collect()
            }),
        Verb::Watch => match grpc
            .watch(WatchRequest {
                resource,
                namespace: ask.namespace.into(),
                send_initial_events: true,
                allow_bookmarks: true,
                metadata_only: ask.metadata_only,
                ..WatchRequest::default()
            })
            .await
        {
            Ok(stream) => Ok(Ok(initial_keys(&mut stream.into_inner()).await?)),
            Err(status) => Err(status),
        },
    };
    match answer {
        Ok(objects) => Ok(Answer::Allowed(objects?)),
        Err(status)
            if matches!(
                status.code(),
                tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
            ) =>
        {
            Ok(Answer::Refused)
        }
        // A certificate Go cannot parse fails the handshake, as on the API
        // server: TLS 1.3 clients learn it at their first request, as a
        // transport error rather than a status of the server's.
        Err(status) if caller.handshake_refused && transport_failure(&status) => {
            Ok(Answer::Refused)
        }
        Err(status) => bail!("{ask}: unexpected status {status:?}"),
    }
}

/// Whether `status` is the client's own, for a connection that failed (at
/// the handshake), not one kube-fanout answered.
fn transport_failure(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown
    ) && !status.metadata().contains_key("content-type")
}

/// kube-fanout's connection for `caller`: `None` if it failed at the
/// handshake, which must happen exactly for the callers whose handshake
/// the API server fails.
async fn fanout_client(
    fanout: &Fanout,
    serving_ca: &Ca,
    caller: &Caller,
) -> Result<Option<Client>> {
    match connect(fanout, serving_ca, caller).await {
        Ok(client) => Ok(Some(client)),
        Err(err) if caller.handshake_refused => {
            tracing::debug!(caller = caller.name, error = %err, "refused at the handshake");
            Ok(None)
        }
        Err(err) => Err(err.context(caller.name.clone())),
    }
}

/// What kube-fanout showed beyond the API server (a leak), and what the
/// API server showed beyond kube-fanout (an over-denial).
fn compare(ours: &Answer, theirs: &Answer) -> (Option<String>, Option<String>) {
    match (ours, theirs) {
        (Answer::Allowed(_), Answer::Refused) => {
            (Some("served, refused by the API server".into()), None)
        }
        (Answer::Refused, Answer::Allowed(_)) => {
            (None, Some("refused, served by the API server".into()))
        }
        (Answer::Refused, Answer::Refused) => (None, None),
        (Answer::Allowed(ours), Answer::Allowed(theirs)) => {
            let more: Vec<_> = ours.difference(theirs).collect();
            let fewer: Vec<_> = theirs.difference(ours).collect();
            (
                (!more.is_empty())
                    .then(|| format!("objects the API server does not show: {more:?}")),
                (!fewer.is_empty()).then(|| format!("objects missing: {fewer:?}")),
            )
        }
    }
}

/// Who the API server says `client`'s credentials are (SelfSubjectReview).
async fn api_view(client: kube::Client) -> Result<String> {
    let review = Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await;
    Ok(match review {
        Ok(review) => {
            let info = review
                .status
                .and_then(|s| s.user_info)
                .context("a SelfSubjectReview without user info")?;
            described(
                &info.username.unwrap_or_default(),
                &info.uid.unwrap_or_default(),
                &info.groups.unwrap_or_default(),
                &info.extra.unwrap_or_default(),
            )
        }
        // The anonymous user may not review itself; the refusal names it.
        Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("system:anonymous") => {
            "anonymous".to_owned()
        }
        Err(kube::Error::Api(e)) => bail!("SelfSubjectReview: {e:?}"),
        Err(_) => "refused at the handshake".to_owned(),
    })
}

fn described(
    user: &str,
    uid: &str,
    groups: &[String],
    extra: &BTreeMap<String, Vec<String>>,
) -> String {
    format!("user {user:?} uid {uid:?} groups {groups:?} extra {extra:?}")
}

/// The API server's count of failed TLS handshakes (its metrics).
async fn handshake_errors(admin: &kube::Client) -> Result<f64> {
    let metrics = admin
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await?;
    Ok(metrics
        .lines()
        .find_map(|l| l.strip_prefix("apiserver_tls_handshake_errors_total "))
        .map(str::parse)
        .transpose()?
        .unwrap_or(0.0))
}

/// Compares the API server's view of each certificate caller with
/// kube-fanout's mapping of its certificate: the same user, UID, groups
/// and extra; without a user, the token's identity or the anonymous user;
/// refused at the handshake when Go cannot parse the certificate.
async fn identity_differences(cp: &ControlPlane, callers: &[Caller]) -> Result<Vec<String>> {
    let mut differences = Vec::new();
    for caller in callers {
        let Some(pair) = &caller.certificate else {
            continue;
        };
        let der = pem_der(&pair.cert)?;
        let mapped = handshake::client_chain([der.as_slice()]).map(|chain| user_of(&chain[0]));
        let token = caller.token.as_deref();
        let failed_handshakes = handshake_errors(&cp.client).await?;
        let seen = api_view(cp.client_with_certificate(&pair.cert, &pair.key, token)?)
            .await
            .with_context(|| caller.name.clone())?;
        // No HTTP answer must mean the API server's handshake failed (its
        // own count of them says so), not some other transport fault.
        if seen == "refused at the handshake"
            && handshake_errors(&cp.client).await? <= failed_handshakes
        {
            differences.push(format!(
                "{}: no HTTP answer, but no TLS handshake error counted",
                caller.name
            ));
        }
        let expected = match (&mapped, token) {
            (Ok(CertificateUser::User(id)), _) => {
                described(&id.user, &id.uid, &id.groups, &id.extra)
            }
            (Ok(CertificateUser::NoUser(_)), Some(token)) => {
                api_view(cp.client_with_token(token)?).await?
            }
            (Ok(CertificateUser::NoUser(_)), None) => "anonymous".to_owned(),
            (Err(_), _) => "refused at the handshake".to_owned(),
        };
        println!(
            "{}: API server: {seen}; kube-fanout: {mapped:?}",
            caller.name
        );
        if seen != expected {
            differences.push(format!(
                "{}: the API server sees {seen}, kube-fanout maps {expected}",
                caller.name
            ));
        }
    }
    Ok(differences)
}

/// A certificate that names no user is refused with a status that says
/// so; one that the API server cannot parse fails kube-fanout's handshake
/// as it fails the API server's.
async fn refusals_say_why(fanout: &Fanout, serving_ca: &Ca, callers: &[Caller]) -> Result<()> {
    let unparsable = callers
        .iter()
        .find(|c| c.name == "certificate CN=cm-reader,O=<invalid PrintableString> with a token")
        .context("no such caller")?;
    let refused = match connect(fanout, serving_ca, unparsable).await {
        Err(_) => true,
        Ok(mut client) => client
            .grpc()
            .list(ListRequest {
                resource: Some(kube_fanout_client::resource("v1/configmaps")?),
                namespace: "a".into(),
                ..ListRequest::default()
            })
            .await
            .is_err_and(|status| transport_failure(&status)),
    };
    assert!(refused, "the unparsable certificate got past the handshake");
    for (caller, expected) in [(
        "certificate CN=cm-reader,CN=",
        "the client certificate names no user (its subject has no common name (CN), or its last one is empty)",
    )] {
        let caller = callers
            .iter()
            .find(|c| c.name == caller)
            .context("no such caller")?;
        let mut client = connect(fanout, serving_ca, caller).await?;
        let status = client
            .grpc()
            .list(ListRequest {
                resource: Some(kube_fanout_client::resource("v1/configmaps")?),
                namespace: "a".into(),
                ..ListRequest::default()
            })
            .await
            .expect_err("refused");
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
        assert!(status.message().contains(expected), "{status:?}");
    }
    Ok(())
}

/// A kube-fanout client with `caller`'s credentials.
async fn connect(fanout: &Fanout, serving_ca: &Ca, caller: &Caller) -> Result<Client> {
    Ok(over_tls(
        fanout.addr,
        &serving_ca.pem(),
        caller.certificate.as_ref(),
        caller.token.as_deref(),
    )
    .connect()
    .await?)
}

#[tokio::test]
async fn every_cell_is_the_api_servers_answer_for_tokens_and_certificates_of_every_shape()
-> Result<()> {
    let started = Instant::now();
    let dir = tempfile::tempdir()?;
    let (serving_ca, client_ca) = (Ca::new("serving")?, Ca::new("clients")?);
    let client_ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&client_ca_file, client_ca.pem())?;
    let cp = ControlPlane::start_with(Options {
        extra_args: vec![format!("--client-ca-file={}", client_ca_file.display())],
        ..Options::default()
    })
    .await?;
    let admin = cp.client.clone();
    for ns in ["a", "b", "g"] {
        create_namespace(&admin, ns).await?;
    }
    for (ns, name) in CONFIGMAPS {
        create_configmap(&admin, ns, name, "v").await?;
    }
    for (ns, name) in SECRETS {
        let mut secret = Secret::default();
        secret.metadata.name = Some((*name).into());
        Api::<Secret>::namespaced(admin.clone(), ns)
            .create(&PostParams::default(), &secret)
            .await?;
    }

    // RBAC shapes. ServiceAccounts (tokens): none; one namespace; list
    // without watch; get of one named object; cluster-wide configmaps but
    // not secrets; through their namespace's group; secrets listed and
    // watched (the metadata-only reader's grant). Users and a group, for
    // certificates: cm-reader may read everything (the one a confused
    // certificate would become), mallory may only list configmaps in b.
    let all = ["get", "list", "watch"];
    let grants: Vec<(&str, &str, Vec<PolicyRule>, Subject)> = vec![
        (
            "a",
            "ns-reader",
            vec![rule(&all, "configmaps")],
            service_account("a", "ns-reader"),
        ),
        (
            "a",
            "list-only",
            vec![rule(&["list"], "configmaps")],
            service_account("a", "list-only"),
        ),
        (
            "a",
            "get-one",
            vec![PolicyRule {
                resource_names: Some(vec!["cm-1".into()]),
                ..rule(&["get"], "configmaps")
            }],
            service_account("a", "get-one"),
        ),
        (
            "",
            "cluster-cm",
            vec![rule(&all, "configmaps")],
            service_account("b", "cluster-cm"),
        ),
        (
            "b",
            "grouped",
            vec![rule(&all, "secrets")],
            group("system:serviceaccounts:g"),
        ),
        (
            "a",
            "secret-meta",
            vec![rule(&["list", "watch"], "secrets")],
            service_account("a", "secret-meta"),
        ),
        (
            "",
            "cm-reader",
            vec![rule(&all, "configmaps"), rule(&all, "secrets")],
            user("cm-reader"),
        ),
        (
            "b",
            "mallory",
            vec![rule(&["list"], "configmaps")],
            user("mallory"),
        ),
        (
            "a",
            "secret-readers",
            vec![rule(&all, "secrets")],
            group("secret-readers"),
        ),
        (
            "a",
            "uid-user",
            vec![rule(&["get"], "configmaps")],
            user("uid-user"),
        ),
    ];
    for (namespace, name, rules, who) in &grants {
        grant(&admin, namespace, name, rules.clone(), vec![who.clone()]).await?;
    }
    for (namespace, _, rules, who) in &grants {
        let (user, groups) = match who.kind.as_str() {
            "ServiceAccount" => {
                let namespace = who.namespace.as_deref().unwrap_or_default();
                (
                    format!("system:serviceaccount:{namespace}:{}", who.name),
                    vec![
                        "system:serviceaccounts".to_owned(),
                        format!("system:serviceaccounts:{namespace}"),
                    ],
                )
            }
            "Group" => ("someone".to_owned(), vec![who.name.clone()]),
            _ => (who.name.clone(), vec![]),
        };
        let probe = &rules[0];
        let resource = &probe.resources.as_ref().expect("a resource")[0];
        until_allowed(&admin, &user, &groups, &probe.verbs[0], resource, namespace).await?;
    }

    let token = |namespace: &'static str, name: &'static str| {
        let cp = &cp;
        async move {
            let issuer = format!("{}/", cp.server_url);
            cp.service_account_token(namespace, name, &[AUDIENCE, &issuer])
                .await
        }
    };
    let mut callers = Vec::new();
    for (namespace, name) in [
        ("a", "none"),
        ("a", "ns-reader"),
        ("a", "list-only"),
        ("a", "get-one"),
        ("b", "cluster-cm"),
        ("g", "grouped"),
        ("a", "secret-meta"),
    ] {
        callers.push(Caller {
            name: format!("token {namespace}/{name}"),
            token: Some(token(namespace, name).await?),
            certificate: None,
            handshake_refused: false,
        });
    }
    let certificate = |what: &str, subject: Vec<u8>, token: Option<String>, refused: bool| {
        Ok::<_, anyhow::Error>(Caller {
            name: format!("certificate {what}"),
            token,
            certificate: Some(client_ca.client_with_subject(&subject)?),
            handshake_refused: refused,
        })
    };
    let ns_reader_token = token("a", "ns-reader").await?;
    callers.extend([
        // mallory to the API server: the last CN, not the first.
        certificate(
            "CN=cm-reader,CN=mallory",
            name(&[&[cn("cm-reader")], &[cn("mallory")]]),
            None,
            false,
        )?,
        // One multi-valued RDN, read in its encoded order.
        certificate(
            "CN=cm-reader+O=x+CN=mallory",
            name(&[&[cn("cm-reader"), o("x"), cn("mallory")]]),
            None,
            false,
        )?,
        // Groups from every O: the second one is bound.
        certificate(
            "CN=olga,O=nobody,O=secret-readers",
            name(&[&[cn("olga")], &[o("nobody")], &[o("secret-readers")]]),
            None,
            false,
        )?,
        // The last CN is empty: no user, whatever the first says.
        certificate(
            "CN=cm-reader,CN=",
            name(&[&[cn("cm-reader")], &[cn("")]]),
            None,
            false,
        )?,
        // No user from the certificate: the token decides, not the O.
        certificate(
            "CN=,O=secret-readers with a token",
            name(&[&[cn("")], &[o("secret-readers")]]),
            Some(ns_reader_token),
            false,
        )?,
        // The Kubernetes UID attribute.
        certificate(
            "CN=uid-user,UID=u-1",
            name(&[&[cn("uid-user")], &[uid("u-1")]]),
            None,
            false,
        )?,
        // An O that is no valid PrintableString: Go cannot parse it, and
        // the API server fails the handshake.
        certificate(
            "CN=cm-reader,O=<invalid PrintableString>",
            name(&[
                &[cn("cm-reader")],
                &[attribute(ORGANIZATION, PRINTABLE_STRING, b"bad_value")],
            ]),
            None,
            true,
        )?,
        // The same with a valid token: still refused (the API server's
        // handshake fails before any token is read).
        certificate(
            "CN=cm-reader,O=<invalid PrintableString> with a token",
            name(&[
                &[cn("cm-reader")],
                &[attribute(ORGANIZATION, PRINTABLE_STRING, b"bad_value")],
            ]),
            Some(token("a", "ns-reader").await?),
            true,
        )?,
        // Other string types Go reads: T.61 as Latin-1, BMPString as UCS-2.
        certificate(
            "CN=<T61String m\\xe9llory>",
            name(&[&[attribute(COMMON_NAME, T61_STRING, b"m\xe9llory")]]),
            None,
            false,
        )?,
        certificate(
            "CN=<BMPString mallory\u{2603}>",
            name(&[&[attribute(
                COMMON_NAME,
                BMP_STRING,
                &"mallory\u{2603}"
                    .encode_utf16()
                    .flat_map(u16::to_be_bytes)
                    .collect::<Vec<u8>>(),
            )]]),
            None,
            false,
        )?,
    ]);

    let (cert, key) = serving_ca.serving()?.write_to(dir.path())?;
    let files = TlsFiles {
        cert,
        key,
        client_ca: Some(client_ca_file),
    };
    let fanout = Fanout::start_with(admin.clone(), &["v1/configmaps", "v1/secrets"], |o| {
        // The matrix asks for every cell's answer, refusals included, all
        // from 127.0.0.1: past the failure budget the source would be shut
        // out (RESOURCE_EXHAUSTED, connections closed), which the flood
        // test proves; here each refusal must be the API server's own.
        o.connections.auth_failures = None;
        o.security.tls = Some(files);
        o.security.auth = Some(AuthOptions {
            audiences: vec![AUDIENCE.into()],
            ..AuthOptions::default()
        });
    })
    .await?;
    fanout.wait_synced().await?;

    let identities = identity_differences(&cp, &callers).await?;
    refusals_say_why(&fanout, &serving_ca, &callers).await?;

    let asks = asks();
    let (mut cells, mut allowed) = (0, 0);
    let (mut leaks, mut over_denials) = (Vec::new(), Vec::new());
    for caller in &callers {
        let api_client = match &caller.certificate {
            Some(pair) => {
                cp.client_with_certificate(&pair.cert, &pair.key, caller.token.as_deref())?
            }
            None => cp.client_with_token(caller.token.as_deref().expect("a credential"))?,
        };
        let mut client = fanout_client(&fanout, &serving_ca, caller).await?;
        let mut listable: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for ask in &asks {
            let theirs = match ask.resource {
                "configmaps" => api_answer::<ConfigMap>(&api_client, ask, caller).await?,
                _ => api_answer::<Secret>(&api_client, ask, caller).await?,
            };
            let ours = fanout_answer(client.as_mut(), ask, caller).await?;
            cells += 1;
            if matches!(ours, Answer::Allowed(_)) {
                allowed += 1;
            }
            if ask.verb == Verb::List && !ask.metadata_only && matches!(theirs, Answer::Allowed(_))
            {
                listable
                    .entry(ask.namespace)
                    .or_default()
                    .insert(ask.resource);
            }
            let (leak, over) = compare(&ours, &theirs);
            if let Some(leak) = leak {
                leaks.push(format!("{}: {ask}: {leak}", caller.name));
            }
            if let Some(over) = over {
                over_denials.push(format!("{}: {ask}: {over}", caller.name));
            }
        }
        // ListResources: the types the caller may list in the scope.
        for &namespace in SCOPES {
            let expected = listable.remove(namespace).unwrap_or_default();
            let listed = match client.as_mut() {
                Some(client) => client.list_resources_in(namespace).await,
                None => Ok(Default::default()),
            };
            let shown: BTreeSet<String> = match listed {
                Ok(r) => r
                    .resources
                    .into_iter()
                    .map(|r| r.resource.unwrap_or_default().resource)
                    .collect(),
                Err(kube_fanout_client::ClientError::Status(s))
                    if s.code() == tonic::Code::Unauthenticated
                        || (caller.handshake_refused && transport_failure(&s)) =>
                {
                    BTreeSet::new()
                }
                Err(err) => return Err(err.into()),
            };
            cells += 1;
            let shown: BTreeSet<&str> = shown.iter().map(String::as_str).collect();
            let more: Vec<_> = shown.difference(&expected).collect();
            let fewer: Vec<_> = expected.difference(&shown).collect();
            if !more.is_empty() {
                leaks.push(format!(
                    "{}: ListResources in {namespace:?}: shows {more:?}",
                    caller.name
                ));
            }
            if !fewer.is_empty() {
                over_denials.push(format!(
                    "{}: ListResources in {namespace:?}: hides {fewer:?}",
                    caller.name
                ));
            }
        }
    }
    println!(
        "{} callers, {cells} cells, {allowed} allowed by kube-fanout, {} leaks, {} over-denials, in {:?}",
        callers.len(),
        leaks.len(),
        over_denials.len(),
        started.elapsed()
    );
    for leak in &leaks {
        println!("LEAK {leak}");
    }
    for over in &over_denials {
        println!("OVER-DENIAL {over}");
    }
    for difference in &identities {
        println!("IDENTITY {difference}");
    }
    assert!(
        leaks.is_empty(),
        "{} leaks:\n{}",
        leaks.len(),
        leaks.join("\n")
    );
    let expected_over_denials: Vec<String> = Vec::new();
    assert_eq!(over_denials, expected_over_denials, "over-denials");
    assert!(identities.is_empty(), "{}", identities.join("\n"));
    // The matrix is not trivially one-sided.
    assert!(
        allowed >= 50 && cells - allowed >= 50,
        "{allowed} of {cells} cells allowed"
    );
    fanout.stop().await
}

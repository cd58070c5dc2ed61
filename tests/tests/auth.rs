//! Authentication and authorization on the real API server: kube-fanout
//! must answer every request as the API server answers the same request
//! made with the same credentials, and fail closed.

use std::{collections::BTreeSet, time::Duration};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::{
    core::v1::{ConfigMap, Secret},
    rbac::v1::RoleBinding,
};
use kube::api::{Api, ListParams, PostParams, WatchParams};
use kube_fanout::security::{AuthOptions, Security};
use kube_fanout_auth::{
    authz::DecisionCacheTtl, bearer::MAX_AUTHORIZATION_BYTES, limits::CallerLimits,
};
use kube_fanout_client::{
    Client,
    proto::{GetRequest, ListRequest, WatchRequest},
};
use kube_fanout_tests::{
    clients::plaintext,
    controlplane::{ControlPlane, user_token},
    eventually::{Look, eventually},
    fanout::Fanout,
    rbac::{grant, rule, service_account, until_api_server_lists, user},
    support::{
        create_configmap, create_namespace, initial_keys, next_change, object_key, read_snapshot,
    },
};
use serde::de::DeserializeOwned;
use tonic::Code;

/// A caller: a static-token user or a ServiceAccount, and its token.
struct Caller {
    name: String,
    token: String,
}

/// What a request got: allowed (with the object names it returned) or a
/// refusal code.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Allowed(BTreeSet<String>),
    Refused(Code),
}

async fn create<K>(api: &Api<K>, object: &K) -> Result<()>
where
    K: kube::Resource + Clone + serde::Serialize + DeserializeOwned + std::fmt::Debug,
{
    api.create(&PostParams::default(), object).await?;
    Ok(())
}

fn names<K: kube::Resource>(objects: impl IntoIterator<Item = K>) -> BTreeSet<String> {
    objects
        .into_iter()
        .map(|o| {
            format!(
                "{}/{}",
                o.meta().namespace.clone().unwrap_or_default(),
                o.meta().name.clone().unwrap_or_default()
            )
        })
        .collect()
}

fn api_refusal(err: kube::Error) -> Result<Answer> {
    match err {
        kube::Error::Api(e) if e.code == 403 => Ok(Answer::Refused(Code::PermissionDenied)),
        kube::Error::Api(e) if e.code == 401 => Ok(Answer::Refused(Code::Unauthenticated)),
        err => Err(err.into()),
    }
}

fn api_for<K>(client: kube::Client, namespace: &str) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    if namespace.is_empty() {
        Api::all(client)
    } else {
        Api::namespaced(client, namespace)
    }
}

/// The API server's answer to `verb` on `K` in `namespace` (`name` for get).
async fn api_server_answer<K>(
    client: kube::Client,
    verb: &str,
    namespace: &str,
    name: &str,
) -> Result<Answer>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = api_for(client, namespace);
    match verb {
        "get" => match api.get(name).await {
            Ok(o) => Ok(Answer::Allowed(names([o]))),
            Err(err) => api_refusal(err),
        },
        "list" => match api.list(&ListParams::default()).await {
            Ok(list) => Ok(Answer::Allowed(names(list.items))),
            Err(err) => api_refusal(err),
        },
        _ => {
            // The watch is authorized before its first event: the answer
            // to opening it is the answer. Its objects are the list's.
            match api.watch(&WatchParams::default().timeout(1), "0").await {
                Ok(_) => {
                    let admin: Api<K> = Api::all(client_admin()?);
                    let all = names(admin.list(&ListParams::default()).await?.items);
                    Ok(Answer::Allowed(in_scope(all, namespace)))
                }
                Err(err) => api_refusal(err),
            }
        }
    }
}

/// The admin client of the control plane this test runs (set once).
static ADMIN: std::sync::OnceLock<kube::Client> = std::sync::OnceLock::new();

fn client_admin() -> Result<kube::Client> {
    ADMIN.get().cloned().context("no admin client")
}

fn in_scope(all: BTreeSet<String>, namespace: &str) -> BTreeSet<String> {
    all.into_iter()
        .filter(|n| namespace.is_empty() || n.starts_with(&format!("{namespace}/")))
        .collect()
}

/// kube-fanout's answer to the same request.
async fn fanout_answer(
    client: &mut Client,
    resource: &str,
    verb: &str,
    namespace: &str,
    name: &str,
) -> Result<Answer> {
    let resource = kube_fanout_client::resource(resource)?;
    let refused = |status: tonic::Status| match status.code() {
        code @ (Code::PermissionDenied | Code::Unauthenticated) => Ok(Answer::Refused(code)),
        _ => bail!("unexpected status {status:?}"),
    };
    let grpc = client.grpc();
    match verb {
        "get" => {
            let request = GetRequest {
                resource: Some(resource),
                namespace: namespace.into(),
                name: name.into(),
                metadata_only: false,
            };
            match grpc.get(request).await {
                Ok(r) => Ok(Answer::Allowed(
                    [object_key(&r.into_inner().object)?].into(),
                )),
                Err(status) => refused(status),
            }
        }
        "list" => {
            let request = ListRequest {
                resource: Some(resource),
                namespace: namespace.into(),
                ..ListRequest::default()
            };
            match grpc.list(request).await {
                Ok(r) => Ok(Answer::Allowed(
                    r.into_inner()
                        .objects
                        .iter()
                        .map(|o| object_key(o))
                        .collect::<Result<_>>()?,
                )),
                Err(status) => refused(status),
            }
        }
        _ => {
            let request = WatchRequest {
                resource: Some(resource),
                namespace: namespace.into(),
                send_initial_events: true,
                allow_bookmarks: true,
                ..WatchRequest::default()
            };
            match grpc.watch(request).await {
                Ok(stream) => Ok(Answer::Allowed(
                    initial_keys(&mut stream.into_inner()).await?,
                )),
                Err(status) => refused(status),
            }
        }
    }
}

async fn secure_fanout(cp: &ControlPlane, adjust: impl FnOnce(&mut Security)) -> Result<Fanout> {
    let mut security = Security {
        auth: Some(AuthOptions::default()),
        ..Security::default()
    };
    adjust(&mut security);
    let fanout = Fanout::start_with(cp.client.clone(), &["v1/configmaps", "v1/secrets"], |o| {
        o.security = security;
    })
    .await?;
    fanout.wait_synced().await?;
    Ok(fanout)
}

async fn connect(fanout: &Fanout, token: &str) -> Result<Client> {
    plaintext(fanout.addr, token).await
}

#[tokio::test]
async fn every_answer_is_the_api_servers_answer() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let admin = cp.client.clone();
    let _ = ADMIN.set(admin.clone());
    for ns in ["a", "b"] {
        create_namespace(&admin, ns).await?;
        create_configmap(&admin, ns, &format!("cm-{ns}"), "v").await?;
        let mut secret = Secret::default();
        secret.metadata.name = Some(format!("secret-{ns}"));
        create(&Api::namespaced(admin.clone(), ns), &secret).await?;
    }
    let list_watch = || vec![rule(&["list", "watch"], "configmaps")];
    // One namespace; all namespaces; get only; nothing; the same for
    // ServiceAccounts with TokenRequest tokens.
    grant(
        &admin,
        "a",
        "alice-reads-a",
        list_watch(),
        vec![user("alice")],
    )
    .await?;
    grant(&admin, "", "bob-reads-all", list_watch(), vec![user("bob")]).await?;
    grant(
        &admin,
        "a",
        "carol-gets-a",
        vec![rule(&["get"], "configmaps")],
        vec![user("carol")],
    )
    .await?;
    grant(
        &admin,
        "b",
        "reader-reads-b",
        vec![rule(&["get", "list", "watch"], "configmaps")],
        vec![service_account("b", "reader")],
    )
    .await?;
    grant(
        &admin,
        "",
        "lister-lists-all",
        vec![rule(&["list"], "configmaps"), rule(&["watch"], "secrets")],
        vec![service_account("a", "lister")],
    )
    .await?;
    let mut callers: Vec<Caller> = ["alice", "bob", "carol", "dave"]
        .iter()
        .map(|u| Caller {
            name: (*u).to_owned(),
            token: user_token(u),
        })
        .collect();
    for (ns, sa) in [("b", "reader"), ("a", "lister")] {
        callers.push(Caller {
            name: format!("system:serviceaccount:{ns}:{sa}"),
            token: cp.service_account_token(ns, sa, &[]).await?,
        });
    }
    for (token, ns) in [
        (&callers[0].token, "a"),
        (&callers[1].token, ""),
        (&callers[4].token, "b"),
        (&callers[5].token, ""),
    ] {
        until_api_server_lists(&cp, token, ns, &ListParams::default()).await?;
    }

    let fanout = secure_fanout(&cp, |_| {}).await?;
    let mut differences = Vec::new();
    let (mut cells, mut allowed) = (0, 0);
    for caller in &callers {
        let mut client = connect(&fanout, &caller.token).await?;
        let api_client = cp.client_with_token(&caller.token)?;
        for resource in ["v1/configmaps", "v1/secrets"] {
            for verb in ["get", "list", "watch"] {
                for namespace in ["a", "b", ""] {
                    if verb == "get" && namespace.is_empty() {
                        continue; // a namespaced object has no cluster-wide get
                    }
                    let kind = if resource == "v1/configmaps" {
                        "cm"
                    } else {
                        "secret"
                    };
                    let name = format!("{kind}-{namespace}");
                    let theirs = if kind == "cm" {
                        api_server_answer::<ConfigMap>(api_client.clone(), verb, namespace, &name)
                            .await?
                    } else {
                        api_server_answer::<Secret>(api_client.clone(), verb, namespace, &name)
                            .await?
                    };
                    let ours = fanout_answer(&mut client, resource, verb, namespace, &name).await?;
                    cells += 1;
                    if let Answer::Allowed(objects) = &ours {
                        allowed += 1;
                        // Nothing outside the asked scope, whatever happens.
                        let stray: Vec<_> = objects
                            .iter()
                            .filter(|o| {
                                !namespace.is_empty() && !o.starts_with(&format!("{namespace}/"))
                            })
                            .collect();
                        if !stray.is_empty() {
                            differences.push(format!(
                                "{} {verb} {resource} {namespace:?}: stray {stray:?}",
                                caller.name
                            ));
                        }
                    }
                    if ours != theirs {
                        differences.push(format!(
                            "{} {verb} {resource} in {namespace:?}: kube-fanout {ours:?}, API server {theirs:?}",
                            caller.name
                        ));
                    }
                }
            }
        }
    }
    // ListResources shows the types the caller may list cluster-wide.
    for (caller, visible) in [(&callers[0], vec![]), (&callers[1], vec!["configmaps"])] {
        let mut client = connect(&fanout, &caller.token).await?;
        let listed: Vec<String> = client
            .list_resources()
            .await?
            .resources
            .into_iter()
            .map(|r| r.resource.unwrap_or_default().resource)
            .collect();
        assert_eq!(listed, visible, "{}", caller.name);
    }
    println!(
        "{cells} cells, {allowed} allowed, {} differences",
        differences.len()
    );
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    assert!(
        allowed >= 10 && cells - allowed >= 10,
        "{allowed} of {cells} allowed"
    );
    fanout.stop().await
}

#[tokio::test]
async fn bad_credentials_are_refused_with_a_clear_status() -> Result<()> {
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, "a").await?;
    let fanout = secure_fanout(&cp, |o| {
        if let Some(auth) = &mut o.auth {
            auth.audiences = vec!["kube-fanout".into()];
        }
    })
    .await?;
    let list = || ListRequest {
        resource: Some(kube_fanout_client::resource("v1/configmaps").unwrap()),
        namespace: "a".into(),
        ..ListRequest::default()
    };
    let status = |result: Result<tonic::Response<_>, tonic::Status>| match result {
        Ok(_) => panic!("allowed"),
        Err(status) => status,
    };
    let mut anonymous = Client::connect(&format!("http://{}", fanout.addr)).await?;
    let s = status(anonymous.grpc().list(list()).await);
    assert_eq!(s.code(), Code::Unauthenticated, "{s:?}");
    assert!(s.message().contains("no credentials"), "{s:?}");

    for (what, token) in [
        ("garbage", "not-a-token".to_owned()),
        (
            "another audience",
            cp.service_account_token("a", "sa", &["someone-else"])
                .await?,
        ),
        (
            "the API server's audience",
            cp.service_account_token("a", "sa", &[]).await?,
        ),
    ] {
        let mut client = connect(&fanout, &token).await?;
        let s = status(client.grpc().list(list()).await);
        assert_eq!(s.code(), Code::Unauthenticated, "{what}: {s:?}");
        assert!(s.message().contains("not accepted"), "{what}: {s:?}");
        assert!(!s.message().contains(&token), "the token is never echoed");
    }
    // A token for the configured audience gets past authentication (and
    // is then refused for lack of RBAC, as the API server would).
    let token = cp
        .service_account_token("a", "sa", &["kube-fanout"])
        .await?;
    let s = status(connect(&fanout, &token).await?.grpc().list(list()).await);
    assert_eq!(s.code(), Code::PermissionDenied, "{s:?}");
    assert!(
        s.message()
            .contains(r#"configmaps is forbidden: User "system:serviceaccount:a:sa" cannot list resource "configmaps" in API group "" in the namespace "a""#),
        "{s:?}"
    );

    let huge = "x".repeat(MAX_AUTHORIZATION_BYTES + 100);
    let s = status(connect(&fanout, &huge).await?.grpc().list(list()).await);
    assert_eq!(s.code(), Code::Unauthenticated, "{s:?}");
    assert!(s.message().contains("bytes; at most"), "{s:?}");

    // Health needs no credentials; the server served all of the above.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", fanout.addr))?
        .connect()
        .await?;
    let health = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await?;
    assert_eq!(
        health.into_inner().status(),
        tonic_health::pb::health_check_response::ServingStatus::Serving
    );
    fanout.stop().await
}

#[tokio::test]
async fn a_revoked_watch_ends_within_the_allow_ttl_and_reviews_fail_closed() -> Result<()> {
    let mut cp = ControlPlane::start().await?;
    let admin = cp.client.clone();
    create_namespace(&admin, "a").await?;
    grant(
        &admin,
        "a",
        "erin-reads-a",
        vec![rule(&["list", "watch"], "configmaps")],
        vec![user("erin")],
    )
    .await?;
    grant(
        &admin,
        "a",
        "carol-reads-a",
        vec![rule(&["list"], "configmaps")],
        vec![user("carol")],
    )
    .await?;
    until_api_server_lists(&cp, &user_token("carol"), "a", &ListParams::default()).await?;
    let token = user_token("erin");
    until_api_server_lists(&cp, &token, "a", &ListParams::default()).await?;
    const ALLOW_TTL: Duration = Duration::from_secs(3);
    let fanout = secure_fanout(&cp, |o| {
        if let Some(auth) = &mut o.auth {
            auth.decision_ttl = DecisionCacheTtl {
                allowed: ALLOW_TTL,
                denied: Duration::from_secs(1),
            };
        }
    })
    .await?;
    let mut client = connect(&fanout, &token).await?;
    let mut watch = client
        .watch(kube_fanout_tests::support::watch_list("a"))
        .await?;
    read_snapshot(&mut watch).await?;
    create_configmap(&admin, "a", "before", "v").await?;
    next_change(&mut watch).await?;

    Api::<RoleBinding>::namespaced(admin.clone(), "a")
        .delete("erin-reads-a", &Default::default())
        .await?;
    let revoked = tokio::time::Instant::now();
    let ended = tokio::time::timeout(ALLOW_TTL * 3, async {
        loop {
            match watch.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => bail!("the watch ended without a status"),
                Err(status) => return Ok(status),
            }
        }
    })
    .await
    .context("the watch outlived the revocation")??;
    let took = revoked.elapsed();
    assert_eq!(ended.code(), Code::PermissionDenied, "{ended:?}");
    assert!(
        ended
            .message()
            .contains(r#"cannot watch resource "configmaps" in API group "" in the namespace "a""#),
        "{ended:?}"
    );
    // The TTL plus the API server's own RBAC propagation and one review.
    assert!(
        took <= ALLOW_TTL + Duration::from_secs(2),
        "ended {took:?} after the revocation"
    );

    // Fail closed: with the API server gone, a request no cached answer
    // covers is refused as UNAVAILABLE, never let through.
    let list_a = || ListRequest {
        resource: Some(kube_fanout_client::resource("v1/configmaps").unwrap()),
        namespace: "a".into(),
        ..ListRequest::default()
    };
    let mut carol = connect(&fanout, &user_token("carol")).await?;
    carol.grpc().list(list_a()).await?;
    let mut bob = connect(&fanout, &user_token("bob")).await?;
    cp.kill_apiserver().await?;
    // A decision already made keeps working until its TTL.
    carol.grpc().list(list_a()).await?;
    for namespace in ["a", ""] {
        let err = bob
            .grpc()
            .list(ListRequest {
                resource: Some(kube_fanout_client::resource("v1/configmaps")?),
                namespace: namespace.into(),
                ..ListRequest::default()
            })
            .await
            .expect_err("nothing is allowed without a review");
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
        assert!(err.message().contains("TokenReview failed"), "{err:?}");
    }
    fanout.stop().await
}

#[tokio::test]
async fn one_caller_cannot_hold_more_watches_than_its_limit() -> Result<()> {
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, "a").await?;
    grant(
        &cp.client,
        "",
        "readers",
        vec![rule(&["list", "watch"], "configmaps")],
        vec![user("alice"), user("bob")],
    )
    .await?;
    until_api_server_lists(&cp, &user_token("bob"), "", &ListParams::default()).await?;
    let fanout = secure_fanout(&cp, |o| {
        o.caller_limits = CallerLimits {
            watches: 2,
            snapshots: 0,
        }
    })
    .await?;
    let mut alice = connect(&fanout, &user_token("alice")).await?;
    let first = alice
        .watch(kube_fanout_tests::support::watch_list("a"))
        .await?;
    let _second = alice
        .watch(kube_fanout_tests::support::watch_list(""))
        .await?;
    let third = alice
        .grpc()
        .watch(kube_fanout_tests::support::watch_list("a"))
        .await
        .expect_err("a third watch is over the limit");
    assert_eq!(third.code(), Code::ResourceExhausted, "{third:?}");
    assert!(
        third
            .message()
            .contains("\"alice\" already has 2 watches open, the most allowed per caller"),
        "{third:?}"
    );
    // Another caller is not affected.
    let mut bob = connect(&fanout, &user_token("bob")).await?;
    let mut watch = bob
        .watch(kube_fanout_tests::support::watch_list("a"))
        .await?;
    read_snapshot(&mut watch).await?;
    // A closed watch gives its place back (once the server sees the reset).
    drop(first);
    eventually("the closed watch's place coming back")
        .within(Duration::from_secs(10))
        .every(Duration::from_millis(50))
        .until_done(async || {
            match alice
                .grpc()
                .watch(kube_fanout_tests::support::watch_list("a"))
                .await
            {
                Ok(stream) => Ok(Look::Done(stream)),
                Err(s) if s.code() == Code::ResourceExhausted => Ok(Look::NotYet(s)),
                Err(s) => bail!("{s:?}"),
            }
        })
        .await?;
    fanout.stop().await
}

#[tokio::test]
async fn a_name_field_selector_is_authorized_against_resource_names_like_the_api_server()
-> Result<()> {
    let cp = ControlPlane::start().await?;
    let admin = cp.client.clone();
    create_namespace(&admin, "a").await?;
    create_configmap(&admin, "a", "mine", "v").await?;
    create_configmap(&admin, "a", "theirs", "v").await?;
    let mut only_mine = rule(&["list", "watch"], "configmaps");
    only_mine.resource_names = Some(vec!["mine".into()]);
    grant(
        &admin,
        "a",
        "erin-mine",
        vec![only_mine],
        vec![user("erin")],
    )
    .await?;
    let token = user_token("erin");
    let api: Api<ConfigMap> = Api::namespaced(cp.client_with_token(&token)?, "a");
    let mine = ListParams::default().fields("metadata.name=mine");
    until_api_server_lists(&cp, &token, "a", &mine).await?;
    let fanout = secure_fanout(&cp, |_| {}).await?;
    let mut client = connect(&fanout, &token).await?;
    for selector in ["metadata.name=mine", "metadata.name=theirs", ""] {
        let theirs = match api.list(&ListParams::default().fields(selector)).await {
            Ok(list) => Answer::Allowed(names(list.items)),
            Err(err) => api_refusal(err)?,
        };
        let request = ListRequest {
            resource: Some(kube_fanout_client::resource("v1/configmaps")?),
            namespace: "a".into(),
            field_selector: selector.into(),
            ..ListRequest::default()
        };
        let ours = match client.grpc().list(request).await {
            Ok(r) => Answer::Allowed(
                r.into_inner()
                    .objects
                    .iter()
                    .map(|o| {
                        let cm: ConfigMap = serde_json::from_str(o)?;
                        Ok(names([cm]).into_iter().next().unwrap_or_default())
                    })
                    .collect::<Result<_>>()?,
            ),
            Err(status) => Answer::Refused(status.code()),
        };
        assert_eq!(ours, theirs, "list with field selector {selector:?}");
    }
    fanout.stop().await
}

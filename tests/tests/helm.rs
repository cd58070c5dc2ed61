//! The Helm chart (`deploy/helm/kube-fanout`) on a real API server, with the
//! real helm: every object it renders is accepted; kube-fanout run with
//! exactly the chart's ServiceAccount identity (a TokenRequest token), the
//! chart's own flags and the certificate the chart generated syncs every
//! resource the values name and is denied one they do not; it serves TLS,
//! accepts a projected token for the audience kube-fanout and refuses the
//! API server's own; its metrics need an authorized token; an upgrade
//! rewrites the RBAC and keeps the certificate; an uninstall leaves nothing
//! behind. There are no nodes, so no pod runs: the binary runs here as the
//! pod would.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result, ensure};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        authentication::v1::{TokenRequest, TokenRequestSpec},
        authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
        core::v1::{ConfigMap, Secret, ServiceAccount},
        rbac::v1::{ClusterRole, ClusterRoleBinding, RoleRef, Subject},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    api::{Api, DynamicObject, ListParams, PostParams},
    core::GroupVersionKind,
    discovery::pinned_kind,
};
use kube_fanout_client::{
    Certificate, ClientConfig, ClientTlsConfig,
    proto::{GetRequest, SyncState},
};
use kube_fanout_tests::{
    controlplane::{ADMIN_TOKEN, ControlPlane, free_port},
    eventually::eventually,
    helm::{Helm, api_for, exists, kind_name, parse_manifest},
    process::{FanoutProcess, READINESS_SERVICE},
    support::{create_namespace, https_get},
};
use tokio::process::Command;
use tonic_health::pb::health_check_response::ServingStatus;

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/helm/kube-fanout");
const KUBE_FANOUT: &str = env!("CARGO_BIN_EXE_kube-fanout-under-test");
const RELEASE: &str = "kf";
const NAMESPACE: &str = "fanout";
/// The name the chart gives the release's objects and ServiceAccount.
const FULLNAME: &str = "kf-kube-fanout";
/// The Service's DNS name, which the generated certificate is for.
const SERVICE_HOST: &str = "kf-kube-fanout.fanout.svc";
/// The token audience the chart accepts by default.
const AUDIENCE: &str = "kube-fanout";

/// The ClusterRole's rules as (API group, resource, verb) triples.
async fn cluster_role_rules(client: &kube::Client) -> Result<BTreeSet<(String, String, String)>> {
    let role = Api::<ClusterRole>::all(client.clone())
        .get(FULLNAME)
        .await?;
    let mut triples = BTreeSet::new();
    for rule in role.rules.unwrap_or_default() {
        for group in rule.api_groups.unwrap_or_default() {
            for resource in rule.resources.clone().unwrap_or_default() {
                for verb in &rule.verbs {
                    triples.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    Ok(triples)
}

/// list and watch on each (group, resource), get on CRDs (the names are
/// checked apart) when a type is in a named group, plus what kube-fanout
/// needs to authenticate and authorize its subscribers.
fn expected_rules(served: &[(&str, &str)]) -> BTreeSet<(String, String, String)> {
    let mut rules: BTreeSet<_> = served
        .iter()
        .flat_map(|(group, resource)| {
            ["list", "watch"].map(|verb| (group.to_string(), resource.to_string(), verb.into()))
        })
        .collect();
    if served.iter().any(|(group, _)| !group.is_empty()) {
        rules.insert((
            "apiextensions.k8s.io".into(),
            "customresourcedefinitions".into(),
            "get".into(),
        ));
    }
    rules.insert((
        "authentication.k8s.io".into(),
        "tokenreviews".into(),
        "create".into(),
    ));
    rules.insert((
        "authorization.k8s.io".into(),
        "subjectaccessreviews".into(),
        "create".into(),
    ));
    rules
}

/// The API server's own answer: may the chart's ServiceAccount `verb`
/// `resource` in `group`, cluster-wide?
async fn allowed(client: &kube::Client, verb: &str, group: &str, resource: &str) -> Result<bool> {
    allowed_on(client, verb, group, resource, "").await
}

/// The same for the object `name` ("" for any).
async fn allowed_on(
    client: &kube::Client,
    verb: &str,
    group: &str,
    resource: &str,
    name: &str,
) -> Result<bool> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{NAMESPACE}:{FULLNAME}")),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{NAMESPACE}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                name: (!name.is_empty()).then(|| name.into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// A CRD `widgets.example.com` (v1, namespaced), waited for until
/// discovery serves it.
async fn create_widget_crd(client: &kube::Client) -> Result<()> {
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    }))?;
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await?;
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    eventually("widgets.example.com served by discovery")
        .every(Duration::from_millis(200))
        .until_ok(async || pinned_kind(client, &gvk).await)
        .await?;
    Ok(())
}

/// A kubeconfig for the same API server that authenticates with `token`.
fn kubeconfig_with_token(cp: &ControlPlane, token: &str, path: &Path) -> Result<()> {
    let admin = std::fs::read_to_string(&cp.kubeconfig)?;
    ensure!(
        admin.contains(ADMIN_TOKEN),
        "the admin kubeconfig has no token"
    );
    std::fs::write(path, admin.replace(ADMIN_TOKEN, token))?;
    Ok(())
}

/// A kube-fanout run like the chart's pod, and where it serves metrics.
struct Pod {
    process: FanoutProcess,
    metrics: std::net::SocketAddr,
}

/// kube-fanout run with `args` (the Deployment's, listen addresses moved to
/// free loopback ports, the mounted certificate at `tls`, without the
/// bootstrap from its peers) and the credentials in `kubeconfig`.
fn run_like_the_pod(
    cp: &ControlPlane,
    args: &[String],
    extra: &[&str],
    tls: &Path,
    kubeconfig: &Path,
    name: &str,
) -> Result<Pod> {
    let loopback =
        || -> Result<std::net::SocketAddr> { Ok(format!("127.0.0.1:{}", free_port()?).parse()?) };
    let (addr, metrics, health) = (loopback()?, loopback()?, loopback()?);
    let mut command = Command::new(KUBE_FANOUT);
    let mut health_listen = false;
    for arg in args {
        // Its peers (the Service, the projected token and CA mounted at
        // /etc/kube-fanout/peer) exist only in a cluster: run alone, it
        // lists. The node test has them.
        if [
            "--bootstrap-from=",
            "--bootstrap-timeout-seconds=",
            "--peer-",
        ]
        .iter()
        .any(|flag| arg.starts_with(flag))
        {
            continue;
        }
        if arg.starts_with("--listen=") {
            command.arg(format!("--listen={addr}"));
        } else if arg.starts_with("--metrics-listen=") {
            command.arg(format!("--metrics-listen={metrics}"));
        } else if arg.starts_with("--health-listen=") {
            health_listen = true;
            command.arg(format!("--health-listen={health}"));
        } else {
            let mounted = tls.to_str().context("path")?;
            command.arg(arg.replace("/etc/kube-fanout/tls", mounted));
        }
    }
    command
        .args(extra)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .env("RUST_LOG", "info");
    let process = FanoutProcess::spawn(command, addr, cp.dir().join(format!("{name}.log")))?;
    ensure!(
        health_listen,
        "the chart's TLS pod probes a --health-listen"
    );
    Ok(Pod {
        process: process.with_health_addr(health),
        metrics,
    })
}

/// The serving certificate and key the chart generated, as the pod mounts
/// them (`tls.crt`, `tls.key` in `dir`), and the Secret's data.
async fn mount_serving_secret(
    client: &kube::Client,
    dir: &Path,
) -> Result<std::collections::BTreeMap<String, k8s_openapi::ByteString>> {
    let secret = Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .get(&format!("{FULLNAME}-tls"))
        .await?;
    ensure!(secret.type_.as_deref() == Some("kubernetes.io/tls"));
    let data = secret.data.context("the TLS Secret has no data")?;
    std::fs::create_dir_all(dir)?;
    for key in ["tls.crt", "tls.key"] {
        std::fs::write(dir.join(key), &data.get(key).context("key missing")?.0)?;
    }
    Ok(data)
}

/// The CA the chart publishes for clients.
async fn published_ca(client: &kube::Client) -> Result<String> {
    let ca = Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
        .get(&format!("{FULLNAME}-ca"))
        .await?
        .data
        .context("the CA ConfigMap has no data")?
        .remove("ca.crt")
        .context("no ca.crt")?;
    ensure!(ca.contains("BEGIN CERTIFICATE"), "{ca}");
    Ok(ca)
}

/// A client of `addr` over TLS, verifying the Service's name with `ca`,
/// sending `token`.
fn tls_client(addr: std::net::SocketAddr, ca: &str, token: &str) -> ClientConfig {
    ClientConfig::new([addr.to_string()])
        .tls(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca))
                .domain_name(SERVICE_HOST),
        )
        .bearer_token(token.to_owned())
}

/// A token of the ServiceAccount `name` in the release's namespace (made
/// if missing), for `audiences` (none: the API server's own), as a
/// projected token volume of a pod running as it holds.
async fn service_account_token(
    client: &kube::Client,
    name: &str,
    audiences: &[&str],
) -> Result<String> {
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE);
    if accounts.get_opt(name).await?.is_none() {
        let account: ServiceAccount =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
        accounts.create(&PostParams::default(), &account).await?;
    }
    accounts
        .create_token_request(
            name,
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    audiences: Some(audiences.iter().map(|a| (*a).to_owned()).collect()),
                    expiration_seconds: Some(3600),
                    ..TokenRequestSpec::default()
                }),
                ..TokenRequest::default()
            },
        )
        .await?
        .status
        .context("TokenRequest without status")?
        .token
        .context("TokenRequest without a token")
}

/// Binds the ClusterRole `role` to the ServiceAccount `account` of the
/// release's namespace.
async fn bind(client: &kube::Client, role: &str, account: &str) -> Result<()> {
    let binding = ClusterRoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{account}-{role}")),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: role.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: account.into(),
            namespace: Some(NAMESPACE.into()),
            ..Subject::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// The container args of the Deployment as the API server stored it.
async fn deployment_args(client: &kube::Client) -> Result<Vec<String>> {
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .get(FULLNAME)
        .await?;
    let spec = deployment.spec.context("no spec")?;
    let pod = spec.template.spec.context("no pod spec")?;
    Ok(pod.containers[0].args.clone().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_installs_with_least_privilege_upgrades_and_uninstalls_cleanly() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let kube = cp.client.clone();
    let helm = Helm::new(&cp)?;
    create_widget_crd(&kube).await?;
    let values = cp.dir().join("values.yaml");
    std::fs::write(
        &values,
        "servedResources:\n  - v1/configmaps\n  - apps/v1/deployments\n  - example.com/v1/widgets\n\
         config:\n  historyEvents: 5000\n",
    )?;

    // Installed: every rendered object is held by the API server, and the
    // notes tell how to connect.
    let notes = helm
        .run(&[
            "install",
            RELEASE,
            CHART,
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "--values",
            values.to_str().context("path")?,
        ])
        .await?;
    for line in [
        "kubectl -n fanout port-forward service/kf-kube-fanout 50051:50051 9090:9090",
        "kubectl -n fanout get configmap kf-kube-fanout-ca -o jsonpath='{.data.ca\\.crt}' > ca.crt",
        "TOKEN=$(kubectl create token default -n fanout --audience kube-fanout)",
        r#"grpcurl -cacert ca.crt -servername kf-kube-fanout.fanout.svc -H "authorization: Bearer $TOKEN" 127.0.0.1:50051 kubefanout.v1.KubeFanout/ListResources"#,
        r#"kubectl-fanout --server 127.0.0.1:50051 --token "$TOKEN" --ca-file ca.crt --tls-server-name kf-kube-fanout.fanout.svc list v1/configmaps -A"#,
        "                audience: kube-fanout",
        "            mountPath: /var/run/secrets/kube-fanout",
        "--clusterrole kf-kube-fanout-metrics-reader",
        r#"curl -s --cacert ca.crt --resolve kf-kube-fanout.fanout.svc:9090:127.0.0.1 -H "authorization: Bearer $TOKEN" https://kf-kube-fanout.fanout.svc:9090/metrics"#,
    ] {
        assert!(notes.contains(line), "NOTES lack {line:?}:\n{notes}");
    }
    assert!(!notes.contains("WARNING"), "{notes}");
    let installed = helm.manifest(RELEASE, NAMESPACE).await?;
    let kinds: BTreeSet<String> = installed.iter().map(kind_name).collect();
    let mut expected_kinds: BTreeSet<String> = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
    ]
    .iter()
    .map(|kind| format!("{kind}/{FULLNAME}"))
    .collect();
    // TLS by default: the generated certificate, its CA for clients, and
    // the ClusterRole a scraper needs.
    expected_kinds.extend([
        format!("Secret/{FULLNAME}-tls"),
        format!("ConfigMap/{FULLNAME}-ca"),
        format!("ClusterRole/{FULLNAME}-metrics-reader"),
    ]);
    assert_eq!(kinds, expected_kinds);
    for object in &installed {
        assert!(
            exists(&kube, object).await?,
            "{} missing after install",
            kind_name(object)
        );
    }

    // The Deployment as stored: nothing the chart set was dropped.
    let stored = Api::<Deployment>::namespaced(kube.clone(), NAMESPACE)
        .get(FULLNAME)
        .await?;
    let stored = serde_json::to_value(&stored)?;
    let container = &stored["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(stored["spec"]["replicas"], 2);
    assert_eq!(
        stored["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        0
    );
    assert_eq!(
        container["readinessProbe"]["grpc"]["service"],
        READINESS_SERVICE
    );
    assert_eq!(container["livenessProbe"]["grpc"]["service"], "");
    assert_eq!(container["lifecycle"]["preStop"]["sleep"]["seconds"], 5);
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"],
        serde_json::json!(["ALL"])
    );

    // RBAC: exactly list and watch on the three types, as the API server
    // itself decides.
    let served = [
        ("", "configmaps"),
        ("apps", "deployments"),
        ("example.com", "widgets"),
    ];
    assert_eq!(cluster_role_rules(&kube).await?, expected_rules(&served));
    for (group, resource) in served {
        for verb in ["list", "watch"] {
            assert!(
                allowed(&kube, verb, group, resource).await?,
                "{verb} {resource}"
            );
        }
        assert!(
            !allowed(&kube, "get", group, resource).await?,
            "get {resource}"
        );
    }
    assert!(!allowed(&kube, "list", "", "secrets").await?);
    // The served types' CRDs, for their selectable fields, and no other.
    let crds = ("apiextensions.k8s.io", "customresourcedefinitions");
    for (name, expected) in [
        ("widgets.example.com", true),
        ("deployments.apps", true),
        ("gadgets.example.com", false),
    ] {
        assert_eq!(
            allowed_on(&kube, "get", crds.0, crds.1, name).await?,
            expected,
            "get CRD {name}"
        );
    }
    assert!(!allowed(&kube, "list", crds.0, crds.1).await?);

    // kube-fanout with the ServiceAccount's own token and the Deployment's
    // own flags syncs every type (the readiness probe's health turns SERVING).
    let token = service_account_token(&kube, FULLNAME, &[]).await?;
    let sa_kubeconfig = cp.dir().join("sa-kubeconfig");
    kubeconfig_with_token(&cp, &token, &sa_kubeconfig)?;
    let args = deployment_args(&kube).await?;
    assert!(
        args.contains(&"--history-events=5000".to_owned()),
        "{args:?}"
    );
    // The certificate the chart generated, mounted as the pod mounts it,
    // and the CA it published: clients verify the Service's name with it.
    let tls_dir = cp.dir().join("tls");
    let serving = mount_serving_secret(&kube, &tls_dir).await?;
    let ca = published_ca(&kube).await?;
    assert_eq!(
        serving.get("ca.crt").map(|c| c.0.as_slice()),
        Some(ca.as_bytes())
    );
    let Pod {
        process: mut fanout,
        metrics,
    } = run_like_the_pod(&cp, &args, &[], &tls_dir, &sa_kubeconfig, "fanout")?;
    fanout.wait_serving(READINESS_SERVICE).await?;
    // The subscriber: a ServiceAccount allowed everything, with a projected
    // token for the audience kube-fanout (what a client pod mounts at
    // /var/run/secrets/kube-fanout/token). kube-fanout (as the chart's
    // identity) authenticates it with TokenReview and authorizes every Get
    // with SubjectAccessReview, so this also proves the chart grants those.
    // The chart's own identity may list and watch, not get.
    bind(&kube, "cluster-admin", "subscriber").await?;
    let projected = service_account_token(&kube, "subscriber", &[AUDIENCE]).await?;
    let mut client = tls_client(fanout.addr, &ca, &projected).connect().await?;
    let synced: BTreeSet<String> = client
        .list_resources()
        .await?
        .resources
        .iter()
        .filter(|r| r.sync_state() == SyncState::Synced)
        .filter_map(|r| r.resource.as_ref())
        .map(|r| format!("{}/{}", r.group, r.resource))
        .collect();
    let want: BTreeSet<String> = served.iter().map(|(g, r)| format!("{g}/{r}")).collect();
    assert_eq!(synced, want);
    // The same user's token for the API server's own audience, and the
    // API server's admin token, are no credentials here: a token kube-fanout
    // accepts is one the API server does not.
    let api_audience = service_account_token(&kube, "subscriber", &[]).await?;
    for (what, token) in [
        ("the API server's audience", api_audience.as_str()),
        ("the admin's static token", ADMIN_TOKEN),
    ] {
        let refused = tls_client(fanout.addr, &ca, token)
            .connect()
            .await?
            .list_resources()
            .await
            .expect_err(what);
        match refused {
            kube_fanout_client::ClientError::Status(status) => {
                assert_eq!(
                    status.code(),
                    tonic::Code::Unauthenticated,
                    "{what}: {status:?}"
                )
            }
            other => panic!("{what}: {other}"),
        }
    }
    // Plaintext is not served, and the client would not send a token over
    // it to another machine anyway (see the client's unit tests).
    let answered = match ClientConfig::new([format!("http://{}", fanout.addr)])
        .bearer_token(projected.clone())
        .connect()
        .await
    {
        Ok(mut plaintext) => plaintext.list_resources().await.is_ok(),
        Err(_) => false,
    };
    assert!(!answered, "plaintext answered on the TLS port");

    // Metrics: TLS, and only for a token whose user may get /metrics
    // (the chart's metrics-reader ClusterRole, bound as a Prometheus'
    // would be); anything else is refused before any metric is read.
    bind(&kube, &format!("{FULLNAME}-metrics-reader"), "scraper").await?;
    let scraper = service_account_token(&kube, "scraper", &[AUDIENCE]).await?;
    let outsider = service_account_token(&kube, "outsider", &[AUDIENCE]).await?;
    let scraper_api = service_account_token(&kube, "scraper", &[]).await?;
    for (what, token, want) in [
        ("no token", None, 401),
        ("the API server's audience", Some(scraper_api.as_str()), 401),
        ("not bound to metrics-reader", Some(outsider.as_str()), 403),
    ] {
        let (status, body) = https_get(metrics, SERVICE_HOST, &ca, "/metrics", token).await?;
        assert_eq!(status, want, "{what}: {body}");
        assert!(!body.contains("kube_fanout_"), "{what}: {body}");
    }
    let (status, body) = https_get(metrics, SERVICE_HOST, &ca, "/metrics", Some(&scraper)).await?;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(r#"kube_fanout_synced{resource="apps/v1/deployments"} 1"#),
        "{body}"
    );

    // And it watches: an object of each type made after the sync arrives
    // (a LIST alone also syncs, so this is what proves `watch`).
    create_one_of_each(&kube).await?;
    for resource in [
        "v1/configmaps",
        "apps/v1/deployments",
        "example.com/v1/widgets",
    ] {
        wait_for_object(&mut client, resource, "after-sync").await?;
    }
    // Without `watch` a reflector would get there too, by relisting after
    // each refused watch: so no reflector may have failed.
    for status in client.list_resources().await?.resources {
        assert_eq!(
            (status.failures, status.last_error.as_str()),
            (0, ""),
            "{:?}",
            status.resource
        );
    }
    drop(fanout);

    // Least privilege: a type the values did not name is refused to the
    // same identity, and that replica never reports ready.
    let greedy = run_like_the_pod(
        &cp,
        &args,
        &["--resource=v1/secrets"],
        &tls_dir,
        &sa_kubeconfig,
        "greedy",
    )?
    .process;
    // Asked as the subscriber: the ServiceAccount itself would not be
    // shown secrets.
    let mut client = wait_for_client(&greedy, tls_client(greedy.addr, &ca, &projected)).await?;
    let refusal = eventually("an error for secrets")
        .every(Duration::from_millis(200))
        .until(
            async || {
                let resources = client.list_resources().await?.resources;
                resources
                    .into_iter()
                    .find(|r| r.resource.as_ref().is_some_and(|r| r.resource == "secrets"))
                    .context("secrets not listed")
            },
            |secrets| !secrets.last_error.is_empty(),
        )
        .await?;
    assert_ne!(refusal.sync_state(), SyncState::Synced);
    assert!(
        refusal.last_error.contains("forbidden"),
        "{}",
        refusal.last_error
    );
    assert_eq!(
        greedy.health(READINESS_SERVICE).await?,
        ServingStatus::NotServing
    );
    assert_eq!(greedy.health("").await?, ServingStatus::Serving);
    drop(greedy);

    // Upgrade: another resource list rewrites the ClusterRole and the flags.
    helm.run(&[
        "upgrade",
        RELEASE,
        CHART,
        "--namespace",
        NAMESPACE,
        "--set",
        "servedResources={v1/configmaps,v1/services}",
    ])
    .await?;
    assert_eq!(
        cluster_role_rules(&kube).await?,
        expected_rules(&[("", "configmaps"), ("", "services")])
    );
    assert!(allowed(&kube, "watch", "", "services").await?);
    assert!(!allowed(&kube, "list", "apps", "deployments").await?);
    // The generated certificate and CA are kept (read back by `lookup`),
    // so clients holding the CA keep verifying the server.
    let upgraded_tls = mount_serving_secret(&kube, &cp.dir().join("tls-upgraded")).await?;
    // Compared, not printed: the Secret holds a private key.
    assert!(
        upgraded_tls == serving,
        "the upgrade replaced the certificate"
    );
    assert_eq!(published_ca(&kube).await?, ca);
    let args = deployment_args(&kube).await?;
    let resources: Vec<&String> = args
        .iter()
        .filter(|a| a.starts_with("--resource="))
        .collect();
    assert_eq!(
        resources,
        ["--resource=v1/configmaps", "--resource=v1/services"]
    );
    let upgraded = helm.manifest(RELEASE, NAMESPACE).await?;

    // Uninstall: nothing of either revision is left, nor helm's own records.
    helm.run(&["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait"])
        .await?;
    for object in installed.iter().chain(&upgraded) {
        assert!(
            !exists(&kube, object).await?,
            "{} left after uninstall",
            kind_name(object)
        );
    }
    let instance = ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}"));
    assert!(
        Api::<ClusterRole>::all(kube.clone())
            .list(&instance)
            .await?
            .items
            .is_empty()
    );
    let records = Api::<Secret>::namespaced(kube.clone(), NAMESPACE)
        .list(&ListParams::default().labels(&format!("owner=helm,name={RELEASE}")))
        .await?;
    assert!(records.items.is_empty(), "helm release records left");
    Ok(())
}

/// A ConfigMap, a Deployment and a Widget named `after-sync` in the
/// release's namespace.
async fn create_one_of_each(client: &kube::Client) -> Result<()> {
    let objects = [
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "after-sync", "namespace": NAMESPACE}}),
        serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "after-sync", "namespace": NAMESPACE},
            "spec": {"selector": {"matchLabels": {"app": "x"}},
                     "template": {"metadata": {"labels": {"app": "x"}},
                                  "spec": {"containers": [{"name": "x", "image": "x"}]}}}}),
        serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "after-sync", "namespace": NAMESPACE}}),
    ];
    for object in objects {
        let object: DynamicObject = serde_json::from_value(object)?;
        api_for(client, &object, NAMESPACE)
            .await?
            .create(&PostParams::default(), &object)
            .await?;
    }
    Ok(())
}

/// Waits until kube-fanout serves `name` of `resource` in the release's
/// namespace.
async fn wait_for_object(
    client: &mut kube_fanout_client::Client,
    resource: &str,
    name: &str,
) -> Result<()> {
    let request = GetRequest {
        resource: Some(kube_fanout_client::resource(resource)?),
        namespace: NAMESPACE.into(),
        name: name.into(),
        metadata_only: false,
    };
    eventually(format!("{resource} {name} served by kube-fanout"))
        .every(Duration::from_millis(200))
        .until_ok(async || client.get(request.clone()).await)
        .await?;
    Ok(())
}

/// A client of `fanout`, made with `config`, once it answers.
async fn wait_for_client(
    fanout: &FanoutProcess,
    config: ClientConfig,
) -> Result<kube_fanout_client::Client> {
    eventually("kube-fanout answering health")
        .every(Duration::from_millis(200))
        .until_ok(async || fanout.health("").await)
        .await
        .with_context(|| format!("kube-fanout's log:\n{}", fanout.log_tail()))?;
    Ok(config.connect().await?)
}

/// Whether the kube-fanout binary parses the flags `deployment`'s
/// container passes it (names and values): clap stops at `--help` after
/// parsing every argument before it, and fails on any it does not know.
fn binary_accepts(deployment: &DynamicObject) -> Result<()> {
    let args: Vec<String> = deployment.data["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .context("the Deployment's container has args")?
        .iter()
        .map(|a| a.as_str().map(str::to_owned).context("an arg is a string"))
        .collect::<Result<_>>()?;
    let out = std::process::Command::new(KUBE_FANOUT)
        .args(&args)
        .arg("--help")
        .env_remove("KUBECONFIG")
        .output()?;
    ensure!(
        out.status.success(),
        "kube-fanout refuses the chart's args {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Every variant the chart's CI values describe (`ci/*.yaml`), rendered by
/// helm and created with a server-side dry run: the API server validates
/// each object (kinds whose CRDs a bare API server lacks excepted), and
/// the binary parses the Deployment's flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_chart_variant_is_valid_for_the_api_server() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let kube = cp.client.clone();
    let helm = Helm::new(&cp)?;
    create_namespace(&kube, NAMESPACE).await?;
    // ci/monitoring-values.yaml puts the dashboard ConfigMap there.
    create_namespace(&kube, "monitoring").await?;
    let mut variants = vec![None];
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(CHART).join("ci"))?
        .map(|entry| Ok(entry?.path()))
        .collect::<Result<_>>()?;
    files.sort();
    variants.extend(files.into_iter().map(Some));
    ensure!(variants.len() > 3, "no CI values files found");
    let without_crds = ["ServiceMonitor", "PrometheusRule", "Certificate"];
    let mut checked = 0;
    for variant in &variants {
        let values = variant.as_deref().map_or_else(
            || "the defaults".to_owned(),
            |f| {
                f.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            },
        );
        let mut args = vec!["template", RELEASE, CHART, "--namespace", NAMESPACE];
        if let Some(file) = variant {
            args.extend(["--values", file.to_str().context("path")?]);
        }
        let objects = parse_manifest(&helm.run(&args).await?)?;
        for object in objects {
            let kind = object.types.as_ref().map(|t| t.kind.clone());
            if kind.as_deref() == Some("Deployment") {
                binary_accepts(&object).with_context(|| values.clone())?;
            }
            if kind.as_deref().is_some_and(|k| without_crds.contains(&k)) {
                continue;
            }
            api_for(&kube, &object, NAMESPACE)
                .await?
                .create(
                    &PostParams {
                        dry_run: true,
                        ..PostParams::default()
                    },
                    &object,
                )
                .await
                .with_context(|| format!("{} with {values}", kind_name(&object)))?;
            checked += 1;
        }
    }
    ensure!(
        checked >= 7 * variants.len(),
        "only {checked} objects checked"
    );
    Ok(())
}

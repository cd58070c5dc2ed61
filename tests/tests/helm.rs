//! The Helm chart (`deploy/helm/kube-fanout`) on a real API server, with the
//! real helm: every object it renders is accepted; kube-fanout run with
//! exactly the chart's ServiceAccount identity (a TokenRequest token) and
//! the chart's own flags syncs every resource the values name and is denied
//! one they do not; an upgrade rewrites the RBAC; an uninstall leaves
//! nothing behind. There are no nodes, so no pod runs: the binary runs here
//! as the pod would.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        authentication::v1::{TokenRequest, TokenRequestSpec},
        authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
        core::v1::{Secret, ServiceAccount},
        rbac::v1::ClusterRole,
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    api::{Api, DynamicObject, ListParams, PostParams},
    core::GroupVersionKind,
    discovery::{Scope, pinned_kind},
};
use kube_fanout_client::{
    ClientConfig,
    proto::{GetRequest, SyncState},
};
use kube_fanout_tests::{
    controlplane::{ADMIN_TOKEN, ControlPlane, free_port},
    process::{FanoutProcess, READINESS_SERVICE},
    support::{create_namespace, tool},
};
use serde::Deserialize as _;
use tokio::process::Command;
use tonic_health::pb::health_check_response::ServingStatus;

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/helm/kube-fanout");
const KUBE_FANOUT: &str = env!("CARGO_BIN_EXE_kube-fanout-under-test");
const RELEASE: &str = "kf";
const NAMESPACE: &str = "fanout";
/// The name the chart gives the release's objects and ServiceAccount.
const FULLNAME: &str = "kf-kube-fanout";

/// The real helm, pointed at the test API server, with its state in the
/// control plane's temporary directory.
struct Helm {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl Helm {
    fn new(cp: &ControlPlane) -> Result<Self> {
        Ok(Helm {
            bin: tool("helm")?,
            kubeconfig: cp.kubeconfig.clone(),
            home: cp.dir().join("helm"),
        })
    }

    /// Runs helm; its stdout, or an error quoting its stderr.
    async fn run(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(&self.bin)
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .env_remove("KUBECONFIG")
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .context("running helm")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.success(), "helm {args:?} failed:\n{stderr}");
        Ok(String::from_utf8(out.stdout)?)
    }

    /// The objects of the release's current manifest.
    async fn manifest(&self) -> Result<Vec<DynamicObject>> {
        parse_manifest(
            &self
                .run(&["get", "manifest", RELEASE, "-n", NAMESPACE])
                .await?,
        )
    }
}

/// The objects of a multi-document YAML manifest.
fn parse_manifest(yaml: &str) -> Result<Vec<DynamicObject>> {
    let mut objects = Vec::new();
    for document in serde_yaml::Deserializer::from_str(yaml) {
        let value = serde_yaml::Value::deserialize(document)?;
        if value.is_null() {
            continue;
        }
        objects.push(serde_json::from_value(serde_json::to_value(value)?)?);
    }
    Ok(objects)
}

/// "Kind/name" of an object, for messages and sets.
fn kind_name(object: &DynamicObject) -> String {
    format!(
        "{}/{}",
        object.types.as_ref().map_or("?", |t| t.kind.as_str()),
        object.metadata.name.as_deref().unwrap_or("?")
    )
}

/// The API for `object`'s kind, found through discovery, in its namespace.
async fn api_for(client: &kube::Client, object: &DynamicObject) -> Result<Api<DynamicObject>> {
    let types = object.types.as_ref().context("no apiVersion/kind")?;
    let gvk = GroupVersionKind::try_from(types)?;
    let (resource, capabilities) = pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("discovering {}", kind_name(object)))?;
    Ok(match capabilities.scope {
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            object.metadata.namespace.as_deref().unwrap_or(NAMESPACE),
            &resource,
        ),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    })
}

/// Whether the API server holds `object`.
async fn exists(client: &kube::Client, object: &DynamicObject) -> Result<bool> {
    let name = object.metadata.name.as_deref().context("unnamed object")?;
    Ok(api_for(client, object)
        .await?
        .get_opt(name)
        .await?
        .is_some())
}

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
    for _ in 0..150 {
        if pinned_kind(client, &gvk).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("widgets.example.com not served by discovery within 30s")
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

/// kube-fanout run with `args` (the Deployment's, listen addresses moved to
/// free loopback ports) and the credentials in `kubeconfig`.
fn run_like_the_pod(
    cp: &ControlPlane,
    args: &[String],
    extra: &[&str],
    kubeconfig: &Path,
    name: &str,
) -> Result<FanoutProcess> {
    let addr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let mut command = Command::new(KUBE_FANOUT);
    for arg in args {
        if arg.starts_with("--listen=") {
            command.arg(format!("--listen={addr}"));
        } else if arg.starts_with("--metrics-listen=") {
            command.arg(format!("--metrics-listen=127.0.0.1:{}", free_port()?));
        } else {
            command.arg(arg);
        }
    }
    command
        .args(extra)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .env("RUST_LOG", "info");
    FanoutProcess::spawn(command, addr, cp.dir().join(format!("{name}.log")))
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
        r#"grpcurl -plaintext -H "authorization: Bearer $TOKEN" 127.0.0.1:50051 kubefanout.v1.KubeFanout/ListResources"#,
        r#"kubectl-fanout --server 127.0.0.1:50051 --token "$TOKEN" list v1/configmaps -A"#,
    ] {
        assert!(notes.contains(line), "NOTES lack {line:?}:\n{notes}");
    }
    let installed = helm.manifest().await?;
    let kinds: BTreeSet<String> = installed.iter().map(kind_name).collect();
    let expected_kinds: BTreeSet<String> = [
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
    assert_eq!(container["lifecycle"]["preStop"]["sleep"]["seconds"], 10);
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
    let token = Api::<ServiceAccount>::namespaced(kube.clone(), NAMESPACE)
        .create_token_request(
            FULLNAME,
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
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
        .context("TokenRequest without a token")?;
    let sa_kubeconfig = cp.dir().join("sa-kubeconfig");
    kubeconfig_with_token(&cp, &token, &sa_kubeconfig)?;
    let args = deployment_args(&kube).await?;
    assert!(
        args.contains(&"--history-events=5000".to_owned()),
        "{args:?}"
    );
    let mut fanout = run_like_the_pod(&cp, &args, &[], &sa_kubeconfig, "fanout")?;
    fanout.wait_serving(READINESS_SERVICE).await?;
    // The subscriber is the admin: kube-fanout (as the chart's identity)
    // authenticates it with TokenReview and authorizes every Get with
    // SubjectAccessReview, so this also proves the chart grants those. The
    // chart's own identity may list and watch, not get.
    let mut client = ClientConfig::new([fanout.addr.to_string()])
        .bearer_token(ADMIN_TOKEN)
        .connect()
        .await?;
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
        &sa_kubeconfig,
        "greedy",
    )?;
    // Asked as the admin: once subscribers are authorized (issue 9), the
    // ServiceAccount itself will not be shown secrets.
    let mut client = wait_for_client(&greedy, ADMIN_TOKEN).await?;
    let mut refusal = None;
    for _ in 0..150 {
        let resources = client.list_resources().await?.resources;
        let secrets = resources
            .into_iter()
            .find(|r| r.resource.as_ref().is_some_and(|r| r.resource == "secrets"))
            .context("secrets not listed")?;
        if !secrets.last_error.is_empty() {
            refusal = Some(secrets);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let refusal = refusal.context("no error for secrets within 30s")?;
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
    let args = deployment_args(&kube).await?;
    let resources: Vec<&String> = args
        .iter()
        .filter(|a| a.starts_with("--resource="))
        .collect();
    assert_eq!(
        resources,
        ["--resource=v1/configmaps", "--resource=v1/services"]
    );
    let upgraded = helm.manifest().await?;

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
        api_for(client, &object)
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
    for _ in 0..150 {
        if client.get(request.clone()).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("{resource} {name} never reached kube-fanout within 30s")
}

/// A client of `fanout` once its gRPC port answers.
async fn wait_for_client(
    fanout: &FanoutProcess,
    token: &str,
) -> Result<kube_fanout_client::Client> {
    for _ in 0..150 {
        if fanout.health("").await.is_ok() {
            return Ok(ClientConfig::new([fanout.addr.to_string()])
                .bearer_token(token.to_owned())
                .connect()
                .await?);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!(
        "kube-fanout did not answer within 30s:\n{}",
        fanout.log_tail()
    )
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
    let mut variants = vec![None];
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(CHART).join("ci"))?
        .map(|entry| Ok(entry?.path()))
        .collect::<Result<_>>()?;
    files.sort();
    variants.extend(files.into_iter().map(Some));
    ensure!(variants.len() > 3, "no CI values files found");
    let without_crds = ["ServiceMonitor", "Certificate"];
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
            api_for(&kube, &object)
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

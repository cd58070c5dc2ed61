//! The Helm chart on a real node (tests/src/node.rs: a kubelet on
//! containerd, the CNI bridge, kube-proxy, kube-controller-manager and
//! kube-scheduler beside the test API server): `helm install` with the
//! chart's defaults (TLS on, two replicas) runs kube-fanout's image as the
//! chart says (non-root, read-only root filesystem, the TLS Secret and the
//! ServiceAccount token mounted), its pods turn Ready through their own
//! gRPC probes; a client pod running the image's kubectl-fanout watches
//! through the Service with a projected token for the audience kube-fanout
//! and the chart's CA and sees every change; a token for another audience
//! is refused with a message saying so; `helm upgrade` rolls the pods one
//! at a time while changes keep coming, and the client, one container
//! that never restarts, resumes on the next pod after each server it
//! followed goes: it prints every change once, in order; the
//! PodDisruptionBudget refuses a second eviction; a readiness probe
//! patched to a wrong port keeps its pod from Ready with the kubelet
//! reporting the failure, and the chart's probe, restored by `helm
//! upgrade`, turns the new pods Ready; `helm uninstall` leaves nothing
//! behind.

// The real node (network namespaces, a kubelet on containerd) is Linux only.
#![cfg(target_os = "linux")]

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context, Result, bail, ensure};
use futures::StreamExt;
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Event, Pod, Service, ServiceAccount},
    policy::v1::PodDisruptionBudget,
    rbac::v1::{Role, RoleBinding},
};
use kube::{
    Api,
    api::{EvictParams, ListParams, LogParams, PostParams},
};
use kube_fanout_tests::{
    changes::{Change, check_each_once_in_order, printed},
    helm::{Helm, exists, kind_name},
    node::{CHART, Cluster, ContainerProcess, Limits, chart_image, kube_fanout_image},
    support::create_namespace,
};
use kube_runtime::watcher;
use serde_json::json;

const RELEASE: &str = "kf";
const NAMESPACE: &str = "fanout";
/// The name the chart gives the release's objects.
const FULLNAME: &str = "kf-kube-fanout";
/// The Service's DNS name, which the generated certificate is for.
const SERVICE_HOST: &str = "kf-kube-fanout.fanout.svc";
/// The namespace whose ConfigMaps the client watches.
const WATCHED: &str = "watched";
/// The chart's replicas by default.
const REPLICAS: usize = 2;
/// The label selecting the release's pods.
const SELECTOR: &str = "app.kubernetes.io/instance=kf,app.kubernetes.io/name=kube-fanout";
/// How long pods may take to become Ready (image unpack, sync, probes).
const POD_TIMEOUT: Duration = Duration::from_secs(180);

/// Run by its own step of scripts/test (`--ignored`), not beside the other
/// end-to-end tests: it needs root, and it takes both cores for minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root; scripts/test runs it in its own step (cargo test -p kube-fanout-tests --test node -- --ignored)"]
async fn the_chart_runs_on_a_real_node() -> Result<()> {
    let cluster = Cluster::start().await?;
    let kube = cluster.cp.client.clone();
    let image = chart_image()?;
    cluster.import_image(kube_fanout_image()?, &image).await?;
    let helm = Helm::new(&cluster.cp)?;
    create_namespace(&kube, WATCHED).await?;

    helm.run(&[
        "install",
        RELEASE,
        CHART,
        "--namespace",
        NAMESPACE,
        "--create-namespace",
    ])
    .await?;
    let installed = helm.manifest(RELEASE, NAMESPACE).await?;
    wait_rolled_out(&cluster, 1).await?;
    check_pods_as_the_chart_says(&kube).await?;

    grant_watcher(&kube).await?;
    let service_ip = service_ip(&kube).await?;
    // Never restarted: the one container has to resume across the rollout.
    create_client_pod(&kube, "watcher", &service_ip, "kube-fanout", "Never").await?;
    create_client_pod(
        &kube,
        "wrong-audience",
        &service_ip,
        "not-kube-fanout",
        "Never",
    )
    .await?;
    let refused = wait_terminated(&cluster, "wrong-audience").await?;
    ensure!(
        refused.contains("does not have valid authentication credentials")
            && refused.contains(r#"token audiences ["not-kube-fanout"] is invalid"#),
        "a token for another audience should be refused with a message naming the audience; the client said:\n{refused}"
    );

    // Changes before the rollout arrive.
    let configmaps: Api<ConfigMap> = Api::namespaced(kube.clone(), WATCHED);
    let mut written = Vec::new();
    for i in 0..5 {
        written.push(write_configmap(&configmaps, i, "before").await?);
    }
    wait_seen(&cluster, "watcher", &written).await?;

    // An upgrade with a new value rolls the pods one at a time while
    // changes keep coming; the client sees each of them once, in order.
    let rollout = RolloutRecorder::start(&kube).await?;
    let stop = tokio_util::sync::CancellationToken::new();
    let writer = {
        let (configmaps, stop) = (configmaps.clone(), stop.clone());
        tokio::spawn(async move {
            let mut written = Vec::new();
            for round in 0.. {
                for i in 0..5 {
                    written
                        .push(write_configmap(&configmaps, i, &format!("during-{round}")).await?);
                }
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
            anyhow::Ok(written)
        })
    };
    // The new pods start from the old ones' snapshots; with no cluster
    // DNS here they reach them at the Service's IP (the certificate still
    // verified as its DNS name).
    let replicas = format!("config.logLevel=debug,replicasAddress=https://{service_ip}:50051");
    upgrade_keeping_values(&helm, &replicas).await?;
    wait_rolled_out(&cluster, 2).await?;
    check_started_from_peers(&kube).await?;
    stop.cancel();
    written.extend(writer.await??);
    let during = rollout.check_one_at_a_time()?;
    for i in 0..5 {
        written.push(write_configmap(&configmaps, i, "after").await?);
    }
    wait_seen(&cluster, "watcher", &written).await?;
    ensure!(
        client_restarts(&kube, "watcher").await? == 0,
        "the client's container restarted"
    );
    let printed = seen(&kube, "watcher").await?;
    check_each_once_in_order(&printed, &written)?;
    tracing::info!(
        states = during,
        changes_written = written.len(),
        printed = printed.len(),
        "rollout observed: every change printed once, in order, by one container"
    );

    check_disruption_budget(&cluster).await?;
    wait_rolled_out(&cluster, 2).await?;
    check_probes_are_real(&cluster, &helm).await?;

    helm.run(&["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait"])
        .await?;
    for object in &installed {
        ensure!(
            !exists(&kube, object).await?,
            "{} is left after helm uninstall",
            kind_name(object)
        );
    }
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
    cluster
        .wait_for("the release's pods gone", POD_TIMEOUT, || async {
            let left = pods.list(&ListParams::default().labels(SELECTOR)).await?;
            Ok(left.items.is_empty().then_some(()))
        })
        .await?;
    Ok(())
}

/// After a rollout every new pod took its first snapshot from a ready
/// peer through the Service (TLS with the chart's CA, a projected token for
/// the audience kube-fanout, the peer's SubjectAccessReview for list and
/// watch) instead of the API server (`bootstrapFromPeers`, on by default):
/// its log says so.
async fn check_started_from_peers(kube: &kube::Client) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
    let listed = pods.list(&ListParams::default().labels(SELECTOR)).await?;
    ensure!(
        listed.items.len() == REPLICAS,
        "{} pods after the rollout",
        listed.items.len()
    );
    for pod in listed.items {
        let name = pod.metadata.name.context("a pod's name")?;
        let log = pods.logs(&name, &LogParams::default()).await?;
        ensure!(
            log.contains("started from a peer's snapshot"),
            "pod {name} did not start from a peer's snapshot; its log of it:\n{}",
            log.lines()
                .filter(|l| l.contains("feed") || l.contains("peer") || l.contains("WARN"))
                .take(20)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    Ok(())
}

/// Waits until the Deployment's pods of template `generation` (its
/// observed generation) are all updated and Ready, and no old one is left;
/// a timeout's error says why each pod is not Ready (container states,
/// probe failures and other events, the last log lines).
async fn wait_rolled_out(cluster: &Cluster, generation: i64) -> Result<()> {
    let kube = cluster.cp.client.clone();
    let deployments: Api<Deployment> = Api::namespaced(kube.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
    let outcome = cluster
        .wait_for("rolled-out Deployment", POD_TIMEOUT, || async {
            let d = deployments.get(FULLNAME).await?;
            let status = d.status.unwrap_or_default();
            let current = pods.list(&ListParams::default().labels(SELECTOR)).await?;
            let done = status.observed_generation.unwrap_or(0) >= generation
                && status.updated_replicas.unwrap_or(0) as usize == REPLICAS
                && status.ready_replicas.unwrap_or(0) as usize == REPLICAS
                && status.replicas.unwrap_or(0) as usize == REPLICAS
                && current.items.len() == REPLICAS;
            Ok(done.then_some(()))
        })
        .await;
    match outcome {
        Ok(()) => Ok(()),
        Err(e) => Err(e.context(diagnose(&kube).await)),
    }
}

/// A port in the pod where nothing listens (the chart's are 50051, 9090
/// and 8081).
const WRONG_PROBE_PORT: i32 = 8089;

/// `helm upgrade` of the release with its values kept and `set` changed:
/// a new pod template, so the pods roll.
async fn upgrade_keeping_values(helm: &Helm, set: &str) -> Result<()> {
    helm.run(&[
        "upgrade",
        RELEASE,
        CHART,
        "--namespace",
        NAMESPACE,
        "--reuse-values",
        "--set",
        set,
    ])
    .await?;
    Ok(())
}

/// The pods turn Ready through the kubelet's own gRPC probes, not
/// whatever they do: with the Deployment's readiness probe patched to
/// [`WRONG_PROBE_PORT`] (generation 3), the new pod's kube-fanout runs but
/// the pod stays not Ready while the kubelet reports the probe failing,
/// and the rollout goes no further (maxUnavailable 0: the old pods
/// serve); `helm upgrade` with a new value then puts the chart's probe
/// back (its three-way merge undoes the patch) and its pods turn Ready
/// (generation 4). What a wrong probe port in the chart would do to a
/// first install, where [`wait_rolled_out`]'s error quotes the same
/// events.
async fn check_probes_are_real(cluster: &Cluster, helm: &Helm) -> Result<()> {
    let started = std::time::Instant::now();
    let kube = cluster.cp.client.clone();
    let deployments: Api<Deployment> = Api::namespaced(kube.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
    let events: Api<Event> = Api::namespaced(kube.clone(), NAMESPACE);
    let chart_port = readiness_port(
        &deployments
            .get(FULLNAME)
            .await?
            .spec
            .and_then(|s| s.template.spec),
    )
    .context("the chart's Deployment has no gRPC readiness probe")?;
    ensure!(
        chart_port != WRONG_PROBE_PORT,
        "the chart probes {WRONG_PROBE_PORT}"
    );
    deployments
        .patch(
            FULLNAME,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "kube-fanout", "readinessProbe": {"grpc": {"port": WRONG_PROBE_PORT}}}
            ]}}}})),
        )
        .await?;
    /// What became of the pod with the wrong probe.
    enum Seen {
        Ready(String),
        ProbeFailing {
            pod: String,
            failures: i32,
            message: String,
        },
    }
    let seen = cluster
        .wait_for(
            "the kubelet reporting the wrong port's readiness probe failing",
            POD_TIMEOUT,
            || async {
                let all_events = events.list(&ListParams::default()).await?;
                for pod in pods.list(&ListParams::default().labels(SELECTOR)).await? {
                    if readiness_port(&pod.spec) != Some(WRONG_PROBE_PORT) {
                        continue;
                    }
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    if pod_state(&pod).ready {
                        return Ok(Some(Seen::Ready(name)));
                    }
                    let running = pod
                        .status
                        .and_then(|s| s.container_statuses)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
                    let failed: Vec<&Event> = all_events
                        .items
                        .iter()
                        .filter(|e| {
                            e.involved_object.name.as_deref() == Some(&name)
                                && e.reason.as_deref() == Some("Unhealthy")
                                && e.message
                                    .as_deref()
                                    .is_some_and(|m| m.starts_with("Readiness probe failed"))
                        })
                        .collect();
                    let failures: i32 = failed.iter().map(|e| e.count.unwrap_or(1)).sum();
                    // Three failures (15 s at periodSeconds 5) of a
                    // container that runs: longer than the chart's pods
                    // take to turn Ready.
                    if running && failures >= 3 {
                        let message = failed
                            .last()
                            .and_then(|e| e.message.clone())
                            .unwrap_or_default();
                        return Ok(Some(Seen::ProbeFailing {
                            pod: name,
                            failures,
                            message,
                        }));
                    }
                }
                Ok(None)
            },
        )
        .await?;
    let (pod, failures, message) = match seen {
        Seen::Ready(pod) => bail!(
            "pod {pod} turned Ready with its readiness probe on port {WRONG_PROBE_PORT}, where nothing listens: the kubelet is not probing the pods"
        ),
        Seen::ProbeFailing {
            pod,
            failures,
            message,
        } => (pod, failures, message),
    };
    ensure!(
        message.contains(&format!(":{WRONG_PROBE_PORT}")),
        "pod {pod}'s probe failure does not name port {WRONG_PROBE_PORT}: {message}"
    );
    let ready = ready_pods(&pods).await?;
    ensure!(
        ready.len() == REPLICAS && !ready.contains(&pod),
        "with the new pod {pod} not Ready the {REPLICAS} old ones should still serve (maxUnavailable 0); Ready: {ready:?}"
    );
    tracing::info!(%pod, failures, %message, "the wrong probe port kept the pod from Ready");
    upgrade_keeping_values(helm, "config.logLevel=info").await?;
    wait_rolled_out(cluster, 4).await?;
    for pod in pods.list(&ListParams::default().labels(SELECTOR)).await? {
        ensure!(
            readiness_port(&pod.spec) == Some(chart_port),
            "after helm upgrade pod {:?} probes {:?}, not the chart's {chart_port}",
            pod.metadata.name,
            readiness_port(&pod.spec)
        );
    }
    tracing::info!(elapsed = ?started.elapsed(), "the probe check (a wrong port, then the chart's) took");
    Ok(())
}

/// The port of a pod spec's kube-fanout container's gRPC readiness probe.
fn readiness_port(spec: &Option<k8s_openapi::api::core::v1::PodSpec>) -> Option<i32> {
    spec.as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "kube-fanout")?
        .readiness_probe
        .as_ref()?
        .grpc
        .as_ref()
        .map(|g| g.port)
}

/// Why the release's pods are not Ready, as a person would find out with
/// kubectl describe and logs: each container's state and last
/// termination, the pod's events (probe failures, mount errors), its log.
async fn diagnose(kube: &kube::Client) -> String {
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
    let events: Api<Event> = Api::namespaced(kube.clone(), NAMESPACE);
    let mut report = String::from("the release's pods:");
    let Ok(list) = pods.list(&ListParams::default().labels(SELECTOR)).await else {
        return "the release's pods could not be listed".into();
    };
    let all_events = events.list(&ListParams::default()).await.ok();
    for pod in list.items {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let status = pod.status.unwrap_or_default();
        report.push_str(&format!(
            "\n- pod {name}: phase {:?}",
            status.phase.unwrap_or_default()
        ));
        for c in status.container_statuses.unwrap_or_default() {
            report.push_str(&format!(
                "\n  container {} ready={} restarts={} state={} last={}",
                c.name,
                c.ready,
                c.restart_count,
                serde_json::to_string(&c.state).unwrap_or_default(),
                serde_json::to_string(&c.last_state).unwrap_or_default()
            ));
        }
        for e in all_events.iter().flat_map(|l| &l.items) {
            if e.involved_object.name.as_deref() == Some(&name)
                && e.type_.as_deref() == Some("Warning")
            {
                report.push_str(&format!(
                    "\n  event {}: {}",
                    e.reason.as_deref().unwrap_or_default(),
                    e.message.as_deref().unwrap_or_default()
                ));
            }
        }
        let log = pods
            .logs(
                &name,
                &LogParams {
                    tail_lines: Some(10),
                    ..LogParams::default()
                },
            )
            .await
            .unwrap_or_else(|e| format!("(no log: {e})"));
        report.push_str(&format!("\n  log:\n{log}"));
    }
    report
}

/// What the chart's pod spec promises, checked on the processes the node
/// runs: each container runs as the chart's non-root user, its root
/// filesystem is read-only (a write into it, as root from the host, fails
/// with EROFS: /tmp is world-writable in the image, so nothing else stops
/// it), the limits its cgroups enforce are the chart's `resources.limits`
/// (a memory limit; no CPU limit is no CFS quota), and it serves (the
/// probes passed).
async fn check_pods_as_the_chart_says(kube: &kube::Client) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
    for pod in pods.list(&ListParams::default().labels(SELECTOR)).await? {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let spec = pod.spec.context("no spec")?;
        let user = spec
            .security_context
            .as_ref()
            .and_then(|s| s.run_as_user)
            .context("the chart sets no runAsUser")?;
        let statuses = pod
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default();
        let status = statuses.first().context("no container status")?;
        ensure!(status.ready, "pod {name}'s container is not ready");
        let process = ContainerProcess::find(status.container_id.as_deref().unwrap_or_default())?;
        let uids = process.uids()?;
        ensure!(
            user != 0 && uids.iter().all(|&u| i64::from(u) == user),
            "pod {name}'s kube-fanout runs as user IDs {uids:?}, not the chart's runAsUser {user}"
        );
        const PROBE: &str = "/tmp/kube-fanout-root-filesystem-write";
        match process.write_in_root(PROBE) {
            Err(e) if e.kind() == std::io::ErrorKind::ReadOnlyFilesystem => {}
            Ok(()) => bail!(
                "pod {name}'s root filesystem is writable on the node: {PROBE} was written into it \
                 (the chart's securityContext.readOnlyRootFilesystem is not in force: {:?})",
                spec.containers[0].security_context
            ),
            Err(e) => bail!(
                "writing {PROBE} into pod {name}'s root filesystem failed, but not as read-only: {e}"
            ),
        }
        let resources = spec.containers[0].resources.as_ref();
        let asked = Limits::asked(resources.and_then(|r| r.limits.as_ref()))?;
        // The chart's default: without a memory limit the comparison below
        // would hold for a kubelet that enforced nothing.
        ensure!(
            asked.memory_bytes.is_some(),
            "pod {name}'s spec has no memory limit: {resources:?}"
        );
        let enforced = process
            .limits()
            .with_context(|| format!("reading the limits pod {name}'s cgroups enforce"))?;
        ensure!(
            enforced == asked,
            "pod {name}'s cgroups enforce {enforced:?}, not the chart's resources.limits {asked:?} \
             ({resources:?}): the kubelet did not put the spec's limits in force"
        );
    }
    Ok(())
}

/// A ServiceAccount `watcher` in the release's namespace that may list and
/// watch ConfigMaps in [`WATCHED`].
async fn grant_watcher(kube: &kube::Client) -> Result<()> {
    let accounts: Api<ServiceAccount> = Api::namespaced(kube.clone(), NAMESPACE);
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "watcher"}}))?,
        )
        .await?;
    let roles: Api<Role> = Api::namespaced(kube.clone(), WATCHED);
    roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "watch-configmaps"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]}]
            }))?,
        )
        .await?;
    let bindings: Api<RoleBinding> = Api::namespaced(kube.clone(), WATCHED);
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "watcher"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "watch-configmaps"},
                "subjects": [{"kind": "ServiceAccount", "name": "watcher", "namespace": NAMESPACE}]
            }))?,
        )
        .await?;
    Ok(())
}

/// The Service's cluster IP (there is no cluster DNS: the client connects
/// to the address and verifies the certificate as [`SERVICE_HOST`]).
async fn service_ip(kube: &kube::Client) -> Result<String> {
    let services: Api<Service> = Api::namespaced(kube.clone(), NAMESPACE);
    services
        .get(FULLNAME)
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .context("the Service has no cluster IP")
}

/// A pod running the image's kubectl-fanout as NOTES.txt tells a client
/// to: a projected token for `audience` and the chart's CA at
/// /var/run/secrets/kube-fanout, watching [`WATCHED`]'s ConfigMaps
/// through the Service, each event a JSON line; `restart_policy` for its
/// container.
async fn create_client_pod(
    kube: &kube::Client,
    name: &str,
    service_ip: &str,
    audience: &str,
    restart_policy: &str,
) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": "watcher",
            "restartPolicy": restart_policy,
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "client",
                "image": chart_image()?,
                "imagePullPolicy": "Never",
                "command": ["/usr/local/bin/kubectl-fanout"],
                "args": ["--server", format!("{service_ip}:50051"), "--tls-server-name", SERVICE_HOST,
                         "watch", "v1/configmaps", "-n", WATCHED, "-o", "json"],
                "env": [
                    {"name": "KUBE_FANOUT_TOKEN_FILE", "value": "/var/run/secrets/kube-fanout/token"},
                    {"name": "KUBE_FANOUT_CA_FILE", "value": "/var/run/secrets/kube-fanout/ca.crt"},
                ],
                "securityContext": {"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                                    "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "kube-fanout", "mountPath": "/var/run/secrets/kube-fanout", "readOnly": true}],
            }],
            "volumes": [{"name": "kube-fanout", "projected": {"sources": [
                {"serviceAccountToken": {"audience": audience, "expirationSeconds": 3600, "path": "token"}},
                {"configMap": {"name": format!("{FULLNAME}-ca"), "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            ]}}],
        }
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    Ok(())
}

/// Creates or updates ConfigMap `cm-i` with `value`: its name and new
/// resourceVersion.
async fn write_configmap(api: &Api<ConfigMap>, i: usize, value: &str) -> Result<Change> {
    let name = format!("cm-{i}");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name},
        "data": {"value": value}
    }))?;
    let written = match api.get_opt(&name).await? {
        None => api.create(&PostParams::default(), &cm).await?,
        Some(_) => {
            api.patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&cm),
            )
            .await?
        }
    };
    let rv = written
        .metadata
        .resource_version
        .context("no resourceVersion")?;
    Ok((name, rv.parse().context("a resourceVersion")?))
}

/// The changes in the events a client pod printed so far, in order (its
/// log, read through the kubelet).
async fn seen(kube: &kube::Client, pod: &str) -> Result<Vec<Change>> {
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
    Ok(printed(&pods.logs(pod, &LogParams::default()).await?))
}

/// Waits until the client pod has printed every one of `written`; the
/// error lists those it has not.
async fn wait_seen(cluster: &Cluster, pod: &str, written: &[Change]) -> Result<()> {
    let kube = cluster.cp.client.clone();
    let outcome = cluster
        .wait_for(
            "client seeing every change",
            Duration::from_secs(60),
            || async {
                let seen: BTreeSet<Change> = seen(&kube, pod).await?.into_iter().collect();
                Ok(written.iter().all(|c| seen.contains(c)).then_some(()))
            },
        )
        .await;
    if outcome.is_err() {
        let seen: BTreeSet<Change> = seen(&kube, pod)
            .await
            .unwrap_or_default()
            .into_iter()
            .collect();
        let missing: Vec<_> = written.iter().filter(|c| !seen.contains(*c)).collect();
        let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
        let state = pods
            .get(pod)
            .await
            .ok()
            .and_then(|p| p.status)
            .and_then(|s| s.container_statuses)
            .map(|c| serde_json::to_string(&c).unwrap_or_default());
        let log = pods
            .logs(
                pod,
                &LogParams {
                    tail_lines: Some(3),
                    ..LogParams::default()
                },
            )
            .await
            .unwrap_or_default();
        bail!(
            "the client missed {} of {} changes: {missing:?}; its container: {state:?}; its log ends: {log}",
            missing.len(),
            written.len()
        );
    }
    Ok(())
}

/// Waits until a client pod's container has terminated: its log.
async fn wait_terminated(cluster: &Cluster, pod: &str) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(cluster.cp.client.clone(), NAMESPACE);
    cluster
        .wait_for("client pod terminated", POD_TIMEOUT, || async {
            let status = pods.get(pod).await?.status.unwrap_or_default();
            let done = status
                .container_statuses
                .unwrap_or_default()
                .iter()
                .any(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()));
            Ok(done.then_some(()))
        })
        .await?;
    Ok(pods.logs(pod, &LogParams::default()).await?)
}

/// How often the client pod's container restarted.
async fn client_restarts(kube: &kube::Client, pod: &str) -> Result<i32> {
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
    let status = pods.get(pod).await?.status.unwrap_or_default();
    Ok(status
        .container_statuses
        .unwrap_or_default()
        .iter()
        .map(|c| c.restart_count)
        .sum())
}

/// The chart's PodDisruptionBudget (maxUnavailable 1) as the eviction API
/// and the disruption controller enforce it: once the controller has
/// counted both pods Ready it allows one disruption; evicting one pod is
/// accepted, and evicting the other right after is refused with 429
/// TooManyRequests while the first is not back (its replacement not
/// Ready). The second eviction must name a pod that was Ready and not
/// deleting: the eviction API deletes a Pending pod (the replacement)
/// or one already being deleted (the first, again) without consulting
/// the budget (`canIgnorePDB` in k8s.io/kubernetes
/// pkg/registry/core/pod/storage/eviction.go). And it must not be retried:
/// see the client below.
async fn check_disruption_budget(cluster: &Cluster) -> Result<()> {
    let kube = cluster.cp.client.clone();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(kube.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
    // kube-rs retries a 429 by default (up to 15 times, 5 ms doubling):
    // the refused eviction would be sent again until the replacement pod
    // is Ready and the budget allows it, and come back accepted. Evictions
    // go through a client that shows the first answer.
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&cluster.cp.kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    config.default_retry = false;
    let evictions: Api<Pod> = Api::namespaced(kube::Client::try_from(config)?, NAMESPACE);
    cluster
        .wait_for(
            "the disruption controller allowing one disruption",
            POD_TIMEOUT,
            || async {
                let pdb = budgets.get(FULLNAME).await?;
                let status = pdb.status.unwrap_or_default();
                let observed =
                    status.observed_generation.unwrap_or(0) >= pdb.metadata.generation.unwrap_or(0);
                Ok((observed
                    && status.disruptions_allowed == Some(1)
                    && status.current_healthy == Some(REPLICAS as i32))
                .then_some(()))
            },
        )
        .await?;
    let ready = ready_pods(&pods).await?;
    ensure!(
        ready.len() == REPLICAS,
        "{REPLICAS} Ready pods expected: {ready:?}"
    );
    evictions
        .evict(&ready[0], &EvictParams::default())
        .await
        .with_context(|| format!("evicting {} with one disruption allowed", ready[0]))?;
    let second = evictions.evict(&ready[1], &EvictParams::default()).await;
    let ready_after = ready_pods(&pods).await?;
    let budget = budgets.get(FULLNAME).await?.status;
    match second {
        Err(kube::Error::Api(status)) if status.code == 429 => ensure!(
            status.message.contains("disruption budget"),
            "the second eviction was refused with 429 but not by the budget: {status:?}"
        ),
        Err(err) => return Err(err).context(format!("evicting {} second", ready[1])),
        Ok(status) => bail!(
            "evicting {} was accepted ({status:?}) right after {} was, though the budget allowed one disruption; Ready pods now: {ready_after:?}; the budget's status: {budget:?}",
            ready[1],
            ready[0]
        ),
    }
    ensure!(
        ready_after == ready[1..],
        "when the second eviction was refused only {} should have been Ready (the first evicted, its replacement not Ready yet): {ready_after:?}",
        ready[1]
    );
    // What an eviction "accepted right after the first" can be without the
    // budget failing: the first pod again, now being deleted, goes through
    // (the API deletes it without consulting the budget), unless it is
    // gone already.
    match evictions.evict(&ready[0], &EvictParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(err) => {
            return Err(err).context(format!("evicting {}, being deleted, again", ready[0]));
        }
    }
    tracing::info!(evicted = %ready[0], refused = %ready[1], budget = ?budget, "the budget held");
    Ok(())
}

/// The release's pods that are Ready and not being deleted, by name.
async fn ready_pods(pods: &Api<Pod>) -> Result<Vec<String>> {
    let mut ready: Vec<String> = pods
        .list(&ListParams::default().labels(SELECTOR))
        .await?
        .into_iter()
        .filter(|p| {
            let state = pod_state(p);
            state.ready && !state.deleting
        })
        .filter_map(|p| p.metadata.name)
        .collect();
    ready.sort();
    Ok(ready)
}

/// Records the release's pods through a watch for the whole rollout.
struct RolloutRecorder {
    states: Arc<Mutex<Vec<BTreeMap<String, PodState>>>>,
    task: tokio::task::JoinHandle<()>,
}

/// What the rollout check needs of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PodState {
    template_hash: String,
    ready: bool,
    deleting: bool,
}

impl RolloutRecorder {
    /// Starts recording; returns once the watch has listed the pods as
    /// they are (the old ones, before an upgrade).
    async fn start(kube: &kube::Client) -> Result<Self> {
        let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
        let states = Arc::new(Mutex::new(Vec::new()));
        let recorded = states.clone();
        let (listed_tx, listed) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut listed_tx = Some(listed_tx);
            let mut current = BTreeMap::new();
            let config = watcher::Config::default().labels(SELECTOR);
            let mut stream = watcher(pods, config).boxed();
            while let Some(Ok(event)) = stream.next().await {
                match event {
                    watcher::Event::InitApply(pod) => {
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        current.insert(name, pod_state(&pod));
                        continue;
                    }
                    watcher::Event::Apply(pod) => {
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        current.insert(name, pod_state(&pod));
                    }
                    watcher::Event::Delete(pod) => {
                        current.remove(&pod.metadata.name.clone().unwrap_or_default());
                    }
                    watcher::Event::Init => continue,
                    watcher::Event::InitDone => {
                        if let Some(tx) = listed_tx.take() {
                            let _ = tx.send(current.clone());
                        }
                        continue;
                    }
                }
                if let Ok(mut states) = recorded.lock() {
                    states.push(current.clone());
                }
            }
        });
        let first = tokio::time::timeout(Duration::from_secs(30), listed)
            .await
            .context("the pod watch did not list")??;
        states
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .insert(0, first);
        Ok(RolloutRecorder { states, task })
    }

    /// Checks that the old pods went one at a time: whenever the k-th
    /// old pod was being deleted, at least k new pods were Ready (so
    /// Ready pods never dropped below the replicas). The states seen.
    fn check_one_at_a_time(self) -> Result<usize> {
        self.task.abort();
        let states = self
            .states
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?;
        let first = states.first().context("no pod state recorded")?;
        let old: BTreeSet<&str> = first.values().map(|s| s.template_hash.as_str()).collect();
        for state in states.iter() {
            let deleting_old = state
                .values()
                .filter(|s| old.contains(s.template_hash.as_str()) && s.deleting)
                .count();
            let gone_old = REPLICAS.saturating_sub(
                state
                    .values()
                    .filter(|s| old.contains(s.template_hash.as_str()))
                    .count(),
            );
            let ready_new = state
                .values()
                .filter(|s| !old.contains(s.template_hash.as_str()) && s.ready)
                .count();
            ensure!(
                ready_new >= deleting_old + gone_old,
                "{} old pod(s) going with only {ready_new} new one(s) Ready: {state:?}",
                deleting_old + gone_old
            );
        }
        let last = states.last().context("no pod state")?;
        ensure!(
            last.values()
                .all(|s| !old.contains(s.template_hash.as_str())),
            "old pods left: {last:?}"
        );
        Ok(states.len())
    }
}

fn pod_state(pod: &Pod) -> PodState {
    PodState {
        template_hash: pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("pod-template-hash").cloned())
            .unwrap_or_default(),
        ready: pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        deleting: pod.metadata.deletion_timestamp.is_some(),
    }
}

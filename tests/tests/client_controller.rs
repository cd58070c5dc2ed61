//! The example controller (client/examples/configmap_controller.rs), a
//! plain kube-runtime Controller fed by kube-fanout, run as its own process
//! against a real kube-fanout and API server.

use anyhow::Result;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube_fanout_tests::{
    controlplane::ControlPlane, eventually::eventually, fanout::Fanout, support::*,
};

const CONTROLLER: &str = env!("CARGO_BIN_EXE_configmap-controller-under-test");
const ANNOTATION: &str = "example.kube-fanout.io/data-keys";

/// Waits until the API server shows `name` annotated with `keys`.
async fn annotated(api: &Api<ConfigMap>, name: &str, keys: &str) -> Result<()> {
    eventually(format!("{name} annotated {ANNOTATION}={keys}"))
        .until(
            async || Ok(api.get(name).await?.metadata.annotations),
            |annotations| {
                annotations
                    .as_ref()
                    .and_then(|a| a.get(ANNOTATION))
                    .map(String::as_str)
                    == Some(keys)
            },
        )
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_controller_reconciles_configmaps_created_after_it_started() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let kube = cp.client.clone();
    create_namespace(&kube, "controller").await?;
    create_configmap(&kube, "controller", "existing", "x").await?;
    let fanout = Fanout::start(kube.clone(), &["v1/configmaps"]).await?;
    fanout.wait_synced().await?;
    let _controller = tokio::process::Command::new(CONTROLLER)
        .args(["--server", &fanout.addr.to_string()])
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .kill_on_drop(true)
        .spawn()?;
    let api: Api<ConfigMap> = Api::namespaced(kube.clone(), "controller");
    // Reconciling the one that existed shows the controller is running.
    annotated(&api, "existing", "1").await?;

    let mut late = ConfigMap::default();
    late.metadata.name = Some("late".into());
    late.data = Some(
        [("a", "1"), ("b", "2")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
    );
    api.create(&PostParams::default(), &late).await?;
    annotated(&api, "late", "2").await?;

    // A change arriving through kube-fanout is reconciled too.
    let mut changed = api.get("late").await?;
    changed
        .data
        .get_or_insert_default()
        .insert("c".into(), "3".into());
    api.replace("late", &PostParams::default(), &changed)
        .await?;
    annotated(&api, "late", "3").await?;
    fanout.stop().await?;
    Ok(())
}

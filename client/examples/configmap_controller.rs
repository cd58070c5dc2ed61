//! A kube-runtime controller fed by kube-fanout instead of the API server.
//!
//! It annotates every ConfigMap with how many data keys it holds
//! (`example.kube-fanout.io/data-keys`). Reads come from kube-fanout; only
//! the writes go to the API server. The one line that differs from a plain
//! kube-runtime controller is marked.
//!
//! ```sh
//! cargo run -p kube-fanout-client --example configmap_controller -- \
//!     --server 127.0.0.1:50051 --kubeconfig ~/.kube/config
//! ```

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api as KubeApi, ResourceExt,
    api::{Patch, PatchParams},
};
use kube_fanout_client::{Api, ClientConfig, watcher};
use kube_runtime::{Controller, WatchStreamExt, controller::Action, reflector, watcher::Config};

/// The annotation the controller maintains.
const ANNOTATION: &str = "example.kube-fanout.io/data-keys";

#[derive(Debug, Parser)]
struct Args {
    /// kube-fanout addresses, tried in order.
    #[arg(
        long = "server",
        env = "KUBE_FANOUT_SERVER",
        value_delimiter = ',',
        required = true
    )]
    servers: Vec<String>,
    /// Kubeconfig for the writes (default: the usual inference).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
}

#[derive(Debug, thiserror::Error)]
#[error("patching the ConfigMap: {0}")]
struct ReconcileError(#[from] kube::Error);

async fn reconcile(cm: Arc<ConfigMap>, kube: Arc<kube::Client>) -> Result<Action, ReconcileError> {
    let keys = cm.data.as_ref().map_or(0, |d| d.len()).to_string();
    if cm.annotations().get(ANNOTATION) == Some(&keys) {
        return Ok(Action::await_change());
    }
    let api =
        KubeApi::<ConfigMap>::namespaced((*kube).clone(), &cm.namespace().unwrap_or_default());
    let patch = serde_json::json!({"metadata": {"annotations": {ANNOTATION: keys}}});
    api.patch(
        &cm.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    tracing::info!(configmap = %cm.name_any(), namespace = ?cm.namespace(), keys, "reconciled");
    Ok(Action::await_change())
}

fn error_policy(_: Arc<ConfigMap>, err: &ReconcileError, _: Arc<kube::Client>) -> Action {
    tracing::warn!(error = %err, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(1))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let kube = match &args.kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Client::try_from(
                kube::Config::from_custom_kubeconfig(file, &Default::default()).await?,
            )?
        }
        None => kube::Client::try_default().await?,
    };
    let fanout = ClientConfig::new(args.servers).build()?;

    let (reader, writer) = reflector::store();
    // The one line: a kube-runtime controller would have
    // `kube_runtime::watcher(kube::Api::<ConfigMap>::all(kube), ...)`.
    let configmaps = watcher(Api::<ConfigMap>::all(fanout), Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects();
    tracing::info!("controller started");
    Controller::for_stream(configmaps, reader)
        .run(reconcile, error_policy, Arc::new(kube))
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::warn!(error = %err, "controller");
            }
        })
        .await;
    Ok(())
}

//! Metadata-only subscriptions against a real API server: what they save
//! on the wire, and a kube-runtime controller fed by kube-fanout's
//! `metadata_watcher` whose store agrees with the API server's own
//! PartialObjectMetadataList.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use anyhow::{Result, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    ResourceExt,
    api::{Api as KubeApi, DeleteParams, ListParams, Patch, PatchParams, PostParams},
    core::PartialObjectMeta,
};
use kube_fanout_client::{
    Api, Client,
    proto::{EventType, ListRequest, WatchRequest},
};
use kube_fanout_tests::{
    controlplane::ControlPlane, eventually::eventually, fanout::Fanout, proxy::CountingProxy,
    support::*,
};
use kube_runtime::{Controller, WatchStreamExt, controller::Action, reflector, watcher::Config};
use rand::{Rng, SeedableRng, distr::Alphanumeric, rngs::StdRng};

/// 10 KiB of data that no two versions share.
fn payload(seed: u64) -> String {
    StdRng::seed_from_u64(seed)
        .sample_iter(Alphanumeric)
        .take(10 * 1024)
        .map(char::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_watch_of_a_10_kib_object_moves_at_most_a_tenth_of_the_bytes() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let kube = cp.client.clone();
    create_namespace(&kube, "meta").await?;
    create_configmap(&kube, "meta", "big", &payload(0)).await?;
    let fanout = Fanout::start(kube.clone(), &["v1/configmaps"]).await?;
    fanout.wait_synced().await?;
    // One proxy, hence one connection, per stream: each counts only its own.
    let full_proxy = CountingProxy::start(fanout.addr).await?;
    let meta_proxy = CountingProxy::start(fanout.addr).await?;
    let mut full_client = Client::connect(&format!("http://{}", full_proxy.addr)).await?;
    let mut meta_client = Client::connect(&format!("http://{}", meta_proxy.addr)).await?;
    let rv = full_client
        .list(ListRequest {
            resource: Some(configmaps()),
            namespace: "meta".into(),
            ..ListRequest::default()
        })
        .await?
        .resource_version;
    let request = |metadata_only| WatchRequest {
        resource: Some(configmaps()),
        namespace: "meta".into(),
        resource_version: rv.clone(),
        metadata_only,
        ..WatchRequest::default()
    };
    let mut full = full_client.watch(request(false)).await?;
    let mut meta = meta_client.watch(request(true)).await?;
    let (full_before, meta_before) = (
        full_proxy.bytes_from_server(),
        meta_proxy.bytes_from_server(),
    );

    const EVENTS: u64 = 20;
    let api: KubeApi<ConfigMap> = KubeApi::namespaced(kube.clone(), "meta");
    for i in 1..=EVENTS {
        let patch = serde_json::json!({"data": {"value": payload(i)}});
        api.patch("big", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    for _ in 0..EVENTS {
        let whole = next_change(&mut full).await?;
        let partial = next_change(&mut meta).await?;
        ensure!(whole.r#type() == EventType::Modified && partial.r#type() == EventType::Modified);
        ensure!(whole.resource_version == partial.resource_version);
        let object: serde_json::Value = serde_json::from_str(&partial.object)?;
        ensure!(
            object["kind"] == "PartialObjectMetadata" && object.get("data").is_none(),
            "not metadata only: {}",
            partial.object.chars().take(200).collect::<String>()
        );
        ensure!(whole.object.len() > 10 * 1024);
    }
    let full_bytes = full_proxy.bytes_from_server() - full_before;
    let meta_bytes = meta_proxy.bytes_from_server() - meta_before;
    println!(
        "{EVENTS} MODIFIED events of a 10 KiB ConfigMap, bytes from the server on the wire: \
         full {full_bytes} ({} per event), metadata only {meta_bytes} ({} per event), ratio {:.2}",
        full_bytes / EVENTS,
        meta_bytes / EVENTS,
        full_bytes as f64 / meta_bytes as f64
    );
    ensure!(
        meta_bytes * 10 <= full_bytes,
        "metadata only moved {meta_bytes} bytes, more than a tenth of the full stream's {full_bytes}"
    );
    fanout.stop().await?;
    Ok(())
}

const TIER: &str = "tier";
const COPIED: &str = "meta.kube-fanout.io/copied-tier";

#[derive(Debug, thiserror::Error)]
#[error("patching the ConfigMap: {0}")]
struct ReconcileError(#[from] kube::Error);

/// A controller that reads only metadata: it copies the `tier` label into
/// an annotation, writing to the API server.
async fn reconcile(
    cm: Arc<PartialObjectMeta<ConfigMap>>,
    kube: Arc<kube::Client>,
) -> Result<Action, ReconcileError> {
    let Some(tier) = cm.labels().get(TIER) else {
        return Ok(Action::await_change());
    };
    if cm.annotations().get(COPIED) == Some(tier) {
        return Ok(Action::await_change());
    }
    let api =
        KubeApi::<ConfigMap>::namespaced((*kube).clone(), &cm.namespace().unwrap_or_default());
    let patch = serde_json::json!({"metadata": {"annotations": {COPIED: tier}}});
    api.patch(
        &cm.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(Action::await_change())
}

fn error_policy(
    _: Arc<PartialObjectMeta<ConfigMap>>,
    _: &ReconcileError,
    _: Arc<kube::Client>,
) -> Action {
    Action::requeue(Duration::from_millis(200))
}

/// Name → the object's type and metadata, less `managedFields` (which
/// kube-fanout drops by default).
fn by_name<'a>(
    objects: impl IntoIterator<Item = &'a PartialObjectMeta<ConfigMap>>,
) -> BTreeMap<String, serde_json::Value> {
    objects
        .into_iter()
        .map(|o| {
            let mut metadata = o.metadata.clone();
            metadata.managed_fields = None;
            let value = serde_json::json!({"types": o.types, "metadata": metadata});
            (o.name_any(), value)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_controller_fed_by_kube_fanout_agrees_with_the_api_server() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let kube = cp.client.clone();
    create_namespace(&kube, "metactl").await?;
    let api: KubeApi<ConfigMap> = KubeApi::namespaced(kube.clone(), "metactl");
    let labelled = |name: &str, tier: &str| {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.labels = Some([(TIER.to_owned(), tier.to_owned())].into());
        cm.data = Some([("value".to_owned(), payload(1))].into());
        cm
    };
    for (name, tier) in [("a", "gold"), ("b", "silver"), ("c", "bronze")] {
        api.create(&PostParams::default(), &labelled(name, tier))
            .await?;
    }
    let fanout = Fanout::start(kube.clone(), &["v1/configmaps"]).await?;
    fanout.wait_synced().await?;

    let (reader, writer) = reflector::store::<PartialObjectMeta<ConfigMap>>();
    let stream = kube_fanout_client::metadata_watcher(
        Api::<ConfigMap>::namespaced(fanout.client().await?, "metactl"),
        Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .applied_objects();
    let controller = tokio::spawn(
        Controller::for_stream(stream, reader.clone())
            .run(reconcile, error_policy, Arc::new(kube.clone()))
            .for_each(|_| async {}),
    );

    // Changes after it started: a new object, a relabel, a deletion.
    api.create(&PostParams::default(), &labelled("d", "gold"))
        .await?;
    let relabel = serde_json::json!({"metadata": {"labels": {TIER: "platinum"}}});
    api.patch("b", &PatchParams::default(), &Patch::Merge(&relabel))
        .await?;
    api.delete("c", &DeleteParams::default()).await?;

    // The API server's own metadata list (kube's Api<PartialObjectMeta<_>>
    // asks it for a PartialObjectMetadataList).
    let truth_api: KubeApi<PartialObjectMeta<ConfigMap>> =
        KubeApi::namespaced(kube.clone(), "metactl");
    let want_copied = BTreeMap::from(
        [("a", "gold"), ("b", "platinum"), ("d", "gold")]
            .map(|(n, t)| (n.to_owned(), t.to_owned())),
    );
    // The annotations the controller copied, and kube-fanout's store
    // against the API server's list.
    eventually(format!(
        "annotations {want_copied:?} and kube-fanout's store equal to the API server's"
    ))
    .until(
        async || {
            let truth = truth_api.list(&ListParams::default()).await?;
            let copied: BTreeMap<String, String> = truth
                .items
                .iter()
                .map(|o| {
                    let copied = o.annotations().get(COPIED).cloned().unwrap_or_default();
                    (o.name_any(), copied)
                })
                .collect();
            let state = reader.state();
            let ours = by_name(state.iter().map(|o| &**o));
            Ok((copied, ours, by_name(&truth.items)))
        },
        |(copied, ours, theirs)| *copied == want_copied && ours == theirs,
    )
    .await
    .inspect_err(|_| controller.abort())?;
    // Every object in the store came as a PartialObjectMetadata.
    ensure!(reader.state().iter().all(|o| {
        o.types
            .as_ref()
            .is_some_and(|t| t.kind == "PartialObjectMetadata")
    }));
    controller.abort();
    fanout.stop().await?;
    Ok(())
}

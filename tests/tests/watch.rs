//! The walking skeleton end to end, on a real kube-apiserver and etcd:
//! snapshots are exact, live events follow in order.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use kube_fanout_client::proto::EventType;
use kube_fanout_tests::{controlplane::ControlPlane, fanout::Fanout, support::*};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_get_an_exact_snapshot_then_every_change_in_order() -> anyhow::Result<()> {
    let cp = ControlPlane::start().await?;
    let client = cp.client.clone();
    create_namespace(&client, "skeleton").await?;
    for i in 0..5 {
        create_configmap(&client, "skeleton", &format!("cm-{i}"), "before").await?;
    }
    let fanout = Fanout::start(client.clone(), &["v1/configmaps"]).await?;

    let mut first = fanout.client().await?.watch(watch_list("skeleton")).await?;
    let (snapshot, snapshot_rv) = read_snapshot(&mut first).await?;
    assert_eq!(snapshot.len(), 5);
    assert_eq!(
        contents(&snapshot),
        contents(&list_at(&client, "skeleton", &snapshot_rv).await?),
        "the first snapshot is the API server's state at its RV {snapshot_rv}"
    );

    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "skeleton");
    let added = create_configmap(&client, "skeleton", "cm-new", "fresh").await?;
    let mut changed = api.get("cm-1").await?;
    changed.data = Some([("value".to_owned(), "after".to_owned())].into());
    let changed = api
        .replace("cm-1", &PostParams::default(), &changed)
        .await?;
    api.delete("cm-2", &DeleteParams::default()).await?;

    let mut last_rv: u64 = snapshot_rv.parse()?;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let event = next_change(&mut first).await?;
        let rv: u64 = event.resource_version.parse()?;
        assert!(rv > last_rv, "RVs increase: {rv} after {last_rv}");
        last_rv = rv;
        let cm = decode(&event)?;
        seen.push((
            event.r#type(),
            cm.metadata.name.unwrap_or_default(),
            cm.metadata.resource_version,
        ));
    }
    assert_eq!(
        seen,
        vec![
            (
                EventType::Added,
                "cm-new".to_owned(),
                added.metadata.resource_version.clone()
            ),
            (
                EventType::Modified,
                "cm-1".to_owned(),
                changed.metadata.resource_version.clone()
            ),
            (EventType::Deleted, "cm-2".to_owned(), seen[2].2.clone()),
        ]
    );

    let mut second = fanout.client().await?.watch(watch_list("skeleton")).await?;
    let (later, later_rv) = read_snapshot(&mut second).await?;
    assert!(later_rv.parse::<u64>()? >= last_rv);
    assert_eq!(
        contents(&later),
        contents(&list_at(&client, "skeleton", &later_rv).await?),
        "a later snapshot is the API server's state at its RV {later_rv}"
    );
    assert!(later.contains_key("cm-new") && !later.contains_key("cm-2"));
    assert_eq!(later["cm-1"].data.as_ref().unwrap()["value"], "after");

    fanout.stop().await?;
    Ok(())
}

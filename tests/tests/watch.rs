//! The walking skeleton end to end, on a real kube-apiserver and etcd:
//! snapshots are exact, live events follow in order.

use std::time::Duration;

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams, WatchEvent, WatchParams};
use kube_fanout_client::proto::EventType;
use kube_fanout_tests::{
    controlplane::ControlPlane, eventually::eventually, fanout::Fanout, support::*,
};

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

    // The deletion's RV, from the API server's own watch (the truth).
    let mut truth = api
        .watch(&WatchParams::default(), &snapshot_rv)
        .await?
        .boxed();
    let deleted_rv = loop {
        match tokio::time::timeout(EVENT_TIMEOUT, truth.try_next()).await?? {
            Some(WatchEvent::Deleted(cm)) => break cm.metadata.resource_version,
            Some(WatchEvent::Error(e)) => anyhow::bail!("the API server's watch failed: {e}"),
            Some(_) => {}
            None => anyhow::bail!("the API server's watch ended"),
        }
    };
    assert!(deleted_rv.is_some() && deleted_rv != changed.metadata.resource_version);

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
            (EventType::Deleted, "cm-2".to_owned(), deleted_rv),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_are_one_snapshot_equal_to_the_api_servers_list_at_its_rv() -> anyhow::Result<()>
{
    use kube_fanout_client::proto::ListRequest;
    use std::collections::BTreeMap;

    let cp = ControlPlane::start().await?;
    let client = cp.client.clone();
    create_namespace(&client, "pages").await?;
    for i in 0..25 {
        create_configmap(&client, "pages", &format!("cm-{i:02}"), "x").await?;
    }
    let fanout = Fanout::start(client.clone(), &["v1/configmaps"]).await?;
    fanout.wait_synced().await?;
    let mut grpc = fanout.client().await?;
    let request = |continue_token: String| ListRequest {
        resource: Some(configmaps()),
        namespace: "pages".into(),
        limit: 10,
        r#continue: continue_token,
        ..ListRequest::default()
    };
    let first = grpc.grpc().list(request(String::new())).await?.into_inner();
    assert_eq!((first.objects.len(), first.remaining_item_count), (10, 15));

    // The store moves on between pages; the pages do not.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "pages");
    api.delete("cm-15", &DeleteParams::default()).await?;
    let late = create_configmap(&client, "pages", "cm-12a", "late").await?;
    let late_rv: u64 = late.metadata.resource_version.context("an RV")?.parse()?;
    eventually(format!("the cache reaching RV {late_rv}"))
        .within(EVENT_TIMEOUT)
        .every(Duration::from_millis(20))
        .until(
            async || {
                let resources = grpc.list_resources().await?;
                Ok(resources.resources[0].resource_version.parse::<u64>()?)
            },
            |rv| *rv >= late_rv,
        )
        .await?;

    let mut objects: BTreeMap<String, ConfigMap> = BTreeMap::new();
    let mut page = first;
    loop {
        for json in &page.objects {
            let cm: ConfigMap = serde_json::from_str(json)?;
            objects.insert(cm.metadata.name.clone().unwrap_or_default(), cm);
        }
        if page.r#continue.is_empty() {
            break;
        }
        let next = grpc
            .grpc()
            .list(request(page.r#continue.clone()))
            .await?
            .into_inner();
        assert_eq!(
            next.resource_version, page.resource_version,
            "every page is the same snapshot"
        );
        page = next;
    }
    assert_eq!(objects.len(), 25);
    assert_eq!(
        contents(&objects),
        contents(&list_at(&client, "pages", &page.resource_version).await?)
    );

    let bad = grpc
        .grpc()
        .list(request("garbage".into()))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert!(bad.message().contains("invalid continue token"), "{bad:?}");
    fanout.stop().await?;
    Ok(())
}

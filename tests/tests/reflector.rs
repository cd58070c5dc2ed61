//! The reflector against a real kube-apiserver and etcd: watch-list with
//! the WatchList gate on and the LIST+WATCH fallback with it off, a real
//! 410 after an etcd compaction, an API server killed mid-watch, and a
//! large paginated list.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube_fanout_client::proto::EventType;
use kube_fanout_core::{
    event::EventKind,
    object::ResourceVersion,
    resource::ResourceType,
    store::{Gap, Store},
};
use kube_fanout_reflector::{Reflector, ReflectorConfig, State, SyncPoint};
use kube_fanout_tests::{
    controlplane::{ControlPlane, Options},
    eventually::eventually,
    fanout::Fanout,
    support::*,
};

/// A reflector for configmaps against `client`, and its store.
async fn reflector(
    client: &kube::Client,
    config: ReflectorConfig,
) -> anyhow::Result<(Reflector, Arc<Store>)> {
    let resource = ResourceType::discover(client, &"v1/configmaps".parse()?).await?;
    let store = Arc::new(Store::new(resource, 100_000));
    Ok((Reflector::new(client.clone(), store.clone(), config), store))
}

/// The store's objects as name → (RV, data), for comparing with a LIST.
fn store_contents(store: &Store, namespace: &str) -> anyhow::Result<Contents> {
    let objects = store
        .snapshot()
        .objects
        .iter()
        .filter(|o| o.namespace == namespace)
        .map(|o| {
            let cm: ConfigMap = serde_json::from_str(&o.json)?;
            Ok((o.name.clone(), cm))
        })
        .collect::<anyhow::Result<BTreeMap<_, _>>>()?;
    Ok(contents(&objects))
}

/// The API server's current LIST of a namespace, and its RV.
async fn api_list(
    client: &kube::Client,
    namespace: &str,
) -> anyhow::Result<(String, BTreeMap<String, ConfigMap>)> {
    let list = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?;
    let rv = list.metadata.resource_version.clone().unwrap_or_default();
    Ok((
        rv,
        list.items
            .into_iter()
            .map(|cm| (cm.metadata.name.clone().unwrap_or_default(), cm))
            .collect(),
    ))
}

/// Runs reflector steps until `done`, with a deadline.
async fn step_until(
    reflector: &mut Reflector,
    mut state: State,
    done: impl Fn(&State) -> bool,
) -> anyhow::Result<State> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done(&state) {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "stuck in {state:?}");
        state = tokio::time::timeout(Duration::from_secs(30), reflector.step(state)).await?;
    }
    Ok(state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_watch_list_gate_on_the_reflector_syncs_by_watch_list_in_one_request()
-> anyhow::Result<()> {
    let cp = ControlPlane::start_with(Options {
        feature_gates: Some("WatchList=true".into()),
        ..Options::default()
    })
    .await?;
    create_namespace(&cp.client, "wl").await?;
    for i in 0..10 {
        create_configmap(&cp.client, "wl", &format!("cm-{i}"), "x").await?;
    }
    let (mut reflector, store) = reflector(&cp.client, ReflectorConfig::default()).await?;
    let status = reflector.status();
    let state = reflector.step(State::WatchList(SyncPoint::Start)).await;
    assert!(
        matches!(state, State::Follow { .. }),
        "synced and kept the watch: {state:?}"
    );
    let s = status.lock().clone();
    assert_eq!((s.watch_lists, s.lists), (1, 0));
    let (_, listed) = api_list(&cp.client, "wl").await?;
    assert_eq!(store_contents(&store, "wl")?, contents(&listed));

    // The same watch carries the next change.
    create_configmap(&cp.client, "wl", "after", "y").await?;
    let follow = tokio::spawn(async move { reflector.step(state).await });
    eventually("the kept watch delivering the change")
        .within(Duration::from_secs(5))
        .every(Duration::from_millis(50))
        .until(async || Ok(store.get("wl/after").is_some()), |got| *got)
        .await?;
    assert_eq!(status.lock().watches, 1, "no second request was needed");
    follow.abort();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_watch_list_gate_off_it_falls_back_to_list_and_watch() -> anyhow::Result<()> {
    let cp = ControlPlane::start_with(Options {
        feature_gates: Some("WatchList=false".into()),
        ..Options::default()
    })
    .await?;
    create_namespace(&cp.client, "fallback").await?;
    create_configmap(&cp.client, "fallback", "before", "x").await?;
    let fanout = Fanout::start(cp.client.clone(), &["v1/configmaps"]).await?;
    let mut stream = fanout.client().await?.watch(watch_list("fallback")).await?;
    let (snapshot, _) = read_snapshot(&mut stream).await?;
    assert_eq!(snapshot.keys().collect::<Vec<_>>(), ["before"]);
    create_configmap(&cp.client, "fallback", "after", "y").await?;
    let event = next_change(&mut stream).await?;
    assert_eq!(
        (event.r#type(), decode(&event)?.metadata.name.as_deref()),
        (EventType::Added, Some("after"))
    );
    let mut client = fanout.client().await?;
    let resources = client.list_resources().await?;
    let configmaps = &resources.resources[0];
    assert_eq!(configmaps.reflector_phase, "watching");
    assert_eq!(
        (configmaps.lists, configmaps.watch_lists),
        (1, 0),
        "the refused watch-list fell back to a LIST"
    );
    // Why it fell back is shown: the API server's refusal.
    assert!(
        configmaps.last_error.contains("sendInitialEvents"),
        "{:?}",
        configmaps.last_error
    );
    fanout.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_410_relists_and_deletions_made_while_the_watch_was_down_arrive_as_deleted()
-> anyhow::Result<()> {
    let mut cp = ControlPlane::start().await?;
    create_namespace(&cp.client, "gone").await?;
    for i in 0..5 {
        create_configmap(&cp.client, "gone", &format!("cm-{i}"), "x").await?;
    }
    let config = ReflectorConfig {
        use_watch_list: false,
        ..ReflectorConfig::default()
    };
    let (mut reflector, store) = reflector(&cp.client, config).await?;
    let status = reflector.status();
    let state = reflector.step(State::List(SyncPoint::Start)).await;
    assert!(matches!(state, State::Watch(_)), "{state:?}");
    let synced = store.head();

    // The watch is down while another API server takes writes; the
    // restarted one's watch cache starts after the reflector's RV, so the
    // watch from that RV gets a real 410.
    cp.kill_apiserver().await?;
    let other = cp.start_extra_apiserver().await?;
    let api: Api<ConfigMap> = Api::namespaced(other.clone(), "gone");
    for i in 0..3 {
        api.delete(&format!("cm-{i}"), &DeleteParams::default())
            .await?;
    }
    for i in 0..50 {
        let patch = serde_json::json!({ "data": { "value": format!("v{i}") } });
        api.patch("cm-4", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    create_configmap(&other, "gone", "newcomer", "z").await?;
    cp.restart_apiserver().await?;

    let state = step_until(&mut reflector, state, |s| {
        matches!(s, State::Watch(_)) && status.lock().lists == 2
    })
    .await?;
    drop(state);
    let s = status.lock().clone();
    assert!(
        s.last_error.as_deref().is_some_and(|e| e.contains("410")),
        "the watch got a 410: {s:?}"
    );
    let (_, listed) = api_list(&cp.client, "gone").await?;
    assert_eq!(store_contents(&store, "gone")?, contents(&listed));

    let events = store
        .read_after(synced.seq, 1000)
        .map_err(|rv| anyhow::anyhow!("ring lost {rv}"))?;
    let mut seen: Vec<(EventKind, String)> = events
        .iter()
        .filter_map(|e| Some((e.kind, e.object.as_ref()?.name.clone())))
        .filter(|(_, name)| name.starts_with("cm-") || name == "newcomer")
        .collect();
    seen.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(
        seen,
        [
            (EventKind::Deleted, "cm-0".into()),
            (EventKind::Deleted, "cm-1".into()),
            (EventKind::Deleted, "cm-2".into()),
            (EventKind::Modified, "cm-4".into()),
            (EventKind::Added, "newcomer".into()),
        ]
    );
    // One re-sync unit at the list's RV: every change flagged, closed by a
    // flagged bookmark, and the skipped range recorded as a gap.
    let list_rv = store.head().resource_version;
    assert!(list_rv > synced.resource_version);
    assert!(
        events
            .iter()
            .all(|e| e.resync && e.resource_version == list_rv),
        "{events:?}"
    );
    assert!(events.last().is_some_and(|e| e.closes_unit()));
    assert_eq!(
        store.status().gaps,
        [Gap {
            after: synced.resource_version,
            until: list_rv
        }]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_apiserver_killed_and_restarted_mid_watch_loses_and_repeats_nothing()
-> anyhow::Result<()> {
    let mut cp = ControlPlane::start().await?;
    create_namespace(&cp.client, "restart").await?;
    create_configmap(&cp.client, "restart", "first", "0").await?;
    let fanout = Fanout::start(cp.client.clone(), &["v1/configmaps"]).await?;
    let mut stream = fanout.client().await?.watch(watch_list("restart")).await?;
    let (snapshot, snapshot_rv) = read_snapshot(&mut stream).await?;
    assert_eq!(snapshot.len(), 1);

    let writes = |client: kube::Client, from: usize| async move {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "restart");
        for i in from..from + 5 {
            create_configmap(&client, "restart", &format!("cm-{i}"), "a").await?;
            let patch = serde_json::json!({ "data": { "value": "b" } });
            api.patch(
                "first",
                &PatchParams::default(),
                &Patch::Merge(&patch.clone()),
            )
            .await?;
            let patch = serde_json::json!({ "data": { "value": format!("{i}") } });
            api.patch("first", &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        api.delete(&format!("cm-{from}"), &DeleteParams::default())
            .await?;
        anyhow::Ok(())
    };
    writes(cp.client.clone(), 0).await?;
    cp.kill_apiserver().await?;
    let other = cp.start_extra_apiserver().await?;
    writes(other, 10).await?;
    cp.restart_apiserver().await?;
    writes(cp.client.clone(), 20).await?;
    let (final_rv, listed) = api_list(&cp.client, "restart").await?;

    let mut state = snapshot;
    let mut last_rv: u64 = snapshot_rv.parse()?;
    let mut seen_versions: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    // Follow until the API server's final RV, then until the stream is quiet:
    // a relist's deletions share its RV.
    let final_rv: u64 = final_rv.parse()?;
    loop {
        let event = if last_rv < final_rv {
            next_event(&mut stream).await?
        } else {
            match tokio::time::timeout(Duration::from_millis(500), stream.message()).await {
                Ok(message) => message?.ok_or_else(|| anyhow::anyhow!("the watch ended"))?,
                Err(_) => break,
            }
        };
        let rv: u64 = event.resource_version.parse()?;
        assert!(rv >= last_rv, "ordered: {rv} after {last_rv}");
        last_rv = rv;
        if event.r#type() == EventType::Bookmark {
            continue;
        }
        let cm = decode(&event)?;
        let (name, object_rv) = name_and_rv(&cm)?;
        let versions = seen_versions.entry(name.clone()).or_default();
        assert!(
            versions
                .last()
                .is_none_or(|v| *v < object_rv || event.r#type() == EventType::Deleted),
            "{name} at RV {object_rv} delivered twice or backwards: {versions:?}"
        );
        versions.push(object_rv);
        match event.r#type() {
            EventType::Deleted => {
                state.remove(&name);
            }
            _ => {
                state.insert(name, cm);
            }
        }
    }
    assert_eq!(
        contents(&state),
        contents(&listed),
        "the subscriber's state is the API server's"
    );
    fanout.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_objects_are_listed_in_small_pages() -> anyhow::Result<()> {
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, "many").await?;
    stream::iter(0..5000)
        .map(|i| {
            let client = cp.client.clone();
            async move { create_configmap(&client, "many", &format!("cm-{i:04}"), "x").await }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    let config = ReflectorConfig {
        page_size: Some(100),
        use_watch_list: false,
        ..ReflectorConfig::default()
    };
    let (mut reflector, store) = reflector(&cp.client, config).await?;
    let status = reflector.status();
    // The first list (RV "0") may be served whole by the watch cache; the
    // relist at the synced RV is paged by the API server.
    let state = reflector.step(State::List(SyncPoint::Start)).await;
    let State::Watch(synced) = state else {
        anyhow::bail!("expected a watch after the list, got {state:?}");
    };
    let (_, listed) = api_list(&cp.client, "many").await?;
    let state = reflector.step(State::List(SyncPoint::At(synced))).await;
    assert!(matches!(state, State::Watch(_)), "{state:?}");
    assert_eq!(store_contents(&store, "many")?, contents(&listed));
    // At least as new as the last write. (Not the list's own RV: that is
    // etcd's revision, which other writers such as leases move on while
    // the API server's cache of configmaps need not have.)
    let newest = listed
        .values()
        .map(|cm| name_and_rv(cm).map(|(_, rv)| rv))
        .collect::<anyhow::Result<Vec<u64>>>()?
        .into_iter()
        .max()
        .unwrap_or_default();
    assert!(store.head().resource_version >= ResourceVersion(newest));
    // Every ConfigMap in the cluster, counted by the API server, in pages
    // of 100.
    let everywhere = Api::<ConfigMap>::all(cp.client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .len();
    assert!(everywhere >= 5000, "{everywhere}");
    let s = status.lock().clone();
    assert_eq!(s.lists, 2);
    assert_eq!(
        s.last_list_requests,
        everywhere.div_ceil(100) as u64,
        "{everywhere} objects in pages of 100, from RV {:?}",
        s.last_list_from
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_managed_fields_saves_memory() -> anyhow::Result<()> {
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, "ssa").await?;
    let api: Api<ConfigMap> = Api::namespaced(cp.client.clone(), "ssa");
    // Server-side apply records managedFields, as controllers' writes do.
    for i in 0..200 {
        let name = format!("cm-{i}");
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": name, "labels": { "app": "demo", "tier": "backend" } },
            "data": { "a": "1", "b": "2", "c": "3" },
        });
        api.patch(
            &name,
            &PatchParams::apply("kube-fanout-test"),
            &Patch::Apply(&body),
        )
        .await?;
    }
    let mut sizes = Vec::new();
    for strip in [true, false] {
        let config = ReflectorConfig {
            use_watch_list: false,
            transform: kube_fanout_core::object::Transform {
                strip_managed_fields: strip,
            },
            ..ReflectorConfig::default()
        };
        let (mut reflector, store) = reflector(&cp.client, config).await?;
        reflector.step(State::List(SyncPoint::Start)).await;
        let objects = store.snapshot().objects;
        let ours: Vec<_> = objects.iter().filter(|o| o.namespace == "ssa").collect();
        assert_eq!(ours.len(), 200);
        assert_eq!(
            ours.iter().any(|o| o.json.contains("managedFields")),
            !strip
        );
        sizes.push(ours.iter().map(|o| o.json.len()).sum::<usize>());
    }
    let (stripped, kept) = (sizes[0], sizes[1]);
    println!(
        "200 server-side-applied ConfigMaps: {kept} bytes of JSON with managedFields, {stripped} without ({:.0}% saved)",
        100.0 * (kept - stripped) as f64 / kept as f64
    );
    assert!(
        stripped * 10 < kept * 7,
        "dropping managedFields saves at least 30%: {stripped} vs {kept}"
    );
    Ok(())
}

/// An object kept from a LIST's item (its apiVersion and kind filled in)
/// is the same text as the same state kept from a watch event, so a
/// relist knows it unchanged by its digest without reading either text
/// (`Object::same_state`): a LIST item and a watch event's object are
/// written alike by the API server, kind before apiVersion, and
/// managedFields cut from both alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_listed_and_the_same_object_watched_are_one_text() -> anyhow::Result<()> {
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, "texts").await?;
    let config = ReflectorConfig {
        use_watch_list: false,
        ..ReflectorConfig::default()
    };
    for resource in ["v1/configmaps", "v1/pods"] {
        let resource_type = ResourceType::discover(&cp.client, &resource.parse()?).await?;
        let store = || Arc::new(Store::new(resource_type.clone(), 100_000));
        // Watched: synced before the objects exist, so they arrive as events.
        let watched = store();
        let mut reflector = Reflector::new(cp.client.clone(), watched.clone(), config);
        let State::Watch(rv) = reflector.step(State::List(SyncPoint::Start)).await else {
            anyhow::bail!("the LIST did not sync");
        };
        let watching = tokio::spawn(async move { reflector.step(State::Watch(rv)).await });
        // Written with server-side apply, so they carry managedFields.
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            cp.client.clone(),
            "texts",
            &kube::api::ApiResource {
                group: String::new(),
                version: "v1".into(),
                api_version: "v1".into(),
                kind: resource_type.kind.clone(),
                plural: resource.trim_start_matches("v1/").into(),
            },
        );
        for i in 0..20 {
            let name = format!("obj-{i}");
            let body = match resource {
                "v1/pods" => serde_json::json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "labels": {"app": "a"}},
                    "spec": {"nodeName": format!("node-{i}"),
                             "containers": [{"name": "c", "image": "registry.invalid/c:1"}]},
                }),
                _ => serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "labels": {"app": "a"}},
                    "data": {"a": "1"},
                }),
            };
            api.patch(
                &name,
                &PatchParams::apply("kube-fanout-test"),
                &Patch::Apply(&body),
            )
            .await?;
        }
        let ours = |store: &Store| {
            let mut objects: Vec<_> = store
                .snapshot()
                .objects
                .iter()
                .filter(|o| o.namespace == "texts")
                .cloned()
                .collect();
            objects.sort_by(|a, b| a.name.cmp(&b.name));
            objects
        };
        eventually("the watch having every object")
            .until(async || Ok(ours(&watched).len()), |n| *n == 20)
            .await?;
        watching.abort();
        // Listed: synced after, from the LIST's items.
        let listed = store();
        let mut reflector = Reflector::new(cp.client.clone(), listed.clone(), config);
        reflector.step(State::List(SyncPoint::Start)).await;
        let (watched, listed) = (ours(&watched), ours(&listed));
        assert_eq!(listed.len(), 20);
        for (w, l) in watched.iter().zip(&listed) {
            assert_eq!(w.name, l.name);
            assert_eq!(w.resource_version, l.resource_version);
            assert!(!w.json.contains("managedFields"), "{}", w.json);
            assert_eq!(w.json, l.json, "{resource} {}: one text", w.name);
            assert_eq!(w.digest, l.digest);
            assert!(w.same_state(l));
        }
    }
    Ok(())
}

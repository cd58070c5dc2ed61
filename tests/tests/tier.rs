//! Tiers on a real kube-apiserver and etcd: a kube-fanout fed by another
//! (`--upstream-fanout`) serves the parent's state and changes at the
//! parent's resourceVersions, so a subscriber resumes on either; the API
//! server sees only the parent; a real relist's re-sync unit reaches the
//! leaf's subscribers as the same unit with the same gap; and a leaf whose
//! parent goes away fails over to the next, losing and repeating nothing.

use std::{net::SocketAddr, time::Duration};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube_fanout_client::proto::{EventType, ResourceStatus, WatchEvent, WatchRequest};
use kube_fanout_core::on_demand::{AllowList, OnDemandOptions};
use kube_fanout_tests::{
    controlplane::{ControlPlane, free_port},
    eventually::{Look, eventually},
    fanout::Fanout,
    proxy::CountingProxy,
    support::*,
};
use tonic::{Code, Streaming};

const NS: &str = "tier";

/// A control plane holding the namespace with cm-0 .. cm-5.
async fn control_plane() -> Result<ControlPlane> {
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, NS).await?;
    for i in 0..6 {
        create_configmap(&cp.client, NS, &format!("cm-{i}"), "x").await?;
    }
    Ok(cp)
}

/// A synced kube-fanout on the API server, serving configmaps: a parent.
async fn replica(cp: &ControlPlane) -> Result<Fanout> {
    let replica = Fanout::start(cp.client.clone(), &["v1/configmaps"]).await?;
    replica.wait_synced().await?;
    Ok(replica)
}

/// A leaf of `parents` (their addresses in order), serving configmaps.
async fn leaf(cp: &ControlPlane, parents: &[&Fanout]) -> Result<Fanout> {
    leaf_of(cp, parents.iter().map(|p| p.addr).collect()).await
}

/// A leaf of the parents at `addresses`, in order, serving configmaps.
async fn leaf_of(cp: &ControlPlane, addresses: Vec<SocketAddr>) -> Result<Fanout> {
    Fanout::start_leaf(cp.client.clone(), &["v1/configmaps"], &addresses).await
}

/// An event as the tests compare them: type, object name, RV, resync.
type Seen = (EventType, String, String, bool);

fn seen(event: &WatchEvent) -> Result<Seen> {
    let name = if event.r#type() == EventType::Bookmark {
        String::new()
    } else {
        object_key(&event.object)?
    };
    Ok((
        event.r#type(),
        name,
        event.resource_version.clone(),
        event.resync,
    ))
}

/// The next `n` changes (bookmarks skipped).
async fn changes(stream: &mut Streaming<WatchEvent>, n: usize) -> Result<Vec<Seen>> {
    let mut out = Vec::new();
    while out.len() < n {
        out.push(seen(&next_change(stream).await?)?);
    }
    Ok(out)
}

/// The changes after `rv`, on `server`, until `n` have come.
async fn resumed(server: &Fanout, rv: &str, n: usize) -> Result<Vec<Seen>> {
    let request = WatchRequest {
        resource_version: rv.to_owned(),
        send_initial_events: false,
        ..watch_list(NS)
    };
    let mut stream = server.client().await?.watch(request).await?;
    changes(&mut stream, n).await
}

/// Three changes to the namespace: one added, one modified, one deleted.
async fn three_writes(client: &kube::Client, round: usize) -> Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    create_configmap(client, NS, &format!("new-{round}"), "a").await?;
    let patch = serde_json::json!({ "data": { "value": format!("r{round}") } });
    api.patch("cm-0", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    api.delete(&format!("cm-{}", round + 1), &DeleteParams::default())
        .await?;
    Ok(())
}

/// The API server's watches and LISTs of configmaps, by its own metrics.
async fn api_server_load(cp: &ControlPlane) -> Result<(f64, f64)> {
    let watches = cp
        .metric_sum(
            "apiserver_longrunning_requests",
            "configmaps",
            r#"verb="WATCH""#,
        )
        .await?;
    let lists = cp
        .metric_sum("apiserver_request_total", "configmaps", r#"verb="LIST""#)
        .await?;
    Ok((watches, lists))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_serves_its_parents_state_at_its_rvs_and_the_api_server_sees_only_the_parent()
-> Result<()> {
    let cp = control_plane().await?;
    let parent = replica(&cp).await?;
    let before = api_server_load(&cp).await?;
    assert!(before.0 >= 1.0, "the parent's watch is counted: {before:?}");

    let leaf = leaf(&cp, &[&parent]).await?;
    let mut on_leaf = Vec::new();
    for _ in 0..5 {
        on_leaf.push(leaf.client().await?.watch(watch_list(NS)).await?);
    }
    let mut on_parent = parent.client().await?.watch(watch_list(NS)).await?;
    let (parent_snapshot, _) = read_snapshot(&mut on_parent).await?;
    let mut snapshots = Vec::new();
    for stream in &mut on_leaf {
        snapshots.push(read_snapshot(stream).await?);
    }

    three_writes(&cp.client, 0).await?;
    three_writes(&cp.client, 1).await?;
    let from_parent = changes(&mut on_parent, 6).await?;
    for stream in &mut on_leaf {
        assert_eq!(
            changes(stream, 6).await?,
            from_parent,
            "same events, same RVs"
        );
    }
    // A resume point handed out by either tier is exact on the other.
    let midway = &from_parent[2].2;
    assert_eq!(resumed(&parent, midway, 3).await?, from_parent[3..]);
    assert_eq!(resumed(&leaf, midway, 3).await?, from_parent[3..]);

    // The leaf says where it is fed from, and the API server never saw it.
    let status = leaf.client().await?.list_resources().await?.resources;
    let configmaps = status.first().context("configmaps served")?;
    assert_eq!(
        configmaps.upstream,
        format!("kube-fanout http://{}/", parent.addr)
    );
    assert_eq!(configmaps.kind, "ConfigMap");
    assert!(configmaps.namespaced);
    let metrics = http_get(leaf.metrics_addr.context("metrics")?, "/metrics").await?;
    let info = format!(
        r#"kube_fanout_upstream_info{{resource="v1/configmaps",upstream="kube-fanout",address="http://{}/",bootstrapped_from=""}} 1"#,
        parent.addr
    );
    assert!(
        metrics.lines().any(|l| l == info),
        "{info} not in\n{metrics}"
    );
    let parent_status = parent.client().await?.list_resources().await?.resources;
    assert_eq!(parent_status[0].upstream, "api-server");
    assert_eq!(
        api_server_load(&cp).await?,
        before,
        "(watches, LISTs) of configmaps on the API server with a leaf and five subscribers on it"
    );
    // Each snapshot is the API server's state at its RV (asked last: these
    // are LISTs of the test's own).
    for (snapshot, rv) in &snapshots {
        let truth = list_at(&cp.client, NS, rv).await?;
        assert_eq!(
            contents(snapshot),
            contents(&truth),
            "the leaf's snapshot at {rv}"
        );
        assert_eq!(contents(snapshot), contents(&parent_snapshot));
    }
    leaf.stop().await?;
    parent.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parents_resync_unit_reaches_the_leafs_subscribers_as_the_same_unit_with_its_gap()
-> Result<()> {
    let mut cp = control_plane().await?;
    let parent = replica(&cp).await?;
    let leaf = leaf(&cp, &[&parent]).await?;
    let mut on_parent = parent.client().await?.watch(watch_list(NS)).await?;
    let mut on_leaf = leaf.client().await?.watch(watch_list(NS)).await?;
    read_snapshot(&mut on_parent).await?;
    read_snapshot(&mut on_leaf).await?;

    // While the parent's API server is down, another on the same etcd
    // takes writes; the restarted one's watch cache starts after the
    // parent's RV, so the parent gets a real 410 and relists.
    cp.kill_apiserver().await?;
    let other = cp.start_extra_apiserver().await?;
    let writes: Api<ConfigMap> = Api::namespaced(other.clone(), NS);
    for i in 0..2 {
        writes
            .delete(&format!("cm-{i}"), &DeleteParams::default())
            .await?;
    }
    for i in 0..10 {
        let patch = serde_json::json!({ "data": { "value": format!("v{i}") } });
        writes
            .patch("cm-4", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    create_configmap(&other, NS, "newcomer", "z").await?;
    cp.restart_apiserver().await?;

    let unit = read_unit(&mut on_parent).await?;
    assert_eq!(
        kinds(&unit),
        [
            (EventType::Deleted, "tier/cm-0"),
            (EventType::Deleted, "tier/cm-1"),
            (EventType::Modified, "tier/cm-4"),
            (EventType::Added, "tier/newcomer"),
            (EventType::Bookmark, ""),
        ],
        "the parent's unit"
    );
    assert_eq!(read_unit(&mut on_leaf).await?, unit, "the leaf's unit");

    // The gap is the same on both: a resume from inside it is Expired.
    let l: u64 = unit[0].2.parse()?;
    for server in [&parent, &leaf] {
        let request = WatchRequest {
            resource_version: (l - 1).to_string(),
            send_initial_events: false,
            ..watch_list(NS)
        };
        let mut stream = server.client().await?.watch(request).await?;
        match stream.message().await {
            Err(status) => assert_eq!(status.code(), Code::OutOfRange, "{status:?}"),
            Ok(event) => bail!("a resume inside the gap was answered {event:?}"),
        }
    }
    // And both go on live after it.
    create_configmap(&cp.client, NS, "later", "z").await?;
    let live = changes(&mut on_parent, 1).await?;
    assert_eq!(changes(&mut on_leaf, 1).await?, live);
    leaf.stop().await?;
    parent.stop().await?;
    Ok(())
}

/// The type and object of each event.
fn kinds(events: &[Seen]) -> Vec<(EventType, &str)> {
    events
        .iter()
        .map(|(kind, name, _, _)| (*kind, name.as_str()))
        .collect()
}

/// A re-sync unit's events, up to and including its closing bookmark; a
/// live change or bookmark before the unit begins is skipped.
async fn read_unit(stream: &mut Streaming<WatchEvent>) -> Result<Vec<Seen>> {
    let mut unit = Vec::new();
    loop {
        let event = next_event(stream).await?;
        if !event.resync {
            if unit.is_empty() {
                continue;
            }
            bail!("a unit was broken by {event:?} after {unit:?}");
        }
        let closes = event.r#type() == EventType::Bookmark;
        unit.push(seen(&event)?);
        if closes {
            return Ok(unit);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_whose_parent_goes_away_resumes_on_the_next_losing_and_repeating_nothing()
-> Result<()> {
    let cp = control_plane().await?;
    let first = replica(&cp).await?;
    let second = replica(&cp).await?;
    let leaf = leaf(&cp, &[&first, &second]).await?;
    let mut on_leaf = leaf.client().await?.watch(watch_list(NS)).await?;
    read_snapshot(&mut on_leaf).await?;
    let mut on_second = second.client().await?.watch(watch_list(NS)).await?;
    read_snapshot(&mut on_second).await?;

    three_writes(&cp.client, 0).await?;
    let before = changes(&mut on_second, 3).await?;
    assert_eq!(changes(&mut on_leaf, 3).await?, before);
    first.stop().await?;
    three_writes(&cp.client, 1).await?;
    let after = changes(&mut on_second, 3).await?;
    assert_eq!(
        changes(&mut on_leaf, 3).await?,
        after,
        "the leaf's subscriber, across its parent's failover"
    );
    let status = leaf.client().await?.list_resources().await?.resources;
    assert_eq!(
        status[0].upstream,
        format!("kube-fanout http://{}/", second.addr)
    );
    assert_eq!(status[0].relists, 0, "resumed, not re-snapshotted");
    // Nothing more, nothing twice: the next event on the leaf is the next
    // write's.
    create_configmap(&cp.client, NS, "last", "z").await?;
    assert_eq!(
        changes(&mut on_leaf, 1).await?,
        changes(&mut on_second, 1).await?
    );
    tokio::time::timeout(Duration::from_secs(60), leaf.stop()).await??;
    second.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_whose_next_parent_no_longer_holds_its_rv_publishes_the_new_snapshots_difference_as_a_unit()
-> Result<()> {
    let cp = control_plane().await?;
    let first = replica(&cp).await?;
    let later: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let leaf = leaf_of(&cp, vec![first.addr, later]).await?;
    let mut on_leaf = leaf.client().await?.watch(watch_list(NS)).await?;
    read_snapshot(&mut on_leaf).await?;
    three_writes(&cp.client, 0).await?;
    changes(&mut on_leaf, 3).await?;

    // The only parent goes; writes go on; a new parent starts after them,
    // its history beginning after the leaf's RV: the leaf's resume there
    // is Expired, and it takes a new snapshot.
    let options = first.options.clone();
    first.stop().await?;
    three_writes(&cp.client, 1).await?;
    let second = Fanout::start_on(cp.client.clone(), later, options).await?;
    second.wait_synced().await?;

    let unit = read_unit(&mut on_leaf).await?;
    assert_eq!(
        kinds(&unit),
        [
            (EventType::Modified, "tier/cm-0"),
            (EventType::Deleted, "tier/cm-2"),
            (EventType::Added, "tier/new-1"),
            (EventType::Bookmark, ""),
        ],
        "what the leaf missed, as one unit"
    );
    let at = &unit[0].2;
    let mut fresh = leaf.client().await?.watch(watch_list(NS)).await?;
    let (snapshot, rv) = read_snapshot(&mut fresh).await?;
    assert_eq!(&rv, at, "nothing since");
    assert_eq!(
        contents(&snapshot),
        contents(&list_at(&cp.client, NS, at).await?)
    );
    let status = leaf.client().await?.list_resources().await?.resources;
    assert_eq!(
        (status[0].lists, status[0].relists),
        (2, 1),
        "two snapshots, one unit"
    );
    leaf.stop().await?;
    second.stop().await?;
    Ok(())
}

/// The configmaps' status on `server` (the only type the tests serve).
async fn configmaps_status(server: &Fanout) -> Result<ResourceStatus> {
    let status = server.client().await?.list_resources().await?.resources;
    status.into_iter().next().context("configmaps served")
}

/// The configmaps' status on `server`: (its RV, its parent's head as last
/// seen, seconds behind the parent).
async fn lag_status(server: &Fanout) -> Result<(String, String, u64)> {
    let configmaps = configmaps_status(server).await?;
    Ok((
        configmaps.resource_version.clone(),
        configmaps.upstream_resource_version.clone(),
        configmaps.upstream_lag_seconds,
    ))
}

/// A leaf says how long it has been behind its parent (ListResources and
/// `kube_fanout_upstream_lag_seconds`), as the parent's head bookmarks tell
/// it: 0 while it keeps up, the parent's head known all along; a second
/// and more while its feed's connection is slowed to 200 KiB/s under 5 MiB
/// of writes (more than the connection holds in flight, so the parent
/// falls behind in sending, and its bookmarks name heads the leaf has not
/// reached); 0 again once the connection goes at full speed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_says_how_long_it_has_been_behind_its_parent() -> Result<()> {
    let cp = control_plane().await?;
    let parent = replica(&cp).await?;
    let proxy = CountingProxy::start(parent.addr).await?;
    let leaf = leaf_of(&cp, vec![proxy.addr]).await?;
    let parent_rv =
        async || -> Result<String> { Ok(configmaps_status(&parent).await?.resource_version) };
    let rv_of = |text: &str| text.parse::<u64>().unwrap_or_default();
    three_writes(&cp.client, 0).await?;
    let rv = eventually("the parent saw the writes")
        .until_done(async || {
            let rv = rv_of(&parent_rv().await?);
            let (at, _, _) = lag_status(&leaf).await?;
            Ok(if rv_of(&at) == rv {
                Look::Done(rv)
            } else {
                Look::NotYet((at, rv))
            })
        })
        .await?;
    eventually("the leaf has its parent's head and has reached it")
        .until(
            async || lag_status(&leaf).await,
            |(at, head, lag)| rv_of(at) >= rv && rv_of(head) >= rv && *lag == 0,
        )
        .await?;

    // The first connection through the proxy is the feeds' (discovery's,
    // shared by every type's feed).
    proxy.limit(0, Some(200 << 10))?;
    let value = "x".repeat(100 << 10);
    for i in 0..50 {
        create_configmap(&cp.client, NS, &format!("big-{i}"), &value).await?;
    }
    let written = rv_of(&parent_rv().await?);
    let (at, head, lag) = eventually("the leaf behind its parent by a second or more")
        .within(Duration::from_secs(90))
        .every(Duration::from_millis(200))
        .until(async || lag_status(&leaf).await, |(_, _, lag)| *lag >= 1)
        .await?;
    assert!(
        rv_of(&at) < rv_of(&head) && rv_of(&at) < written,
        "behind {lag} s yet at {at}, the parent's head {head}, written up to {written}"
    );
    let metrics = http_get(leaf.metrics_addr.context("metrics")?, "/metrics").await?;
    let line = metrics
        .lines()
        .find(|l| l.starts_with(r#"kube_fanout_upstream_lag_seconds{resource="v1/configmaps"} "#))
        .with_context(|| format!("no lag line in\n{metrics}"))?;
    let seconds: f64 = line.rsplit(' ').next().unwrap_or_default().parse()?;
    assert!(seconds >= 1.0, "{line}");

    proxy.limit(0, None)?;
    eventually("the leaf caught up with its parent")
        .within(Duration::from_secs(60))
        .until(
            async || lag_status(&leaf).await,
            |(at, _, lag)| rv_of(at) >= written && *lag == 0,
        )
        .await?;
    leaf.stop().await?;
    parent.stop().await?;
    Ok(())
}

/// A leaf of a parent serving configmaps on demand, which nobody has asked
/// for yet (so its ListResources does not list them): the leaf's start
/// asks for them, which starts them there, and it serves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_starts_its_types_on_a_parent_serving_them_on_demand() -> Result<()> {
    let cp = control_plane().await?;
    let allow = AllowList(vec!["core/configmaps".parse()?]);
    let parent = Fanout::start_with(cp.client.clone(), &[], |o| {
        o.on_demand = Some(OnDemandOptions {
            allow,
            max_types: 5,
            idle: Duration::from_secs(3600),
        });
    })
    .await?;
    assert!(
        parent
            .client()
            .await?
            .list_resources()
            .await?
            .resources
            .is_empty(),
        "nothing started on the parent yet"
    );
    let leaf = leaf(&cp, &[&parent]).await?;
    let (keys, _) = read_snapshot(&mut leaf.client().await?.watch(watch_list(NS)).await?).await?;
    assert_eq!(keys.len(), 6, "cm-0 .. cm-5 through the leaf");
    leaf.stop().await?;
    parent.stop().await?;
    Ok(())
}

/// A leaf whose first parent cannot be asked which types it serves (its
/// address accepts connections and closes them) takes its types from the
/// next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_whose_first_parent_does_not_answer_starts_from_the_next() -> Result<()> {
    let cp = control_plane().await?;
    let parent = replica(&cp).await?;
    let closing = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let dead = closing.local_addr()?;
    let accepting = tokio::spawn(async move {
        while let Ok((connection, _)) = closing.accept().await {
            drop(connection);
        }
    });
    let leaf = leaf_of(&cp, vec![dead, parent.addr]).await?;
    assert_eq!(
        configmaps_status(&leaf).await?.upstream,
        format!("kube-fanout http://{}/", parent.addr)
    );
    accepting.abort();
    leaf.stop().await?;
    parent.stop().await?;
    Ok(())
}

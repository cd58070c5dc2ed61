//! kube-fanout-client's watcher end to end, on a real kube-apiserver and
//! etcd: it survives replicas going away and coming back with no lost and
//! no duplicated event, re-snapshots when its resume point is gone, and
//! takes a real relist's re-sync unit as one replacement of its store.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    api::{
        Api as KubeApi, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    },
    discovery::ApiResource,
};
use kube_fanout_client::{Api, ClientConfig, LocalStore, reflect};
use kube_fanout_tests::{controlplane::ControlPlane, fanout::Fanout, init_logging, support::*};
use kube_runtime::watcher::{Config, Event};
use tokio::sync::mpsc;

const NS: &str = "client-watch";
const RESOURCES: &[&str] = &["v1/configmaps"];

/// What the watcher yields, readably: (event, name, resourceVersion).
type Seen = (&'static str, String, String);

fn seen(event: &Event<ConfigMap>) -> Seen {
    let of = |kind, cm: &ConfigMap| {
        (
            kind,
            cm.metadata.name.clone().unwrap_or_default(),
            cm.metadata.resource_version.clone().unwrap_or_default(),
        )
    };
    match event {
        Event::Init => ("Init", String::new(), String::new()),
        Event::InitApply(cm) => of("InitApply", cm),
        Event::InitDone => ("InitDone", String::new(), String::new()),
        Event::Apply(cm) => of("Apply", cm),
        Event::Delete(cm) => of("Delete", cm),
    }
}

/// A watcher polled in the background, its events queued for the test.
struct Watching {
    store: LocalStore<ConfigMap>,
    events: mpsc::UnboundedReceiver<Seen>,
}

impl Watching {
    fn start(api: Api<ConfigMap>) -> Self {
        let (store, stream) = reflect(api, Config::default(), ());
        let (tx, events) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let event = event.expect("the watcher hides every failure the tests cause");
                if tx.send(seen(&event)).is_err() {
                    return;
                }
            }
        });
        Watching { store, events }
    }

    async fn next(&mut self, within: Duration) -> Result<Seen> {
        tokio::time::timeout(within, self.events.recv())
            .await
            .context("no event in time")?
            .context("the watcher ended")
    }

    /// The next `n` events, which must come within `within` each.
    async fn take(&mut self, n: usize, within: Duration) -> Result<Vec<Seen>> {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(self.next(within).await?);
        }
        Ok(out)
    }

    /// A snapshot: Init, InitApply for each object, InitDone; the names.
    async fn snapshot(&mut self, within: Duration) -> Result<Vec<String>> {
        let first = self.next(within).await?;
        if first.0 != "Init" {
            bail!("expected a new snapshot, got {first:?}");
        }
        let mut names = Vec::new();
        loop {
            match self.next(EVENT_TIMEOUT).await? {
                ("InitApply", name, _) => names.push(name),
                ("InitDone", ..) => return Ok(names),
                other => bail!("expected the snapshot's objects, got {other:?}"),
            }
        }
    }

    /// The store's objects as (resourceVersion, data) by name.
    fn contents(&self) -> BTreeMap<String, (String, Option<BTreeMap<String, String>>)> {
        let objects: BTreeMap<String, ConfigMap> = self
            .store
            .list()
            .iter()
            .map(|cm| (cm.metadata.name.clone().unwrap_or_default(), (**cm).clone()))
            .collect();
        contents(&objects)
    }
}

/// The API server's own LIST, in the same form as [`Watching::contents`].
async fn truth(
    client: &kube::Client,
) -> Result<BTreeMap<String, (String, Option<BTreeMap<String, String>>)>> {
    let list = KubeApi::<ConfigMap>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await?;
    Ok(contents(
        &list
            .items
            .into_iter()
            .map(|cm| (cm.metadata.name.clone().unwrap_or_default(), cm))
            .collect(),
    ))
}

fn applied(cm: &ConfigMap) -> Seen {
    (
        "Apply",
        cm.metadata.name.clone().unwrap_or_default(),
        cm.metadata.resource_version.clone().unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_survives_replicas_going_away_and_resnapshots_when_its_rv_expired() -> Result<()>
{
    init_logging();
    let cp = ControlPlane::start().await?;
    let kube = cp.client.clone();
    create_namespace(&kube, NS).await?;
    for i in 0..3 {
        create_configmap(&kube, NS, &format!("before-{i}"), "v1").await?;
    }
    let a = Fanout::start(kube.clone(), RESOURCES).await?;
    let b = Fanout::start(kube.clone(), RESOURCES).await?;
    a.wait_synced().await?;
    b.wait_synced().await?;
    let (a_addr, a_options) = (a.addr, a.options.clone());

    let fanout = ClientConfig::new([format!("http://{a_addr}"), format!("http://{}", b.addr)])
        .bearer_token("not-checked-yet")
        .connect()
        .await?;
    assert_eq!(fanout.address(), format!("http://{a_addr}/"));
    let mut watching = Watching::start(Api::namespaced(fanout, NS));
    let names = watching.snapshot(EVENT_TIMEOUT).await?;
    assert_eq!(names, ["before-0", "before-1", "before-2"]);
    watching.store.wait_until_synced().await?;
    assert_eq!(watching.contents(), truth(&kube).await?);

    // Replica A goes away mid-stream: the watcher moves to B and resumes
    // after the last RV it saw, so every change arrives once, in order.
    let mut expected = Vec::new();
    for i in 0..3 {
        expected.push(applied(
            &create_configmap(&kube, NS, &format!("live-{i}"), "v1").await?,
        ));
    }
    assert_eq!(watching.take(3, EVENT_TIMEOUT).await?, expected);
    a.stop().await?;
    let api = KubeApi::<ConfigMap>::namespaced(kube.clone(), NS);
    let mut expected = Vec::new();
    for i in 3..6 {
        expected.push(applied(
            &create_configmap(&kube, NS, &format!("live-{i}"), "v1").await?,
        ));
    }
    let mut changed = api.get("before-0").await?;
    changed.data = Some([("value".to_owned(), "v2".to_owned())].into());
    expected.push(applied(
        &api.replace("before-0", &PostParams::default(), &changed)
            .await?,
    ));
    api.delete("before-1", &DeleteParams::default()).await?;
    expected.push(("Delete", "before-1".to_owned(), String::new()));
    let mut got = watching.take(expected.len(), EVENT_TIMEOUT).await?;
    // A deletion's RV is only known from the event itself.
    got.last_mut().context("events")?.2 = String::new();
    assert_eq!(
        got, expected,
        "resumed on B: no gap, no duplicate, no new snapshot"
    );
    assert_eq!(watching.contents(), truth(&kube).await?);

    // Now B goes away too and, while no replica is up, the configmaps
    // change: when A comes back its history starts after the watcher's
    // last RV, so the resume is Expired and the watcher takes a new
    // snapshot, which its store must equal.
    b.stop().await?;
    create_configmap(&kube, NS, "while-down", "v1").await?;
    api.delete("before-2", &DeleteParams::default()).await?;
    // The watcher keeps retrying (with backoff and log lines) meanwhile.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        watching.events.is_empty(),
        "nothing to see while no server is up"
    );
    let a = Fanout::start_on(kube.clone(), a_addr, a_options).await?;
    a.wait_synced().await?;
    let names = watching.snapshot(Duration::from_secs(60)).await?;
    assert!(names.contains(&"while-down".to_owned()) && !names.contains(&"before-2".to_owned()));
    assert_eq!(
        watching.contents(),
        truth(&kube).await?,
        "the store equals the API server's LIST after the re-snapshot"
    );

    // And it goes on live from the new snapshot.
    let fresh = create_configmap(&kube, NS, "after", "v1").await?;
    assert_eq!(watching.next(EVENT_TIMEOUT).await?, applied(&fresh));
    assert_eq!(watching.contents(), truth(&kube).await?);
    assert_eq!(
        watching
            .store
            .get("after", Some(NS))
            .and_then(|cm| cm.metadata.resource_version.clone()),
        fresh.metadata.resource_version
    );
    assert_eq!(
        watching.store.list_namespace(NS).len(),
        watching.store.len()
    );
    assert!(watching.store.list_namespace("elsewhere").is_empty());

    // The same through the typed unary calls, and for a type known only at
    // run time (DynamicObject).
    let fanout = ClientConfig::new([format!("http://{a_addr}")])
        .connect()
        .await?;
    let typed = Api::<ConfigMap>::namespaced(fanout.clone(), NS);
    assert_eq!(
        typed.get("after").await?.metadata.resource_version,
        fresh.metadata.resource_version
    );
    let listed = typed.list(&ListParams::default()).await?;
    assert_eq!(
        contents(
            &listed
                .items
                .into_iter()
                .map(|cm| (cm.metadata.name.clone().unwrap_or_default(), cm))
                .collect()
        ),
        truth(&kube).await?
    );
    let ar = ApiResource::erase::<ConfigMap>(&());
    let dynamic = Api::<DynamicObject>::namespaced_with(fanout, NS, &ar);
    let mut events = std::pin::pin!(kube_fanout_client::watch(dynamic, Config::default()));
    let mut names = Vec::new();
    while let Some(event) = tokio::time::timeout(EVENT_TIMEOUT, events.next()).await? {
        match event? {
            Event::InitApply(o) => names.push(o.metadata.name.unwrap_or_default()),
            Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(names, truth(&kube).await?.into_keys().collect::<Vec<_>>());
    a.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_relist_reaches_the_watchers_store_as_one_replacement() -> Result<()> {
    init_logging();
    let mut cp = ControlPlane::start().await?;
    create_namespace(&cp.client, NS).await?;
    for i in 0..5 {
        create_configmap(&cp.client, NS, &format!("cm-{i}"), "v1").await?;
    }
    let fanout = Fanout::start(cp.client.clone(), RESOURCES).await?;
    fanout.wait_synced().await?;
    let api = Api::<ConfigMap>::namespaced(fanout.client().await?, NS);
    // Every event with the store's contents right after it: what a reader
    // of the store could see.
    let (store, stream) = reflect(api, Config::default(), ());
    let (tx, mut events) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let event = event.expect("no failure reaches this watcher");
            let objects: BTreeMap<String, ConfigMap> = store
                .list()
                .iter()
                .map(|cm| (cm.metadata.name.clone().unwrap_or_default(), (**cm).clone()))
                .collect();
            if tx.send((seen(&event), contents(&objects))).is_err() {
                return;
            }
        }
    });
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(60), events.recv())
            .await
            .context("no event in time")?
            .context("the watcher ended")
    };
    let mut before = Vec::new();
    while before
        .last()
        .is_none_or(|(e, _): &(Seen, Contents)| e.0 != "InitDone")
    {
        before.push(next().await?);
    }
    let (_, synced) = before.pop().context("the snapshot")?;
    assert_eq!(synced, truth(&cp.client).await?);

    // While the API server kube-fanout watches is down, another one on the
    // same etcd takes writes. The restarted one's watch cache starts after
    // kube-fanout's RV: its watch gets a real 410 and it relists, sending
    // the difference as one re-sync unit.
    cp.kill_apiserver().await?;
    let other = cp.start_extra_apiserver().await?;
    let writes = KubeApi::<ConfigMap>::namespaced(other.clone(), NS);
    for i in 0..3 {
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
    create_configmap(&other, NS, "newcomer", "v1").await?;
    cp.restart_apiserver().await?;
    let after = truth(&cp.client).await?;

    // Everything until the store equals the API server again.
    let mut unit = vec![next().await?];
    while unit.last().is_some_and(|(_, state)| *state != after) {
        unit.push(next().await?);
    }
    let kinds: Vec<(&str, String)> = unit.iter().map(|((k, n, _), _)| (*k, n.clone())).collect();
    assert_eq!(
        kinds,
        [
            ("Init", String::new()),
            ("InitApply", "cm-3".into()),
            ("InitApply", "cm-4".into()),
            ("InitApply", "newcomer".into()),
            ("InitDone", String::new()),
        ],
        "the relist arrives as one replacement, not as Applys and Deletes"
    );
    for (event, state) in &unit {
        assert!(
            *state == synced || *state == after,
            "after {event:?} the store held a state the API server never had: {state:?}"
        );
    }

    // Live again after it.
    let fresh = create_configmap(&cp.client, NS, "later", "v1").await?;
    assert_eq!(next().await?.0, applied(&fresh));
    fanout.stop().await?;
    Ok(())
}

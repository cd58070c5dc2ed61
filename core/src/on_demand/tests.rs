//! The on-demand types' lives with a fake upstream and paused time: the
//! idle stop (and the start again), the bound on types held, the
//! allow-list, one discovery for concurrent requests, and a type the API
//! server stops serving.

use std::{
    collections::BTreeSet,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::{FutureExt, StreamExt, future::BoxFuture};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::{
    AllowList, DiscoveryError, OnDemand, OnDemandOptions, Reflecting, ResolveError, Upstream,
    counters::Stop, types::TypeState,
};
use crate::{
    event::EventKind,
    fields::SelectableFields,
    object::ResourceVersion,
    reflector_status::ReflectorStatus,
    resource::{GroupVersionResource, ResourceError, ResourceType},
    store::Store,
    subscription::{self, Limits, WatchError, tests::spec},
};

/// What the fake API server serves, and what was asked of it.
#[derive(Default)]
struct Fake {
    known: Mutex<BTreeSet<GroupVersionResource>>,
    discoveries: AtomicUsize,
    running: AtomicUsize,
    statuses: Mutex<Vec<Arc<Mutex<ReflectorStatus>>>>,
}

struct FakeUpstream(Arc<Fake>);

impl Upstream for FakeUpstream {
    fn discover(
        &self,
        gvr: &GroupVersionResource,
    ) -> BoxFuture<'static, Result<Store, DiscoveryError>> {
        let (fake, gvr) = (self.0.clone(), gvr.clone());
        async move {
            fake.discoveries.fetch_add(1, Ordering::SeqCst);
            // A discovery takes a moment, so concurrent requests overlap.
            tokio::time::sleep(Duration::from_millis(10)).await;
            if !fake.known.lock().contains(&gvr) {
                return Err(ResourceError::Unknown(gvr).into());
            }
            let resource = ResourceType {
                gvr,
                kind: "Widget".into(),
                namespaced: true,
                fields: SelectableFields::default(),
            };
            Ok(Store::new(resource, 100))
        }
        .boxed()
    }

    fn reflect(&self, store: Arc<Store>, stop: CancellationToken) -> Reflecting {
        let status = Arc::new(Mutex::new(ReflectorStatus::default()));
        self.0.statuses.lock().push(status.clone());
        let fake = self.0.clone();
        Reflecting {
            status,
            run: async move {
                fake.running.fetch_add(1, Ordering::SeqCst);
                store.replace(Vec::new(), ResourceVersion(1));
                stop.cancelled().await;
                fake.running.fetch_sub(1, Ordering::SeqCst);
            }
            .boxed(),
        }
    }
}

fn gvr(s: &str) -> GroupVersionResource {
    s.parse().unwrap()
}

const IDLE: Duration = Duration::from_secs(60);

fn on_demand(allow: &[&str], max_types: usize, known: &[&str]) -> (OnDemand, Arc<Fake>) {
    let fake = Arc::new(Fake::default());
    fake.known.lock().extend(known.iter().map(|k| gvr(k)));
    let options = OnDemandOptions {
        allow: AllowList(allow.iter().map(|p| p.parse().unwrap()).collect()),
        max_types,
        idle: IDLE,
    };
    let on_demand = OnDemand::new(
        options,
        Arc::new(FakeUpstream(fake.clone())),
        CancellationToken::new(),
    );
    (on_demand, fake)
}

/// Lets the types' tasks run their next checks.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn an_idle_type_stops_after_the_idle_time_and_starts_again_on_the_next_request() {
    let (on_demand, fake) = on_demand(&["example.com/*"], 10, &["example.com/v1/widgets"]);
    let widgets = gvr("example.com/v1/widgets");
    let first = on_demand.resolve(&widgets).await.unwrap();
    let store = first.served().store.clone();
    settle().await;
    assert_eq!(fake.running.load(Ordering::SeqCst), 1);
    assert!(store.head().synced);
    assert_eq!(on_demand.states()[&TypeState::InUse], 1);

    // In use for twice the idle time: kept.
    tokio::time::sleep(IDLE * 2).await;
    settle().await;
    assert!(on_demand.get(&widgets).is_some(), "kept while in use");
    drop(first);
    assert_eq!(on_demand.states()[&TypeState::Idle], 1);

    // Unused: kept until the idle time has passed since the last use.
    tokio::time::sleep(IDLE - Duration::from_secs(2)).await;
    settle().await;
    assert_eq!(fake.running.load(Ordering::SeqCst), 1, "stopped too early");
    tokio::time::sleep(Duration::from_secs(2) + on_demand.options().check_period()).await;
    settle().await;
    assert_eq!(fake.running.load(Ordering::SeqCst), 0, "not stopped");
    assert!(on_demand.get(&widgets).is_none());
    assert!(on_demand.held().is_empty());
    assert_eq!(on_demand.counters().stops(Stop::Idle), 1);
    // A subscriber that raced the stop would be told to go elsewhere.
    assert!(store.is_closing());

    // The next request starts it again: discovered again, a new store.
    let again = on_demand.resolve(&widgets).await.unwrap();
    assert!(!Arc::ptr_eq(&again.served().store, &store));
    settle().await;
    assert_eq!(fake.running.load(Ordering::SeqCst), 1);
    assert_eq!(fake.discoveries.load(Ordering::SeqCst), 2);
    assert_eq!(on_demand.counters().starts(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_type_bound_refuses_the_next_type_until_one_is_freed() {
    let known = ["g.io/v1/a", "g.io/v1/b", "g.io/v1/c"];
    let (on_demand, fake) = on_demand(&["*"], 2, &known);
    let a = on_demand.resolve(&gvr(known[0])).await.unwrap();
    let b = on_demand.resolve(&gvr(known[1])).await.unwrap();
    // The same type again takes no new slot.
    let _b_again = on_demand.resolve(&gvr(known[1])).await.unwrap();
    let refused = on_demand.resolve(&gvr(known[2])).await.unwrap_err();
    assert!(
        matches!(refused, ResolveError::TooManyTypes { max: 2, .. }),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("--on-demand-max-types"),
        "{refused}"
    );
    assert_eq!(
        fake.discoveries.load(Ordering::SeqCst),
        2,
        "no discovery over the bound"
    );
    assert_eq!(on_demand.counters().refusals()["max_types"], 1);

    // a is freed once idle; then c fits.
    drop(a);
    tokio::time::sleep(IDLE + on_demand.options().check_period() * 2).await;
    settle().await;
    assert_eq!(on_demand.held().len(), 1);
    let _c = on_demand.resolve(&gvr(known[2])).await.unwrap();
    drop(b);
}

#[tokio::test(start_paused = true)]
async fn types_outside_the_allow_list_or_unknown_upstream_are_not_served() {
    let (on_demand, fake) = on_demand(&["apps/deployments"], 10, &["apps/v1/deployments"]);
    let outside = on_demand.resolve(&gvr("v1/secrets")).await.unwrap_err();
    assert!(
        matches!(outside, ResolveError::NotAllowed { .. }),
        "{outside:?}"
    );
    assert!(
        outside
            .to_string()
            .contains("--on-demand-resources=apps/deployments"),
        "{outside}"
    );
    assert_eq!(fake.discoveries.load(Ordering::SeqCst), 0);

    let unknown = on_demand
        .resolve(&gvr("apps/v9/deployments"))
        .await
        .unwrap_err();
    assert_eq!(unknown.reason(), "not_found", "{unknown:?}");
    assert!(on_demand.held().is_empty(), "no slot kept");
    assert_eq!(on_demand.states().values().sum::<u64>(), 0);
    on_demand
        .resolve(&gvr("apps/v1/deployments"))
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn concurrent_requests_for_a_new_type_share_one_discovery_and_one_reflector() {
    let (on_demand, fake) = on_demand(&["*"], 10, &["g.io/v1/a"]);
    let a = gvr("g.io/v1/a");
    let uses = futures::future::join_all((0..20).map(|_| on_demand.resolve(&a))).await;
    assert!(uses.iter().all(Result::is_ok));
    settle().await;
    assert_eq!(fake.discoveries.load(Ordering::SeqCst), 1);
    assert_eq!(fake.running.load(Ordering::SeqCst), 1);
    assert_eq!(on_demand.counters().starts(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_type_the_api_server_no_longer_serves_ends_its_subscribers_and_is_dropped() {
    let (on_demand, fake) = on_demand(&["*"], 10, &["g.io/v1/a"]);
    let a = gvr("g.io/v1/a");
    let used = on_demand.resolve(&a).await.unwrap();
    settle().await;
    let store = used.served().store.clone();
    let mut watch = Box::pin(subscription::tests::events(subscription::watch_on(
        store.clone(),
        spec("", subscription::Start::Latest, true),
        Limits::default(),
        None,
        None,
        None,
    )));
    let end = watch.next().await.unwrap().unwrap();
    assert_eq!(end.kind, EventKind::Bookmark, "the (empty) snapshot ends");

    // A 404 of a moment while discovery still knows it: kept.
    fake.statuses.lock()[0].lock().not_found_since = Some(tokio::time::Instant::now());
    tokio::time::sleep(on_demand.options().check_period() * 3).await;
    settle().await;
    assert!(on_demand.get(&a).is_some());

    // Gone from discovery too: dropped, its subscriber told so.
    fake.known.lock().clear();
    tokio::time::sleep(on_demand.options().check_period() * 3).await;
    settle().await;
    assert!(on_demand.get(&a).is_none());
    assert_eq!(fake.running.load(Ordering::SeqCst), 0);
    assert_eq!(on_demand.counters().stops(Stop::Removed), 1);
    let ended = tokio::time::timeout(Duration::from_millis(10), watch.next())
        .await
        .expect("ended at once");
    assert_eq!(ended, Some(Err(WatchError::Removed(a.clone()))));
    drop(used);
}

//! One served resource type: its store, its reflector's status, its
//! subscribers (how many are open, what they were sent, and how many
//! watches ended with which error), how it came to be served, and who
//! uses it now (what frees an idle on-demand type).

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use dashmap::DashMap;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::{
    paging::Pages, reflector_status::ReflectorStatus, resource::ResourceType, store::Store,
    subscription::WatchError,
};

/// How a type came to be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Configured at start (`--resource`): served until the server stops.
    Configured,
    /// Started on demand by a request for it; freed once idle.
    OnDemand,
}

/// One served resource type.
#[derive(Debug)]
pub struct Served {
    /// Its cache.
    pub store: Arc<Store>,
    /// What its reflector is doing.
    pub reflector: Arc<Mutex<ReflectorStatus>>,
    /// Lists whose later pages are still expected.
    pub pages: Pages,
    /// Configured or on demand.
    pub origin: Origin,
    subscribers: Arc<Subscribers>,
    activity: Mutex<Activity>,
}

/// Who uses a type: its open watches and requests in flight, and since
/// when nobody has.
#[derive(Debug)]
struct Activity {
    users: u64,
    /// When the last user went (or the type was started).
    since: Instant,
}

/// A use of a served type (a watch for its life, a List or Get while it
/// is answered): an on-demand type is never freed while one is held.
#[derive(Debug)]
pub struct InUse {
    served: Arc<Served>,
}

impl InUse {
    /// The type in use.
    pub fn served(&self) -> &Arc<Served> {
        &self.served
    }
}

impl Drop for InUse {
    fn drop(&mut self) {
        let mut activity = self.served.activity.lock();
        activity.users -= 1;
        if activity.users == 0 {
            activity.since = Instant::now();
        }
    }
}

#[derive(Debug, Default)]
struct Subscribers {
    open: AtomicU64,
    /// Open subscriptions by the namespace they watch (validated names,
    /// an entry only while one is open), for callers allowed only there.
    by_namespace: DashMap<String, u64>,
    /// Watches that ended with an error, by its reason. Rare, so a lock.
    ended: Mutex<BTreeMap<&'static str, u64>>,
    /// Events handed to subscribers' streams, one per subscriber an event
    /// reaches (where `Store::status`'s counts are per event published),
    /// and their encoded bytes. On the event path: one relaxed add each
    /// per delivery, through the guard each subscription holds, so no
    /// lookup of the type and no lock.
    delivered: AtomicU64,
    delivered_bytes: AtomicU64,
}

/// What a type's subscribers were sent, all of them together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deliveries {
    /// Events (changes and bookmarks) handed to subscribers' streams.
    pub events: u64,
    /// Their encoded `WatchEvent` bytes.
    pub bytes: u64,
}

/// Counts one subscriber for as long as it lives.
#[derive(Debug)]
pub struct SubscriberGuard {
    subscribers: Arc<Subscribers>,
    namespace: String,
}

impl SubscriberGuard {
    /// Records that `events` events of `bytes` encoded bytes in all were
    /// handed to this subscriber's stream.
    pub fn delivered(&self, events: u64, bytes: u64) {
        self.subscribers
            .delivered
            .fetch_add(events, Ordering::Relaxed);
        self.subscribers
            .delivered_bytes
            .fetch_add(bytes, Ordering::Relaxed);
    }

    /// Records that the watch ended with `err`.
    pub fn ended(&self, err: &WatchError) {
        *self
            .subscribers
            .ended
            .lock()
            .entry(err.reason())
            .or_default() += 1;
    }
}

impl Drop for SubscriberGuard {
    fn drop(&mut self) {
        self.subscribers.open.fetch_sub(1, Ordering::Relaxed);
        self.subscribers
            .by_namespace
            .remove_if_mut(&self.namespace, |_, n| {
                *n -= 1;
                *n == 0
            });
    }
}

impl Served {
    /// Bundles a store with its reflector's status: a configured type.
    pub fn new(store: Arc<Store>, reflector: Arc<Mutex<ReflectorStatus>>) -> Self {
        Self::with_origin(store, reflector, Origin::Configured)
    }

    /// Bundles a store with its reflector's status, for a type of `origin`.
    pub fn with_origin(
        store: Arc<Store>,
        reflector: Arc<Mutex<ReflectorStatus>>,
        origin: Origin,
    ) -> Self {
        Served {
            store,
            reflector,
            pages: Pages::default(),
            origin,
            subscribers: Arc::default(),
            activity: Mutex::new(Activity {
                users: 0,
                since: Instant::now(),
            }),
        }
    }

    /// Registers a use until the guard drops.
    pub fn in_use(self: &Arc<Self>) -> InUse {
        self.activity.lock().users += 1;
        InUse {
            served: self.clone(),
        }
    }

    /// Since when nobody has used the type; `None` while someone does.
    pub fn idle_since(&self) -> Option<Instant> {
        let activity = self.activity.lock();
        (activity.users == 0).then_some(activity.since)
    }

    /// The resource type.
    pub fn resource(&self) -> &ResourceType {
        self.store.resource()
    }

    /// Registers a subscriber of `namespace` (empty: all) until the guard
    /// drops.
    pub fn subscriber(&self, namespace: &str) -> SubscriberGuard {
        self.subscribers.open.fetch_add(1, Ordering::Relaxed);
        *self
            .subscribers
            .by_namespace
            .entry(namespace.to_owned())
            .or_default() += 1;
        SubscriberGuard {
            subscribers: self.subscribers.clone(),
            namespace: namespace.to_owned(),
        }
    }

    /// Open subscriptions: all of them for `namespace` "", else those
    /// watching that namespace.
    pub fn subscribers(&self, namespace: &str) -> u64 {
        if namespace.is_empty() {
            self.subscribers.open.load(Ordering::Relaxed)
        } else {
            self.subscribers
                .by_namespace
                .get(namespace)
                .map_or(0, |n| *n)
        }
    }

    /// What every subscriber of the type was sent so far.
    pub fn deliveries(&self) -> Deliveries {
        Deliveries {
            events: self.subscribers.delivered.load(Ordering::Relaxed),
            bytes: self.subscribers.delivered_bytes.load(Ordering::Relaxed),
        }
    }

    /// How many watches ended with an error, by the error's reason.
    pub fn watch_errors(&self) -> BTreeMap<&'static str, u64> {
        self.subscribers.ended.lock().clone()
    }
}

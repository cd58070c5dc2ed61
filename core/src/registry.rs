//! The set of served resource types: each one's store, its reflector's
//! status and its subscribers (how many are open, what they were sent,
//! and how many watches ended with which error), looked up by
//! group/version/resource.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use dashmap::DashMap;
use parking_lot::Mutex;

use crate::{
    paging::Pages,
    reflector_status::ReflectorStatus,
    resource::{GroupVersionResource, ResourceType},
    store::Store,
    subscription::WatchError,
};

/// One served resource type.
#[derive(Debug)]
pub struct Served {
    /// Its cache.
    pub store: Arc<Store>,
    /// What its reflector is doing.
    pub reflector: Arc<Mutex<ReflectorStatus>>,
    /// Lists whose later pages are still expected.
    pub pages: Pages,
    subscribers: Arc<Subscribers>,
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
    /// Records that one event of `bytes` encoded bytes was handed to this
    /// subscriber's stream.
    pub fn delivered(&self, bytes: usize) {
        self.subscribers.delivered.fetch_add(1, Ordering::Relaxed);
        self.subscribers
            .delivered_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
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
    /// Bundles a store with its reflector's status.
    pub fn new(store: Arc<Store>, reflector: Arc<Mutex<ReflectorStatus>>) -> Self {
        Served {
            store,
            reflector,
            pages: Pages::default(),
            subscribers: Arc::default(),
        }
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

/// Every served resource type.
#[derive(Debug, Default)]
pub struct ServedTypes {
    served: BTreeMap<GroupVersionResource, Arc<Served>>,
}

impl ServedTypes {
    /// Adds a resource type.
    pub fn insert(&mut self, served: Served) {
        self.served
            .insert(served.resource().gvr.clone(), Arc::new(served));
    }

    /// Looks a resource type up.
    pub fn get(&self, gvr: &GroupVersionResource) -> Option<Arc<Served>> {
        self.served.get(gvr).cloned()
    }

    /// Every served type, ordered by group/version/resource.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Served>> {
        self.served.values()
    }

    /// Ends every open and future watch of every served type with
    /// `ShuttingDown` (see [`Store::close_subscribers`]).
    pub fn close_subscribers(&self) {
        self.iter()
            .for_each(|served| served.store.close_subscribers());
    }

    /// Whether every store has finished its first list.
    pub fn all_synced(&self) -> bool {
        self.served.values().all(|s| s.store.head().synced)
    }
}

//! The set of served resource types: each one's store, its reflector's
//! status and its subscribers (how many are open, and how many watches
//! ended with which error), looked up by group/version/resource.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use parking_lot::Mutex;

use crate::{
    paging::Pages,
    reflector::ReflectorStatus,
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
    /// Watches that ended with an error, by its reason. Rare, so a lock.
    ended: Mutex<BTreeMap<&'static str, u64>>,
}

/// Counts one subscriber for as long as it lives.
#[derive(Debug)]
pub struct SubscriberGuard(Arc<Subscribers>);

impl SubscriberGuard {
    /// Records that the watch ended with `err`.
    pub fn ended(&self, err: &WatchError) {
        *self.0.ended.lock().entry(err.reason()).or_default() += 1;
    }
}

impl Drop for SubscriberGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
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

    /// Registers a subscriber until the guard drops.
    pub fn subscriber(&self) -> SubscriberGuard {
        self.subscribers.open.fetch_add(1, Ordering::Relaxed);
        SubscriberGuard(self.subscribers.clone())
    }

    /// Open subscriptions.
    pub fn subscribers(&self) -> u64 {
        self.subscribers.open.load(Ordering::Relaxed)
    }

    /// How many watches ended with an error, by the error's reason.
    pub fn watch_errors(&self) -> BTreeMap<&'static str, u64> {
        self.subscribers.ended.lock().clone()
    }
}

/// Every served resource type.
#[derive(Debug, Default)]
pub struct Cache {
    served: BTreeMap<GroupVersionResource, Arc<Served>>,
}

impl Cache {
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

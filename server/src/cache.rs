//! The set of served resource types: each one's store, its reflector's
//! status and its subscriber count, looked up by group/version/resource.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use parking_lot::Mutex;

use crate::{
    reflector::ReflectorStatus,
    resource::{GroupVersionResource, ResourceType},
    store::Store,
};

/// One served resource type.
#[derive(Debug)]
pub struct Served {
    /// Its cache.
    pub store: Arc<Store>,
    /// What its reflector is doing.
    pub reflector: Arc<Mutex<ReflectorStatus>>,
    subscribers: Arc<AtomicU64>,
}

/// Counts one subscriber for as long as it lives.
#[derive(Debug)]
pub struct SubscriberGuard(Arc<AtomicU64>);

impl Drop for SubscriberGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Served {
    /// Bundles a store with its reflector's status.
    pub fn new(store: Arc<Store>, reflector: Arc<Mutex<ReflectorStatus>>) -> Self {
        Served {
            store,
            reflector,
            subscribers: Arc::default(),
        }
    }

    /// The resource type.
    pub fn resource(&self) -> &ResourceType {
        self.store.resource()
    }

    /// Registers a subscriber until the guard drops.
    pub fn subscriber(&self) -> SubscriberGuard {
        self.subscribers.fetch_add(1, Ordering::Relaxed);
        SubscriberGuard(self.subscribers.clone())
    }

    /// Open subscriptions.
    pub fn subscribers(&self) -> u64 {
        self.subscribers.load(Ordering::Relaxed)
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

    /// Whether every store has finished its first list.
    pub fn all_synced(&self) -> bool {
        self.served.values().all(|s| s.store.head().synced)
    }
}

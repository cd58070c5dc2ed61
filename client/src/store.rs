//! A local copy of the watched objects, kept by the watch stream: the read
//! API of kube-runtime's reflector `Store`, which it wraps, plus lookups by
//! name and namespace.

use std::{hash::Hash, sync::Arc};

use futures::{Stream, StreamExt};
use kube::Resource;
use kube_runtime::{
    reflector::{
        ObjectRef,
        store::{Store, Writer, WriterDropped},
    },
    watcher::{self, Event},
};
use serde::de::DeserializeOwned;

use crate::{api::Api, watcher::WatchError};

/// The objects a [`reflect`] stream has seen, as of its last event.
#[derive(Debug, Clone)]
pub struct LocalStore<K: 'static + Resource + Clone>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    dyntype: K::DynamicType,
}

impl<K: 'static + Resource + Clone> LocalStore<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    /// The object `name` in `namespace` (`None` for cluster-scoped types).
    pub fn get(&self, name: &str, namespace: Option<&str>) -> Option<Arc<K>> {
        let mut key = ObjectRef::new_with(name, self.dyntype.clone());
        key.namespace = namespace.map(str::to_owned);
        self.store.get(&key)
    }

    /// Every object.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    /// The objects in `namespace`.
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        self.store
            .state_filter(|o| o.meta().namespace.as_deref() == Some(namespace))
    }

    /// How many objects there are.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// Waits until the first snapshot is in. Fails only when the stream
    /// feeding the store was dropped before that.
    pub async fn wait_until_synced(&self) -> Result<(), WriterDropped> {
        self.store.wait_until_ready().await
    }

    /// kube-runtime's store, for a `Controller` (`for_stream`) or anything
    /// else that takes one.
    pub fn reader(&self) -> Store<K> {
        self.store.clone()
    }
}

/// Watches `api` (see [`watch`](crate::watch)) into a [`LocalStore`]. The
/// store follows the stream as it is polled, like kube-runtime's
/// `reflector`; after a re-snapshot it holds exactly the new snapshot, and
/// a re-sync unit replaces its contents at once (see
/// [`watcher`](mod@crate::watcher)): a reader never sees a state the API
/// server did not have.
pub fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    dyntype: K::DynamicType,
) -> (
    LocalStore<K>,
    impl Stream<Item = Result<Event<K>, WatchError>> + Send + 'static,
)
where
    K: Resource + Clone + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let mut writer = Writer::new(dyntype.clone());
    let store = LocalStore {
        store: writer.as_reader(),
        dyntype,
    };
    let stream = crate::watch(api, config).map(move |result| {
        if let Ok(event) = &result {
            writer.apply_watcher_event(event);
        }
        result
    });
    (store, stream)
}

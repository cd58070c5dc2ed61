//! What the caller holds, and the re-sync unit that replaces it at once
//! (see "Re-sync units" in the module documentation).

use std::collections::{BTreeMap, VecDeque};

use kube::Resource;

/// How the watcher keys the objects it delivered: namespace (empty for
/// cluster-scoped objects) and name.
type Key = (String, String);

fn key<K: Resource>(object: &K) -> Key {
    let meta = object.meta();
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Every object yielded to the caller and not deleted since: the latest
/// version of each, which is what matches the selectors (the server
/// filters).
pub(super) struct Held<K>(BTreeMap<Key, K>);

// Not derived: that would ask for `K: Default`.
impl<K> Default for Held<K> {
    fn default() -> Self {
        Held(BTreeMap::new())
    }
}

impl<K: Resource + Clone> Held<K> {
    /// Records an object yielded as applied.
    pub(super) fn apply(&mut self, object: &K) {
        self.0.insert(key(object), object.clone());
    }

    /// Records an object yielded as deleted.
    pub(super) fn delete(&mut self, object: &K) {
        self.0.remove(&key(object));
    }

    /// A copy of every object, in key order, to yield as a new state.
    pub(super) fn objects(&self) -> VecDeque<K> {
        self.0.values().cloned().collect()
    }
}

/// A re-sync unit being received: its resourceVersion and the changes so
/// far, each an object and whether it was deleted.
pub(super) struct Unit<K> {
    resource_version: String,
    changes: Vec<(K, bool)>,
}

impl<K: Resource + Clone> Unit<K> {
    /// A unit at `resource_version` with no change yet.
    pub(super) fn new(resource_version: String) -> Self {
        Unit {
            resource_version,
            changes: Vec::new(),
        }
    }

    /// The resourceVersion every event of the unit carries.
    pub(super) fn resource_version(&self) -> &str {
        &self.resource_version
    }

    /// Adds a change.
    pub(super) fn push(&mut self, object: K, deleted: bool) {
        self.changes.push((object, deleted));
    }

    /// Applies the unit's changes to `held`, in order; false when it has
    /// none, so nothing is to be yielded.
    pub(super) fn apply_to(self, held: &mut Held<K>) -> bool {
        let changed = !self.changes.is_empty();
        for (object, deleted) in self.changes {
            if deleted {
                held.delete(&object);
            } else {
                held.0.insert(key(&object), object);
            }
        }
        changed
    }
}

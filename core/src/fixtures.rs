//! Test fixtures shared by the unit tests of this crate and of the crates
//! above it (feature `fixtures`): the ConfigMap type, objects of it and an
//! empty store; and, for this crate's tests only, the views of snapshots
//! and events the store's tests compare.

#[cfg(test)]
use std::collections::BTreeMap;
use std::sync::Arc;

#[cfg(test)]
use crate::{
    event::{Event, EventKind},
    store::Snapshot,
};
use crate::{
    fields::SelectableFields,
    object::{Object, ResourceVersion, Transform, TypeMeta},
    resource::ResourceType,
    store::Store,
};

/// The ConfigMap type (`v1/configmaps`, namespaced, no selectable
/// fields beyond the defaults).
pub fn configmaps() -> ResourceType {
    ResourceType {
        gvr: "v1/configmaps".parse().expect("a valid resource"),
        kind: "ConfigMap".into(),
        namespaced: true,
        fields: SelectableFields::default(),
    }
}

/// An empty ConfigMap store at RV 1 keeping 100 events, as most
/// subscription tests start.
pub fn empty_store() -> Arc<Store> {
    let store = Arc::new(Store::new(configmaps(), 100));
    store.replace(Vec::new(), ResourceVersion(1));
    store
}

/// A ConfigMap `ns/name` at `rv` with `labels` (a JSON object).
pub fn object(name: &str, rv: u64, labels: &str) -> Object {
    object_in("ns", name, rv, labels)
}

/// A ConfigMap `namespace/name` at `rv` with `labels` (a JSON object).
pub fn object_in(namespace: &str, name: &str, rv: u64, labels: &str) -> Object {
    let raw = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"{namespace}","resourceVersion":"{rv}","labels":{labels}}}}}"#
    );
    let meta = TypeMeta {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
    };
    Object::from_json(
        &raw,
        &meta,
        &SelectableFields::default(),
        Transform::default(),
    )
    .unwrap()
}

/// Keeps `snapshot` for checking unless it shares the copy of the one
/// before: a reader that finds the ring where it was gets the same
/// copy again, as fast as it can ask, and one check of it is enough.
#[cfg(test)]
pub(crate) fn keep_new(snapshots: &mut Vec<Snapshot>, snapshot: Snapshot) {
    if snapshots
        .last()
        .is_none_or(|last| !Arc::ptr_eq(&last.objects, &snapshot.objects))
    {
        snapshots.push(snapshot);
    }
}

/// The objects' keys and resourceVersions, for comparing states.
#[cfg(test)]
pub(crate) fn contents(objects: &[Arc<Object>]) -> BTreeMap<String, u64> {
    objects
        .iter()
        .map(|o| (o.key.clone(), o.resource_version.0))
        .collect()
}

/// (kind, name, RV, resync) of events.
#[cfg(test)]
pub(crate) fn seen(events: &[Arc<Event>]) -> Vec<(EventKind, &str, u64, bool)> {
    events
        .iter()
        .map(|e| {
            (
                e.kind,
                e.object.as_ref().map_or("", |o| o.name.as_str()),
                e.resource_version.0,
                e.resync,
            )
        })
        .collect()
}

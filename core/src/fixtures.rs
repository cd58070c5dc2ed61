//! Test fixtures shared by the unit tests of this crate and of the crates
//! above it (feature `fixtures`): the ConfigMap type, objects of it and an
//! empty store.

use std::sync::Arc;

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

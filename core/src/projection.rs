//! What of an object a subscriber receives: the whole object, or only its
//! metadata as the API server's `PartialObjectMetadata` (what it sends for
//! `Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`,
//! which client-go's metadata informers and kube-rs's `metadata_watcher`
//! ask for).
//!
//! The API server turns every object of such a watch into
//! `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{...}}`,
//! bookmarks included (checked against kube-apiserver v1.36), and a list's
//! items likewise (the list itself being a `PartialObjectMetadataList`).
//!
//! Memory and CPU: the projection of an object is made lazily, the first
//! time a metadata subscriber needs that object (a snapshot ADDED, a live
//! event, a List or Get), and kept on the [`Object`] for as long as the
//! store or the event history holds it: one parse of the object's JSON per
//! object version, shared by every metadata subscriber, and no cost at all
//! for a type nobody watches by metadata (a 24-byte empty cell per object).
//! Making it eagerly on arrival would charge every event of every type a
//! second parse and the memory of the metadata twice over. A live event's
//! encoded `WatchEvent` has one cell per projection (see
//! [`crate::codec::Encodings`]), so an event is encoded at most once for
//! all full subscribers and once for all metadata subscribers.
//!
//! The lag bound (`--max-lag-bytes`) counts what a metadata subscriber
//! receives: its exact count sums the projections' lengths (making them,
//! as its deliveries would). The ring keeps one running byte count, of
//! full JSON, for everyone, which only decides when the next exact count
//! is due. A projection is shorter than its object unless the object has
//! little besides its metadata (then `PartialObjectMetadata` and
//! `meta.k8s.io/v1` are longer than its own kind and apiVersion), so for
//! such objects a metadata subscriber can owe a little more than the
//! byte bound before it is counted again; the event bound is exact.

use std::sync::Arc;

use serde_json::Value;

use crate::object::Object;

/// The apiVersion of `PartialObjectMetadata`.
const META_API_VERSION: &str = "meta.k8s.io/v1";
/// The kind of one object's metadata.
const PARTIAL_OBJECT_METADATA: &str = "PartialObjectMetadata";

/// What a subscriber receives of each object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Projection {
    /// The object as the API server sent it (after the cache's transform).
    #[default]
    Full,
    /// Only apiVersion, kind and metadata, as a `PartialObjectMetadata`.
    Metadata,
}

impl Projection {
    /// The projection a request's `metadata_only` asks for.
    pub fn from_request(metadata_only: bool) -> Self {
        if metadata_only {
            Projection::Metadata
        } else {
            Projection::Full
        }
    }

    /// `object`'s JSON as this projection shows it.
    pub fn json(self, object: &Object) -> Arc<str> {
        match self {
            Projection::Full => object.json.clone(),
            Projection::Metadata => object
                .partial_metadata
                .0
                .get_or_init(|| partial_object_metadata(&object.json))
                .clone(),
        }
    }

    /// The length of `object`'s JSON as this projection shows it (for
    /// metadata, made on first use like [`Projection::json`]).
    pub fn bytes(self, object: &Object) -> u64 {
        match self {
            Projection::Full => object.json.len() as u64,
            Projection::Metadata => self.json(object).len() as u64,
        }
    }

    /// The apiVersion and kind that objects of a type with `api_version`
    /// and `kind` carry in this projection (bookmarks too).
    pub fn type_meta<'a>(self, api_version: &'a str, kind: &'a str) -> (&'a str, &'a str) {
        match self {
            Projection::Full => (api_version, kind),
            Projection::Metadata => (META_API_VERSION, PARTIAL_OBJECT_METADATA),
        }
    }
}

/// The `PartialObjectMetadata` of an object's JSON.
fn partial_object_metadata(json: &str) -> Arc<str> {
    // `Object::from_json` parsed this very text with the same parser and
    // found a metadata object with a name in it, so neither the parse nor
    // the lookup can fail; an empty metadata would stand in if they did.
    let metadata = serde_json::from_str::<Value>(json)
        .ok()
        .and_then(|mut v| v.get_mut("metadata").map(Value::take))
        .unwrap_or_default();
    serde_json::json!({
        "kind": PARTIAL_OBJECT_METADATA,
        "apiVersion": META_API_VERSION,
        "metadata": metadata,
    })
    .to_string()
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{Transform, TypeMeta};

    #[test]
    fn metadata_only_keeps_type_and_metadata_and_drops_the_rest() {
        let raw = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"7","labels":{"app":"x"},"annotations":{"n":"1"}},"data":{"big":"xxxxxxxxxxxxxxxx"}}"#;
        let type_meta = TypeMeta {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        let object = Object::from_json(
            raw,
            &type_meta,
            &crate::fields::SelectableFields::default(),
            Transform::default(),
        )
        .unwrap();
        let partial: Value = serde_json::from_str(&Projection::Metadata.json(&object)).unwrap();
        assert_eq!(
            partial,
            serde_json::json!({
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata",
                "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7",
                             "labels": {"app": "x"}, "annotations": {"n": "1"}},
            })
        );
        // Made once, then shared.
        assert!(Arc::ptr_eq(
            &Projection::Metadata.json(&object),
            &Projection::Metadata.json(&object)
        ));
        assert_eq!(Projection::Full.json(&object), object.json);
        // Equality ignores whether it was made.
        let fresh = Object::from_json(
            raw,
            &type_meta,
            &crate::fields::SelectableFields::default(),
            Transform::default(),
        )
        .unwrap();
        assert_eq!(fresh, object);
    }
}

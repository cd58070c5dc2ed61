//! Objects as the cache holds them: the JSON the API server sent, plus the
//! few fields the store and the filters need, parsed once on arrival.

use std::{
    collections::BTreeMap,
    fmt,
    ops::Range,
    str::FromStr,
    sync::{Arc, OnceLock},
};

use serde::Deserialize;
use serde_json::Value;

use crate::{
    fields::{SelectableFields, Source},
    sparse,
};

/// A Kubernetes resourceVersion.
///
/// Kubernetes calls resourceVersions opaque, but every API server backed by
/// etcd (and kube-fanout itself) hands out etcd revisions, which are
/// unsigned integers. The subscriber contract orders events and compares
/// resume points by resourceVersion, so kube-fanout relies on that and
/// rejects anything else with a clear error instead of guessing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ResourceVersion(pub u64);

impl FromStr for ResourceVersion {
    type Err = ObjectError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<u64>()
            .map(ResourceVersion)
            .map_err(|_| ObjectError::ResourceVersion(s.to_owned()))
    }
}

impl fmt::Display for ResourceVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Why an object from the API server could not be taken into the cache.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The bytes are not a JSON object.
    #[error("object is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A resourceVersion that is not an etcd revision.
    #[error("resourceVersion {} is not an unsigned integer", crate::quote::quote(.0))]
    ResourceVersion(String),
    /// metadata.name is missing or empty.
    #[error("object has no metadata.name")]
    NoName,
    /// The object is not of the type being cached (a Table, say).
    #[error("object is a {found}, expected a {expected}")]
    UnexpectedType {
        /// `apiVersion kind` expected.
        expected: String,
        /// `apiVersion kind` found.
        found: String,
    },
}

/// An object's apiVersion and kind.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TypeMeta {
    /// For example `apps/v1`.
    pub api_version: String,
    /// For example `Deployment`.
    pub kind: String,
}

impl fmt::Display for TypeMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.api_version, self.kind)
    }
}

/// The fields of `metadata` the cache reads.
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// What to do to an object before it is stored, like client-go's
/// `TransformFunc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transform {
    /// Drop `metadata.managedFields`: server-side-apply bookkeeping that
    /// often outweighs the rest of the object and that watchers rarely read.
    pub strip_managed_fields: bool,
}

impl Default for Transform {
    fn default() -> Self {
        Transform {
            strip_managed_fields: true,
        }
    }
}

/// An object's JSON with `metadata.resourceVersion` set to `rv`. The API
/// server's watch cache shows an object that left a watch's selector this
/// way (its last matching state, at the event's resourceVersion), and
/// clients such as client-go's reflector take their resume point from the
/// object, not from the event.
pub(crate) fn with_resource_version(json: &Arc<str>, rv: ResourceVersion) -> Arc<str> {
    let Ok(mut value) = serde_json::from_str::<Value>(json) else {
        // Parsed once already when it entered the store; unreachable.
        return json.clone();
    };
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.insert("resourceVersion".into(), rv.to_string().into());
    }
    value.to_string().into()
}

/// One cached object. Cheap to share: the store and every event that
/// mentions it hold the same `Arc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// `namespace/name`, or `name` for a cluster-scoped object.
    pub key: String,
    /// metadata.namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// metadata.resourceVersion.
    pub resource_version: ResourceVersion,
    /// metadata.labels.
    pub labels: BTreeMap<String, String>,
    /// The values of its type's own selectable fields, in the order of
    /// [`SelectableFields::fields`], taken once on arrival.
    pub fields: Box<[String]>,
    /// The object's JSON after the transform.
    pub json: Arc<str>,
    /// A 64-bit [`digest`] of [`Self::json`], so that comparing two
    /// states whose texts are equal reads neither text.
    pub digest: u64,
    /// Its `PartialObjectMetadata`, made when a metadata subscriber first
    /// needs it (see [`crate::projection`]).
    pub partial_metadata: PartialMetadataCell,
}

impl Object {
    /// Whether `other` is the same state of the object: the same
    /// resourceVersion (a different one always means a different state,
    /// and is checked first) and the same JSON value.
    ///
    /// Objects are kept as the API server sent them (a list item with
    /// the apiVersion and kind its watch events carry put in front, as the
    /// API server writes them), so one state is one text, and equal
    /// digests answer without reading either: a relist compares every
    /// unchanged object, and reading both texts was half its time. Texts
    /// that differ at one resourceVersion (keys in another order, from an
    /// API server that writes them so) are parsed and their values
    /// compared, twenty times slower but still exact. Two different states
    /// of one object at one resourceVersion (possible only if etcd reused
    /// a revision, as a restore without `--bump-revision` does) would also
    /// have to collide in 64 bits.
    pub fn same_state(&self, other: &Object) -> bool {
        self.resource_version == other.resource_version
            && (self.digest == other.digest || same_value(&self.json, &other.json))
    }

    /// The object's value of a selectable field (resolved for its type by
    /// [`SelectableFields::resolve`]), as a field selector compares it:
    /// read from what was taken on arrival, nothing parsed again.
    pub fn field(&self, source: Source) -> &str {
        match source {
            Source::Name => &self.name,
            Source::Namespace => &self.namespace,
            Source::Field(i) => self.fields.get(i).map_or("", String::as_str),
            Source::Unset => "",
        }
    }

    /// Parses an object the API server sent, applying `transform`, and
    /// takes the values of `fields`.
    ///
    /// Items of a LIST come without apiVersion and kind; they are filled in
    /// from `type_meta`, so subscribers get whole objects either way. An
    /// object of another type is refused.
    pub fn from_json(
        raw: &str,
        type_meta: &TypeMeta,
        fields: &SelectableFields,
        transform: Transform,
    ) -> Result<Self, ObjectError> {
        // Read for the parts kept; the text is kept as sent, less what the
        // transform cuts out (see `crate::sparse`).
        let sparse::Sparse {
            value,
            managed_fields,
        } = sparse::read(raw, fields.wanted(), transform.strip_managed_fields)?;
        let mut edits = sparse::Edits::default();
        // The API server writes kind before apiVersion: a list item filled
        // in this way reads as its watch event does.
        for (field, expected) in [
            ("kind", &type_meta.kind),
            ("apiVersion", &type_meta.api_version),
        ] {
            match value.get(field).and_then(Value::as_str) {
                Some(found) if found == expected => {}
                // Missing: put in. (Present but not a string, or not an
                // object at all: refused below.)
                None if value.is_object() && value.get(field).is_none() => {
                    edits.prepend(field, expected)
                }
                _ => {
                    return Err(ObjectError::UnexpectedType {
                        expected: type_meta.to_string(),
                        found: format!(
                            "{} {}",
                            value
                                .get("apiVersion")
                                .and_then(Value::as_str)
                                .unwrap_or("?"),
                            value.get("kind").and_then(Value::as_str).unwrap_or("?")
                        ),
                    });
                }
            }
        }
        let meta =
            Meta::deserialize(value.get("metadata").unwrap_or(&Value::Null)).unwrap_or_default();
        if meta.name.is_empty() {
            return Err(ObjectError::NoName);
        }
        let resource_version = meta
            .resource_version
            .as_deref()
            .unwrap_or_default()
            .parse()?;
        let fields = fields.values(&value);
        let json: Arc<str> = match managed_fields {
            Some(range) if !edits.cut_member(raw, "managedFields", range.clone()) => {
                // Its key written with escapes: the text cannot be cut, so
                // the value is written out again without it (all of it read).
                let mut whole: Value = serde_json::from_str(raw)?;
                if let Some(m) = whole.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("managedFields");
                }
                let mut text = serde_json::to_string(&whole)?;
                if !edits.is_empty() {
                    text = edits.apply(&text);
                }
                text.into()
            }
            _ if edits.is_empty() => raw.into(),
            _ => edits.apply(raw).into(),
        };
        let digest = digest(&json);
        let namespace = meta.namespace.unwrap_or_default();
        Ok(Object {
            key: object_key(&namespace, &meta.name),
            namespace,
            name: meta.name,
            resource_version,
            labels: meta.labels,
            fields,
            digest,
            json,
            partial_metadata: Default::default(),
        })
    }
}

/// Whether two texts hold the same JSON value (neither parses: false).
fn same_value(a: &str, b: &str) -> bool {
    match (
        serde_json::from_str::<Value>(a),
        serde_json::from_str::<Value>(b),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// The digest of a text that [`Object::digest`] holds: foldhash
/// with a fixed seed, so it is the same for equal texts anywhere in the
/// process (it is never kept or sent elsewhere), at several gigabytes a
/// second.
pub fn digest(json: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0).hash_one(json)
}

/// The store key of an object: `namespace/name`, or `name` when cluster-scoped,
/// as client-go's `MetaNamespaceKeyFunc` makes it.
pub fn object_key(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}/{name}")
    }
}

/// Where `namespace`'s objects are in `sorted`, objects in key order (as a
/// snapshot holds them): their keys, `namespace/name`, are exactly those
/// from `namespace/` up to but not including `namespace0` (`0` follows `/`,
/// and names hold no `/`), so they are one range, found by two binary
/// searches. (No key equals `namespace/` itself: names are never empty.)
pub fn namespace_range(sorted: &[Arc<Object>], namespace: &str) -> Range<usize> {
    let from = format!("{namespace}/");
    let to = format!("{namespace}0");
    let start = sorted.partition_point(|o| o.key < from);
    let end = sorted.partition_point(|o| o.key < to);
    start..end
}

/// The lazily made `PartialObjectMetadata` of an object (see the module
/// docs). It is derived from the object's JSON, so two objects with equal
/// JSON are equal whether or not either has made it yet.
#[derive(Debug, Clone, Default)]
pub struct PartialMetadataCell(pub(crate) OnceLock<Arc<str>>);

impl PartialEq for PartialMetadataCell {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for PartialMetadataCell {}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm() -> TypeMeta {
        TypeMeta {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        }
    }

    /// `raw` read as a ConfigMap, with the default fields and transform.
    fn configmap(raw: &str) -> Result<Object, ObjectError> {
        Object::from_json(
            raw,
            &cm(),
            &SelectableFields::default(),
            Transform::default(),
        )
    }

    #[test]
    fn the_same_state_is_recognised_whatever_the_key_order() {
        let parse = |raw: &str| configmap(raw).unwrap();
        // As the API server writes a watch event's object.
        let a = parse(
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"4","managedFields":[{"manager":"m"}]},"data":{"x":"1","y":"2"}}"#,
        );
        let reordered = parse(
            r#"{"data":{"y":"2","x":"1"},"metadata":{"resourceVersion":"4","name":"a"},"kind":"ConfigMap","apiVersion":"v1"}"#,
        );
        let changed = parse(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"4"},"data":{"x":"1","y":"3"}}"#,
        );
        let newer = parse(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"5"},"data":{"x":"1","y":"2"}}"#,
        );
        // A LIST's item: no apiVersion or kind, so filled in as the API
        // server writes them: the same text, known by its digest.
        let listed = parse(
            r#"{"metadata":{"name":"a","resourceVersion":"4","managedFields":[{"manager":"m"}]},"data":{"x":"1","y":"2"}}"#,
        );
        assert_eq!(a.json, listed.json);
        assert_eq!(a.digest, listed.digest);
        assert!(a.same_state(&listed));
        // Another key order: another text, the same value.
        assert_ne!(a.digest, reordered.digest, "both kept as sent");
        assert!(a.same_state(&reordered));
        assert!(!a.same_state(&changed));
        assert!(!a.same_state(&newer));
    }

    #[test]
    fn parses_metadata_and_strips_managed_fields() {
        let raw = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"42","labels":{"app":"x"},"managedFields":[{"manager":"kubectl"}]},"data":{"k":"v"}}"#;
        let obj = configmap(raw).unwrap();
        assert_eq!(obj.key, "ns/a");
        assert_eq!(obj.resource_version, ResourceVersion(42));
        assert_eq!(obj.labels.get("app").map(String::as_str), Some("x"));
        assert!(!obj.json.contains("managedFields"));
        assert!(obj.json.contains(r#""data":{"k":"v"}"#));
    }

    /// A managedFields key written with escapes cannot be cut from the
    /// text: the object is written out again without it, still whole.
    #[test]
    fn strips_managed_fields_whose_key_is_written_with_escapes() {
        let raw = r#"{"metadata":{"name":"a","resourceVersion":"3","managed\u0046ields":[{"manager":"m"}]},"data":{"k":"v"}}"#;
        let obj = configmap(raw).unwrap();
        let value: Value = serde_json::from_str(&obj.json).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"kind": "ConfigMap", "apiVersion": "v1",
                "metadata": {"name": "a", "resourceVersion": "3"}, "data": {"k": "v"}})
        );
        assert!(
            obj.json
                .starts_with(r#"{"kind":"ConfigMap","apiVersion":"v1","#)
        );
    }

    #[test]
    fn keeps_managed_fields_when_the_transform_is_off() {
        let raw = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"1","managedFields":[]}}"#;
        let obj = Object::from_json(
            raw,
            &cm(),
            &SelectableFields::default(),
            Transform {
                strip_managed_fields: false,
            },
        )
        .unwrap();
        assert_eq!(&*obj.json, raw);
        assert_eq!(obj.key, "a");
    }

    #[test]
    fn rejects_objects_without_a_name_or_with_an_opaque_resource_version() {
        assert!(matches!(
            configmap(r#"{"metadata":{}}"#),
            Err(ObjectError::NoName)
        ));
        assert!(matches!(
            Object::from_json(
                r#"{"metadata":{"name":"a","resourceVersion":"abc"}}"#,
                &cm(),
                &SelectableFields::default(),
                Transform::default()
            ),
            Err(ObjectError::ResourceVersion(_))
        ));
    }

    #[test]
    fn fills_in_the_type_of_list_items_and_refuses_other_types() {
        let item = Object::from_json(
            r#"{"metadata":{"name":"a","resourceVersion":"3"}}"#,
            &cm(),
            &SelectableFields::default(),
            Transform::default(),
        )
        .unwrap();
        assert!(
            item.json.contains(r#""apiVersion":"v1""#)
                && item.json.contains(r#""kind":"ConfigMap""#)
        );
        let table = r#"{"apiVersion":"meta.k8s.io/v1","kind":"Table","metadata":{"name":"a","resourceVersion":"3"}}"#;
        let err = configmap(table).unwrap_err();
        assert!(matches!(err, ObjectError::UnexpectedType { .. }), "{err}");
        assert!(err.to_string().contains("meta.k8s.io/v1 Table"), "{err}");
        // Not an object, or a kind that is not a string: refused, not
        // filled in (the text cannot hold two kinds).
        for raw in [
            r#"[{"metadata":{"name":"a","resourceVersion":"3"}}]"#,
            r#""a""#,
            r#"{"kind":5,"metadata":{"name":"a","resourceVersion":"3"}}"#,
        ] {
            let err = configmap(raw).unwrap_err();
            assert!(
                matches!(err, ObjectError::UnexpectedType { .. }),
                "{raw}: {err}"
            );
        }
    }
}

//! An object's metadata as the PartialObjectMetadata in a Table row:
//! `metav1.ObjectMeta` re-encoded in its Go field order, as the API server
//! copies it out of the object (`meta.AsPartialObjectMetadata`). For a
//! built-in type that is the object's own `metadata` bytes; for a custom
//! resource, whose JSON has its keys sorted, the order differs.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::{
    error::PrinterError,
    json::{write_compact, write_str},
    time::parse_rfc3339,
};

/// `metav1.ObjectMeta` as read from JSON. Fields of the wrong JSON type
/// read as unset, as the unstructured accessors read them.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ObjectMeta<'a> {
    #[serde(deserialize_with = "lenient")]
    name: Option<String>,
    #[serde(deserialize_with = "lenient")]
    generate_name: Option<String>,
    #[serde(deserialize_with = "lenient")]
    namespace: Option<String>,
    #[serde(deserialize_with = "lenient")]
    self_link: Option<String>,
    #[serde(deserialize_with = "lenient")]
    uid: Option<String>,
    #[serde(deserialize_with = "lenient")]
    resource_version: Option<String>,
    #[serde(deserialize_with = "lenient")]
    generation: Option<i64>,
    #[serde(deserialize_with = "lenient")]
    creation_timestamp: Option<String>,
    #[serde(deserialize_with = "lenient")]
    deletion_timestamp: Option<String>,
    #[serde(deserialize_with = "lenient")]
    deletion_grace_period_seconds: Option<i64>,
    #[serde(deserialize_with = "lenient")]
    labels: Option<BTreeMap<String, String>>,
    #[serde(deserialize_with = "lenient")]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(deserialize_with = "lenient")]
    owner_references: Option<Vec<OwnerReference>>,
    #[serde(deserialize_with = "lenient")]
    finalizers: Option<Vec<String>>,
    // Not lenient: a raw value cannot be read through the buffering that
    // reading a field two ways needs. The API server writes managedFields
    // well formed; metadata that does not read is an error.
    #[serde(borrow)]
    managed_fields: Option<Vec<ManagedFieldsEntry<'a>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct OwnerReference {
    #[serde(deserialize_with = "lenient")]
    api_version: Option<String>,
    #[serde(deserialize_with = "lenient")]
    kind: Option<String>,
    #[serde(deserialize_with = "lenient")]
    name: Option<String>,
    #[serde(deserialize_with = "lenient")]
    uid: Option<String>,
    #[serde(deserialize_with = "lenient")]
    controller: Option<bool>,
    #[serde(deserialize_with = "lenient")]
    block_owner_deletion: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ManagedFieldsEntry<'a> {
    #[serde(deserialize_with = "lenient")]
    manager: Option<String>,
    #[serde(deserialize_with = "lenient")]
    operation: Option<String>,
    #[serde(deserialize_with = "lenient")]
    api_version: Option<String>,
    #[serde(deserialize_with = "lenient")]
    time: Option<String>,
    #[serde(deserialize_with = "lenient")]
    fields_type: Option<String>,
    #[serde(borrow)]
    fields_v1: Option<&'a RawValue>,
    #[serde(deserialize_with = "lenient")]
    subresource: Option<String>,
}

/// Reads a field as `T`, or as unset if its JSON is of another type.
fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Maybe<T> {
        Is(T),
        Other(serde::de::IgnoredAny),
    }
    Ok(match Maybe::<T>::deserialize(deserializer)? {
        Maybe::Is(value) => Some(value),
        Maybe::Other(_) => None,
    })
}

/// Writes `"key":value` after a comma unless it is the first field.
struct Fields<'o> {
    out: &'o mut String,
    first: bool,
}

impl<'o> Fields<'o> {
    fn open(out: &'o mut String) -> Fields<'o> {
        out.push('{');
        Fields { out, first: true }
    }

    fn key(&mut self, key: &str) -> &mut String {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.out.push('"');
        self.out.push_str(key);
        self.out.push_str("\":");
        self.out
    }

    /// A string field with `omitempty`.
    fn string(&mut self, key: &str, value: &Option<String>) {
        if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
            write_str(self.key(key), v);
        }
    }

    fn close(self) {
        self.out.push('}');
    }
}

/// Writes a `metav1.Time` as it encodes: UTC whole seconds, or `null`
/// when zero. The API server's accessors read a time that does not parse
/// as zero.
fn write_time(out: &mut String, value: Option<&str>) {
    match value.and_then(parse_rfc3339).filter(|t| !t.is_zero()) {
        Some(t) => write_str(out, &t.rfc3339()),
        None => out.push_str("null"),
    }
}

fn write_string_map(fields: &mut Fields<'_>, key: &str, map: &Option<BTreeMap<String, String>>) {
    let Some(map) = map.as_ref().filter(|m| !m.is_empty()) else {
        return;
    };
    let out = fields.key(key);
    out.push('{');
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str(out, k);
        out.push(':');
        write_str(out, v);
    }
    out.push('}');
}

/// The annotations of an object as the API server's internal type holds
/// them: the conversion from a version's JSON may take some out into
/// fields (see `builtin::Builtin::internal_annotations`).
pub(crate) type Annotations = BTreeMap<String, String>;

/// Appends `{"kind":"PartialObjectMetadata","apiVersion":..,"metadata":{..}}`
/// for an object whose `metadata` is the JSON `raw` (None if it has none),
/// its annotations first passed through `internal`.
pub(crate) fn write_partial_object_metadata(
    out: &mut String,
    api_version: &str,
    raw: Option<&str>,
    internal: fn(&mut Annotations) -> Result<(), PrinterError>,
) -> Result<(), PrinterError> {
    let mut meta: ObjectMeta<'_> = match raw {
        Some(raw) => serde_json::from_str(raw).map_err(|_| PrinterError::Unreadable {
            what: "metadata that is not ObjectMeta",
        })?,
        None => ObjectMeta::default(),
    };
    if let Some(annotations) = meta.annotations.as_mut() {
        internal(annotations)?;
    }
    out.push_str("{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":");
    write_str(out, api_version);
    out.push_str(",\"metadata\":");
    let mut f = Fields::open(out);
    f.string("name", &meta.name);
    f.string("generateName", &meta.generate_name);
    f.string("namespace", &meta.namespace);
    f.string("selfLink", &meta.self_link);
    f.string("uid", &meta.uid);
    f.string("resourceVersion", &meta.resource_version);
    if let Some(generation) = meta.generation.filter(|g| *g != 0) {
        f.key("generation").push_str(&generation.to_string());
    }
    // omitzero: a zero (or unreadable) creation time is left out.
    if let Some(created) = meta
        .creation_timestamp
        .as_deref()
        .and_then(parse_rfc3339)
        .filter(|t| !t.is_zero())
    {
        write_str(f.key("creationTimestamp"), &created.rfc3339());
    }
    if let Some(deleted) = meta
        .deletion_timestamp
        .as_deref()
        .and_then(parse_rfc3339)
        .filter(|t| !t.is_zero())
    {
        write_str(f.key("deletionTimestamp"), &deleted.rfc3339());
    }
    if let Some(grace) = meta.deletion_grace_period_seconds {
        f.key("deletionGracePeriodSeconds")
            .push_str(&grace.to_string());
    }
    write_string_map(&mut f, "labels", &meta.labels);
    write_string_map(&mut f, "annotations", &meta.annotations);
    if let Some(owners) = meta.owner_references.as_ref().filter(|o| !o.is_empty()) {
        let out = f.key("ownerReferences");
        out.push('[');
        for (i, owner) in owners.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            // apiVersion, kind, name and uid have no omitempty.
            out.push_str("{\"apiVersion\":");
            write_str(out, owner.api_version.as_deref().unwrap_or(""));
            out.push_str(",\"kind\":");
            write_str(out, owner.kind.as_deref().unwrap_or(""));
            out.push_str(",\"name\":");
            write_str(out, owner.name.as_deref().unwrap_or(""));
            out.push_str(",\"uid\":");
            write_str(out, owner.uid.as_deref().unwrap_or(""));
            for (key, flag) in [
                ("controller", owner.controller),
                ("blockOwnerDeletion", owner.block_owner_deletion),
            ] {
                if let Some(flag) = flag {
                    out.push_str(&format!(",\"{key}\":{flag}"));
                }
            }
            out.push('}');
        }
        out.push(']');
    }
    if let Some(finalizers) = meta.finalizers.as_ref().filter(|f| !f.is_empty()) {
        let out = f.key("finalizers");
        out.push('[');
        for (i, finalizer) in finalizers.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_str(out, finalizer);
        }
        out.push(']');
    }
    if let Some(entries) = meta.managed_fields.as_ref().filter(|m| !m.is_empty()) {
        let out = f.key("managedFields");
        out.push('[');
        for (i, entry) in entries.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let mut e = Fields::open(out);
            e.string("manager", &entry.manager);
            e.string("operation", &entry.operation);
            e.string("apiVersion", &entry.api_version);
            if entry.time.is_some() {
                write_time(e.key("time"), entry.time.as_deref());
            }
            e.string("fieldsType", &entry.fields_type);
            if let Some(fields) = entry.fields_v1 {
                write_compact(e.key("fieldsV1"), fields.get());
            }
            e.string("subresource", &entry.subresource);
            e.close();
        }
        out.push(']');
    }
    f.close();
    out.push('}');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partial(raw: Option<&str>) -> String {
        let mut out = String::new();
        write_partial_object_metadata(&mut out, "meta.k8s.io/v1", raw, |_| Ok(())).unwrap();
        out
    }

    #[test]
    fn a_built_in_objects_metadata_comes_out_as_it_went_in() {
        let raw = r#"{"name":"web","namespace":"team-a","uid":"6c1e","resourceVersion":"42","generation":3,"creationTimestamp":"2026-12-07T10:00:00Z","labels":{"a":"1","b":"\u003c2\u003e"},"annotations":{"x":"y"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","uid":"9f","controller":true,"blockOwnerDeletion":true}],"finalizers":["f/1"],"managedFields":[{"manager":"kubectl","operation":"Update","apiVersion":"v1","time":"2026-12-07T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:a":{}}}}]}"#;
        assert_eq!(
            partial(Some(raw)),
            format!(
                r#"{{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{raw}}}"#
            )
        );
    }

    #[test]
    fn a_custom_resources_sorted_metadata_is_put_in_go_field_order() {
        let raw = r#"{"creationTimestamp":"2026-12-07T10:00:00Z","generation":1,"name":"c","namespace":"n","ownerReferences":[{"apiVersion":"v1","blockOwnerDeletion":false,"kind":"ConfigMap","name":"o","uid":"u"}],"resourceVersion":"7","uid":"1"}"#;
        assert_eq!(
            partial(Some(raw)),
            r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"c","namespace":"n","uid":"1","resourceVersion":"7","generation":1,"creationTimestamp":"2026-12-07T10:00:00Z","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"o","uid":"u","blockOwnerDeletion":false}]}}"#
        );
    }

    #[test]
    fn zero_and_empty_fields_are_left_out() {
        assert_eq!(
            partial(None),
            r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{}}"#
        );
        assert_eq!(
            partial(Some(
                r#"{"resourceVersion":"9","creationTimestamp":null,"labels":{}}"#
            )),
            r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"9"}}"#
        );
    }
}

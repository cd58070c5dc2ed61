//! Which fields a type's field selectors may name, and each field's value
//! for an object, exactly as kube-apiserver v1.36 decides them.
//!
//! Two tables in the API server decide a field selector, and this module
//! mirrors both:
//! - which labels a request may name, per served group/version/kind: the
//!   `AddFieldLabelConversionFunc` registered in
//!   `pkg/apis/<group>/<version>/conversion.go` (some map a label to
//!   another, `spec.host` to `spec.nodeName`; a kind without one accepts
//!   only `metadata.name` and `metadata.namespace`); for custom resources,
//!   the CRD's `selectableFields` of the served version;
//! - each object's values: `ToSelectableFields`/`GetAttrs` in
//!   `pkg/registry/<group>/<type>/strategy.go`, which format booleans with
//!   `strconv.FormatBool`, counts with `strconv.Itoa`, and read a missing
//!   field as its Go zero value. A label that is accepted but has no value
//!   in that set (a pod's `status.podIPs`) reads as "", as `fields.Set.Get`
//!   does.
//!
//! Values are taken once per object, when it enters the cache
//! ([`SelectableFields::values`]), in the order of [`SelectableFields::fields`],
//! so filters and indexes read a field by position without parsing again.

use serde_json::Value;

use crate::{quote::quote, sparse::Wanted};

/// Where a selector's field label takes its value from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `metadata.name`.
    Name,
    /// `metadata.namespace` ("" for a cluster-scoped object).
    Namespace,
    /// The type's own field at this position of [`SelectableFields::fields`].
    Field(usize),
    /// A label the API server accepts but never sets: always "".
    Unset,
}

/// How a field's value is read from an object's JSON, in the served
/// version's names, formatted as the registry formats it.
#[derive(Clone, Copy)]
enum Read {
    /// The first non-empty string among these paths; none is "" (Go's
    /// zero value). More than one path where the v1 -> internal
    /// conversion falls back from one field to another.
    Str(&'static [&'static [&'static str]]),
    /// A boolean as `strconv.FormatBool` writes it; missing is false.
    Bool(&'static [&'static str]),
    /// An integer as `strconv.Itoa` writes it; missing is 0.
    Int(&'static [&'static str]),
}

/// How the API server words a refused label (each conversion function
/// has its own text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// `field label not supported: <label>`: most kinds, and custom resources.
    Plain,
    /// `"<label>" is not a known field selector: only "metadata.name", "metadata.namespace"`:
    /// kinds without a conversion function.
    Default,
    /// `field label "<label>" not supported for <kind>`.
    ForKind(&'static str),
    /// `field label not supported for <gvk>: <label>`.
    ForGvk(&'static str),
}

/// One built-in kind's selectable fields.
struct Table {
    /// The kind's own fields, by the name the registry gives them, and how
    /// each is read from the JSON.
    fields: &'static [(&'static str, Read)],
    /// The first path steps the served version names differently from
    /// `fields` (events.k8s.io/v1 calls `involvedObject` `regarding`).
    renames: &'static [(&'static str, &'static str)],
    /// Every label a request may name, and what it selects on.
    accepted: &'static [(&'static str, Accepted)],
    refusal: Refusal,
}

/// What an accepted label of a built-in kind selects on.
#[derive(Clone, Copy)]
enum Accepted {
    Name,
    Namespace,
    /// One of [`Table::fields`], by name.
    Field(&'static str),
    Unset,
}

/// The built-in kinds, in their versions served by default in v1.36,
/// that register a field label conversion of their own (every other
/// built-in kind gets the default: `metadata.name`, `metadata.namespace`).
/// Beta and alpha versions with one (apps/v1beta1 StatefulSets,
/// certificates.k8s.io/v1beta1 ClusterTrustBundles and
/// PodCertificateRequests, ...) are not covered: they get the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Builtin {
    Pod,
    Node,
    ReplicationController,
    CoreEvent,
    Namespace,
    Secret,
    Service,
    Job,
    CertificateSigningRequest,
    EventsEvent,
    ResourceSlice,
}

/// A custom resource's declared selectable field.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CustomField {
    /// The label: the jsonPath without its leading dot.
    label: String,
    /// The path's steps from the object's root.
    path: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum Kind {
    /// `metadata.name` and `metadata.namespace` only.
    #[default]
    Metadata,
    Builtin(Builtin),
    Custom {
        namespaced: bool,
        fields: Vec<CustomField>,
    },
}

/// The field selectors one resource type supports. The default supports
/// `metadata.name` and `metadata.namespace`, as the API server does for a
/// kind without a field label conversion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectableFields {
    kind: Kind,
    /// What an object's JSON is read for: every path [`Self::values`]
    /// reads, and the metadata the cache keeps.
    wanted: Wanted,
}

impl Default for SelectableFields {
    fn default() -> Self {
        SelectableFields::of(Kind::Metadata)
    }
}

/// A custom resource's `selectableFields` entry kube-fanout cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("selectable field jsonPath {} is not a path of fields", quote(.0))]
pub struct JsonPathError(pub String);

impl SelectableFields {
    /// The fields of a built-in kind served as `api_version`; `None` when
    /// the API server has no conversion function for it (the default then
    /// applies, or the CRD's declared fields for a custom resource).
    pub fn builtin(api_version: &str, kind: &str) -> Option<Self> {
        let builtin = match (api_version, kind) {
            ("v1", "Pod") => Builtin::Pod,
            ("v1", "Node") => Builtin::Node,
            ("v1", "ReplicationController") => Builtin::ReplicationController,
            ("v1", "Event") => Builtin::CoreEvent,
            ("v1", "Namespace") => Builtin::Namespace,
            ("v1", "Secret") => Builtin::Secret,
            ("v1", "Service") => Builtin::Service,
            ("batch/v1", "Job") => Builtin::Job,
            ("certificates.k8s.io/v1", "CertificateSigningRequest") => {
                Builtin::CertificateSigningRequest
            }
            ("events.k8s.io/v1", "Event") => Builtin::EventsEvent,
            ("resource.k8s.io/v1", "ResourceSlice") => Builtin::ResourceSlice,
            _ => return None,
        };
        Some(SelectableFields::of(Kind::Builtin(builtin)))
    }

    /// A custom resource's fields: `metadata.name`, `metadata.namespace`
    /// when `namespaced`, and the served version's `selectableFields`
    /// (their `jsonPath`s, like `.spec.color`).
    pub fn custom(namespaced: bool, json_paths: &[String]) -> Result<Self, JsonPathError> {
        let fields = json_paths
            .iter()
            .map(|p| {
                Ok(CustomField {
                    label: p.strip_prefix('.').unwrap_or(p).to_owned(),
                    path: parse_json_path(p).ok_or_else(|| JsonPathError(p.clone()))?,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(SelectableFields::of(Kind::Custom { namespaced, fields }))
    }

    /// A custom resource's declared fields as the jsonPaths
    /// [`custom`](Self::custom) takes (`.spec.color`), for a tier's leaf to
    /// serve the same selectors; `None` for a built-in type or the default.
    pub fn custom_json_paths(&self) -> Option<Vec<String>> {
        match &self.kind {
            Kind::Custom { fields, .. } => {
                Some(fields.iter().map(|f| format!(".{}", f.label)).collect())
            }
            Kind::Metadata | Kind::Builtin(_) => None,
        }
    }

    fn of(kind: Kind) -> Self {
        let paths: Vec<Vec<&str>> = match &kind {
            Kind::Metadata => Vec::new(),
            Kind::Builtin(b) => {
                let table = b.table();
                table
                    .fields
                    .iter()
                    .flat_map(|(_, read)| match read {
                        Read::Str(paths) => paths.to_vec(),
                        Read::Bool(path) | Read::Int(path) => vec![*path],
                    })
                    .map(|path| table.renamed(path).collect())
                    .collect()
            }
            Kind::Custom { fields, .. } => fields
                .iter()
                .map(|f| f.path.iter().map(String::as_str).collect())
                .collect(),
        };
        let wanted = Wanted::with(paths.iter().map(Vec::as_slice));
        SelectableFields { kind, wanted }
    }

    /// What an object's JSON is read for (see [`crate::sparse`]).
    pub(crate) fn wanted(&self) -> &Wanted {
        &self.wanted
    }

    /// The type's own fields, in the order [`values`](Self::values) gives
    /// their values.
    pub fn fields(&self) -> Vec<&str> {
        match &self.kind {
            Kind::Metadata => Vec::new(),
            Kind::Builtin(b) => b.table().fields.iter().map(|(name, _)| *name).collect(),
            Kind::Custom { fields, .. } => fields.iter().map(|f| f.label.as_str()).collect(),
        }
    }

    /// The canonical path `source` reads (`metadata.name`, or one of the
    /// type's own fields); `None` for a label that is never set.
    pub fn path(&self, source: Source) -> Option<&str> {
        match source {
            Source::Name => Some("metadata.name"),
            Source::Namespace => Some("metadata.namespace"),
            Source::Field(i) => self.fields().get(i).copied(),
            Source::Unset => None,
        }
    }

    /// Every label a field selector may name for this type.
    pub fn labels(&self) -> Vec<&str> {
        match &self.kind {
            Kind::Metadata => vec!["metadata.name", "metadata.namespace"],
            Kind::Builtin(b) => b.table().accepted.iter().map(|(l, _)| *l).collect(),
            Kind::Custom { namespaced, fields } => ["metadata.name"]
                .into_iter()
                .chain(namespaced.then_some("metadata.namespace"))
                .chain(fields.iter().map(|f| f.label.as_str()))
                .collect(),
        }
    }

    /// What `label` selects on, or why the API server would refuse it: its
    /// own words, then the labels this type supports.
    pub(crate) fn resolve(&self, label: &str) -> Result<Source, String> {
        let found = match &self.kind {
            Kind::Metadata => match label {
                "metadata.name" => Some(Source::Name),
                "metadata.namespace" => Some(Source::Namespace),
                _ => None,
            },
            Kind::Builtin(b) => {
                let table = b.table();
                table
                    .accepted
                    .iter()
                    .find(|(l, _)| *l == label)
                    .map(|(_, accepted)| match accepted {
                        Accepted::Name => Source::Name,
                        Accepted::Namespace => Source::Namespace,
                        Accepted::Unset => Source::Unset,
                        Accepted::Field(name) => Source::Field(
                            table
                                .fields
                                .iter()
                                .position(|(n, _)| n == name)
                                .expect("every accepted field is in the table"),
                        ),
                    })
            }
            Kind::Custom { namespaced, fields } => match label {
                "metadata.name" => Some(Source::Name),
                "metadata.namespace" if *namespaced => Some(Source::Namespace),
                _ => fields
                    .iter()
                    .position(|f| f.label == label)
                    .map(Source::Field),
            },
        };
        found.ok_or_else(|| {
            let refusal = match &self.kind {
                Kind::Metadata => Refusal::Default,
                Kind::Builtin(b) => b.table().refusal,
                Kind::Custom { .. } => Refusal::Plain,
            };
            let label = quote(label);
            let said = match refusal {
                Refusal::Plain => format!("field label not supported: {label}"),
                Refusal::Default => format!(
                    r#"{label} is not a known field selector: only "metadata.name", "metadata.namespace""#
                ),
                Refusal::ForKind(kind) => {
                    format!("field label {label} not supported for {kind}")
                }
                Refusal::ForGvk(gvk) => {
                    format!("field label not supported for {gvk}: {label}")
                }
            };
            format!("{said} (supported: {})", self.labels().join(", "))
        })
    }

    /// The values of the type's own fields for `object` (its JSON as the
    /// API server sent it), in the order of [`fields`](Self::fields).
    pub fn values(&self, object: &Value) -> Box<[String]> {
        match &self.kind {
            Kind::Metadata => Box::default(),
            Kind::Builtin(b) => {
                let table = b.table();
                table
                    .fields
                    .iter()
                    .map(|(_, read)| table.read(*read, object))
                    .collect()
            }
            Kind::Custom { fields, .. } => fields
                .iter()
                .map(|f| custom_value(at(object, &f.path)))
                .collect(),
        }
    }
}

/// The value at `path`, if every step exists (a number steps into an array).
fn at<S: AsRef<str>>(object: &Value, path: impl IntoIterator<Item = S>) -> Option<&Value> {
    path.into_iter().try_fold(object, |v, step| match v {
        Value::Array(items) => items.get(step.as_ref().parse::<usize>().ok()?),
        _ => v.get(step.as_ref()),
    })
}

impl Table {
    /// `path` in the served version's names.
    fn renamed<'a>(&self, path: &'a [&'a str]) -> impl Iterator<Item = &'a str> {
        let first = self
            .renames
            .iter()
            .find(|(from, _)| path.first() == Some(from))
            .map_or(path[0], |(_, to)| to);
        std::iter::once(first).chain(path[1..].iter().copied())
    }

    /// The value `read` gives for `object`.
    fn read(&self, read: Read, object: &Value) -> String {
        let at = |path: &[&str]| at(object, self.renamed(path));
        match read {
            Read::Str(paths) => paths
                .iter()
                .filter_map(|p| at(p).and_then(Value::as_str))
                .find(|s| !s.is_empty())
                .unwrap_or_default()
                .to_owned(),
            Read::Bool(path) => at(path)
                .and_then(Value::as_bool)
                .unwrap_or_default()
                .to_string(),
            Read::Int(path) => at(path)
                .and_then(Value::as_i64)
                .unwrap_or_default()
                .to_string(),
        }
    }
}

/// A custom resource's field as the API server formats it: `fmt.Sprint`
/// of the decoded JSON value, "" when missing or null. CRD validation
/// allows only string, integer and boolean fields.
fn custom_value(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Splits a selectable field's jsonPath (`.spec.color`, `.spec['a.b']`)
/// into field names; `None` for anything else (CRD validation allows only
/// such paths, without array steps).
fn parse_json_path(path: &str) -> Option<Vec<String>> {
    let mut rest = path;
    let mut steps = Vec::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("['") {
            let (name, after) = r.split_once("']")?;
            steps.push(name.to_owned());
            rest = after;
        } else {
            let r = rest.strip_prefix('.')?;
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return None;
            }
            steps.push(r[..end].to_owned());
            rest = &r[end..];
        }
    }
    (!steps.is_empty()).then_some(steps)
}

// The tables, each from its kind's `pkg/registry/.../strategy.go`
// (values) and `pkg/apis/.../v1/conversion.go` (accepted labels).

/// `pkg/registry/core/pod/strategy.go` `ToSelectableFields`, read from v1
/// JSON: the v1 -> internal conversion takes `serviceAccount` when
/// `serviceAccountName` is empty, and `status.podIP` over `podIPs[0]`.
const POD: Table = Table {
    fields: &[
        ("spec.nodeName", Read::Str(&[&["spec", "nodeName"]])),
        (
            "spec.restartPolicy",
            Read::Str(&[&["spec", "restartPolicy"]]),
        ),
        (
            "spec.schedulerName",
            Read::Str(&[&["spec", "schedulerName"]]),
        ),
        (
            "spec.serviceAccountName",
            Read::Str(&[&["spec", "serviceAccountName"], &["spec", "serviceAccount"]]),
        ),
        ("spec.hostNetwork", Read::Bool(&["spec", "hostNetwork"])),
        ("status.phase", Read::Str(&[&["status", "phase"]])),
        (
            "status.podIP",
            Read::Str(&[&["status", "podIP"], &["status", "podIPs", "0", "ip"]]),
        ),
        (
            "status.nominatedNodeName",
            Read::Str(&[&["status", "nominatedNodeName"]]),
        ),
    ],
    renames: &[],
    accepted: &[
        ("metadata.name", Accepted::Name),
        ("metadata.namespace", Accepted::Namespace),
        ("spec.nodeName", Accepted::Field("spec.nodeName")),
        ("spec.restartPolicy", Accepted::Field("spec.restartPolicy")),
        ("spec.schedulerName", Accepted::Field("spec.schedulerName")),
        (
            "spec.serviceAccountName",
            Accepted::Field("spec.serviceAccountName"),
        ),
        ("spec.hostNetwork", Accepted::Field("spec.hostNetwork")),
        ("status.phase", Accepted::Field("status.phase")),
        ("status.podIP", Accepted::Field("status.podIP")),
        // Accepted, but ToSelectableFields never sets it.
        ("status.podIPs", Accepted::Unset),
        (
            "status.nominatedNodeName",
            Accepted::Field("status.nominatedNodeName"),
        ),
        // For old v1 clients; the API server maps it to spec.nodeName.
        ("spec.host", Accepted::Field("spec.nodeName")),
    ],
    refusal: Refusal::Plain,
};

const NODE: Table = Table {
    fields: &[("spec.unschedulable", Read::Bool(&["spec", "unschedulable"]))],
    renames: &[],
    accepted: &[
        ("metadata.name", Accepted::Name),
        ("spec.unschedulable", Accepted::Field("spec.unschedulable")),
    ],
    refusal: Refusal::Plain,
};

const REPLICATION_CONTROLLER: Table = Table {
    fields: &[("status.replicas", Read::Int(&["status", "replicas"]))],
    renames: &[],
    accepted: &[
        ("metadata.name", Accepted::Name),
        ("metadata.namespace", Accepted::Namespace),
        ("status.replicas", Accepted::Field("status.replicas")),
    ],
    refusal: Refusal::Plain,
};

/// `pkg/registry/core/event/strategy.go`, in core v1's names: `source` is
/// the source component, or the reporting controller when that is empty.
const EVENT_FIELDS: &[(&str, Read)] = &[
    (
        "involvedObject.kind",
        Read::Str(&[&["involvedObject", "kind"]]),
    ),
    (
        "involvedObject.namespace",
        Read::Str(&[&["involvedObject", "namespace"]]),
    ),
    (
        "involvedObject.name",
        Read::Str(&[&["involvedObject", "name"]]),
    ),
    (
        "involvedObject.uid",
        Read::Str(&[&["involvedObject", "uid"]]),
    ),
    (
        "involvedObject.apiVersion",
        Read::Str(&[&["involvedObject", "apiVersion"]]),
    ),
    (
        "involvedObject.resourceVersion",
        Read::Str(&[&["involvedObject", "resourceVersion"]]),
    ),
    (
        "involvedObject.fieldPath",
        Read::Str(&[&["involvedObject", "fieldPath"]]),
    ),
    ("reason", Read::Str(&[&["reason"]])),
    ("reportingComponent", Read::Str(&[&["reportingComponent"]])),
    (
        "source",
        Read::Str(&[&["source", "component"], &["reportingComponent"]]),
    ),
    ("type", Read::Str(&[&["type"]])),
];

const CORE_EVENT: Table = Table {
    fields: EVENT_FIELDS,
    renames: &[],
    accepted: &[
        (
            "involvedObject.kind",
            Accepted::Field("involvedObject.kind"),
        ),
        (
            "involvedObject.namespace",
            Accepted::Field("involvedObject.namespace"),
        ),
        (
            "involvedObject.name",
            Accepted::Field("involvedObject.name"),
        ),
        ("involvedObject.uid", Accepted::Field("involvedObject.uid")),
        (
            "involvedObject.apiVersion",
            Accepted::Field("involvedObject.apiVersion"),
        ),
        (
            "involvedObject.resourceVersion",
            Accepted::Field("involvedObject.resourceVersion"),
        ),
        (
            "involvedObject.fieldPath",
            Accepted::Field("involvedObject.fieldPath"),
        ),
        ("reason", Accepted::Field("reason")),
        ("reportingComponent", Accepted::Field("reportingComponent")),
        ("source", Accepted::Field("source")),
        ("type", Accepted::Field("type")),
        ("metadata.namespace", Accepted::Namespace),
        ("metadata.name", Accepted::Name),
    ],
    refusal: Refusal::Plain,
};

/// The same registry, read from events.k8s.io/v1 JSON; the labels are that
/// version's names, which its conversion maps to the registry's.
const EVENTS_EVENT: Table = Table {
    fields: EVENT_FIELDS,
    renames: &[
        ("involvedObject", "regarding"),
        ("reportingComponent", "reportingController"),
        ("source", "deprecatedSource"),
    ],
    accepted: &[
        ("reason", Accepted::Field("reason")),
        ("regarding.kind", Accepted::Field("involvedObject.kind")),
        (
            "regarding.namespace",
            Accepted::Field("involvedObject.namespace"),
        ),
        ("regarding.name", Accepted::Field("involvedObject.name")),
        ("regarding.uid", Accepted::Field("involvedObject.uid")),
        (
            "regarding.apiVersion",
            Accepted::Field("involvedObject.apiVersion"),
        ),
        (
            "regarding.resourceVersion",
            Accepted::Field("involvedObject.resourceVersion"),
        ),
        (
            "regarding.fieldPath",
            Accepted::Field("involvedObject.fieldPath"),
        ),
        ("reportingController", Accepted::Field("reportingComponent")),
        ("type", Accepted::Field("type")),
        ("metadata.namespace", Accepted::Namespace),
        ("metadata.name", Accepted::Name),
    ],
    refusal: Refusal::Plain,
};

const NAMESPACE: Table = Table {
    fields: &[("status.phase", Read::Str(&[&["status", "phase"]]))],
    renames: &[],
    accepted: &[
        ("status.phase", Accepted::Field("status.phase")),
        ("metadata.name", Accepted::Name),
    ],
    refusal: Refusal::Plain,
};

const SECRET: Table = Table {
    fields: &[("type", Read::Str(&[&["type"]]))],
    renames: &[],
    accepted: &[
        ("type", Accepted::Field("type")),
        ("metadata.namespace", Accepted::Namespace),
        ("metadata.name", Accepted::Name),
    ],
    refusal: Refusal::Plain,
};

const SERVICE: Table = Table {
    fields: &[
        ("spec.clusterIP", Read::Str(&[&["spec", "clusterIP"]])),
        ("spec.type", Read::Str(&[&["spec", "type"]])),
    ],
    renames: &[],
    accepted: &[
        ("metadata.namespace", Accepted::Namespace),
        ("metadata.name", Accepted::Name),
        ("spec.clusterIP", Accepted::Field("spec.clusterIP")),
        ("spec.type", Accepted::Field("spec.type")),
    ],
    refusal: Refusal::Plain,
};

const JOB: Table = Table {
    // The registry names it status.successful; v1 JSON calls it succeeded.
    fields: &[("status.successful", Read::Int(&["status", "succeeded"]))],
    renames: &[],
    accepted: &[
        ("metadata.name", Accepted::Name),
        ("metadata.namespace", Accepted::Namespace),
        ("status.successful", Accepted::Field("status.successful")),
    ],
    refusal: Refusal::ForKind("Job"),
};

const CERTIFICATE_SIGNING_REQUEST: Table = Table {
    fields: &[("spec.signerName", Read::Str(&[&["spec", "signerName"]]))],
    renames: &[],
    accepted: &[
        ("metadata.name", Accepted::Name),
        ("spec.signerName", Accepted::Field("spec.signerName")),
    ],
    refusal: Refusal::Plain,
};

const RESOURCE_SLICE: Table = Table {
    fields: &[
        ("spec.nodeName", Read::Str(&[&["spec", "nodeName"]])),
        ("spec.driver", Read::Str(&[&["spec", "driver"]])),
    ],
    renames: &[],
    accepted: &[
        ("metadata.name", Accepted::Name),
        ("spec.nodeName", Accepted::Field("spec.nodeName")),
        ("spec.driver", Accepted::Field("spec.driver")),
    ],
    refusal: Refusal::ForGvk("resource.k8s.io/v1, Kind=ResourceSlice"),
};

impl Builtin {
    fn table(self) -> &'static Table {
        match self {
            Builtin::Pod => &POD,
            Builtin::Node => &NODE,
            Builtin::ReplicationController => &REPLICATION_CONTROLLER,
            Builtin::CoreEvent => &CORE_EVENT,
            Builtin::Namespace => &NAMESPACE,
            Builtin::Secret => &SECRET,
            Builtin::Service => &SERVICE,
            Builtin::Job => &JOB,
            Builtin::CertificateSigningRequest => &CERTIFICATE_SIGNING_REQUEST,
            Builtin::EventsEvent => &EVENTS_EVENT,
            Builtin::ResourceSlice => &RESOURCE_SLICE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> SelectableFields {
        SelectableFields::builtin("v1", "Pod").unwrap()
    }

    fn value_of(fields: &SelectableFields, label: &str, object: &str) -> String {
        let object: Value = serde_json::from_str(object).unwrap();
        match fields.resolve(label).unwrap() {
            Source::Field(i) => fields.values(&object)[i].clone(),
            other => panic!("{label} is {other:?}"),
        }
    }

    #[test]
    fn every_accepted_field_names_a_field_of_its_table() {
        for (api_version, kind) in [
            ("v1", "Pod"),
            ("v1", "Node"),
            ("v1", "ReplicationController"),
            ("v1", "Event"),
            ("v1", "Namespace"),
            ("v1", "Secret"),
            ("v1", "Service"),
            ("batch/v1", "Job"),
            ("certificates.k8s.io/v1", "CertificateSigningRequest"),
            ("events.k8s.io/v1", "Event"),
            ("resource.k8s.io/v1", "ResourceSlice"),
        ] {
            let fields = SelectableFields::builtin(api_version, kind).unwrap();
            for label in fields.labels() {
                assert!(fields.resolve(label).is_ok(), "{kind} {label}");
            }
        }
    }

    #[test]
    fn missing_values_read_as_go_zero_values() {
        let bare = r#"{"metadata":{"name":"a"}}"#;
        assert_eq!(value_of(&pod(), "spec.hostNetwork", bare), "false");
        assert_eq!(value_of(&pod(), "status.podIP", bare), "");
        let rc = SelectableFields::builtin("v1", "ReplicationController").unwrap();
        assert_eq!(value_of(&rc, "status.replicas", bare), "0");
        let node = SelectableFields::builtin("v1", "Node").unwrap();
        assert_eq!(value_of(&node, "spec.unschedulable", bare), "false");
    }

    #[test]
    fn pod_fields_follow_the_v1_conversion() {
        let p = r#"{"spec":{"serviceAccount":"old","hostNetwork":true},
                    "status":{"podIPs":[{"ip":"10.0.0.2"},{"ip":"fd00::2"}]}}"#;
        assert_eq!(value_of(&pod(), "spec.serviceAccountName", p), "old");
        assert_eq!(value_of(&pod(), "spec.hostNetwork", p), "true");
        assert_eq!(value_of(&pod(), "status.podIP", p), "10.0.0.2");
        let n = r#"{"spec":{"nodeName":"n1"}}"#;
        assert_eq!(value_of(&pod(), "spec.host", n), "n1");
        assert_eq!(pod().resolve("status.podIPs"), Ok(Source::Unset));
    }

    #[test]
    fn event_source_falls_back_to_the_reporting_controller() {
        let events = SelectableFields::builtin("v1", "Event").unwrap();
        let e = r#"{"reportingComponent":"ctl"}"#;
        assert_eq!(value_of(&events, "source", e), "ctl");
        let e = r#"{"source":{"component":"kubelet"},"reportingComponent":"ctl"}"#;
        assert_eq!(value_of(&events, "source", e), "kubelet");
        let v1 = SelectableFields::builtin("events.k8s.io/v1", "Event").unwrap();
        let e = r#"{"regarding":{"kind":"Pod"},"reportingController":"ctl"}"#;
        assert_eq!(value_of(&v1, "regarding.kind", e), "Pod");
        assert_eq!(value_of(&v1, "reportingController", e), "ctl");
        assert!(v1.resolve("source").is_err());
        assert!(v1.resolve("involvedObject.kind").is_err());
    }

    #[test]
    fn refusals_use_the_api_servers_words_and_list_the_supported_labels() {
        let err = pod().resolve("spec.nope").unwrap_err();
        assert!(
            err.starts_with(r#"field label not supported: "spec.nope" (supported: metadata.name, metadata.namespace, spec.nodeName"#),
            "{err}"
        );
        let err = SelectableFields::default().resolve("x").unwrap_err();
        assert_eq!(
            err,
            r#""x" is not a known field selector: only "metadata.name", "metadata.namespace" (supported: metadata.name, metadata.namespace)"#
        );
        let job = SelectableFields::builtin("batch/v1", "Job").unwrap();
        assert!(
            job.resolve("spec.x")
                .unwrap_err()
                .starts_with(r#"field label "spec.x" not supported for Job"#)
        );
        let node = SelectableFields::builtin("v1", "Node").unwrap();
        assert!(node.resolve("metadata.namespace").is_err());
    }

    #[test]
    fn custom_fields_format_like_fmt_sprint() {
        let f = SelectableFields::custom(
            false,
            &[
                ".spec.color".into(),
                ".spec.size".into(),
                ".spec['a.b']".into(),
            ],
        )
        .unwrap();
        assert_eq!(f.fields(), ["spec.color", "spec.size", "spec['a.b']"]);
        let o = r#"{"spec":{"color":"red","size":3,"a.b":true}}"#;
        assert_eq!(value_of(&f, "spec.color", o), "red");
        assert_eq!(value_of(&f, "spec.size", o), "3");
        assert_eq!(value_of(&f, "spec['a.b']", o), "true");
        assert_eq!(value_of(&f, "spec.size", "{}"), "");
        assert!(f.resolve("metadata.namespace").is_err());
        assert!(SelectableFields::custom(true, &["spec[0]".into()]).is_err());
    }

    /// What a parent hands a leaf rebuilds the same fields: a custom
    /// type's jsonPaths give back an equal [`SelectableFields`], and a
    /// built-in type or the default hands none (the leaf knows those).
    #[test]
    fn a_custom_types_json_paths_rebuild_it() {
        let paths = vec![".spec.color".to_owned(), ".spec['a.b']".to_owned()];
        let f = SelectableFields::custom(true, &paths).unwrap();
        let handed = f.custom_json_paths().unwrap();
        assert_eq!(handed, paths);
        assert_eq!(SelectableFields::custom(true, &handed).unwrap(), f);
        assert_eq!(SelectableFields::default().custom_json_paths(), None);
        let pods = SelectableFields::builtin("v1", "Pod").unwrap();
        assert_eq!(pods.custom_json_paths(), None);
    }
}

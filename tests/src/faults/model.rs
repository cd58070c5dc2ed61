//! What the checker compares: a ConfigMap reduced to what a change can
//! alter, and a subscriber's filter (namespace, label requirements, a
//! pinned or excluded name) and view (whole objects or metadata only),
//! evaluated here independently of kube-fanout's own filter and projection
//! code so that the checker is an oracle, not a copy.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    sync::Arc,
};

use anyhow::{Context, Result, bail};
use k8s_openapi::{api::core::v1::ConfigMap, apimachinery::pkg::apis::meta::v1::ObjectMeta};
use rand::{Rng, seq::IndexedRandom};

/// `namespace/name`.
pub type Key = Arc<str>;

/// A ConfigMap as the checker sees it: its resourceVersion, labels and
/// data. Two states are equal iff these are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Obj {
    /// `metadata.resourceVersion`.
    pub rv: u64,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `data`.
    pub data: BTreeMap<String, String>,
}

impl Obj {
    /// The key and state of a ConfigMap the API server returned.
    pub fn from_configmap(cm: &ConfigMap) -> Result<(Key, Obj)> {
        Self::from_parts(&cm.metadata, cm.data.clone().unwrap_or_default())
    }

    fn from_parts(metadata: &ObjectMeta, data: BTreeMap<String, String>) -> Result<(Key, Obj)> {
        let rv = metadata.resource_version.as_deref().unwrap_or_default();
        Ok((
            key(
                metadata.namespace.as_deref().unwrap_or_default(),
                metadata.name.as_deref().unwrap_or_default(),
            ),
            Obj {
                rv: rv
                    .parse()
                    .with_context(|| format!("resourceVersion {rv:?}"))?,
                labels: metadata.labels.clone().unwrap_or_default(),
                data,
            },
        ))
    }

    /// The key and state of an object as a WatchEvent carries it: a
    /// ConfigMap, or for a metadata-only subscriber the API server's
    /// `PartialObjectMetadata` (only kind, apiVersion and metadata; its
    /// state has no data).
    pub fn from_json(json: &str, metadata_only: bool) -> Result<(Key, Obj)> {
        let decoding = || format!("decoding {}", bounded(json, 200));
        if !metadata_only {
            let cm: ConfigMap = serde_json::from_str(json).with_context(decoding)?;
            return Self::from_configmap(&cm);
        }
        let value: serde_json::Value = serde_json::from_str(json).with_context(decoding)?;
        let fields: BTreeSet<&str> = value
            .as_object()
            .into_iter()
            .flat_map(|o| o.keys().map(String::as_str))
            .collect();
        if value["kind"] != "PartialObjectMetadata"
            || value["apiVersion"] != "meta.k8s.io/v1"
            || fields != BTreeSet::from(["apiVersion", "kind", "metadata"])
        {
            bail!(
                "not a PartialObjectMetadata of only kind, apiVersion and metadata: {}",
                bounded(json, 200)
            );
        }
        let metadata: ObjectMeta =
            serde_json::from_value(value["metadata"].clone()).with_context(decoding)?;
        Self::from_parts(&metadata, BTreeMap::new())
    }
}

impl fmt::Display for Obj {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rv {} labels {:?} data {:?}",
            self.rv, self.labels, self.data
        )
    }
}

/// The key of `name` in `namespace`.
pub fn key(namespace: &str, name: &str) -> Key {
    format!("{namespace}/{name}").into()
}

/// At most `max` characters of `text`, marked when cut.
pub fn bounded(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// One label requirement, in Kubernetes' selector semantics (`!=` and
/// `notin` also match objects without the label).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `k=v`
    Equals(&'static str, &'static str),
    /// `k!=v`
    NotEquals(&'static str, &'static str),
    /// `k in (v1,v2)`
    In(&'static str, Vec<&'static str>),
    /// `k notin (v1,v2)`
    NotIn(&'static str, Vec<&'static str>),
    /// `k`
    Exists(&'static str),
    /// `!k`
    NotExists(&'static str),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let get = |k: &str| labels.get(k).map(String::as_str);
        match self {
            Requirement::Equals(k, v) => get(k) == Some(v),
            Requirement::NotEquals(k, v) => get(k) != Some(v),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.contains(&x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.contains(&x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Requirement::Equals(k, v) => write!(f, "{k}={v}"),
            Requirement::NotEquals(k, v) => write!(f, "{k}!={v}"),
            Requirement::In(k, vs) => write!(f, "{k} in ({})", vs.join(",")),
            Requirement::NotIn(k, vs) => write!(f, "{k} notin ({})", vs.join(",")),
            Requirement::Exists(k) => write!(f, "{k}"),
            Requirement::NotExists(k) => write!(f, "!{k}"),
        }
    }
}

/// The label keys and values the writers use.
pub const APPS: [&str; 3] = ["a", "b", "c"];
/// Values of the second label key, `tier`.
pub const TIERS: [&str; 2] = ["x", "y"];

/// A `metadata.name` field selector term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameTerm {
    /// `metadata.name=n`: kube-fanout registers such a subscriber under
    /// the name and wakes it only for events of that name.
    Equals(String),
    /// `metadata.name!=n`.
    NotEquals(String),
}

/// A subscriber's filter: a namespace ("" for all), a label selector and a
/// `metadata.name` term; and its view, whole objects or metadata only.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Filter {
    /// The namespace, "" for every namespace.
    pub namespace: String,
    /// All must match.
    pub requirements: Vec<Requirement>,
    /// The field selector's one term, if any.
    pub name: Option<NameTerm>,
    /// Asks for `PartialObjectMetadata` instead of whole objects.
    pub metadata_only: bool,
}

impl Filter {
    /// A random filter over `namespaces`: often one namespace, often a
    /// selector on the labels the writers flip, sometimes a pinned or
    /// excluded name (of the writers' `names`), sometimes metadata only.
    pub fn random(rng: &mut impl Rng, namespaces: &[String], names: u32) -> Filter {
        let namespace = if rng.random_bool(0.4) {
            String::new()
        } else {
            namespaces.choose(rng).cloned().unwrap_or_default()
        };
        let app = *APPS.choose(rng).unwrap_or(&"a");
        let tier = *TIERS.choose(rng).unwrap_or(&"x");
        use Requirement::*;
        // Without a namespace or a pinned name, `app=a`, `app in (a)`,
        // `app in (a,b)` and `tier=x` are indexed by that label (woken
        // only through it; a set under each of its values), and `app` by
        // the label's presence.
        let choices: [Vec<Requirement>; 11] = [
            vec![],
            vec![Equals("app", app)],
            vec![In("app", vec![app])],
            vec![NotEquals("app", app)],
            vec![In("app", vec!["a", "b"])],
            vec![NotIn("app", vec![app])],
            vec![Exists("app")],
            vec![NotExists("app")],
            vec![Exists("app"), Equals("tier", tier)],
            vec![Equals("tier", tier)],
            vec![In("app", vec!["b", "c"]), NotExists("tier")],
        ];
        let requirements = choices.choose(rng).cloned().unwrap_or_default();
        let name = format!("cm-{}", rng.random_range(0..names.max(1)));
        let name = match rng.random_range(0..10) {
            0..2 => Some(NameTerm::Equals(name)),
            2 => Some(NameTerm::NotEquals(name)),
            _ => None,
        };
        Filter {
            namespace,
            requirements,
            name,
            metadata_only: rng.random_bool(0.25),
        }
    }

    /// Whether kube-fanout indexes a subscriber with this filter by a
    /// label: it pins no namespace and no name (those come first) and
    /// pins a label to one value or a set of values, or requires one to
    /// exist.
    pub fn label_indexed(&self) -> bool {
        self.namespace.is_empty()
            && !matches!(self.name, Some(NameTerm::Equals(_)))
            && self.requirements.iter().any(|r| {
                matches!(
                    r,
                    Requirement::Equals(..) | Requirement::In(..) | Requirement::Exists(_)
                )
            })
    }

    /// Whether that label index registers it under a label's presence: it
    /// pins no label's value (a value comes first).
    pub fn label_presence_indexed(&self) -> bool {
        self.label_indexed()
            && !self
                .requirements
                .iter()
                .any(|r| matches!(r, Requirement::Equals(..) | Requirement::In(..)))
    }

    /// Whether that label index registers it under several values: every
    /// label it pins, it pins to a set (kube-fanout takes the label with
    /// the fewest values).
    pub fn label_set_indexed(&self) -> bool {
        self.label_indexed()
            && self
                .requirements
                .iter()
                .any(|r| matches!(r, Requirement::In(..)))
            && self.requirements.iter().all(|r| match r {
                Requirement::Equals(..) => false,
                Requirement::In(_, values) => values.len() > 1,
                _ => true,
            })
    }

    /// The field selector in Kubernetes syntax.
    pub fn field_selector(&self) -> String {
        match &self.name {
            Some(NameTerm::Equals(n)) => format!("metadata.name={n}"),
            Some(NameTerm::NotEquals(n)) => format!("metadata.name!={n}"),
            None => String::new(),
        }
    }

    /// The label selector in Kubernetes syntax.
    pub fn label_selector(&self) -> String {
        self.requirements
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Whether the object at `key` in state `obj` passes the filter.
    pub fn matches(&self, key: &str, obj: &Obj) -> bool {
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        let name_passes = match &self.name {
            Some(NameTerm::Equals(n)) => name == n,
            Some(NameTerm::NotEquals(n)) => name != n,
            None => true,
        };
        (self.namespace.is_empty() || self.namespace == namespace)
            && name_passes
            && self.requirements.iter().all(|r| r.matches(&obj.labels))
    }

    /// The object at `key` in state `obj` as this subscriber receives it,
    /// if the filter passes it: without data for a metadata-only one.
    pub fn view(&self, key: &str, obj: &Arc<Obj>) -> Option<Arc<Obj>> {
        if !self.matches(key, obj) {
            return None;
        }
        Some(if self.metadata_only {
            Arc::new(Obj {
                data: BTreeMap::new(),
                ..Obj::clone(obj)
            })
        } else {
            obj.clone()
        })
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = if self.namespace.is_empty() {
            "*"
        } else {
            &self.namespace
        };
        write!(f, "ns={ns} selector={:?}", self.label_selector())?;
        if self.name.is_some() {
            write!(f, " fields={:?}", self.field_selector())?;
        }
        if self.metadata_only {
            write!(f, " metadata-only")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(labels: &[(&str, &str)]) -> Obj {
        Obj {
            rv: 1,
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            data: BTreeMap::new(),
        }
    }

    #[test]
    fn name_terms_and_the_metadata_view() {
        let a = Arc::new(Obj {
            data: [("value".to_owned(), "1".to_owned())].into(),
            ..obj(&[("app", "a")])
        });
        let pinned = Filter {
            name: Some(NameTerm::Equals("x".into())),
            ..Filter::default()
        };
        assert!(pinned.matches("n/x", &a));
        assert!(!pinned.matches("n/xx", &a));
        assert_eq!(pinned.field_selector(), "metadata.name=x");
        let excluded = Filter {
            name: Some(NameTerm::NotEquals("x".into())),
            metadata_only: true,
            ..Filter::default()
        };
        assert!(!excluded.matches("n/x", &a));
        assert_eq!(excluded.field_selector(), "metadata.name!=x");
        assert_eq!(excluded.view("n/y", &a).map(|o| o.data.len()), Some(0));
        assert_eq!(pinned.view("n/x", &a), Some(a.clone()));
        assert_eq!(pinned.view("n/y", &a), None);
    }

    #[test]
    fn a_metadata_only_object_must_be_partial_object_metadata() {
        let meta = r#"{"namespace":"n","name":"x","resourceVersion":"7","labels":{"app":"a"}}"#;
        let partial = format!(
            r#"{{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{meta}}}"#
        );
        let (key, o) = Obj::from_json(&partial, true).unwrap();
        assert_eq!((&*key, o.rv, o.data.len()), ("n/x", 7, 0));
        let whole = format!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{meta},"data":{{"v":"1"}}}}"#
        );
        assert_eq!(Obj::from_json(&whole, false).unwrap().1.data.len(), 1);
        assert!(Obj::from_json(&whole, true).is_err());
        let leaking = format!(
            r#"{{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{meta},"data":{{"v":"1"}}}}"#
        );
        assert!(Obj::from_json(&leaking, true).is_err());
    }

    #[test]
    fn requirements_follow_kubernetes_semantics() {
        use Requirement::*;
        let none = obj(&[]);
        let a = obj(&[("app", "a")]);
        let ax = obj(&[("app", "a"), ("tier", "x")]);
        let filter = |requirements| Filter {
            requirements,
            ..Filter::default()
        };
        assert!(filter(vec![NotEquals("app", "a")]).matches("n/x", &none));
        assert!(!filter(vec![NotEquals("app", "a")]).matches("n/x", &a));
        assert!(filter(vec![NotIn("app", vec!["b"])]).matches("n/x", &none));
        assert!(!filter(vec![In("app", vec!["b"])]).matches("n/x", &none));
        assert!(filter(vec![Exists("app"), Equals("tier", "x")]).matches("n/x", &ax));
        assert!(!filter(vec![Exists("app"), Equals("tier", "x")]).matches("n/x", &a));
        assert!(filter(vec![NotExists("tier")]).matches("n/x", &a));
        let scoped = Filter {
            namespace: "n".into(),
            ..Filter::default()
        };
        assert!(scoped.matches("n/x", &none));
        assert!(!scoped.matches("nn/x", &none));
        assert_eq!(
            filter(vec![In("app", vec!["b", "c"]), NotExists("tier")]).label_selector(),
            "app in (b,c),!tier"
        );
    }

    /// The report's index counts follow the server's choice: a value
    /// before a presence, a namespace or a pinned name before any label.
    #[test]
    fn which_label_index_a_filter_is_counted_under() {
        use Requirement::*;
        let filter = |requirements| Filter {
            requirements,
            ..Filter::default()
        };
        let counted = |f: Filter| {
            [
                f.label_indexed(),
                f.label_set_indexed(),
                f.label_presence_indexed(),
            ]
        };
        assert_eq!(
            counted(filter(vec![Equals("app", "a")])),
            [true, false, false]
        );
        assert_eq!(
            counted(filter(vec![In("app", vec!["a", "b"])])),
            [true, true, false]
        );
        assert_eq!(counted(filter(vec![Exists("app")])), [true, false, true]);
        assert_eq!(
            counted(filter(vec![Exists("app"), Equals("tier", "x")])),
            [true, false, false]
        );
        assert_eq!(
            counted(filter(vec![NotExists("app")])),
            [false, false, false]
        );
        let scoped = Filter {
            namespace: "n".into(),
            ..filter(vec![Exists("app")])
        };
        assert_eq!(counted(scoped), [false, false, false]);
    }
}

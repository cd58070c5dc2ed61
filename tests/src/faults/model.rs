//! What the checker compares: a ConfigMap reduced to what a change can
//! alter, and a subscriber's filter (namespace and label requirements),
//! evaluated here independently of kube-fanout's own filter code so that
//! the checker is an oracle, not a copy.

use std::{collections::BTreeMap, fmt, sync::Arc};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::ConfigMap;
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
        let rv = cm.metadata.resource_version.as_deref().unwrap_or_default();
        Ok((
            key(
                cm.metadata.namespace.as_deref().unwrap_or_default(),
                cm.metadata.name.as_deref().unwrap_or_default(),
            ),
            Obj {
                rv: rv
                    .parse()
                    .with_context(|| format!("resourceVersion {rv:?}"))?,
                labels: cm.metadata.labels.clone().unwrap_or_default(),
                data: cm.data.clone().unwrap_or_default(),
            },
        ))
    }

    /// The key and state of a ConfigMap as JSON (what a WatchEvent carries).
    pub fn from_json(json: &str) -> Result<(Key, Obj)> {
        let cm: ConfigMap = serde_json::from_str(json)
            .with_context(|| format!("decoding {}", bounded(json, 200)))?;
        Self::from_configmap(&cm)
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

/// A subscriber's filter: a namespace ("" for all) and a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// The namespace, "" for every namespace.
    pub namespace: String,
    /// All must match.
    pub requirements: Vec<Requirement>,
}

impl Filter {
    /// A random filter over `namespaces`: often one namespace, often a
    /// selector on the labels the writers flip.
    pub fn random(rng: &mut impl Rng, namespaces: &[String]) -> Filter {
        let namespace = if rng.random_bool(0.4) {
            String::new()
        } else {
            namespaces.choose(rng).cloned().unwrap_or_default()
        };
        let app = *APPS.choose(rng).unwrap_or(&"a");
        let tier = *TIERS.choose(rng).unwrap_or(&"x");
        use Requirement::*;
        let choices: [Vec<Requirement>; 10] = [
            vec![],
            vec![Equals("app", app)],
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
        Filter {
            namespace,
            requirements,
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
        let namespace = key.split_once('/').map_or("", |(ns, _)| ns);
        (self.namespace.is_empty() || self.namespace == namespace)
            && self.requirements.iter().all(|r| r.matches(&obj.labels))
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = if self.namespace.is_empty() {
            "*"
        } else {
            &self.namespace
        };
        write!(f, "ns={ns} selector={:?}", self.label_selector())
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
    fn requirements_follow_kubernetes_semantics() {
        use Requirement::*;
        let none = obj(&[]);
        let a = obj(&[("app", "a")]);
        let ax = obj(&[("app", "a"), ("tier", "x")]);
        let filter = |requirements| Filter {
            namespace: String::new(),
            requirements,
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
            requirements: vec![],
        };
        assert!(scoped.matches("n/x", &none));
        assert!(!scoped.matches("nn/x", &none));
        assert_eq!(
            filter(vec![In("app", vec!["b", "c"]), NotExists("tier")]).label_selector(),
            "app in (b,c),!tier"
        );
    }
}

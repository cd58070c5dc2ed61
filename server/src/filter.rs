//! Which objects a subscriber sees: namespace, label selector and field
//! selector, in Kubernetes' own syntax and meaning.

use std::collections::BTreeMap;

use crate::{error::quote, object::Object};

/// Why a selector was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// The label selector does not parse.
    #[error("invalid label selector {}: {reason}", quote(.selector))]
    Label {
        /// The selector as given.
        selector: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The field selector does not parse or names an unsupported field.
    #[error("invalid field selector {}: {reason}", quote(.selector))]
    Field {
        /// The selector as given.
        selector: String,
        /// What is wrong with it.
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl LabelRequirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = |k: &String| labels.get(k).map(String::as_str);
        match self {
            Self::Equals(k, v) => value(k) == Some(v.as_str()),
            Self::NotEquals(k, v) => value(k) != Some(v.as_str()),
            Self::In(k, vs) => value(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Self::NotIn(k, vs) => !value(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Self::Exists(k) => labels.contains_key(k),
            Self::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Name,
    Namespace,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldRequirement {
    field: Field,
    value: String,
    equal: bool,
}

/// A subscriber's filter. The default matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    namespace: Option<String>,
    labels: Vec<LabelRequirement>,
    fields: Vec<FieldRequirement>,
}

impl Filter {
    /// Builds a filter; empty strings mean "no restriction".
    pub fn new(
        namespace: &str,
        label_selector: &str,
        field_selector: &str,
    ) -> Result<Self, FilterError> {
        Ok(Filter {
            namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
            labels: parse_labels(label_selector).map_err(|reason| FilterError::Label {
                selector: label_selector.to_owned(),
                reason,
            })?,
            fields: parse_fields(field_selector).map_err(|reason| FilterError::Field {
                selector: field_selector.to_owned(),
                reason,
            })?,
        })
    }

    /// Whether `object` passes every part of the filter.
    pub fn matches(&self, object: &Object) -> bool {
        self.namespace
            .as_ref()
            .is_none_or(|ns| *ns == object.namespace)
            && self.labels.iter().all(|r| r.matches(&object.labels))
            && self.fields.iter().all(|r| {
                let actual = match r.field {
                    Field::Name => &object.name,
                    Field::Namespace => &object.namespace,
                };
                (*actual == r.value) == r.equal
            })
    }
}

/// Splits at commas outside parentheses.
fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or("unbalanced ')'")?,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn check_key(key: &str) -> Result<String, String> {
    let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.len() <= 253
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-.".contains(c))
        // A slash with nothing before it ("/name") is an empty prefix,
        // which Kubernetes refuses; a prefix of valid characters never
        // starts with one.
        && !key.starts_with('/');
    if name_ok && prefix_ok {
        Ok(key.to_owned())
    } else {
        Err(format!("{} is not a valid label key", quote(key)))
    }
}

fn check_value(value: &str) -> Result<String, String> {
    let ok = value.is_empty()
        || (value.len() <= 63
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()));
    if ok {
        Ok(value.to_owned())
    } else {
        Err(format!("{} is not a valid label value", quote(value)))
    }
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            format!(
                "expected a parenthesised set of values, found {}",
                quote(rest)
            )
        })?;
    inner.split(',').map(|v| check_value(v.trim())).collect()
}

fn parse_label_requirement(req: &str) -> Result<LabelRequirement, String> {
    let req = req.trim();
    if req.is_empty() {
        return Err("empty requirement".into());
    }
    if let Some(key) = req.strip_prefix('!') {
        return Ok(LabelRequirement::DoesNotExist(check_key(key.trim())?));
    }
    if let Some(open) = req.find('(') {
        let head = req[..open].trim_end();
        let set = parse_set(&req[open..])?;
        if let Some(key) = head.strip_suffix(" notin") {
            return Ok(LabelRequirement::NotIn(check_key(key.trim())?, set));
        }
        if let Some(key) = head.strip_suffix(" in") {
            return Ok(LabelRequirement::In(check_key(key.trim())?, set));
        }
        return Err(format!(
            "expected 'in' or 'notin' before the set in {}",
            quote(req)
        ));
    }
    for (op, negate) in [("!=", true), ("==", false), ("=", false)] {
        if let Some((key, value)) = req.split_once(op) {
            let (key, value) = (check_key(key.trim())?, check_value(value.trim())?);
            return Ok(if negate {
                LabelRequirement::NotEquals(key, value)
            } else {
                LabelRequirement::Equals(key, value)
            });
        }
    }
    Ok(LabelRequirement::Exists(check_key(req)?))
}

fn parse_labels(selector: &str) -> Result<Vec<LabelRequirement>, String> {
    if selector.trim().is_empty() {
        return Ok(Vec::new());
    }
    split_top_level(selector)?
        .into_iter()
        .map(parse_label_requirement)
        .collect()
}

fn parse_fields(selector: &str) -> Result<Vec<FieldRequirement>, String> {
    if selector.trim().is_empty() {
        return Ok(Vec::new());
    }
    selector
        .split(',')
        .map(|req| {
            let (field, value, equal) = [("!=", false), ("==", true), ("=", true)]
                .iter()
                .find_map(|(op, equal)| req.split_once(op).map(|(f, v)| (f, v, *equal)))
                .ok_or_else(|| format!("{} has no operator (=, == or !=)", quote(req)))?;
            let field = match field.trim() {
                "metadata.name" => Field::Name,
                "metadata.namespace" => Field::Namespace,
                other => {
                    return Err(format!(
                        "field {} is not supported; kube-fanout filters on metadata.name and metadata.namespace",
                        quote(other)
                    ));
                }
            };
            Ok(FieldRequirement {
                field,
                value: value.trim().to_owned(),
                equal,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{Transform, TypeMeta};

    fn obj(ns: &str, name: &str, labels: &str) -> Object {
        let raw = format!(
            r#"{{"apiVersion":"","kind":"","metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"1","labels":{labels}}}}}"#
        );
        Object::from_json(&raw, &TypeMeta::default(), Transform::default()).unwrap()
    }

    fn matches(labels: &str, selector: &str) -> bool {
        Filter::new("", selector, "")
            .unwrap()
            .matches(&obj("ns", "a", labels))
    }

    #[test]
    fn label_selectors_follow_kubernetes_semantics() {
        let l = r#"{"app":"web","tier":"front"}"#;
        assert!(matches(l, "app=web"));
        assert!(matches(l, "app==web,tier"));
        assert!(!matches(l, "app!=web"));
        assert!(matches(l, "missing!=x"));
        assert!(matches(l, "app in (db, web)"));
        assert!(!matches(l, "app notin (db,web)"));
        assert!(matches(l, "missing notin (x)"));
        assert!(!matches(l, "missing in (x)"));
        assert!(matches(l, "!missing"));
        assert!(!matches(l, "!app"));
        assert!(matches(l, "example.com/x notin (a),tier=front"));
        assert!(matches(l, ""));
    }

    #[test]
    fn invalid_label_selectors_name_the_fault() {
        for (bad, why) in [
            ("app in (a", "unbalanced"),
            ("app=(x", "unbalanced"),
            ("app==w eb", "not a valid label value"),
            ("a b", "not a valid label key"),
            ("app,", "empty requirement"),
            ("app foo (x)", "'in' or 'notin'"),
        ] {
            let err = Filter::new("", bad, "").unwrap_err().to_string();
            assert!(
                err.contains(why) && err.contains("label selector"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn field_selectors_cover_name_and_namespace_and_refuse_other_fields() {
        let o = obj("ns", "a", "{}");
        let f = |s| Filter::new("", "", s).unwrap().matches(&o);
        assert!(f("metadata.name=a"));
        assert!(f("metadata.namespace==ns,metadata.name!=b"));
        assert!(!f("metadata.name!=a"));
        let err = Filter::new("", "", "spec.nodeName=x")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("spec.nodeName") && err.contains("not supported"),
            "{err}"
        );
        assert!(Filter::new("", "", "metadata.name").is_err());
    }

    #[test]
    fn set_requirements_compare_the_label_with_every_value() {
        let l = r#"{"app":"web"}"#;
        assert!(!matches(l, "app in (db)"), "web is not in (db)");
        assert!(matches(l, "app in (db,web)"));
        assert!(matches(l, "app notin (db)"), "web is not in (db)");
        assert!(!matches(l, "app notin (web)"));
    }

    /// The bounds Kubernetes puts on label keys and values, on both sides.
    #[test]
    fn label_keys_and_values_are_checked_at_their_bounds() {
        let name = "a".repeat(63);
        let prefix = format!("{}.io", "p".repeat(250));
        assert_eq!(prefix.len(), 253);
        for good in [
            name.clone(),
            format!("{prefix}/{name}"),
            format!("k={name}"),
            "k=".into(),
            "a-b_c.9=v-w_x.0".into(),
        ] {
            assert!(Filter::new("", &good, "").is_ok(), "{good}");
        }
        let key = "not a valid label key";
        let value = "not a valid label value";
        for (bad, why) in [
            ("a".repeat(64), key),
            (format!("p{prefix}/a"), key),
            ("Example.com/a".into(), key),
            ("exa_mple.com/a".into(), key),
            ("/a".into(), key),
            ("-a".into(), key),
            ("a-".into(), key),
            (format!("k={}", "a".repeat(64)), value),
            ("k=-v".into(), value),
            ("k=v-".into(), value),
        ] {
            let err = Filter::new("", &bad, "").unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn namespace_restricts() {
        let f = Filter::new("ns", "", "").unwrap();
        assert!(f.matches(&obj("ns", "a", "{}")));
        assert!(!f.matches(&obj("other", "a", "{}")));
    }
}

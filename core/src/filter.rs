//! Which objects a subscriber sees: namespace, label selector and field
//! selector, in Kubernetes' own syntax and meaning.

use std::{collections::BTreeMap, ops::Range, sync::Arc};

use crate::{
    fields::{SelectableFields, Source},
    names::is_dns1123_subdomain,
    object::{Object, namespace_range},
    quote::quote,
};

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
    /// `key>N`: the label's value, read as an integer, is above N.
    GreaterThan(String, i64),
    /// `key<N`: the label's value, read as an integer, is below N.
    LessThan(String, i64),
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
            // As apimachinery: a missing label, or a value that is not an
            // integer (strconv.ParseInt, base 10, 64 bits), does not match.
            Self::GreaterThan(k, n) => integer(value(k)).is_some_and(|v| v > *n),
            Self::LessThan(k, n) => integer(value(k)).is_some_and(|v| v < *n),
        }
    }
}

/// A label value read as an integer, as apimachinery's `strconv.ParseInt(v,
/// 10, 64)` reads it (an optional sign, decimal digits, no spaces).
fn integer(value: Option<&str>) -> Option<i64> {
    value?.parse().ok()
}

/// One term of a field selector, its label resolved for the type.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldRequirement {
    source: Source,
    /// The field's canonical path (`spec.nodeName` for `spec.host`).
    path: String,
    value: String,
    equal: bool,
}

impl FieldRequirement {
    fn matches(&self, object: &Object) -> bool {
        (object.field(self.source) == self.value) == self.equal
    }
}

/// A subscriber's filter. The default matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    namespace: Option<String>,
    labels: Vec<LabelRequirement>,
    fields: Vec<FieldRequirement>,
}

impl Filter {
    /// Builds a filter for a type whose field selectors may name `fields`;
    /// empty strings mean "no restriction".
    pub fn new(
        namespace: &str,
        label_selector: &str,
        field_selector: &str,
        fields: &SelectableFields,
    ) -> Result<Self, FilterError> {
        Ok(Filter {
            namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
            labels: parse_labels(label_selector).map_err(|reason| FilterError::Label {
                selector: label_selector.to_owned(),
                reason,
            })?,
            fields: parse_fields(field_selector, fields).map_err(|reason| FilterError::Field {
                selector: field_selector.to_owned(),
                reason,
            })?,
        })
    }

    /// The exact values the filter requires, as (field path, value): every
    /// object it matches has them (dispatch indexes subscribers by them).
    pub fn pinned(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        let namespace = self
            .namespace
            .iter()
            .map(|ns| ("metadata.namespace", ns.as_str()));
        let fields = self
            .fields
            .iter()
            .filter(|r| r.equal)
            .map(|r| (r.path.as_str(), r.value.as_str()));
        namespace.chain(fields)
    }

    /// The labels the filter requires, as (key, allowed values): `key=value`
    /// and `key==value` (one value) and `key in (values)` give the values,
    /// `key` (the label exists) gives `None`, any value. Every object it
    /// matches has that label, with one of the values when they are given
    /// (dispatch indexes subscribers by them when no field is pinned).
    pub(crate) fn required_labels(
        &self,
    ) -> impl Iterator<Item = (&str, Option<&[String]>)> + Clone {
        self.labels.iter().filter_map(|r| match r {
            LabelRequirement::Equals(key, value) => {
                Some((key.as_str(), Some(std::slice::from_ref(value))))
            }
            LabelRequirement::In(key, values) => Some((key.as_str(), Some(values.as_slice()))),
            LabelRequirement::Exists(key)
            | LabelRequirement::GreaterThan(key, _)
            | LabelRequirement::LessThan(key, _) => Some((key.as_str(), None)),
            _ => None,
        })
    }

    /// Whether `object` passes every part of the filter.
    pub fn matches(&self, object: &Object) -> bool {
        self.namespace
            .as_ref()
            .is_none_or(|ns| *ns == object.namespace)
            && self.matches_candidate(object)
    }

    /// The part of `sorted` (objects in key order, as a snapshot holds
    /// them) that can hold the filter's matches: its namespace's range when
    /// it names one, else all of it. A namespace's snapshot then costs two
    /// binary searches and its own objects, not a pass over the store.
    pub(crate) fn candidates(&self, sorted: &[Arc<Object>]) -> Range<usize> {
        match &self.namespace {
            Some(ns) => namespace_range(sorted, ns),
            None => 0..sorted.len(),
        }
    }

    /// [`Filter::matches`] for an object from [`Filter::candidates`]: its
    /// namespace is already known to match, so only the selectors are
    /// checked.
    pub(crate) fn matches_candidate(&self, object: &Object) -> bool {
        self.labels.iter().all(|r| r.matches(&object.labels))
            && self.fields.iter().all(|r| r.matches(object))
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
    // A DNS-1123 subdomain. A slash with nothing before it ("/name") is an
    // empty prefix, which Kubernetes refuses too.
    let prefix_ok =
        prefix.len() <= 253 && (key.rsplit_once('/').is_none() || is_dns1123_subdomain(prefix));
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
    for op in ["!=", "==", "=", ">", "<"] {
        if let Some((key, value)) = req.split_once(op) {
            let (key, value) = (check_key(key.trim())?, check_value(value.trim())?);
            return Ok(match op {
                "!=" => LabelRequirement::NotEquals(key, value),
                ">" => LabelRequirement::GreaterThan(key, bound(&value)?),
                "<" => LabelRequirement::LessThan(key, bound(&value)?),
                _ => LabelRequirement::Equals(key, value),
            });
        }
    }
    Ok(LabelRequirement::Exists(check_key(req)?))
}

/// The integer a `>` or `<` compares with, which apimachinery requires to
/// parse (an empty value does not).
fn bound(value: &str) -> Result<i64, String> {
    value.parse().map_err(|_| {
        format!(
            "{} is not an integer (the value of '>' and '<' must be one)",
            quote(value)
        )
    })
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

/// Parses a field selector as the API server does (apimachinery's
/// `fields.ParseSelector`, then the type's field label conversion): terms
/// split at commas a backslash does not escape, empty terms skipped, no
/// whitespace trimmed, the operator the first `!=`, `==` or `=` from the
/// left, and the value unescaped (`\\`, `\,`, `\=`). Terms are checked
/// in sorted order, as the API server does, so the same term is reported
/// first.
fn parse_fields(
    selector: &str,
    fields: &SelectableFields,
) -> Result<Vec<FieldRequirement>, String> {
    let mut terms = split_terms(selector);
    terms.sort_unstable();
    let parsed = terms
        .into_iter()
        .filter(|t| !t.is_empty())
        .map(|term| {
            let (label, equal, value) =
                split_term(term).ok_or_else(|| format!("can't understand {}", quote(term)))?;
            Ok((label, equal, unescape(value)?))
        })
        .collect::<Result<Vec<_>, String>>()?;
    parsed
        .into_iter()
        .map(|(label, equal, value)| {
            let source = fields.resolve(label)?;
            Ok(FieldRequirement {
                source,
                path: fields.path(source).unwrap_or(label).to_owned(),
                value,
                equal,
            })
        })
        .collect()
}

/// The object name a List or Watch is narrowed to, as the API server reads
/// it for authorization (its request info): the value of the first
/// `metadata.name` term testing equality, read with the same parser as the
/// filter (escapes undone, nothing trimmed), so the name authorized is the
/// name the filter then selects. Empty when there is none or the selector
/// does not parse (the request then fails on its filter).
pub fn selected_name(field_selector: &str) -> String {
    split_terms(field_selector)
        .into_iter()
        .filter_map(split_term)
        .find(|(label, equal, _)| *equal && *label == "metadata.name")
        .and_then(|(_, _, value)| unescape(value).ok())
        .unwrap_or_default()
}

/// Splits at commas not escaped by a backslash (the escape is kept).
fn split_terms(selector: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut start, mut escaped) = (0, false);
    for (i, c) in selector.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// A term's label, whether it tests equality, and its raw value.
fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    term.char_indices().find_map(|(i, _)| {
        let rest = &term[i..];
        [("!=", false), ("==", true), ("=", true)]
            .into_iter()
            .find(|(op, _)| rest.starts_with(op))
            .map(|(op, equal)| (&term[..i], equal, &rest[op.len()..]))
    })
}

/// A term's value with its escapes undone; a bare `,` or `=` is refused.
fn unescape(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => {
                    return Err(format!(
                        "invalid escape sequence \\{e} in value {}",
                        quote(value)
                    ));
                }
                None => return Err(format!("value {} ends in a lone backslash", quote(value))),
            },
            ',' | '=' => {
                return Err(format!(
                    "unescaped {c:?} in value {} (escape it as \\{c})",
                    quote(value)
                ));
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{Transform, TypeMeta};

    #[test]
    fn the_authorized_name_is_the_name_the_filter_selects() {
        assert_eq!(selected_name("metadata.name=a"), "a");
        assert_eq!(selected_name("metadata.namespace=x,metadata.name==b"), "b");
        assert_eq!(selected_name("metadata.name!=a"), "");
        assert_eq!(selected_name("metadata.namespace=a"), "");
        assert_eq!(selected_name(""), "");
        // Escapes are undone, an escaped comma does not split the term,
        // and a padded label is not metadata.name (the filter refuses it).
        assert_eq!(selected_name(r"metadata.name=a\,b"), "a,b");
        assert_eq!(selected_name(r"metadata.name=a\\b"), r"a\b");
        // An invalid escape: no name (the filter refuses the selector).
        assert_eq!(selected_name(r"metadata.name=a\b"), "");
        assert_eq!(selected_name("metadata.name =a"), "");
        let filter =
            Filter::new("", "", r"metadata.name=a\,b", &SelectableFields::default()).unwrap();
        assert!(filter.matches(&obj("ns", "a,b", "{}")));
    }

    /// A namespace's candidates are exactly its objects, whatever sorts
    /// beside them: namespaces that extend its name (`a-b` sorts before
    /// `a/`, `a0` and `ab` after), cluster-scoped keys equal to it and to
    /// the range's end (`a0`), and the ends of the list; the selectors are
    /// still applied within.
    #[test]
    fn a_namespaces_candidates_are_its_objects_and_no_others() {
        let mut sorted: Vec<Arc<Object>> = [
            ("", "a", r#"{"x":"1"}"#),
            ("", "a0", r#"{"x":"1"}"#),
            ("a", "p", r#"{"x":"1"}"#),
            ("a", "q", r#"{"x":"2"}"#),
            ("a-b", "p", r#"{"x":"1"}"#),
            ("a0", "p", r#"{"x":"1"}"#),
            ("ab", "p", r#"{"x":"1"}"#),
            ("b", "p", r#"{"x":"1"}"#),
            ("0", "p", r#"{"x":"1"}"#),
            ("z", "p", r#"{"x":"1"}"#),
        ]
        .iter()
        .map(|(ns, name, labels)| Arc::new(obj(ns, name, labels)))
        .collect();
        sorted.sort_by(|a, b| a.key.cmp(&b.key));
        let fields = SelectableFields::default();
        for ns in ["", "a", "a-b", "a0", "ab", "b", "0", "z", "c", "aa"] {
            for selector in ["", "x=1"] {
                let filter = Filter::new(ns, selector, "", &fields).unwrap();
                let by_range: Vec<&str> = sorted[filter.candidates(&sorted)]
                    .iter()
                    .filter(|o| filter.matches_candidate(o))
                    .map(|o| o.key.as_str())
                    .collect();
                let by_pass: Vec<&str> = sorted
                    .iter()
                    .filter(|o| filter.matches(o))
                    .map(|o| o.key.as_str())
                    .collect();
                assert_eq!(by_range, by_pass, "namespace {ns:?}, selector {selector:?}");
            }
        }
        let a = Filter::new("a", "", "", &fields).unwrap();
        let keys: Vec<&str> = sorted[a.candidates(&sorted)]
            .iter()
            .map(|o| o.key.as_str())
            .collect();
        assert_eq!(keys, ["a/p", "a/q"]);
    }

    fn obj(ns: &str, name: &str, labels: &str) -> Object {
        let raw = format!(
            r#"{{"apiVersion":"","kind":"","metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"1","labels":{labels}}}}}"#
        );
        Object::from_json(
            &raw,
            &TypeMeta::default(),
            &SelectableFields::default(),
            Transform::default(),
        )
        .unwrap()
    }

    fn matches(labels: &str, selector: &str) -> bool {
        Filter::new("", selector, "", &SelectableFields::default())
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

    /// apimachinery's Gt and Lt: the label's value read as a 64-bit
    /// integer, compared strictly; a missing label or a value that is not
    /// an integer never matches, whatever the operator; spaces around the
    /// operator are allowed.
    #[test]
    fn greater_and_less_than_compare_the_labels_integer_value() {
        let l = r#"{"n":"5","z":"007","big":"9223372036854775807","word":"five","empty":""}"#;
        assert!(matches(l, "n>4"));
        assert!(!matches(l, "n>5"));
        assert!(matches(l, "n<6"));
        assert!(!matches(l, "n<5"));
        assert!(matches(l, "n > 4 , n < 6"));
        assert!(matches(l, "z>6"), "leading zeros are an integer");
        assert!(matches(l, "z<008"));
        assert!(matches(l, "big>9223372036854775806"));
        for never in [
            "missing>0",
            "missing<0",
            "word>0",
            "word<0",
            "empty>0",
            "empty<0",
        ] {
            assert!(!matches(l, never), "{never}");
        }
        for bad in [
            "n>",
            "n<",
            "n>x",
            "n>-1",
            "n>+1",
            "n>1.5",
            "n>99999999999999999999",
        ] {
            let err = Filter::new("", bad, "", &SelectableFields::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("not an integer") || err.contains("not a valid label value"),
                "{bad}: {err}"
            );
        }
        for bad in ["n>=1", "n<=1", "n>1>2", "!n>1", "n<>1"] {
            assert!(
                Filter::new("", bad, "", &SelectableFields::default()).is_err(),
                "{bad}"
            );
        }
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
            let err = Filter::new("", bad, "", &SelectableFields::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(why) && err.contains("label selector"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn field_selectors_on_metadata_work_for_every_type() {
        let o = obj("ns", "a", "{}");
        let f = |s| {
            Filter::new("", "", s, &SelectableFields::default())
                .unwrap()
                .matches(&o)
        };
        assert!(f("metadata.name=a"));
        assert!(f("metadata.namespace==ns,metadata.name!=b"));
        assert!(!f("metadata.name!=a"));
        assert!(f(",metadata.name=a,,"));
        assert!(f(""));
        let err = Filter::new("", "", "spec.nodeName=x", &SelectableFields::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(r#""spec.nodeName" is not a known field selector"#),
            "{err}"
        );
    }

    fn pod(spec: &str) -> Object {
        let raw = format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p","namespace":"ns","resourceVersion":"1"}},"spec":{spec}}}"#
        );
        let meta = TypeMeta {
            api_version: "v1".into(),
            kind: "Pod".into(),
        };
        Object::from_json(&raw, &meta, &pod_fields(), Transform::default()).unwrap()
    }

    fn pod_fields() -> SelectableFields {
        SelectableFields::builtin("v1", "Pod").unwrap()
    }

    fn pod_filter(selector: &str) -> Result<Filter, String> {
        Filter::new("", "", selector, &pod_fields()).map_err(|e| e.to_string())
    }

    #[test]
    fn field_selectors_read_the_types_own_fields() {
        let p = pod(r#"{"nodeName":"n1","hostNetwork":true}"#);
        let f = |s| pod_filter(s).unwrap().matches(&p);
        assert!(f("spec.nodeName=n1"));
        assert!(f("spec.host=n1"));
        assert!(!f("spec.nodeName!=n1"));
        assert!(f("spec.hostNetwork=true,status.phase="));
        assert!(!f("spec.hostNetwork=false"));
        assert!(f("status.podIPs="));
        assert!(!f("status.podIPs=10.0.0.1"));
        assert!(f("spec.nodeName!=n2,metadata.namespace=ns"));
    }

    #[test]
    fn field_selectors_parse_as_the_api_server_parses_them() {
        let p = pod(r#"{"nodeName":"a,b=c\\d"}"#);
        let f = |s| pod_filter(s).unwrap().matches(&p);
        assert!(f(r"spec.nodeName=a\,b\=c\\d"));
        // Neither side is trimmed: a space is part of the value.
        assert!(!f(r"spec.nodeName= a\,b\=c\\d"));
        assert!(pod_filter(" spec.nodeName=x").is_err());
        // The first operator from the left splits the term.
        assert!(f(r"spec.nodeName!=a\,b\=c\\d\=x"));
        for (bad, why) in [
            ("spec.nodeName", "can't understand"),
            (r"spec.nodeName=a\x", r"invalid escape sequence \x"),
            (r"spec.nodeName=a\", "lone backslash"),
            ("spec.nodeName=a=b", "unescaped '='"),
        ] {
            let err = pod_filter(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        // Terms are checked in sorted order, so the same one is named first.
        let err = pod_filter("z=1,spec.nope=2").unwrap_err();
        assert!(err.contains(r#"not supported: "spec.nope""#), "{err}");
        // A term that does not parse is reported before any unknown label.
        let err = pod_filter("a=1,zz").unwrap_err();
        assert!(err.contains("can't understand"), "{err}");
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
            assert!(
                Filter::new("", &good, "", &SelectableFields::default()).is_ok(),
                "{good}"
            );
        }
        let key = "not a valid label key";
        let value = "not a valid label value";
        for (bad, why) in [
            ("a".repeat(64), key),
            (format!("p{prefix}/a"), key),
            ("Example.com/a".into(), key),
            ("exa_mple.com/a".into(), key),
            ("/a".into(), key),
            ("-a.com/x".into(), key),
            ("a-.com/x".into(), key),
            ("a..com/x".into(), key),
            ("-a".into(), key),
            ("a-".into(), key),
            (format!("k={}", "a".repeat(64)), value),
            ("k=-v".into(), value),
            ("k=v-".into(), value),
        ] {
            let err = Filter::new("", &bad, "", &SelectableFields::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn namespace_restricts() {
        let f = Filter::new("ns", "", "", &SelectableFields::default()).unwrap();
        assert!(f.matches(&obj("ns", "a", "{}")));
        assert!(!f.matches(&obj("other", "a", "{}")));
    }
}

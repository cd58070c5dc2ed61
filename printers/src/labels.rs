//! Labels and label selectors printed as apimachinery prints them:
//! `labels.FormatLabels` of a map and `metav1.FormatLabelSelector` (or
//! `LabelSelectorAsSelector(..).String()`) of a `LabelSelector`.

use crate::object::Field;

/// `labels.Set(m).String()`: the `key=value` pairs, sorted as strings,
/// joined by commas.
pub(crate) fn set_string(map: Field<'_>) -> String {
    let mut pairs: Vec<String> = map
        .string_map()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    pairs.sort_unstable();
    pairs.join(",")
}

/// `labels.FormatLabels`: [`set_string`], or "<none>" for no labels.
pub(crate) fn format_labels(map: Field<'_>) -> String {
    let s = set_string(map);
    if s.is_empty() { "<none>".to_owned() } else { s }
}

/// What `metav1.LabelSelectorAsSelector` makes of a selector.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Selector {
    /// The selector's `String()`: "" for a nil selector (labels.Nothing)
    /// or an empty one (labels.Everything).
    Valid(String),
    /// The selector does not convert (an unknown operator, a key or value
    /// that is not a label's, values where none may be).
    Invalid,
}

/// `metav1.LabelSelectorAsSelector(selector)`, as its `String()`.
pub(crate) fn selector(selector: Field<'_>) -> Selector {
    if !selector.is_set() {
        return Selector::Valid(String::new());
    }
    // (key, rendered requirement), in the order LabelSelectorAsSelector
    // appends them: matchLabels, then matchExpressions.
    let mut requirements: Vec<(String, String)> = Vec::new();
    for (key, value) in selector.at(&["matchLabels"]).string_map() {
        if !is_label_key(key) || !is_label_value(value) {
            return Selector::Invalid;
        }
        requirements.push((key.to_owned(), format!("{key}={value}")));
    }
    for expression in selector.at(&["matchExpressions"]).items() {
        let key = expression.at(&["key"]).str();
        let values: Vec<&str> = expression.at(&["values"]).items().map(Field::str).collect();
        if !is_label_key(key) || !values.iter().all(|v| is_label_value(v)) {
            return Selector::Invalid;
        }
        let rendered = match expression.at(&["operator"]).str() {
            "In" | "NotIn" if values.is_empty() => return Selector::Invalid,
            op @ ("In" | "NotIn") => {
                let mut sorted = values.clone();
                sorted.sort_unstable();
                let word = if op == "In" { "in" } else { "notin" };
                format!("{key} {word} ({})", sorted.join(","))
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => return Selector::Invalid,
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => return Selector::Invalid,
        };
        requirements.push((key.to_owned(), rendered));
    }
    // labels.NewSelector().Add sorts by key; Go's sort.Sort is an
    // insertion sort for the handful of requirements a selector has, so
    // ties keep their order, as here.
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    Selector::Valid(
        requirements
            .into_iter()
            .map(|(_, r)| r)
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// `metav1.FormatLabelSelector`: the selector's string, "<none>" when it is
/// empty, "<error>" when it does not convert.
pub(crate) fn format_label_selector(field: Field<'_>) -> String {
    match selector(field) {
        Selector::Valid(s) if s.is_empty() => "<none>".to_owned(),
        Selector::Valid(s) => s,
        Selector::Invalid => "<error>".to_owned(),
    }
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?` of at most 63 bytes.
fn is_label_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A DNS-1123 subdomain: dot-separated labels of `[a-z0-9-]` that start
/// and end alphanumeric, at most 253 bytes.
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// `content.IsLabelKey`: a name with an optional DNS subdomain prefix.
fn is_label_key(key: &str) -> bool {
    match key.split_once('/') {
        None => is_label_name(key),
        Some((prefix, name)) => {
            !name.contains('/')
                && !prefix.is_empty()
                && is_dns1123_subdomain(prefix)
                && is_label_name(name)
        }
    }
}

/// `validation.IsValidLabelValue`: empty, or a label name.
fn is_label_value(value: &str) -> bool {
    value.is_empty() || is_label_name(value)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn formatted(selector: Value) -> String {
        format_label_selector(Field::of(&selector))
    }

    #[test]
    fn label_pairs_are_sorted_as_strings_not_by_key() {
        let labels = json!({"a": "2", "a.b": "1", "z": ""});
        assert_eq!(format_labels(Field::of(&labels)), "a.b=1,a=2,z=");
        assert_eq!(format_labels(Field::of(&json!({}))), "<none>");
    }

    #[test]
    fn selectors_print_as_apimachinery_prints_them() {
        assert_eq!(formatted(json!({})), "<none>");
        assert_eq!(
            formatted(json!({
                "matchLabels": {"tier": "web", "app": "x"},
                "matchExpressions": [
                    {"key": "app", "operator": "In", "values": ["z", "b"]},
                    {"key": "env", "operator": "NotIn", "values": ["prod"]},
                    {"key": "canary", "operator": "DoesNotExist"},
                    {"key": "example.com/owner", "operator": "Exists"},
                ],
            })),
            "app=x,app in (b,z),!canary,env notin (prod),example.com/owner,tier=web"
        );
    }

    #[test]
    fn selectors_that_do_not_convert_print_as_an_error() {
        for bad in [
            json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
            json!({"matchLabels": {"-a": "x"}}),
            json!({"matchLabels": {"a/b/c": "x"}}),
            json!({"matchLabels": {"Example.com/a": "x"}}),
            json!({"matchLabels": {"a": "x y"}}),
        ] {
            assert_eq!(formatted(bad.clone()), "<error>", "{bad}");
        }
    }
}

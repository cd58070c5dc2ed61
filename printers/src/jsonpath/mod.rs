//! client-go's JSONPath (`k8s.io/client-go/util/jsonpath`), as the API
//! server's custom resource table convertor uses it: a column's path
//! parsed as the template `{<jsonPath>}`, missing keys allowed, evaluated
//! over the object, its first result printed or typed by the column.
//! `range`/`end` blocks are refused: the convertor never needs them and
//! client-go's handling of them depends on evaluation state this port
//! does not keep.

mod eval;
mod parser;

#[cfg(test)]
pub(crate) use eval::MAX_VALUES;
pub(crate) use eval::{Item, print};
use parser::Node;
use serde_json::Value;

/// A parsed column path.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JsonPath {
    nodes: Vec<Node>,
}

/// Why a path is not used: client-go does not parse it, or it has a
/// `range` or `end` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unusable(pub(crate) String);

fn has_block(nodes: &[Node]) -> bool {
    nodes.iter().any(|node| match node {
        Node::Identifier(name) => name == "range" || name == "end",
        Node::List(nodes) => has_block(nodes),
        Node::Filter { left, right, .. } => has_block(left) || has_block(right),
        Node::Union(parts) => parts.iter().any(|p| has_block(p)),
        _ => false,
    })
}

/// The longest column path taken, in bytes: real ones are a few dozen
/// (`.status.conditions[?(@.type=="Ready")].status` is 45); the parser,
/// as client-go's, recurses once per `{..}` action, so the length bounds
/// its stack too.
pub(crate) const MAX_PATH_BYTES: usize = 512;

/// A path visited more than [`eval::MAX_VALUES`] values in one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooMany;

impl JsonPath {
    /// The path of a printer column, parsed as the convertor parses it.
    pub(crate) fn column(json_path: &str) -> Result<JsonPath, Unusable> {
        if json_path.len() > MAX_PATH_BYTES {
            return Err(Unusable(format!("longer than {MAX_PATH_BYTES} bytes")));
        }
        let nodes = parser::parse(&format!("{{{json_path}}}")).map_err(|e| Unusable(e.0))?;
        if has_block(&nodes) {
            return Err(Unusable("a range or end block".to_owned()));
        }
        Ok(JsonPath { nodes })
    }

    /// The first value the path finds in `data`, as the convertor takes
    /// it: None if it finds nothing or evaluating fails; an error if it
    /// visits too many values to be evaluated here.
    pub(crate) fn first<'a>(&self, data: &'a Value) -> Result<Option<Item<'a>>, TooMany> {
        match eval::find_results(&self.nodes, data) {
            Ok(results) => Ok(results
                .into_iter()
                .next()
                .and_then(|r| r.into_iter().next())),
            Err(eval::EvalError::Failed(_)) => Ok(None),
            Err(eval::EvalError::TooMany) => Err(TooMany),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn first(path: &str, data: &Value) -> Option<String> {
        JsonPath::column(path)
            .unwrap()
            .first(data)
            .unwrap()
            .map(|item| print(&item))
    }

    #[test]
    fn column_paths_find_what_client_go_finds() {
        let data = json!({
            "spec": {"replicas": 3, "ratio": 0.5, "big": 1.5e7, "on": true, "none": null, "tags": ["a", "b", "c"],
                     "labels": {"k": "v", "a": "<b>"}},
            "status": {"conditions": [
                {"type": "Synced", "status": "False"},
                {"type": "Ready", "status": "True", "weight": 2},
            ]},
        });
        assert_eq!(first(".spec.replicas", &data).as_deref(), Some("3"));
        assert_eq!(first(".spec.ratio", &data).as_deref(), Some("0.5"));
        assert_eq!(first(".spec.big", &data).as_deref(), Some("1.5e+07"));
        assert_eq!(first(".spec.on", &data).as_deref(), Some("true"));
        assert_eq!(first(".spec.none", &data).as_deref(), Some("<no value>"));
        assert_eq!(first(".spec.missing", &data), None);
        assert_eq!(
            first(".spec.tags", &data).as_deref(),
            Some(r#"["a","b","c"]"#)
        );
        assert_eq!(
            first(".spec.labels", &data).as_deref(),
            Some(r#"{"a":"\u003cb\u003e","k":"v"}"#)
        );
        assert_eq!(first(".spec.tags[1]", &data).as_deref(), Some("b"));
        assert_eq!(first(".spec.tags[-1]", &data).as_deref(), Some("c"));
        assert_eq!(
            first(".spec.tags[5]", &data),
            None,
            "out of bounds is an error, so no value"
        );
        assert_eq!(first(".spec.tags[1:1]", &data), None);
        assert_eq!(
            first(r#".status.conditions[?(@.type=="Ready")].status"#, &data).as_deref(),
            Some("True")
        );
        assert_eq!(
            first(".status.conditions[?(@.weight>1)].type", &data).as_deref(),
            Some("Ready")
        );
        assert_eq!(
            first(".status.conditions[?(@.weight)].type", &data).as_deref(),
            Some("Ready")
        );
        assert_eq!(
            first(".status.conditions[?(@.weight>1.5)].type", &data),
            None,
            "int against float errs"
        );
        assert_eq!(
            first(".status.conditions[*].type", &data).as_deref(),
            Some("Synced")
        );
        assert_eq!(
            first("..status", &data).as_deref(),
            Some(
                r#"{"conditions":[{"status":"False","type":"Synced"},{"status":"True","type":"Ready","weight":2}]}"#
            )
        );
        assert_eq!(
            first(".spec.x}{.spec.replicas", &data),
            None,
            "the first of two actions finds nothing"
        );
    }

    #[test]
    fn paths_are_taken_up_to_their_length_bound_and_nested_filters_refused_as_client_go_refuses_them()
     {
        let longest = format!(".{}", "a".repeat(MAX_PATH_BYTES - 1));
        assert!(JsonPath::column(&longest).is_ok());
        assert_eq!(
            JsonPath::column(&format!("{longest}b")),
            Err(Unusable("longer than 512 bytes".to_owned()))
        );
        let nested = |n: usize| format!(".x{}.y{}", "[?(@.x".repeat(n), ")]".repeat(n));
        // client-go ends a filter at its first `)`, so a filter inside a
        // filter is never whole: "unterminated filter" (as go run of
        // k8s.io/client-go/util/jsonpath v0.36.3 answers for nested(2)).
        let unterminated = Err(Unusable("unterminated filter".to_owned()));
        assert_eq!(JsonPath::column(&nested(2)), unterminated);
        assert_eq!(JsonPath::column(&nested(parser::MAX_NESTING)), unterminated);
    }

    #[test]
    fn paths_client_go_refuses_or_this_port_does_not_take_are_unusable() {
        assert!(JsonPath::column(".spec[").is_err());
        assert!(JsonPath::column(".items}{range .x}{.y}{end").is_err());
    }
}

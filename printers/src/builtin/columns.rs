//! The column definitions of the API server's convertors, as it writes them
//! (the JSON of each `[]metav1.TableColumnDefinition`), generated from
//! k8s.io/kubernetes at the control plane's version by
//! `tests/controlplane/printercolumns` (which says how to regenerate
//! `columns.json`); keys are the Go types the printers take.

use std::{collections::HashMap, sync::LazyLock};

use serde_json::value::RawValue;

static COLUMNS: LazyLock<HashMap<&'static str, &'static RawValue>> = LazyLock::new(|| {
    // Generated, checked in, and read by a unit test: it parses.
    serde_json::from_str(include_str!("columns.json"))
        .expect("columns.json is a JSON object of column lists")
});

/// The column definitions' JSON for the convertor `key`.
///
/// # Panics
///
/// If `key` is not in `columns.json`: keys are constants of this crate,
/// each one read by a unit test.
pub(crate) fn get(key: &str) -> &'static str {
    COLUMNS
        .get(key)
        .unwrap_or_else(|| panic!("no column definitions for {key} in columns.json"))
        .get()
}

/// A description custom resources' Tables take from ObjectMeta ("name",
/// "creationTimestamp"), as a JSON string.
pub(crate) fn object_meta_description(field: &str) -> &'static str {
    get(&format!("ObjectMeta.{field}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_columns_parse() {
        assert!(COLUMNS.len() > 50);
        assert!(get("*core.Pod").starts_with(r#"[{"name":"Name","type":"string","format":"name""#));
        assert!(object_meta_description("name").starts_with("\"Name must be unique"));
    }
}

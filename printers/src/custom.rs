//! Custom resources' Tables, as apiextensions-apiserver's table convertor
//! prints them: a Name column, then the served version's
//! additionalPrinterColumns (or, when it declares none, an Age column of
//! the creation timestamp), each cell typed by its column.

use serde::Deserialize;
use serde_json::Value;

use crate::{
    builtin::columns::object_meta_description,
    error::PrinterError,
    json::{Number, write_str},
    jsonpath::{Item, JsonPath, TooMany, print},
    table::{Cell, Row},
    time::{Clock, parse_rfc3339},
};

/// One of a CRD version's `additionalPrinterColumns`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PrinterColumn {
    /// The column's name.
    pub name: String,
    /// `integer`, `number`, `string`, `boolean` or `date`.
    #[serde(rename = "type")]
    pub column_type: String,
    /// The OpenAPI format (`name`, `int32`, `byte`, ..), shown to clients.
    pub format: String,
    /// The description ("" for the API server's default one).
    pub description: String,
    /// 0 for the default output, higher for `-o wide`.
    pub priority: i32,
    /// The simple JSONPath of the value (`.spec.replicas`).
    #[serde(rename = "jsonPath")]
    pub json_path: String,
}

/// A custom resource type's Table: its column definitions as the API
/// server writes them, and each column's path.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Custom {
    pub(crate) columns: String,
    paths: Vec<(JsonPath, String)>,
}

/// `serveDefaultColumnsIfEmpty`'s column, described as ObjectMeta's
/// creationTimestamp.
fn default_age() -> PrinterColumn {
    PrinterColumn {
        name: "Age".to_owned(),
        column_type: "date".to_owned(),
        description: serde_json::from_str(object_meta_description("creationTimestamp"))
            .unwrap_or_default(),
        json_path: ".metadata.creationTimestamp".to_owned(),
        ..PrinterColumn::default()
    }
}

impl Custom {
    /// The convertor of `columns` (a version's additionalPrinterColumns).
    pub(crate) fn new(columns: &[PrinterColumn]) -> Result<Custom, PrinterError> {
        let defaulted;
        let columns = if columns.is_empty() {
            defaulted = [default_age()];
            &defaulted[..]
        } else {
            columns
        };
        let mut json =
            String::from(r#"[{"name":"Name","type":"string","format":"name","description":"#);
        json.push_str(object_meta_description("name"));
        json.push_str(r#","priority":0}"#);
        let mut paths = Vec::with_capacity(columns.len());
        for (index, column) in columns.iter().enumerate() {
            let path =
                JsonPath::column(&column.json_path).map_err(|unusable| PrinterError::Column {
                    index,
                    reason: format!("its JSONPath is not printed here: {}", unusable.0),
                })?;
            json.push_str(",{\"name\":");
            write_str(&mut json, &column.name);
            json.push_str(",\"type\":");
            write_str(&mut json, &column.column_type);
            json.push_str(",\"format\":");
            write_str(&mut json, &column.format);
            json.push_str(",\"description\":");
            if !column.description.is_empty() {
                write_str(&mut json, &column.description);
            } else {
                write_str(
                    &mut json,
                    &format!(
                        "Custom resource definition column (in JSONPath format): {}",
                        column.json_path
                    ),
                );
            }
            json.push_str(&format!(",\"priority\":{}}}", column.priority));
            paths.push((path, column.column_type.clone()));
        }
        json.push(']');
        Ok(Custom {
            columns: json,
            paths,
        })
    }

    /// The row of one custom resource; an error if a column's path visits
    /// too many of its values to be evaluated here.
    pub(crate) fn row(&self, object: &Value, clock: Clock) -> Result<Row, PrinterError> {
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut cells = vec![Cell::from(name)];
        for (path, column_type) in &self.paths {
            let first = path.first(object).map_err(|TooMany| {
                PrinterError::Unprintable(
                    "a printer column's JSONPath visits too many of the object's values",
                )
            })?;
            let cell = match first {
                None => Cell::Null,
                Some(item) if column_type == "string" => Cell::Str(print(&item)),
                Some(item) => typed_cell(column_type, &item, clock),
            };
            cells.push(cell);
        }
        Ok(Row::new(cells))
    }
}

/// `cellForJSONValue`: the value as the column's type, nil when it is not
/// of it.
fn typed_cell(column_type: &str, item: &Item<'_>, clock: Clock) -> Cell {
    let number = match item {
        Item::Data(Value::Number(n)) => Some(Number::of(n)),
        _ => None,
    };
    match (column_type, number, item) {
        ("integer", Some(Number::Int(i)), _) => Cell::Int(i),
        ("integer", Some(Number::Float(f)), _) => Cell::Int(go_float_to_int64(f)),
        ("number", Some(Number::Int(i)), _) => Cell::Float(i as f64),
        ("number", Some(Number::Float(f)), _) => Cell::Float(f),
        ("boolean", _, Item::Data(Value::Bool(b)) | Item::Bool(b)) => Cell::Bool(*b),
        ("date", _, Item::Data(Value::String(s)) | Item::Text(s)) => date(s, clock),
        _ => Cell::Null,
    }
}

/// Go's `int64(f)` on amd64: truncated toward zero, and the "integer
/// indefinite" value for what int64 cannot hold.
fn go_float_to_int64(f: f64) -> i64 {
    if f.is_nan() || !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f) {
        i64::MIN
    } else {
        f as i64
    }
}

/// A date column's cell: "<unknown>" for "", "null" and the zero time,
/// "<invalid>" for what is not RFC 3339, else the age.
fn date(s: &str, clock: Clock) -> Cell {
    if s.is_empty() || s == "null" {
        return "<unknown>".into();
    }
    match parse_rfc3339(s) {
        None => "<invalid>".into(),
        Some(t) => clock.age(Some(t)).into(),
    }
}

/// The additionalPrinterColumns of `version` in a CustomResourceDefinition's
/// JSON.
pub(crate) fn crd_columns(crd: &str, version: &str) -> Result<Vec<PrinterColumn>, PrinterError> {
    #[derive(Deserialize)]
    struct Crd {
        spec: Spec,
    }
    #[derive(Deserialize)]
    struct Spec {
        versions: Vec<Version>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Version {
        name: String,
        #[serde(default)]
        additional_printer_columns: Vec<PrinterColumn>,
    }
    let no_version = || PrinterError::NoSuchVersion {
        version: version.chars().take(64).collect(),
    };
    let crd: Crd = serde_json::from_str(crd).map_err(|_| no_version())?;
    crd.spec
        .versions
        .into_iter()
        .find(|v| v.name == version)
        .map(|v| v.additional_printer_columns)
        .ok_or_else(no_version)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use serde_json::json;

    use super::*;

    fn column(name: &str, column_type: &str, json_path: &str) -> PrinterColumn {
        PrinterColumn {
            name: name.to_owned(),
            column_type: column_type.to_owned(),
            json_path: json_path.to_owned(),
            ..PrinterColumn::default()
        }
    }

    #[test]
    fn cells_take_their_columns_types_as_the_convertor_does() {
        let custom = Custom::new(&[
            column("I", "integer", ".spec.n"),
            column("IF", "integer", ".spec.f"),
            column("N", "number", ".spec.n"),
            column("B", "boolean", ".spec.b"),
            column("BS", "boolean", ".spec.s"),
            column("S", "string", ".spec.n"),
            column("D", "date", ".spec.when"),
            column("DI", "date", ".spec.s"),
            column("M", "integer", ".spec.missing"),
        ])
        .unwrap();
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let object = json!({"metadata": {"name": "x"}, "spec": {
            "n": 7, "f": -2.9, "b": true, "s": "yes", "when": "2027-01-15T02:00:00Z",
        }});
        let row = custom.row(&object, Clock::at(now)).unwrap();
        assert_eq!(
            row.cells,
            vec![
                Cell::from("x"),
                Cell::Int(7),
                Cell::Int(-2),
                Cell::Float(7.0),
                Cell::Bool(true),
                Cell::Null,
                Cell::from("7"),
                Cell::from("6h"),
                Cell::from("<invalid>"),
                Cell::Null,
            ]
        );
    }

    #[test]
    fn a_column_past_the_path_bounds_is_refused_naming_the_bound() {
        let long = format!(".spec{}", ".a".repeat(260));
        assert!(long.len() > crate::jsonpath::MAX_PATH_BYTES);
        let refused = Custom::new(&[column("A", "string", ".a"), column("L", "string", &long)]);
        assert_eq!(
            refused,
            Err(PrinterError::Column {
                index: 1,
                reason: "its JSONPath is not printed here: longer than 512 bytes".to_owned(),
            })
        );
    }

    #[test]
    fn a_path_visiting_too_many_values_makes_the_object_unprintable() {
        let custom = Custom::new(&[
            column("First", "integer", ".spec.items[0].n"),
            column("Any", "string", "..n"),
        ])
        .unwrap();
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let small = json!({"metadata": {"name": "x"}, "spec": {"items": [{"n": 1}, {"n": 2}]}});
        assert_eq!(
            custom.row(&small, Clock::at(now)).unwrap().cells,
            vec![Cell::from("x"), Cell::Int(1), Cell::from("1")]
        );
        let items: Vec<Value> = (0..crate::jsonpath::MAX_VALUES / 2)
            .map(|n| json!({"n": n}))
            .collect();
        let big = json!({"metadata": {"name": "x"}, "spec": {"items": items}});
        assert!(matches!(
            custom.row(&big, Clock::at(now)),
            Err(PrinterError::Unprintable(_))
        ));
    }

    #[test]
    fn a_version_without_columns_gets_an_age_column() {
        let custom = Custom::new(&[]).unwrap();
        let columns: Vec<Value> = serde_json::from_str(&custom.columns).unwrap();
        assert_eq!(columns.len(), 2);
        assert_eq!(columns[1]["name"], "Age");
        assert_eq!(columns[1]["type"], "date");
        assert!(
            columns[1]["description"]
                .as_str()
                .unwrap()
                .starts_with("CreationTimestamp is a timestamp")
        );
    }

    #[test]
    fn a_declared_column_without_description_gets_the_json_path_one() {
        let custom = Custom::new(&[
            column("Age", "date", ".metadata.creationTimestamp"),
            column("R", "integer", ".spec.r"),
        ])
        .unwrap();
        let columns: Vec<Value> = serde_json::from_str(&custom.columns).unwrap();
        assert_eq!(
            columns[1]["description"],
            "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp"
        );
    }

    #[test]
    fn columns_are_read_from_the_crd_version_served() {
        let crd = json!({"spec": {"versions": [
            {"name": "v1", "additionalPrinterColumns": [{"name": "R", "type": "integer", "jsonPath": ".spec.r", "priority": 1}]},
            {"name": "v2"},
        ]}})
        .to_string();
        assert_eq!(
            crd_columns(&crd, "v1").unwrap(),
            vec![PrinterColumn {
                priority: 1,
                ..column("R", "integer", ".spec.r")
            }]
        );
        assert_eq!(crd_columns(&crd, "v2").unwrap(), vec![]);
        assert!(crd_columns(&crd, "v3").is_err());
    }
}

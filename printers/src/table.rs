//! A `metav1.Table` written as the API server writes it: kind and
//! apiVersion, the list metadata, the column definitions (or `null`), and
//! the rows with their cells, conditions and object as `includeObject`
//! asks.

use std::fmt::Write as _;

use serde_json::Value;

use crate::{
    IncludeObject, TableOptions,
    error::PrinterError,
    json::{Number, write_compact, write_f64, write_str},
    metadata::{Annotations, write_partial_object_metadata},
};

/// One cell, of the Go type the API server's printer puts in it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    /// A string.
    Str(String),
    /// An int64 (or int32).
    Int(i64),
    /// A float64 (a custom resource's "number" column).
    Float(f64),
    /// A bool.
    Bool(bool),
    /// nil (a custom resource's column with no value).
    Null,
}

impl From<String> for Cell {
    fn from(s: String) -> Cell {
        Cell::Str(s)
    }
}

impl From<&str> for Cell {
    fn from(s: &str) -> Cell {
        Cell::Str(s.to_owned())
    }
}

impl From<i64> for Cell {
    fn from(i: i64) -> Cell {
        Cell::Int(i)
    }
}

impl From<bool> for Cell {
    fn from(b: bool) -> Cell {
        Cell::Bool(b)
    }
}

impl Cell {
    fn write(&self, out: &mut String) {
        match self {
            Cell::Str(s) => write_str(out, s),
            Cell::Int(i) => Number::Int(*i).write(out),
            Cell::Float(f) => write_f64(out, *f),
            Cell::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Cell::Null => out.push_str("null"),
        }
    }
}

/// A row's cells and its conditions (the JSON of a
/// `[]metav1.TableRowCondition`, "" for none).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub(crate) cells: Vec<Cell>,
    pub(crate) conditions: &'static str,
}

impl Row {
    /// A row of `cells` without conditions.
    pub(crate) fn new(cells: Vec<Cell>) -> Row {
        Row {
            cells,
            conditions: "",
        }
    }
}

/// An object to print: its JSON as given, and parsed.
#[derive(Debug)]
pub(crate) struct Item<'a> {
    pub(crate) raw: &'a str,
    pub(crate) value: Value,
}

impl<'a> Item<'a> {
    /// Parses `raw`, which must be a JSON object.
    pub(crate) fn parse(raw: &'a str) -> Result<Item<'a>, PrinterError> {
        let value: Value =
            serde_json::from_str(raw).map_err(|e| PrinterError::NotJson(e.to_string()))?;
        if !value.is_object() {
            return Err(PrinterError::NotJson("not an object".to_owned()));
        }
        Ok(Item { raw, value })
    }

    /// The object's `metadata.resourceVersion`.
    pub(crate) fn resource_version(&self) -> &str {
        self.value
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// Whether this is the bookmark ending a watch's initial events: the
    /// API server puts its metadata in a row even when `includeObject` is
    /// None (but the whole object for Object, which it tests first).
    fn ends_initial_events(&self) -> bool {
        self.value
            .pointer("/metadata/annotations/k8s.io~1initial-events-end")
            .and_then(Value::as_str)
            == Some("true")
    }

    /// The raw JSON of the object's `metadata`, if it has one.
    fn raw_metadata(&self) -> Result<Option<String>, PrinterError> {
        #[derive(serde::Deserialize)]
        struct Top<'a> {
            #[serde(borrow)]
            metadata: Option<&'a serde_json::value::RawValue>,
        }
        let top: Top<'_> =
            serde_json::from_str(self.raw).map_err(|e| PrinterError::NotJson(e.to_string()))?;
        Ok(top.metadata.map(|m| m.get().to_owned()))
    }
}

/// The object a row carries for `kind` and `api_version` of its type (an
/// object of a built-in type given without them gets them first, as the API
/// server's conversion to the request's version sets them).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TypeMeta<'a> {
    pub(crate) kind: &'a str,
    pub(crate) api_version: &'a str,
}

/// The list metadata of a Table.
#[derive(Debug, Default)]
pub(crate) struct Meta<'a> {
    pub(crate) resource_version: &'a str,
    pub(crate) continue_token: &'a str,
    pub(crate) remaining_item_count: Option<i64>,
}

/// Everything a Table is written from.
pub(crate) struct Table<'a> {
    pub(crate) options: &'a TableOptions,
    /// The column definitions' JSON, None for `null`.
    pub(crate) columns: Option<&'a str>,
    pub(crate) rows: Vec<(Row, &'a Item<'a>)>,
    /// Rows `null` rather than `[]` when there are none (the default
    /// convertor appends to a nil slice).
    pub(crate) nil_rows: bool,
    pub(crate) meta: Meta<'a>,
    /// The kind and apiVersion of the objects, for `includeObject=Object`.
    pub(crate) type_meta: Option<TypeMeta<'a>>,
    /// The objects' annotations as their internal type holds them, for
    /// rows that carry metadata.
    pub(crate) internal_annotations: fn(&mut Annotations) -> Result<(), PrinterError>,
}

impl Table<'_> {
    /// The Table's JSON, without a trailing newline.
    pub(crate) fn write(&self) -> Result<String, PrinterError> {
        let mut out = String::with_capacity(256 + self.rows.len() * 256);
        out.push_str("{\"kind\":\"Table\",\"apiVersion\":");
        write_str(&mut out, self.options.version.api_version());
        out.push_str(",\"metadata\":{");
        let mut sep = "";
        if !self.meta.resource_version.is_empty() {
            out.push_str("\"resourceVersion\":");
            write_str(&mut out, self.meta.resource_version);
            sep = ",";
        }
        if !self.meta.continue_token.is_empty() {
            out.push_str(sep);
            out.push_str("\"continue\":");
            write_str(&mut out, self.meta.continue_token);
            sep = ",";
        }
        if let Some(count) = self.meta.remaining_item_count {
            out.push_str(sep);
            let _ = write!(out, "\"remainingItemCount\":{count}");
        }
        out.push_str("},\"columnDefinitions\":");
        out.push_str(self.columns.unwrap_or("null"));
        out.push_str(",\"rows\":");
        if self.rows.is_empty() && self.nil_rows {
            out.push_str("null}");
            return Ok(out);
        }
        out.push('[');
        for (i, (row, item)) in self.rows.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"cells\":[");
            for (j, cell) in row.cells.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                cell.write(&mut out);
            }
            out.push(']');
            if !row.conditions.is_empty() {
                out.push_str(",\"conditions\":");
                out.push_str(row.conditions);
            }
            out.push_str(",\"object\":");
            self.write_object(&mut out, item)?;
            out.push('}');
        }
        out.push_str("]}");
        Ok(out)
    }

    fn write_object(&self, out: &mut String, item: &Item<'_>) -> Result<(), PrinterError> {
        let include = match self.options.include_object {
            IncludeObject::None if item.ends_initial_events() => IncludeObject::Metadata,
            include => include,
        };
        match include {
            IncludeObject::None => out.push_str("null"),
            IncludeObject::Metadata => {
                let metadata = item.raw_metadata()?;
                write_partial_object_metadata(
                    out,
                    self.options.version.api_version(),
                    metadata.as_deref(),
                    self.internal_annotations,
                )?;
            }
            IncludeObject::Object => {
                let has_type =
                    item.value.get("kind").is_some() && item.value.get("apiVersion").is_some();
                match self.type_meta.filter(|_| !has_type) {
                    None => write_compact(out, item.raw),
                    Some(type_meta) => {
                        out.push_str("{\"kind\":");
                        write_str(out, type_meta.kind);
                        out.push_str(",\"apiVersion\":");
                        write_str(out, type_meta.api_version);
                        let body = item.raw.trim_start().strip_prefix('{').unwrap_or("}");
                        if !body.trim_start().starts_with('}') {
                            out.push(',');
                        }
                        write_compact(out, body);
                    }
                }
            }
        }
        Ok(())
    }
}

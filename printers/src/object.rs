//! Reading an object's JSON as the API server's printers read the Go
//! struct decoded from it: an absent field, or a JSON `null`, is the
//! field's zero value ("", 0, false, empty list), so a printer reads
//! `status.phase` of any object, whatever it holds.

use serde_json::{Map, Value};

use crate::{
    error::PrinterError,
    time::{Instant, parse_rfc3339},
};

/// A JSON value seen through Go's zero values.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field<'a>(Option<&'a Value>);

static EMPTY: Vec<Value> = Vec::new();

impl<'a> Field<'a> {
    /// The whole object.
    pub(crate) fn of(value: &'a Value) -> Field<'a> {
        Field(Some(value))
    }

    /// The field `path` below this one, each step a key of an object.
    pub(crate) fn at(self, path: &[&str]) -> Field<'a> {
        let mut value = self.0;
        for key in path {
            value = value.and_then(|v| v.as_object()).and_then(|m| m.get(*key));
        }
        Field(value.filter(|v| !v.is_null()))
    }

    /// Whether the field is set (present and not `null`): a Go pointer that
    /// is not nil.
    pub(crate) fn is_set(self) -> bool {
        self.0.is_some()
    }

    /// The field as a string, "" if it is not one.
    pub(crate) fn str(self) -> &'a str {
        self.0.and_then(Value::as_str).unwrap_or("")
    }

    /// The field as a string if it is set to one (a Go `*string`).
    pub(crate) fn opt_str(self) -> Option<&'a str> {
        self.0.and_then(Value::as_str)
    }

    /// The field as an integer, 0 if it is not one.
    pub(crate) fn int(self) -> i64 {
        self.opt_int().unwrap_or(0)
    }

    /// The field as an integer if it is set to one (a Go `*int32`).
    pub(crate) fn opt_int(self) -> Option<i64> {
        self.0.and_then(Value::as_i64)
    }

    /// The field as a boolean, false if it is not one.
    pub(crate) fn bool(self) -> bool {
        self.opt_bool().unwrap_or(false)
    }

    /// The field as a boolean if it is set to one (a Go `*bool`).
    pub(crate) fn opt_bool(self) -> Option<bool> {
        self.0.and_then(Value::as_bool)
    }

    /// The field's items, none if it is not a list.
    pub(crate) fn items(self) -> impl ExactSizeIterator<Item = Field<'a>> + Clone {
        self.0
            .and_then(Value::as_array)
            .unwrap_or(&EMPTY)
            .iter()
            .map(|v| Field(Some(v).filter(|v| !v.is_null())))
    }

    /// The number of the field's items (of a list) or entries (of a map).
    pub(crate) fn len(self) -> usize {
        match self.0 {
            Some(Value::Array(items)) => items.len(),
            Some(Value::Object(map)) => map.len(),
            _ => 0,
        }
    }

    /// The field's entries as a map of strings, values that are not strings
    /// read as "" (a `map[string]string`).
    pub(crate) fn string_map(self) -> Vec<(&'a str, &'a str)> {
        self.map()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or("")))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The value of `key` in the field's map of strings, if it has it.
    pub(crate) fn entry(self, key: &str) -> Option<&'a str> {
        self.map()
            .and_then(|m| m.get(key))
            .map(|v| v.as_str().unwrap_or(""))
    }

    /// The field as a JSON object, if it is one.
    pub(crate) fn map(self) -> Option<&'a Map<String, Value>> {
        self.0.and_then(Value::as_object)
    }

    /// The field as a `metav1.Time` or `MicroTime`: None if unset; an error
    /// if it is a string that is not RFC 3339, which the API server would
    /// not have decoded.
    pub(crate) fn time(self) -> Result<Option<Instant>, PrinterError> {
        match self.0 {
            None => Ok(None),
            Some(Value::String(s)) => parse_rfc3339(s).map(Some).ok_or(PrinterError::Unreadable {
                what: "a timestamp that is not RFC 3339",
            }),
            Some(_) => Err(PrinterError::Unreadable {
                what: "a timestamp that is not a string",
            }),
        }
    }

    /// The field as a `resource.Quantity`'s `String()`: the API server
    /// writes quantities in their canonical form, which is what `String()`
    /// gives, so it is the JSON text itself; an unset quantity is "0".
    pub(crate) fn quantity(self) -> String {
        match self.0 {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => "0".to_owned(),
        }
    }

    /// The field as an `intstr.IntOrString`'s `String()`.
    pub(crate) fn int_or_string(self) -> String {
        match self.0 {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.as_i64().unwrap_or(0).to_string(),
            _ => "0".to_owned(),
        }
    }
}

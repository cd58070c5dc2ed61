//! JSON written byte for byte as Go's `encoding/json` writes it, which is
//! what kube-apiserver's JSON serializer uses: strings with `<`, `>`, `&`,
//! U+2028 and U+2029 escaped, floats in ES6 style, map keys sorted. A Table
//! is then the same bytes as the API server's, not only the same value.

use std::fmt::Write as _;

use serde_json::Value;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `s` as a JSON string, escaped as `encoding/json` does with HTML
/// escaping on (the API server's encoder never turns it off).
pub(crate) fn write_str(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, c) in s.char_indices() {
        let escape: Option<&str> = match c {
            '\\' => Some("\\\\"),
            '"' => Some("\\\""),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            _ => None,
        };
        let unicode = matches!(
            c,
            '\0'..='\u{1f}' | '<' | '>' | '&' | '\u{2028}' | '\u{2029}'
        );
        if escape.is_none() && !unicode {
            continue;
        }
        out.push_str(&s[start..i]);
        start = i + c.len_utf8();
        match escape {
            Some(e) => out.push_str(e),
            None => {
                let code = c as u32;
                out.push_str("\\u");
                for shift in [12, 8, 4, 0] {
                    out.push(HEX[((code >> shift) & 0xf) as usize] as char);
                }
            }
        }
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Appends a float64 as `encoding/json` writes it: the shortest digits
/// that read back as `f`, in `%f` form, or in `%e` form (exponent without
/// leading zeros) below 1e-6 and from 1e21. JSON numbers read from an API
/// server's answer are finite, so NaN and infinities are not expected; they
/// are written as `null` (Go refuses to encode them at all).
pub(crate) fn write_f64(out: &mut String, f: f64) {
    if !f.is_finite() {
        out.push_str("null");
        return;
    }
    let abs = f.abs();
    let exponential = abs != 0.0 && !(1e-6..1e21).contains(&abs);
    let (negative, digits, exponent) = shortest(f);
    if negative {
        out.push('-');
    }
    if exponential {
        write_exponential(out, &digits, exponent, 1);
    } else {
        write_fixed(out, &digits, exponent);
    }
}

/// Appends a float64 as Go's `fmt.Print` (`%v`, that is `strconv`'s `'g'`
/// with the shortest precision) writes it: `%e` form, with an exponent of
/// at least two digits, when the decimal exponent is below -4 or 6 and
/// above (`'g'` decides with a precision of 6 for the shortest form).
pub(crate) fn write_f64_print(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("NaN");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "+Inf" } else { "-Inf" });
        return;
    }
    let (negative, digits, exponent) = shortest(f);
    if negative {
        out.push('-');
    }
    // `exponent` is the position of the decimal point after the first
    // digit, minus one: the `%e` exponent.
    if f != 0.0 && !(-4..6).contains(&exponent) {
        write_exponential(out, &digits, exponent, 2);
    } else {
        write_fixed(out, &digits, exponent);
    }
}

/// The shortest decimal digits that read back as `f` (Rust's and Go's
/// algorithms both give the shortest, closest digits), with the `%e`
/// exponent of the first digit.
fn shortest(f: f64) -> (bool, Vec<u8>, i32) {
    // `{:e}` is the shortest representation in scientific form,
    // e.g. "-1.25e-7", "3e0".
    let text = format!("{f:e}");
    let negative = text.starts_with('-');
    let text = text.trim_start_matches('-');
    let (mantissa, exponent) = text.split_once('e').unwrap_or((text, "0"));
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    let exponent = exponent.parse::<i32>().unwrap_or(0);
    (negative, digits, exponent)
}

fn write_fixed(out: &mut String, digits: &[u8], exponent: i32) {
    // Digits before the point: exponent + 1 (at least one, "0").
    let point = exponent + 1;
    if point <= 0 {
        out.push_str("0.");
        for _ in 0..-point {
            out.push('0');
        }
        out.extend(digits.iter().map(|&d| d as char));
        return;
    }
    let point = point as usize;
    for i in 0..point.max(digits.len()) {
        if i == point {
            out.push('.');
        }
        out.push(digits.get(i).map_or('0', |&d| d as char));
    }
}

fn write_exponential(out: &mut String, digits: &[u8], exponent: i32, exponent_width: usize) {
    out.push(digits[0] as char);
    if digits.len() > 1 {
        out.push('.');
        out.extend(digits[1..].iter().map(|&d| d as char));
    }
    out.push('e');
    out.push(if exponent < 0 { '-' } else { '+' });
    let _ = write!(
        out,
        "{:0width$}",
        exponent.unsigned_abs(),
        width = exponent_width
    );
}

/// A JSON number as the API server's decoder of unstructured objects holds
/// it: an int64 when it is an integer that fits, else a float64.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Number {
    /// An integer within int64.
    Int(i64),
    /// Any other number.
    Float(f64),
}

impl Number {
    /// The number `n` as Go's unstructured decoding types it.
    pub(crate) fn of(n: &serde_json::Number) -> Number {
        match n.as_i64() {
            Some(i) => Number::Int(i),
            None => Number::Float(n.as_f64().unwrap_or(f64::NAN)),
        }
    }

    /// Appends the number as `encoding/json` writes an int64 or float64.
    pub(crate) fn write(self, out: &mut String) {
        match self {
            Number::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Number::Float(f) => write_f64(out, f),
        }
    }
}

/// Appends `value` as `encoding/json` writes the `interface{}` value Go's
/// unstructured decoding makes of it: objects with sorted keys, integers
/// as int64, other numbers as float64.
pub(crate) fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => Number::of(n).write(out),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Go sorts map keys bytewise; so does a BTreeMap of Strings,
            // but serde_json's map keeps insertion order when a crate in
            // the build turns on its preserve_order feature.
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(out, key);
                out.push(':');
                write_value(out, &map[key]);
            }
            out.push('}');
        }
    }
}

/// Appends raw JSON as `encoding/json` embeds a value's own encoding (a
/// `json.Marshaler`'s output): whitespace between tokens removed, and `<`,
/// `>`, `&`, U+2028 and U+2029 inside strings escaped; everything else,
/// escapes included, kept as written. The API server's own JSON comes out
/// unchanged.
pub(crate) fn write_compact(out: &mut String, raw: &str) {
    let mut in_string = false;
    let mut escaped = false;
    for c in raw.chars() {
        if in_string {
            if escaped {
                escaped = false;
                out.push(c);
                continue;
            }
            match c {
                '\\' => {
                    escaped = true;
                    out.push(c);
                }
                '"' => {
                    in_string = false;
                    out.push(c);
                }
                '<' => out.push_str("\\u003c"),
                '>' => out.push_str("\\u003e"),
                '&' => out.push_str("\\u0026"),
                '\u{2028}' => out.push_str("\\u2028"),
                '\u{2029}' => out.push_str("\\u2029"),
                _ => out.push(c),
            }
        } else {
            match c {
                ' ' | '\t' | '\n' | '\r' => {}
                '"' => {
                    in_string = true;
                    out.push(c);
                }
                _ => out.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(s: &str) -> String {
        let mut out = String::new();
        write_str(&mut out, s);
        out
    }

    fn float(f: f64) -> String {
        let mut out = String::new();
        write_f64(&mut out, f);
        out
    }

    fn printed(f: f64) -> String {
        let mut out = String::new();
        write_f64_print(&mut out, f);
        out
    }

    /// Expected values are what Go 1.26's `json.Marshal` gives for the
    /// same strings.
    #[test]
    fn strings_are_escaped_as_go_escapes_them_with_html_escaping() {
        assert_eq!(string("<none>"), r#""\u003cnone\u003e""#);
        assert_eq!(string("a&b"), r#""a\u0026b""#);
        assert_eq!(string("q\"\\"), r#""q\"\\""#);
        assert_eq!(string("\u{8}\u{c}\n\r\t"), r#""\b\f\n\r\t""#);
        assert_eq!(string("\u{1}\u{1f}\u{7f}"), "\"\\u0001\\u001f\u{7f}\"");
        assert_eq!(string("\u{2028}\u{2029}é"), "\"\\u2028\\u2029é\"");
    }

    /// Expected values are Go's `json.Marshal(float64(...))`.
    #[test]
    fn floats_are_written_as_go_json_writes_a_float64() {
        assert_eq!(float(0.0), "0");
        assert_eq!(float(-0.0), "-0");
        assert_eq!(float(3.0), "3");
        assert_eq!(float(1.5), "1.5");
        assert_eq!(float(-2.25), "-2.25");
        assert_eq!(float(0.000001), "0.000001");
        assert_eq!(float(0.0000001), "1e-7");
        assert_eq!(float(1.25e-10), "1.25e-10");
        assert_eq!(float(123456789.0), "123456789");
        assert_eq!(float(1e20), "100000000000000000000");
        assert_eq!(float(1e21), "1e+21");
        assert_eq!(float(1.5e300), "1.5e+300");
        assert_eq!(float(0.1), "0.1");
        assert_eq!(float(9007199254740993.0), "9007199254740992");
    }

    /// Expected values are Go's `fmt.Sprint(float64(...))`.
    #[test]
    fn printed_floats_are_written_as_go_fmt_prints_a_float64() {
        assert_eq!(printed(0.0), "0");
        assert_eq!(printed(1.5), "1.5");
        assert_eq!(printed(100000.0), "100000");
        assert_eq!(printed(123456.0), "123456");
        assert_eq!(printed(1e6), "1e+06");
        assert_eq!(printed(1234567.0), "1.234567e+06");
        assert_eq!(printed(1e21), "1e+21");
        assert_eq!(printed(123456789.0), "1.23456789e+08");
        assert_eq!(printed(0.0001), "0.0001");
        assert_eq!(printed(0.00001), "1e-05");
        assert_eq!(printed(-2.5e-7), "-2.5e-07");
    }

    #[test]
    fn values_are_written_with_sorted_keys_and_go_numbers() {
        let value: Value =
            serde_json::from_str(r#"{"b":[1,2.5,1e21],"a":{"y":null,"x":true},"c":"<"}"#).unwrap();
        let mut out = String::new();
        write_value(&mut out, &value);
        assert_eq!(
            out,
            r#"{"a":{"x":true,"y":null},"b":[1,2.5,1e+21],"c":"\u003c"}"#
        );
    }

    #[test]
    fn raw_json_is_compacted_and_html_escaped_inside_strings_only() {
        let mut out = String::new();
        write_compact(&mut out, "{ \"a\" : \"<x> \\\" &\" ,\n \"b\": [1, 2] }");
        assert_eq!(out, r#"{"a":"\u003cx\u003e \" \u0026","b":[1,2]}"#);
    }
}

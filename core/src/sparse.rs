//! An object's JSON read in one pass for the few parts the cache keeps
//! ([`Wanted`]), everything else skipped unbuilt, and the edits the
//! transform makes applied to the text itself ([`Edits`]).
//!
//! Why: a pod of a few KiB parsed into a whole `serde_json::Value` (a map
//! node per object, a string per key and value), then written out again
//! without its `managedFields`, was most of what an event cost kube-fanout
//! (see BENCHMARKS.md, "The cost of one event"). Skipping a value costs a
//! scan and no allocation; the text the API server sent is kept, less the
//! bytes of `metadata.managedFields`, so nothing is written out again.

use std::{borrow::Cow, ops::Range};

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value, value::RawValue};

/// The paths into an object whose values are kept, as a tree of field
/// names; a node marked `whole` keeps its whole value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Wanted {
    children: Vec<(Box<str>, Wanted)>,
    whole: bool,
}

impl Wanted {
    /// The tree of `paths` (each a list of field names from the root),
    /// with what every object needs: `apiVersion`, `kind`, and
    /// `metadata`'s `name`, `namespace`, `resourceVersion` and `labels`.
    pub(crate) fn with<'a>(paths: impl IntoIterator<Item = &'a [&'a str]>) -> Self {
        let mut tree = Wanted::default();
        let always: [&[&str]; 6] = [
            &["apiVersion"],
            &["kind"],
            &["metadata", "name"],
            &["metadata", "namespace"],
            &["metadata", "resourceVersion"],
            &["metadata", "labels"],
        ];
        for path in always.into_iter().chain(paths) {
            tree.add(path);
        }
        tree
    }

    fn add(&mut self, path: &[&str]) {
        if self.whole {
            return;
        }
        let Some((first, rest)) = path.split_first() else {
            // The whole value, whatever was asked below it.
            self.whole = true;
            self.children.clear();
            return;
        };
        let at = match self.children.iter().position(|(k, _)| **k == **first) {
            Some(at) => at,
            None => {
                self.children.push(((*first).into(), Wanted::default()));
                self.children.len() - 1
            }
        };
        self.children[at].1.add(rest);
    }

    fn child(&self, key: &str) -> Option<&Wanted> {
        self.children
            .iter()
            .find(|(k, _)| **k == *key)
            .map(|(_, w)| w)
    }
}

/// An object read for what [`Wanted`] names.
#[derive(Debug)]
pub(crate) struct Sparse {
    /// The wanted values, in a value shaped like the object; what was not
    /// wanted is missing. (An array on a wanted path is kept whole.)
    pub(crate) value: Value,
    /// Where `metadata.managedFields`'s value lies in the text, if it is
    /// there and was asked for.
    pub(crate) managed_fields: Option<Range<usize>>,
}

/// Reads `text`, a JSON value, for `wanted`; with `find_managed_fields`,
/// also where its `metadata.managedFields` lies.
pub(crate) fn read(
    text: &str,
    wanted: &Wanted,
    find_managed_fields: bool,
) -> Result<Sparse, serde_json::Error> {
    let mut managed_fields = None;
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Seed {
        wanted,
        text,
        at: Level::Root {
            find_managed_fields,
        },
        managed_fields: &mut managed_fields,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(Sparse {
        value,
        managed_fields,
    })
}

/// Where a [`Seed`] reads.
#[derive(Clone, Copy)]
enum Level {
    /// The object itself: its `metadata` is where managedFields may be.
    Root { find_managed_fields: bool },
    /// Its `metadata`, when managedFields is to be found.
    Metadata,
    /// Anywhere below.
    Inner,
}

struct Seed<'w, 'm, 't> {
    wanted: &'w Wanted,
    /// The whole text being read: a borrowed value's offset is found from
    /// where its slice lies in it.
    text: &'t str,
    at: Level,
    managed_fields: &'m mut Option<Range<usize>>,
}

impl<'de> DeserializeSeed<'de> for Seed<'_, '_, 'de> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_, '_, 'de> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(Key)? {
            let at = match (self.at, &*key) {
                (
                    Level::Root {
                        find_managed_fields: true,
                    },
                    "metadata",
                ) => Level::Metadata,
                (Level::Metadata, "managedFields") => {
                    let raw: &'de RawValue = map.next_value()?;
                    // Where the borrowed slice lies in the text.
                    let start = raw.get().as_ptr() as usize - self.text.as_ptr() as usize;
                    *self.managed_fields = Some(start..start + raw.get().len());
                    continue;
                }
                _ => Level::Inner,
            };
            match self.wanted.child(&key) {
                Some(child) if child.whole => {
                    out.insert(key.into_owned(), map.next_value::<Value>()?);
                }
                Some(child) => {
                    let value = map.next_value_seed(Seed {
                        wanted: child,
                        text: self.text,
                        at,
                        managed_fields: &mut *self.managed_fields,
                    })?;
                    out.insert(key.into_owned(), value);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(out))
    }

    // Anything but an object on a wanted path is kept whole.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(item) = seq.next_element::<Value>()? {
            out.push(item);
        }
        Ok(Value::Array(out))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

/// A map key, borrowed from the text unless it holds escapes: most keys
/// are skipped, and need no copy.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// Edits to an object's text: fields put in at its start, and a range of
/// it cut out, the text between kept byte for byte.
#[derive(Debug, Default)]
pub(crate) struct Edits {
    /// Members written at the start of the object, each `"key":value`.
    prepend: Vec<String>,
    /// A member (with a comma next to it) to cut out.
    cut: Option<Range<usize>>,
}

impl Edits {
    /// Puts `key` with string `value` at the start of the object.
    pub(crate) fn prepend(&mut self, key: &str, value: &str) {
        // A string serializes infallibly.
        let json = |s: &str| Value::String(s.to_owned()).to_string();
        self.prepend.push(format!("{}:{}", json(key), json(value)));
    }

    /// Cuts out the member whose value lies at `value` in `text` (a
    /// member named `key` of an object): the key, the value and one comma
    /// next to them. `false` (and nothing cut) if the text before the
    /// value is not `"key":` with only whitespace around (a key written
    /// with escapes, say).
    pub(crate) fn cut_member(&mut self, text: &str, key: &str, value: Range<usize>) -> bool {
        let before = text[..value.start].trim_end();
        let Some(before) = before.strip_suffix(':') else {
            return false;
        };
        let quoted = format!("\"{key}\"");
        let Some(before) = before.trim_end().strip_suffix(&*quoted) else {
            return false;
        };
        let key_start = before.len();
        let ahead = before.trim_end();
        self.cut = Some(if let Some(comma) = ahead.strip_suffix(',') {
            // Not the first member: with the comma before it.
            comma.len()..value.end
        } else {
            let after = &text[value.end..];
            let rest = after.trim_start();
            match rest.strip_prefix(',') {
                // The first of several: with the comma after it.
                Some(_) => key_start..value.end + (after.len() - rest.len()) + 1,
                // The only member.
                None => key_start..value.end,
            }
        });
        true
    }

    /// Whether there is nothing to do.
    pub(crate) fn is_empty(&self) -> bool {
        self.prepend.is_empty() && self.cut.is_none()
    }

    /// `text` edited; `text` must be an object with at least one member
    /// (true of any object with a name).
    pub(crate) fn apply(&self, text: &str) -> String {
        let open = text.len() - text.trim_start().len() + 1;
        let mut out = String::with_capacity(text.len() + 64);
        out.push_str(&text[..open]);
        for member in &self.prepend {
            out.push_str(member);
            out.push(',');
        }
        match &self.cut {
            Some(cut) => {
                out.push_str(&text[open..cut.start]);
                out.push_str(&text[cut.end..]);
            }
            None => out.push_str(&text[open..]),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(paths: &[&[&str]]) -> Wanted {
        Wanted::with(paths.iter().copied())
    }

    #[test]
    fn only_the_wanted_parts_are_read_and_arrays_whole() {
        let text = r#"{"kind":"Pod","apiVersion":"v1",
            "metadata":{"name":"a","uid":"u","labels":{"x":"1"},"annotations":{"big":"..."}},
            "spec":{"nodeName":"n1","containers":[{"name":"c"}],"hostNetwork":true,"tolerations":[1,2]},
            "status":{"phase":"Running","conditions":[{"type":"Ready"}]}}"#;
        let read = read(
            text,
            &wanted(&[
                &["spec", "nodeName"],
                &["spec", "tolerations"],
                &["spec", "hostNetwork"],
                &["status", "phase"],
            ]),
            true,
        )
        .unwrap();
        assert_eq!(
            read.value,
            serde_json::json!({"kind":"Pod","apiVersion":"v1",
                "metadata":{"name":"a","labels":{"x":"1"}},
                "spec":{"nodeName":"n1","hostNetwork":true,"tolerations":[1,2]},
                "status":{"phase":"Running"}})
        );
        assert_eq!(read.managed_fields, None);
    }

    #[test]
    fn a_leaf_keeps_its_value_whatever_is_asked_below_it() {
        let w = wanted(&[
            &["spec"],
            &["spec", "nodeName"],
            &["status", "phase"],
            &["status"],
        ]);
        let read = read(r#"{"spec":{"a":1},"status":{"b":2},"x":3}"#, &w, false).unwrap();
        assert_eq!(
            read.value,
            serde_json::json!({"spec":{"a":1},"status":{"b":2}})
        );
    }

    #[test]
    fn managed_fields_are_found_only_in_the_objects_own_metadata() {
        let text = r#"{"spec":{"metadata":{"managedFields":[0]}},"metadata":{"name":"a", "managedFields" : [{"manager":"kubectl"}] ,"uid":"u"}}"#;
        let found = read(text, &wanted(&[]), true).unwrap();
        let range = found.managed_fields.expect("found");
        assert_eq!(&text[range], r#"[{"manager":"kubectl"}]"#);
        assert_eq!(
            read(text, &wanted(&[]), false).unwrap().managed_fields,
            None
        );
    }

    #[test]
    fn a_cut_member_takes_one_comma_with_it_wherever_it_stands() {
        let strip = |text: &str| {
            let range = read(text, &wanted(&[]), true)
                .unwrap()
                .managed_fields
                .unwrap();
            let mut edits = Edits::default();
            assert!(edits.cut_member(text, "managedFields", range));
            let out = edits.apply(text);
            let _: Value = serde_json::from_str(&out).expect("still JSON");
            out
        };
        assert_eq!(
            strip(r#"{"metadata":{"name":"a","managedFields":[1],"uid":"u"}}"#),
            r#"{"metadata":{"name":"a","uid":"u"}}"#
        );
        assert_eq!(
            strip(r#"{"metadata":{"managedFields":[1] , "name":"a"}}"#),
            r#"{"metadata":{ "name":"a"}}"#
        );
        assert_eq!(
            strip(r#"{"metadata":{"name":"a" ,"managedFields" :[1]}}"#),
            r#"{"metadata":{"name":"a" }}"#
        );
        assert_eq!(
            strip(r#"{"metadata":{"managedFields":[1]},"x":1}"#),
            r#"{"metadata":{},"x":1}"#
        );
    }

    #[test]
    fn a_key_written_with_escapes_is_not_cut() {
        let text = r#"{"metadata":{"name":"a","managed\u0046ields":[1]}}"#;
        let range = read(text, &wanted(&[]), true)
            .unwrap()
            .managed_fields
            .unwrap();
        let mut edits = Edits::default();
        assert!(!edits.cut_member(text, "managedFields", range));
        assert!(edits.is_empty());
    }

    #[test]
    fn prepended_members_come_first_and_the_rest_is_kept_byte_for_byte() {
        let mut edits = Edits::default();
        edits.prepend("kind", "Pod");
        edits.prepend("apiVersion", "v1");
        assert_eq!(
            edits.apply(r#" {"metadata": {"name":"a"}}"#),
            r#" {"kind":"Pod","apiVersion":"v1","metadata": {"name":"a"}}"#
        );
    }

    #[test]
    fn trailing_text_is_refused() {
        assert!(read(r#"{"a":1} x"#, &wanted(&[]), false).is_err());
        assert!(read(r#"{"a":"#, &wanted(&[]), false).is_err());
    }
}

//! JSON to protobuf in one pass over the JSON, driven by the schema: the
//! encoding Go's generated `Marshal` writes for the object Kubernetes'
//! JSON decoder would read from the same text.
//!
//! Each value is written as it is read, into one buffer. Go writes a
//! message's fields by number, and the fields it always writes (every
//! non-pointer one) even when the JSON leaves them out; the JSON has its
//! keys in the Go struct's order, which is mostly but not always the
//! numbers' order. So an object's fields are written as segments, and when
//! the JSON's order or absent keys call for it the object is laid out again
//! from its segments and the fields' defaults (one copy of the object).
//! A length-delimited value keeps one byte for its length and moves its
//! content up if it needs more (see `wire::end_len`).
//!
//! JSON `null` reads as Go reads it: for a field it is the field's absence
//! (Go leaves the zero value, which is what it writes for an absent field);
//! in a list or a map it is the element's zero value.

use std::fmt;

use base64::Engine as _;
use serde::Deserialize as _;
use serde::de::{
    self, DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_json::value::RawValue;

use crate::schema::{Card, Field, Form, Key, MessageId, Schema, Type};
use crate::time::{self, Fraction};
use crate::wire;

/// One field's bytes in the buffer, and its place among the object's.
#[derive(Debug, Clone, Copy)]
struct Segment {
    order: u64,
    start: usize,
    end: usize,
}

/// The encoder's buffers, reused from one object to the next.
#[derive(Debug)]
pub(crate) struct Encoder<'s> {
    schema: &'s Schema,
    /// The encoding being written.
    pub(crate) buf: Vec<u8>,
    segments: Vec<Segment>,
    scratch: Vec<u8>,
    entries: Vec<(usize, usize)>,
}

impl<'s> Encoder<'s> {
    pub(crate) fn new(schema: &'s Schema, capacity: usize) -> Self {
        Encoder {
            schema,
            buf: Vec::with_capacity(capacity),
            segments: Vec::new(),
            scratch: Vec::new(),
            entries: Vec::new(),
        }
    }

    /// Appends the encoding of `json`, an object of message `m` (its
    /// fields, without a tag or length).
    pub(crate) fn message(&mut self, m: MessageId, json: &[u8]) -> Result<(), serde_json::Error> {
        let mut de = serde_json::Deserializer::from_slice(json);
        Content { e: self, m }.deserialize(&mut de)?;
        de.end()
    }

    /// Lays out the object of message `m` written since `start`, whose
    /// fields' segments are those since `mark`.
    fn finish_object(&mut self, m: MessageId, start: usize, mark: usize, seen: u128) {
        let msg = &self.schema.messages[m];
        let segments = &mut self.segments[mark..];
        let in_order = segments.windows(2).all(|w| w[0].order < w[1].order);
        if in_order && !msg.assembles && msg.defaulted & !seen == 0 {
            self.segments.truncate(mark);
            return;
        }
        if !in_order {
            segments.sort_unstable_by_key(|s| s.order);
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(&self.buf[start..]);
        self.buf.truncate(start);
        assemble(
            self.schema,
            m,
            &self.segments[mark..],
            0,
            start,
            &self.scratch,
            &mut self.buf,
        );
        self.segments.truncate(mark);
    }

    /// Orders the entries of a map written since `start` by key, as Go
    /// writes them (the entries since `mark`, each with the entry tag
    /// `tag`). Fails on a key given twice.
    fn finish_map(&mut self, start: usize, mark: usize, tag: usize) -> Result<(), String> {
        let entries = &mut self.entries[mark..];
        let buf = &self.buf;
        let in_order = entries
            .windows(2)
            .all(|w| entry_key(buf, w[0], tag) < entry_key(buf, w[1], tag));
        if !in_order {
            entries.sort_unstable_by(|a, b| entry_key(buf, *a, tag).cmp(entry_key(buf, *b, tag)));
            if let Some(w) = entries
                .windows(2)
                .find(|w| entry_key(buf, w[0], tag) == entry_key(buf, w[1], tag))
            {
                let key = String::from_utf8_lossy(entry_key(buf, w[0], tag)).into_owned();
                self.entries.truncate(mark);
                return Err(format!(
                    "map key {} given twice",
                    crate::error::bounded(&key)
                ));
            }
            self.scratch.clear();
            self.scratch.extend_from_slice(&self.buf[start..]);
            self.buf.truncate(start);
            for (a, b) in &self.entries[mark..] {
                self.buf
                    .extend_from_slice(&self.scratch[a - start..b - start]);
            }
        }
        self.entries.truncate(mark);
        Ok(())
    }
}

/// The key of a map entry at `entry` in `buf`: after the entry's tag
/// (`tag` bytes) and length, the key field's tag (1 byte), length, bytes.
fn entry_key(buf: &[u8], (start, end): (usize, usize), tag: usize) -> &[u8] {
    let entry = &buf[start + tag..end];
    let Some((_, n)) = wire::read_varint(entry) else {
        return &[];
    };
    let Some((len, k)) = wire::read_varint(&entry[n + 1..]) else {
        return &[];
    };
    let at = n + 1 + k;
    &entry[at..at + len as usize]
}

/// Writes message `m`'s fields in number order into `buf`: each from its
/// segment (in `scratch`, which starts at `base` of the buffer) when the
/// JSON gave it, else its default. `depth` is how far `m` is inlined.
fn assemble(
    schema: &Schema,
    m: MessageId,
    segments: &[Segment],
    depth: usize,
    base: usize,
    scratch: &[u8],
    buf: &mut Vec<u8>,
) {
    let shift = 48 - 16 * depth;
    let number = |s: &Segment| ((s.order >> shift) & 0xffff) as u32;
    let mut i = 0;
    for f in &schema.messages[m].fields {
        if f.inline {
            let from = i;
            while i < segments.len() && number(&segments[i]) == f.number {
                i += 1;
            }
            match f.ty {
                Type::Message(child) if from < i => {
                    buf.extend_from_slice(&f.tag);
                    let at = wire::begin_len(buf);
                    assemble(
                        schema,
                        child,
                        &segments[from..i],
                        depth + 1,
                        base,
                        scratch,
                        buf,
                    );
                    wire::end_len(buf, at);
                }
                _ => buf.extend_from_slice(&f.default),
            }
        } else if i < segments.len() && number(&segments[i]) == f.number {
            let s = segments[i];
            buf.extend_from_slice(&scratch[s.start - base..s.end - base]);
            i += 1;
        } else {
            buf.extend_from_slice(&f.default);
        }
    }
}

/// The content of a message (no tag or length), from a non-null JSON value
/// of its form.
struct Content<'a, 's> {
    e: &'a mut Encoder<'s>,
    m: MessageId,
}

impl<'de> DeserializeSeed<'de> for Content<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let schema = self.e.schema;
        let msg = &schema.messages[self.m];
        let fields = &msg.fields;
        match msg.form {
            Form::Object => d.deserialize_map(ObjectVisitor {
                e: self.e,
                m: self.m,
            }),
            Form::Array => d.deserialize_seq(Elements {
                e: self.e,
                field: &fields[0],
            }),
            Form::Time | Form::MicroTime => {
                let fraction = if msg.form == Form::Time {
                    Fraction::Any
                } else {
                    Fraction::Micro
                };
                let s = d.deserialize_str(Str)?;
                let (seconds, nanos) = time::parse(&s, fraction).ok_or_else(|| {
                    D::Error::custom(format!(
                        "time {} is not RFC 3339",
                        crate::error::bounded(&s)
                    ))
                })?;
                // Time carries whole seconds only (time_proto.go); MicroTime
                // microseconds. The zero time is an empty message.
                let nanos = if msg.form == Form::Time {
                    0
                } else {
                    nanos / 1000 * 1000
                };
                let buf = &mut self.e.buf;
                if seconds != time::ZERO_SECONDS || nanos != 0 {
                    buf.extend_from_slice(&fields[0].tag);
                    wire::varint(buf, seconds as u64);
                    buf.extend_from_slice(&fields[1].tag);
                    wire::varint(buf, u64::from(nanos));
                }
                Ok(())
            }
            Form::Quantity => {
                // Quantity.UnmarshalJSON reads the bytes between the quotes
                // (or a bare number), trimmed; the API server writes the
                // canonical string, which protobuf carries as it is.
                let raw = <&RawValue>::deserialize(d)?.get();
                let text = raw
                    .strip_prefix('"')
                    .and_then(|r| r.strip_suffix('"'))
                    .unwrap_or(raw)
                    .trim();
                wire::len_field(&mut self.e.buf, &fields[0].tag, text.as_bytes());
                Ok(())
            }
            Form::IntOrString => d.deserialize_any(IntOrStringVisitor {
                buf: &mut self.e.buf,
                fields,
            }),
            Form::Raw => {
                let raw = <&RawValue>::deserialize(d)?.get();
                wire::len_field(&mut self.e.buf, &fields[0].tag, raw.as_bytes());
                Ok(())
            }
            Form::OrBool | Form::OrArray | Form::OrStringArray => {
                d.deserialize_any(SchemaOrVisitor {
                    e: self.e,
                    m: self.m,
                })
            }
        }
    }
}

/// A JSON string, borrowed when it has no escapes.
struct Str;

impl<'de> Visitor<'de> for Str {
    type Value = std::borrow::Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.to_owned().into())
    }
}

struct ObjectVisitor<'a, 's> {
    e: &'a mut Encoder<'s>,
    m: MessageId,
}

impl<'de> Visitor<'de> for ObjectVisitor<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        object(self.e, self.m, map)
    }
}

/// Writes the fields of an object of message `m` from its keys.
fn object<'de, A: MapAccess<'de>>(
    e: &mut Encoder<'_>,
    m: MessageId,
    mut map: A,
) -> Result<(), A::Error> {
    let schema = e.schema;
    let msg = &schema.messages[m];
    let start = e.buf.len();
    let mark = e.segments.len();
    let mut seen = 0u128;
    while let Some(key) = map.next_key_seed(KeySeed { msg: &msg.keys })? {
        let Some((name, key)) = key else {
            // Not a field (kind and apiVersion, or one the pinned types do
            // not have): Kubernetes' decoder drops it too.
            map.next_value::<IgnoredAny>()?;
            continue;
        };
        let bit = 1u128 << key.bit;
        if seen & bit != 0 {
            return Err(A::Error::custom(format!(
                "key {} given twice",
                crate::error::bounded(name)
            )));
        }
        let field = &schema.messages[key.message].fields[key.field];
        let at = e.buf.len();
        map.next_value_seed(FieldSeed { e, field })?;
        if e.buf.len() > at {
            seen |= bit;
            e.segments.push(Segment {
                order: key.order,
                start: at,
                end: e.buf.len(),
            });
        }
    }
    e.finish_object(m, start, mark, seen);
    Ok(())
}

/// A key of an object: its field, or none.
struct KeySeed<'k> {
    msg: &'k std::collections::HashMap<Box<str>, Key, foldhash::fast::RandomState>,
}

impl<'de, 'k> DeserializeSeed<'de> for KeySeed<'k> {
    type Value = Option<(&'k str, Key)>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, 'k> Visitor<'de> for KeySeed<'k> {
    type Value = Option<(&'k str, Key)>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.msg.get_key_value(v).map(|(k, key)| (&**k, *key)))
    }
}

/// One field's JSON value: nothing for null, else the field's encoding
/// (tag included; a list's elements, a map's entries each with theirs).
struct FieldSeed<'a, 's, 'f> {
    e: &'a mut Encoder<'s>,
    field: &'f Field,
}

impl<'de> DeserializeSeed<'de> for FieldSeed<'_, '_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for FieldSeed<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "field {}", self.field.proto)
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match self.field.card {
            Card::One => value(self.e, self.field.ty, &self.field.tag, d),
            Card::Repeated => d.deserialize_seq(Elements {
                e: self.e,
                field: self.field,
            }),
            Card::Map => d.deserialize_map(Entries {
                e: self.e,
                field: self.field,
            }),
        }
    }
}

/// Writes one value of type `ty` with its tag.
fn value<'de, D: Deserializer<'de>>(
    e: &mut Encoder<'_>,
    ty: Type,
    tag: &[u8],
    d: D,
) -> Result<(), D::Error> {
    match ty {
        Type::String => {
            let s = d.deserialize_str(Str)?;
            wire::len_field(&mut e.buf, tag, s.as_bytes());
        }
        Type::Bytes => {
            // encoding/json's []byte: standard base64 with padding.
            let s = d.deserialize_str(Str)?;
            e.buf.extend_from_slice(tag);
            let at = wire::begin_len(&mut e.buf);
            base64::engine::general_purpose::STANDARD
                .decode_vec(s.as_bytes(), &mut e.buf)
                .map_err(|err| D::Error::custom(format!("bytes: {err}")))?;
            wire::end_len(&mut e.buf, at);
        }
        Type::Bool => {
            let b = bool::deserialize(d)?;
            e.buf.extend_from_slice(tag);
            e.buf.push(u8::from(b));
        }
        Type::Int32 => {
            let v = i32::deserialize(d)?;
            e.buf.extend_from_slice(tag);
            wire::varint(&mut e.buf, i64::from(v) as u64);
        }
        Type::Int64 => {
            let v = i64::deserialize(d)?;
            e.buf.extend_from_slice(tag);
            wire::varint(&mut e.buf, v as u64);
        }
        Type::Double => {
            let v = f64::deserialize(d)?;
            e.buf.extend_from_slice(tag);
            e.buf.extend_from_slice(&v.to_bits().to_le_bytes());
        }
        Type::Message(m) => {
            e.buf.extend_from_slice(tag);
            let at = wire::begin_len(&mut e.buf);
            Content { e: &mut *e, m }.deserialize(d)?;
            wire::end_len(&mut e.buf, at);
        }
    }
    Ok(())
}

/// Writes the zero value of type `ty` with its tag: a list's null element.
fn zero(schema: &Schema, buf: &mut Vec<u8>, ty: Type, tag: &[u8]) {
    buf.extend_from_slice(tag);
    match ty {
        Type::String | Type::Bytes => buf.push(0),
        Type::Bool | Type::Int32 | Type::Int64 => buf.push(0),
        Type::Double => buf.extend_from_slice(&[0; 8]),
        Type::Message(m) => {
            let z = &schema.messages[m].zero;
            wire::varint(buf, z.len() as u64);
            buf.extend_from_slice(z);
        }
    }
}

/// A list field's elements, each with the field's tag.
struct Elements<'a, 's, 'f> {
    e: &'a mut Encoder<'s>,
    field: &'f Field,
}

impl<'de> Visitor<'de> for Elements<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a list for {}", self.field.proto)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(Element {
                e: &mut *self.e,
                field: self.field,
            })?
            .is_some()
        {}
        Ok(())
    }
}

struct Element<'a, 's, 'f> {
    e: &'a mut Encoder<'s>,
    field: &'f Field,
}

impl<'de> DeserializeSeed<'de> for Element<'_, '_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for Element<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an element of {}", self.field.proto)
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        zero(
            self.e.schema,
            &mut self.e.buf,
            self.field.ty,
            &self.field.tag,
        );
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        value(self.e, self.field.ty, &self.field.tag, d)
    }
}

/// A map field's entries (`key` = 1, `value` = 2), ordered by key.
struct Entries<'a, 's, 'f> {
    e: &'a mut Encoder<'s>,
    field: &'f Field,
}

/// The tag of a map entry's key, a string.
const KEY_TAG: u8 = 1 << 3 | wire::LEN as u8;

impl<'de> Visitor<'de> for Entries<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a map for {}", self.field.proto)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let e = self.e;
        let value_tag = wire::tag(2, self.field.ty.wire());
        let start = e.buf.len();
        let mark = e.entries.len();
        while let Some(key) = map.next_key_seed(MapKey)? {
            let entry = e.buf.len();
            e.buf.extend_from_slice(&self.field.tag);
            let at = wire::begin_len(&mut e.buf);
            wire::len_field(&mut e.buf, &[KEY_TAG], key.as_bytes());
            map.next_value_seed(MapValue {
                e: &mut *e,
                ty: self.field.ty,
                tag: &value_tag,
            })?;
            wire::end_len(&mut e.buf, at);
            e.entries.push((entry, e.buf.len()));
        }
        e.finish_map(start, mark, self.field.tag.len())
            .map_err(A::Error::custom)
    }
}

struct MapKey;

impl<'de> DeserializeSeed<'de> for MapKey {
    type Value = std::borrow::Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(Str)
    }
}

/// A map entry's value: Go writes a null one as the zero value, except
/// bytes, whose nil it leaves out.
struct MapValue<'a, 's, 't> {
    e: &'a mut Encoder<'s>,
    ty: Type,
    tag: &'t [u8],
}

impl<'de> DeserializeSeed<'de> for MapValue<'_, '_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for MapValue<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map value")
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        if self.ty != Type::Bytes {
            zero(self.e.schema, &mut self.e.buf, self.ty, self.tag);
        }
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        value(self.e, self.ty, self.tag, d)
    }
}

/// intstr.IntOrString: a number is `{type: 0, intVal}`, a string
/// `{type: 1, strVal}`; Go writes all three fields.
struct IntOrStringVisitor<'b, 'f> {
    buf: &'b mut Vec<u8>,
    fields: &'f [Field],
}

impl<'de> Visitor<'de> for IntOrStringVisitor<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an int32 or a string")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        let v = i32::try_from(v)
            .map_err(|_| E::custom(format!("int-or-string {v} is out of range for int32")))?;
        let [ty, int_val, str_val] = self.fields else {
            unreachable!("checked by the schema")
        };
        self.buf.extend_from_slice(&ty.tag);
        self.buf.push(0);
        self.buf.extend_from_slice(&int_val.tag);
        wire::varint(self.buf, i64::from(v) as u64);
        self.buf.extend_from_slice(&str_val.tag);
        self.buf.push(0);
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        let [ty, int_val, str_val] = self.fields else {
            unreachable!("checked by the schema")
        };
        self.buf.extend_from_slice(&ty.tag);
        self.buf.push(1);
        self.buf.extend_from_slice(&int_val.tag);
        self.buf.push(0);
        wire::len_field(self.buf, &str_val.tag, v.as_bytes());
        Ok(())
    }
}

/// JSONSchemaPropsOr{Bool,Array,StringArray}: what their UnmarshalJSON
/// makes of each JSON type.
struct SchemaOrVisitor<'a, 's> {
    e: &'a mut Encoder<'s>,
    m: MessageId,
}

impl<'de> Visitor<'de> for SchemaOrVisitor<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON schema, a bool or a list")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        let msg = &self.e.schema.messages[self.m];
        match msg.form {
            Form::OrBool => {
                self.e.buf.extend_from_slice(&msg.fields[0].tag);
                self.e.buf.push(u8::from(v));
                Ok(())
            }
            // A JSON value of another type reads as the zero value.
            _ => Ok(()),
        }
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.other()
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.other()
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.other()
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.other()
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.other()
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let schema = self.e.schema;
        let msg = &schema.messages[self.m];
        // OrBool: allows (1) is true with a schema (2); the others: schema is 1.
        let field = if msg.form == Form::OrBool {
            self.e.buf.extend_from_slice(&msg.fields[0].tag);
            self.e.buf.push(1);
            &msg.fields[1]
        } else {
            &msg.fields[0]
        };
        let Type::Message(props) = field.ty else {
            unreachable!("checked by the schema")
        };
        self.e.buf.extend_from_slice(&field.tag);
        let at = wire::begin_len(&mut self.e.buf);
        object(self.e, props, map)?;
        wire::end_len(&mut self.e.buf, at);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        let msg = &self.e.schema.messages[self.m];
        if msg.form == Form::OrBool {
            return Err(A::Error::custom("boolean or JSON schema expected"));
        }
        Elements {
            e: self.e,
            field: &msg.fields[1],
        }
        .visit_seq(seq)
    }
}

impl SchemaOrVisitor<'_, '_> {
    /// A number, string or null: OrBool refuses it, the others read it as
    /// their zero value.
    fn other<E: de::Error>(self) -> Result<(), E> {
        match self.e.schema.messages[self.m].form {
            Form::OrBool => Err(E::custom("boolean or JSON schema expected")),
            _ => Ok(()),
        }
    }
}

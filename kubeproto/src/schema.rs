//! The schema of the built-in types: what `kubeproto/schema/kubernetes.schema`
//! (written from the Go types by `kubeproto/oracle`, its format described
//! in `kubeproto/oracle/schema.go`) says, read once into tables the encoder
//! walks: per message its fields by number with their tags and the bytes
//! Go writes for them when their JSON is absent, and the JSON keys of the
//! object, inlined fields' keys included, each with where its encoding goes.

use std::collections::HashMap;

use foldhash::fast::RandomState;

use crate::wire;

/// The vendored schema's text.
const SCHEMA: &str = include_str!("../schema/kubernetes.schema");

/// An index into [`Schema::messages`].
pub(crate) type MessageId = usize;

/// How many JSON keys one object may have (inlined fields' included): the
/// encoder keeps which it saw in a `u128`.
const MAX_KEYS: usize = 128;

/// How deep inlined fields nest: a key's place in the object is one field
/// number per level, 16 bits each, in a `u64`.
const MAX_INLINE_DEPTH: usize = 3;

/// The Kubernetes types, their kinds and messages.
#[derive(Debug)]
pub(crate) struct Schema {
    pub(crate) messages: Vec<Message>,
    /// By API version, then kind.
    kinds: HashMap<String, HashMap<String, MessageId, RandomState>, RandomState>,
    names: HashMap<String, MessageId, RandomState>,
}

/// How a message's JSON reads (the `FORM` of the schema).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// A JSON object of its fields.
    Object,
    /// A JSON array: the items of its one repeated field (ExtraValue).
    Array,
    /// metav1.Time: an RFC 3339 string, whole seconds on the wire.
    Time,
    /// metav1.MicroTime: an RFC 3339 string with microseconds.
    MicroTime,
    /// resource.Quantity: a string (or bare number), field 1 on the wire.
    Quantity,
    /// intstr.IntOrString: a number or a string.
    IntOrString,
    /// RawExtension, apiextensions JSON, FieldsV1: any JSON, its bytes.
    Raw,
    /// JSONSchemaPropsOrBool: a bool or a schema.
    OrBool,
    /// JSONSchemaPropsOrArray: a schema or an array of them.
    OrArray,
    /// JSONSchemaPropsOrStringArray: a schema or an array of strings.
    OrStringArray,
}

/// One message.
#[derive(Debug)]
pub(crate) struct Message {
    /// The Go type's name (package path, a dot, the type).
    pub(crate) name: String,
    pub(crate) form: Form,
    /// Its fields by number.
    pub(crate) fields: Vec<Field>,
    /// The JSON keys of an object form, inlined fields' keys included.
    pub(crate) keys: HashMap<Box<str>, Key, RandomState>,
    /// The keys whose field Go writes even when the key is absent.
    pub(crate) defaulted: u128,
    /// Whether every encoding must be laid out field by field: a field is
    /// inlined (its keys sit in this object), or Go writes a field that has
    /// no JSON key.
    pub(crate) assembles: bool,
    /// The encoding of the zero value (what Go writes for an absent
    /// non-pointer field of this type, and for a null in a list or map).
    pub(crate) zero: Vec<u8>,
}

/// One field of a message.
#[derive(Debug)]
pub(crate) struct Field {
    /// Its protobuf name (a form's encoder finds its fields by it).
    pub(crate) proto: String,
    pub(crate) number: u32,
    /// The encoded tag (for a map, of each entry).
    pub(crate) tag: Vec<u8>,
    pub(crate) ty: Type,
    pub(crate) card: Card,
    /// Its keys sit in the enclosing object.
    pub(crate) inline: bool,
    /// What Go writes for the field when its JSON is absent or null: the
    /// field's part of the message's zero encoding, tag included (empty
    /// for a pointer, a list or a map, which Go leaves out).
    pub(crate) default: Vec<u8>,
}

/// A field's protobuf type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Type {
    String,
    Bytes,
    Bool,
    Int32,
    Int64,
    Double,
    Message(MessageId),
}

/// One, a list, or a map from string keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Card {
    One,
    Repeated,
    Map,
}

/// One JSON key of an object.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Key {
    /// Its bit in the set of keys seen.
    pub(crate) bit: u32,
    /// Its place in the encoding: the field numbers from the object's own
    /// field down through inlined ones, 16 bits each from the top.
    pub(crate) order: u64,
    /// The message whose field it is (the object's, or an inlined one's).
    pub(crate) message: MessageId,
    /// The field's index in that message's fields.
    pub(crate) field: usize,
}

impl Type {
    /// The wire type this type is written with.
    pub(crate) fn wire(self) -> u32 {
        match self {
            Type::Bool | Type::Int32 | Type::Int64 => wire::VARINT,
            Type::Double => wire::FIXED64,
            Type::String | Type::Bytes | Type::Message(_) => wire::LEN,
        }
    }
}

impl Schema {
    /// The vendored schema.
    pub(crate) fn load() -> Self {
        Self::parse(SCHEMA).unwrap_or_else(|e| panic!("kubeproto/schema/kubernetes.schema: {e}"))
    }

    /// The message of objects of `api_version` and `kind`.
    pub(crate) fn kind(&self, api_version: &str, kind: &str) -> Option<MessageId> {
        self.kinds.get(api_version)?.get(kind).copied()
    }

    /// The message of a Go type, by name.
    pub(crate) fn message(&self, name: &str) -> Option<MessageId> {
        self.names.get(name).copied()
    }

    /// The field of `message` with protobuf name `proto`.
    pub(crate) fn field(&self, message: MessageId, proto: &str) -> Option<&Field> {
        self.messages[message]
            .fields
            .iter()
            .find(|f| f.proto == proto)
    }

    fn parse(text: &str) -> Result<Self, String> {
        // First pass: message names, so that fields may refer forwards.
        let mut names = HashMap::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("message ") {
                let name = rest.split(' ').next().unwrap_or_default();
                let id = names.len();
                names.insert(name.to_owned(), id);
            }
        }
        let mut messages: Vec<Message> = Vec::with_capacity(names.len());
        let mut kinds: HashMap<String, HashMap<String, MessageId, RandomState>, RandomState> =
            HashMap::default();
        for (n, line) in text.lines().enumerate() {
            let at = |e: String| format!("line {}: {e}: {line:?}", n + 1);
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                [] | [""] => {}
                [first, ..] if first.starts_with('#') => {}
                ["kind", api_version, kind, message] => {
                    let id = *names
                        .get(*message)
                        .ok_or_else(|| at("unknown message".into()))?;
                    kinds
                        .entry((*api_version).to_owned())
                        .or_default()
                        .insert((*kind).to_owned(), id);
                }
                ["message", name, form, zero] => messages.push(Message {
                    name: (*name).to_owned(),
                    form: parse_form(form).map_err(at)?,
                    fields: Vec::new(),
                    keys: HashMap::default(),
                    defaulted: 0,
                    assembles: false,
                    zero: parse_hex(zero).map_err(at)?,
                }),
                ["field", proto, json, number, ty, card, rest @ ..] => {
                    let message = messages
                        .last_mut()
                        .ok_or_else(|| at("field before any message".into()))?;
                    let number: u32 = number.parse().map_err(|_| at("bad number".into()))?;
                    if number == 0 || number >= 1 << 16 {
                        return Err(at("field number out of range".into()));
                    }
                    let ty = match *ty {
                        "string" => Type::String,
                        "bytes" => Type::Bytes,
                        "bool" => Type::Bool,
                        "int32" => Type::Int32,
                        "int64" => Type::Int64,
                        "double" => Type::Double,
                        name => Type::Message(
                            *names
                                .get(name)
                                .ok_or_else(|| at("unknown message".into()))?,
                        ),
                    };
                    let card = match *card {
                        "one" => Card::One,
                        "rep" => Card::Repeated,
                        "map" => Card::Map,
                        _ => return Err(at("bad cardinality".into())),
                    };
                    let inline = match rest {
                        [] => false,
                        ["inline"] => true,
                        _ => return Err(at("bad field options".into())),
                    };
                    let wire = if card == Card::Map {
                        wire::LEN
                    } else {
                        ty.wire()
                    };
                    message.fields.push(Field {
                        proto: (*proto).to_owned(),
                        number,
                        tag: wire::tag(number, wire),
                        ty,
                        card,
                        inline,
                        default: Vec::new(),
                    });
                    // The JSON key is kept in the field's place until the
                    // keys are laid out below; "-" has none.
                    if *json != "-" {
                        message.keys.insert(
                            (*json).into(),
                            Key {
                                bit: 0,
                                order: 0,
                                message: 0,
                                field: message.fields.len() - 1,
                            },
                        );
                    }
                }
                _ => return Err(at("unknown record".into())),
            }
        }
        for m in &mut messages {
            split_zero(m)?;
            check_form(m)?;
            // Fields the object's own pass cannot see to: inlined ones, and
            // defaulted fields with no JSON key.
            let keyed: Vec<usize> = m.keys.values().map(|k| k.field).collect();
            m.assembles = m
                .fields
                .iter()
                .enumerate()
                .any(|(i, f)| f.inline || (!f.default.is_empty() && !keyed.contains(&i)));
        }
        let own: Vec<Vec<(Box<str>, usize)>> = messages
            .iter()
            .map(|m| {
                m.keys
                    .iter()
                    .map(|(k, key)| (k.clone(), key.field))
                    .collect()
            })
            .collect();
        for id in 0..messages.len() {
            let mut keys = HashMap::default();
            let mut defaulted = 0u128;
            lay_out(&messages, &own, id, id, 0, 0, &mut keys, &mut defaulted)?;
            messages[id].keys = keys;
            messages[id].defaulted = defaulted;
        }
        Ok(Schema {
            messages,
            kinds,
            names,
        })
    }
}

/// Gives each JSON key of `object` (the keys of `at`, a message inlined
/// `depth` levels into it at `order`) its bit and place.
#[allow(clippy::too_many_arguments)]
fn lay_out(
    messages: &[Message],
    own: &[Vec<(Box<str>, usize)>],
    object: MessageId,
    at: MessageId,
    depth: usize,
    order: u64,
    keys: &mut HashMap<Box<str>, Key, RandomState>,
    defaulted: &mut u128,
) -> Result<(), String> {
    if depth >= MAX_INLINE_DEPTH {
        return Err(format!(
            "{}: inlined deeper than {MAX_INLINE_DEPTH}",
            messages[object].name
        ));
    }
    let shift = 48 - 16 * depth;
    for f in &messages[at].fields {
        if !f.inline {
            continue;
        }
        let Type::Message(child) = f.ty else {
            return Err(format!(
                "{}.{}: an inlined field that is no message",
                messages[at].name, f.proto
            ));
        };
        lay_out(
            messages,
            own,
            object,
            child,
            depth + 1,
            order | u64::from(f.number) << shift,
            keys,
            defaulted,
        )?;
    }
    for (json, field) in &own[at] {
        let f = &messages[at].fields[*field];
        let bit = keys.len() as u32;
        if keys.len() >= MAX_KEYS {
            return Err(format!(
                "{}: more than {MAX_KEYS} JSON keys",
                messages[object].name
            ));
        }
        if !f.default.is_empty() {
            *defaulted |= 1 << bit;
        }
        let key = Key {
            bit,
            order: order | u64::from(f.number) << shift,
            message: at,
            field: *field,
        };
        if keys.insert(json.clone(), key).is_some() {
            return Err(format!(
                "{}: JSON key {json:?} twice",
                messages[object].name
            ));
        }
    }
    Ok(())
}

/// Splits a message's zero encoding into its fields' defaults.
fn split_zero(m: &mut Message) -> Result<(), String> {
    let mut rest = &m.zero[..];
    while !rest.is_empty() {
        let bad = || format!("{}: zero encoding unreadable", m.name);
        let (tag, n) = wire::read_varint(rest).ok_or_else(bad)?;
        let len = match (tag & 7) as u32 {
            wire::VARINT => n + wire::read_varint(&rest[n..]).ok_or_else(bad)?.1,
            wire::FIXED64 => n + 8,
            wire::LEN => {
                let (l, k) = wire::read_varint(&rest[n..]).ok_or_else(bad)?;
                n + k + l as usize
            }
            _ => return Err(bad()),
        };
        if len > rest.len() {
            return Err(bad());
        }
        let number = (tag >> 3) as u32;
        let field = m
            .fields
            .iter_mut()
            .find(|f| f.number == number)
            .ok_or_else(|| format!("{}: zero encoding has field {number}", m.name))?;
        field.default = rest[..len].to_vec();
        rest = &rest[len..];
    }
    Ok(())
}

/// The fields a form's encoder writes, by protobuf name, in number order.
fn form_fields(form: Form) -> &'static [&'static str] {
    match form {
        Form::Object => &[],
        Form::Array => &["items"],
        Form::Time | Form::MicroTime => &["seconds", "nanos"],
        Form::Quantity => &["string"],
        Form::IntOrString => &["type", "intVal", "strVal"],
        Form::Raw => &["raw"],
        Form::OrBool => &["allows", "schema"],
        Form::OrArray => &["schema", "jSONSchemas"],
        Form::OrStringArray => &["schema", "property"],
    }
}

/// A form's encoder takes its fields by position: they must be the ones it
/// knows (FieldsV1 names its one field "Raw").
fn check_form(m: &Message) -> Result<(), String> {
    let want = form_fields(m.form);
    if m.form == Form::Object {
        return Ok(());
    }
    let have: Vec<String> = m
        .fields
        .iter()
        .map(|f| f.proto.to_ascii_lowercase())
        .collect();
    if have.len() != want.len()
        || have
            .iter()
            .zip(want)
            .any(|(h, w)| *h != w.to_ascii_lowercase())
    {
        return Err(format!(
            "{}: fields {have:?}, its form writes {want:?}",
            m.name
        ));
    }
    Ok(())
}

fn parse_form(form: &str) -> Result<Form, String> {
    Ok(match form {
        "object" => Form::Object,
        "array" => Form::Array,
        "time" => Form::Time,
        "microtime" => Form::MicroTime,
        "quantity" => Form::Quantity,
        "intorstring" => Form::IntOrString,
        "raw" => Form::Raw,
        "orbool" => Form::OrBool,
        "orarray" => Form::OrArray,
        "orstringarray" => Form::OrStringArray,
        _ => return Err("unknown form".into()),
    })
}

fn parse_hex(hex: &str) -> Result<Vec<u8>, String> {
    if hex == "-" {
        return Ok(Vec::new());
    }
    if !hex.len().is_multiple_of(2) {
        return Err("odd hex".into());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| "bad hex".to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_schema_loads_with_every_kind_on_a_message() {
        let schema = Schema::load();
        let pod = schema.kind("v1", "Pod").expect("v1 Pod");
        assert_eq!(schema.messages[pod].name, "k8s.io/api/core/v1.Pod");
        assert!(
            schema
                .kind("apiextensions.k8s.io/v1", "CustomResourceDefinition")
                .is_some()
        );
        assert!(
            schema
                .kind("meta.k8s.io/v1", "PartialObjectMetadataList")
                .is_some()
        );
        assert!(
            schema.kind("meta.k8s.io/v1", "Table").is_none(),
            "Table has no protobuf form"
        );
    }

    #[test]
    fn inlined_keys_sit_in_the_enclosing_object_at_their_field() {
        let schema = Schema::load();
        let volume = schema.message("k8s.io/api/core/v1.Volume").expect("Volume");
        let config_map = schema.messages[volume].keys["configMap"];
        let source = schema
            .message("k8s.io/api/core/v1.VolumeSource")
            .expect("VolumeSource");
        assert_eq!(config_map.message, source);
        let f = &schema.messages[source].fields[config_map.field];
        assert_eq!(
            config_map.order,
            2 << 48 | u64::from(f.number) << 32,
            "volumeSource is field 2"
        );
        assert_eq!(schema.messages[volume].keys["name"].order, 1 << 48);
    }

    #[test]
    fn defaults_are_the_zero_encoding_of_each_non_pointer_field() {
        let schema = Schema::load();
        let meta = schema
            .message("k8s.io/apimachinery/pkg/apis/meta/v1.ObjectMeta")
            .expect("ObjectMeta");
        let name = schema.field(meta, "name").expect("name");
        assert_eq!(name.default, [0x0a, 0x00]);
        let deletion = schema
            .field(meta, "deletionTimestamp")
            .expect("deletionTimestamp");
        assert!(deletion.default.is_empty(), "a pointer is left out");
        let created = schema
            .field(meta, "creationTimestamp")
            .expect("creationTimestamp");
        assert_eq!(
            created.default,
            [0x42, 0x00],
            "a zero Time is an empty message"
        );
    }
}

//! The library's face: objects, lists and watch events of the built-in
//! types in the Kubernetes protobuf wire format, enveloped as
//! `k8s.io/apimachinery/pkg/runtime/serializer/protobuf` writes them.

use serde::Serialize;

use crate::error::{Quoted, TranscodeError};
use crate::schema::{MessageId, Schema, Type};
use crate::transcode::Encoder;
use crate::wire;

/// What every protobuf-encoded object starts with (protobuf.go).
const MAGIC: &[u8] = b"k8s\0";

// runtime.Unknown's fields (types_proto.go): typeMeta, raw,
// contentEncoding, contentType; and runtime.TypeMeta's: apiVersion, kind.
const TYPE_META_TAG: u8 = 0x0a;
const RAW_TAG: u8 = 0x12;
const CONTENT_ENCODING_TAG: u8 = 0x1a;
const CONTENT_TYPE_TAG: u8 = 0x22;
const API_VERSION_TAG: u8 = 0x0a;
const KIND_TAG: u8 = 0x12;

/// The watch event types the API server sends.
const EVENT_TYPES: [&str; 5] = ["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"];

/// Protobuf encodings of JSON objects of the built-in types at the pinned
/// Kubernetes version (`kubeproto/oracle/go.mod`): every kind of
/// k8s.io/api, apiextensions-apiserver and kube-aggregator, and the
/// meta.k8s.io kinds (Status, PartialObjectMetadata and its list; Table has
/// no protobuf form, the API server answers 406 for it). Built once (a few
/// milliseconds: the schema is read into tables), then shared: `Send +
/// Sync`, every method takes `&self`.
///
/// The JSON is the API server's (what the store holds): a field the pinned
/// types do not have is dropped, as a client of that version drops it.
#[derive(Debug)]
pub struct KubeProtobuf {
    schema: Schema,
    list_meta: MessageId,
    watch_event: WatchEventFields,
}

/// The tags of metav1.WatchEvent's fields and of RawExtension's one.
#[derive(Debug)]
struct WatchEventFields {
    event_type: Vec<u8>,
    object: Vec<u8>,
    raw: Vec<u8>,
}

/// A list's metadata, as the list's JSON would carry it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListMeta {
    /// The resourceVersion the list is at.
    pub resource_version: String,
    /// The token for the next page, empty on the last.
    #[serde(rename = "continue")]
    pub continue_token: String,
    /// How many items are left after this page, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_item_count: Option<i64>,
}

impl Default for KubeProtobuf {
    fn default() -> Self {
        Self::new()
    }
}

impl KubeProtobuf {
    /// Reads the vendored schema.
    pub fn new() -> Self {
        let schema = Schema::load();
        let message = |name: &str| {
            schema
                .message(name)
                .unwrap_or_else(|| panic!("the schema has no {name}"))
        };
        let tag = |m: MessageId, proto: &str| {
            schema
                .field(m, proto)
                .unwrap_or_else(|| panic!("the schema has no {proto}"))
                .tag
                .clone()
        };
        let list_meta = message("k8s.io/apimachinery/pkg/apis/meta/v1.ListMeta");
        let event = message("k8s.io/apimachinery/pkg/apis/meta/v1.WatchEvent");
        let raw = message("k8s.io/apimachinery/pkg/runtime.RawExtension");
        let watch_event = WatchEventFields {
            event_type: tag(event, "type"),
            object: tag(event, "object"),
            raw: tag(raw, "raw"),
        };
        KubeProtobuf {
            schema,
            list_meta,
            watch_event,
        }
    }

    /// Whether objects of this apiVersion and kind can be encoded.
    pub fn supports(&self, api_version: &str, kind: &str) -> bool {
        self.schema.kind(api_version, kind).is_some()
    }

    /// One object, as the API server answers a GET: the magic `k8s\0`, then
    /// runtime.Unknown{typeMeta{api_version, kind}, raw: the object}.
    ///
    /// `json` may lack `kind` and `apiVersion` (list items do): the
    /// arguments say what it is. Kind `PartialObjectMetadata` (of
    /// `meta.k8s.io/v1`) encodes any object's metadata from its full JSON.
    pub fn object(
        &self,
        api_version: &str,
        kind: &str,
        json: &[u8],
    ) -> Result<Vec<u8>, TranscodeError> {
        let m = self.kind(api_version, kind)?;
        let mut e = Encoder::new(&self.schema, json.len() + 64);
        self.enveloped(&mut e, api_version, kind, |e| {
            e.message(m, json)
                .map_err(|err| TranscodeError::json(kind, &err))
        })?;
        Ok(e.buf)
    }

    /// A list (`list_kind` is the list's kind, "ConfigMapList"), with its
    /// metadata and items given as JSON objects of the list's item kind.
    pub fn list<'a>(
        &self,
        api_version: &str,
        list_kind: &str,
        meta: &ListMeta,
        items: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Vec<u8>, TranscodeError> {
        let m = self.kind(api_version, list_kind)?;
        let list = &self.schema.messages[m];
        let field = |json: &str| {
            let key = list.keys.get(json).filter(|k| k.message == m);
            key.map(|k| &list.fields[k.field])
                .ok_or_else(|| self.unsupported(api_version, list_kind))
        };
        let (metadata, items_field) = (field("metadata")?, field("items")?);
        let Type::Message(item) = items_field.ty else {
            return Err(self.unsupported(api_version, list_kind));
        };
        let meta_json = serde_json::to_vec(meta).expect("ListMeta serializes");
        let mut e = Encoder::new(&self.schema, 4096);
        self.enveloped(&mut e, api_version, list_kind, |e| {
            // By field number, as Go writes them: metadata is 1 and items 2
            // in every list but meta.k8s.io/v1beta1's, which has them the
            // other way round.
            let write_meta = |e: &mut Encoder<'_>| {
                e.buf.extend_from_slice(&metadata.tag);
                let at = wire::begin_len(&mut e.buf);
                e.message(self.list_meta, &meta_json)
                    .map_err(|err| TranscodeError::json("ListMeta", &err))?;
                wire::end_len(&mut e.buf, at);
                Ok::<_, TranscodeError>(())
            };
            if metadata.number < items_field.number {
                write_meta(e)?;
            }
            for json in items {
                e.buf.extend_from_slice(&items_field.tag);
                let at = wire::begin_len(&mut e.buf);
                e.message(item, json)
                    .map_err(|err| TranscodeError::json(list_kind, &err))?;
                wire::end_len(&mut e.buf, at);
            }
            if metadata.number > items_field.number {
                write_meta(e)?;
            }
            Ok(())
        })?;
        Ok(e.buf)
    }

    /// One watch event as the API server streams it: a 4-byte big-endian
    /// length, then metav1.WatchEvent{type, object: RawExtension{raw: the
    /// object as [`object`](Self::object) encodes it}}.
    pub fn watch_event(
        &self,
        event_type: &str,
        api_version: &str,
        kind: &str,
        object_json: &[u8],
    ) -> Result<Vec<u8>, TranscodeError> {
        if !EVENT_TYPES.contains(&event_type) {
            return Err(TranscodeError::EventType(Quoted::new(event_type)));
        }
        let m = self.kind(api_version, kind)?;
        let fields = &self.watch_event;
        let mut e = Encoder::new(&self.schema, object_json.len() + 96);
        e.buf.extend_from_slice(&[0; 4]);
        wire::len_field(&mut e.buf, &fields.event_type, event_type.as_bytes());
        e.buf.extend_from_slice(&fields.object);
        let object = wire::begin_len(&mut e.buf);
        e.buf.extend_from_slice(&fields.raw);
        let raw = wire::begin_len(&mut e.buf);
        self.enveloped(&mut e, api_version, kind, |e| {
            e.message(m, object_json)
                .map_err(|err| TranscodeError::json(kind, &err))
        })?;
        wire::end_len(&mut e.buf, raw);
        wire::end_len(&mut e.buf, object);
        let len = u32::try_from(e.buf.len() - 4).expect("an event under 4 GiB");
        e.buf[..4].copy_from_slice(&len.to_be_bytes());
        Ok(e.buf)
    }

    fn kind(&self, api_version: &str, kind: &str) -> Result<MessageId, TranscodeError> {
        self.schema
            .kind(api_version, kind)
            .ok_or_else(|| self.unsupported(api_version, kind))
    }

    fn unsupported(&self, api_version: &str, kind: &str) -> TranscodeError {
        TranscodeError::Unsupported {
            api_version: Quoted::new(api_version),
            kind: Quoted::new(kind),
        }
    }

    /// Appends the magic and a runtime.Unknown whose raw `body` writes.
    fn enveloped(
        &self,
        e: &mut Encoder<'_>,
        api_version: &str,
        kind: &str,
        body: impl FnOnce(&mut Encoder<'_>) -> Result<(), TranscodeError>,
    ) -> Result<(), TranscodeError> {
        e.buf.extend_from_slice(MAGIC);
        e.buf.push(TYPE_META_TAG);
        let at = wire::begin_len(&mut e.buf);
        wire::len_field(&mut e.buf, &[API_VERSION_TAG], api_version.as_bytes());
        wire::len_field(&mut e.buf, &[KIND_TAG], kind.as_bytes());
        wire::end_len(&mut e.buf, at);
        e.buf.push(RAW_TAG);
        let at = wire::begin_len(&mut e.buf);
        body(e)?;
        wire::end_len(&mut e.buf, at);
        // Go writes contentEncoding and contentType, empty, always.
        e.buf
            .extend_from_slice(&[CONTENT_ENCODING_TAG, 0, CONTENT_TYPE_TAG, 0]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_error(kp: &KubeProtobuf, kind: &str, json: &str) -> String {
        match kp.object("v1", kind, json.as_bytes()) {
            Err(e @ TranscodeError::Json { .. }) => e.to_string(),
            other => panic!("{json}: {other:?}"),
        }
    }

    #[test]
    fn a_kind_without_a_protobuf_form_is_refused_by_name() {
        let kp = KubeProtobuf::new();
        assert!(!kp.supports("meta.k8s.io/v1", "Table"));
        assert!(kp.supports("v1", "Pod"));
        let e = kp
            .object("example.com/v1", "Thing", b"{}")
            .expect_err("a custom resource");
        assert_eq!(
            e.to_string(),
            r#""Thing" of "example.com/v1" has no Kubernetes protobuf encoding here"#
        );
        assert!(
            matches!(
                kp.list("v1", "Pod", &ListMeta::default(), []),
                Err(TranscodeError::Unsupported { .. })
            ),
            "Pod is no list"
        );
    }

    #[test]
    fn a_watch_event_type_the_api_server_does_not_send_is_refused() {
        let kp = KubeProtobuf::new();
        let e = kp
            .watch_event("UPDATED", "v1", "ConfigMap", b"{}")
            .expect_err("no such type");
        assert!(matches!(e, TranscodeError::EventType(_)), "{e}");
        assert!(
            kp.watch_event(
                "BOOKMARK",
                "v1",
                "ConfigMap",
                br#"{"metadata":{"resourceVersion":"7"}}"#
            )
            .is_ok()
        );
    }

    #[test]
    fn json_go_would_refuse_is_refused_with_what_is_wrong() {
        let kp = KubeProtobuf::new();
        let e = json_error(
            &kp,
            "ReplicationController",
            r#"{"spec":{"replicas":4294967296}}"#,
        );
        assert!(e.contains("i32"), "{e}");
        let e = json_error(&kp, "ConfigMap", r#"{"metadata":{"name":"a","name":"b"}}"#);
        assert!(e.contains(r#"key "name" given twice"#), "{e}");
        let e = json_error(&kp, "ConfigMap", r#"{"data":{"k":"1","a":"2","k":"3"}}"#);
        assert!(e.contains(r#"map key "k" given twice"#), "{e}");
        let e = json_error(&kp, "ConfigMap", r#"{"binaryData":{"k":"not base64!"}}"#);
        assert!(e.contains("bytes"), "{e}");
        let e = json_error(
            &kp,
            "Pod",
            r#"{"spec":{"containers":[{"ports":[{"containerPort":1.5}]}]}}"#,
        );
        assert!(e.contains("floating point"), "{e}");
        let e = json_error(&kp, "ConfigMap", r#"{"data":{}} trailing"#);
        assert!(e.contains("trailing"), "{e}");
    }

    #[test]
    fn an_error_quotes_at_most_a_bound_of_its_input() {
        let kp = KubeProtobuf::new();
        let long = "9".repeat(100_000);
        let e = json_error(
            &kp,
            "ConfigMap",
            &format!(r#"{{"metadata":{{"creationTimestamp":"{long}"}}}}"#),
        );
        assert!(e.len() < 500, "{} bytes: {e}", e.len());
        assert!(e.contains("(100000 bytes)\" is not RFC 3339"), "{e}");
        let e = json_error(
            &kp,
            "ConfigMap",
            &format!(r#"{{"metadata":{{"name":{long}}}}}"#),
        );
        assert!(e.len() < 400, "{} bytes: {e}", e.len());
    }

    #[test]
    fn a_watch_frame_is_its_length_then_the_event() {
        let kp = KubeProtobuf::new();
        let json = br#"{"metadata":{"name":"c"}}"#;
        let object = kp.object("v1", "ConfigMap", json).expect("object");
        let frame = kp
            .watch_event("ADDED", "v1", "ConfigMap", json)
            .expect("frame");
        let len = u32::from_be_bytes(frame[..4].try_into().expect("4 bytes")) as usize;
        assert_eq!(len, frame.len() - 4);
        assert!(
            frame.ends_with(&object),
            "the enveloped object is the event's last field"
        );
        assert!(
            object.starts_with(b"k8s\0\x0a\x0f\x0a\x02v1\x12\x09ConfigMap\x12"),
            "{object:?}"
        );
    }
}

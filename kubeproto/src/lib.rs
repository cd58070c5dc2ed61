//! kube-fanout-kubeproto: JSON objects of the built-in Kubernetes types
//! (as the API server writes them, as kube-fanout's store holds them) to
//! the Kubernetes protobuf wire format (`application/vnd.kubernetes.protobuf`),
//! byte for byte as `k8s.io/apimachinery`'s protobuf serializer writes the
//! object Kubernetes' JSON decoder reads from the same text. A pure
//! library on no crate of kube-fanout's (layer 0).
//!
//! [`KubeProtobuf`] encodes one object (the `k8s\0` magic and the
//! runtime.Unknown envelope), a list, or a watch event frame.
//!
//! What Go does that the JSON alone does not say comes from the Go types
//! themselves: `kubeproto/schema/kubernetes.schema`, written by
//! `kubeproto/schema/generate.sh` from the pinned modules with the Go
//! program in `kubeproto/oracle`, names each kind's message, each JSON key's
//! field (inlined structs' keys included, and the protobuf names that
//! differ from the JSON ones), the types whose JSON Kubernetes writes by
//! hand (Time, MicroTime, Quantity, IntOrString, RawExtension and
//! apiextensions JSON, the JSONSchemaProps unions), and the fields Go
//! writes even when their JSON is absent (as the zero value's encoding).
//! The same program checks this crate's output against Go's serializer
//! (`tests/differential.rs`).
//!
//! Modules, lowest first: `wire` (varints, lengths), `time` (RFC 3339),
//! `error`, `schema` (the tables), `transcode` (one JSON pass to
//! protobuf), `kube_protobuf` (envelopes, lists, watch frames).

mod error;
mod kube_protobuf;
mod schema;
mod time;
mod transcode;
mod wire;

pub use error::{Quoted, TranscodeError};
pub use kube_protobuf::{KubeProtobuf, ListMeta};

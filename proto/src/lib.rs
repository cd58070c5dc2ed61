//! kube-fanout's gRPC API (`kubefanout.v1`), generated from `proto/`, and
//! what its server and client must agree on beyond the messages: how a
//! resource type is named ([`GroupVersionResource`]), how a Watch stream
//! marks the end of a unit ([`ends_initial_events`], [`ends_resync`]), and
//! the status reasons a client acts on by name ([`CONNECTION_RETIRED`],
//! [`EXPIRED`], ...).
//!
//! The `grpc` feature (on by default) adds the tonic client and server
//! stubs and the server's codec; without it the crate is the messages
//! alone, so the server's tonic-free core can use them.

mod resource;
mod unit;

pub use resource::{GroupVersionResource, ResourceSyntaxError};
pub use unit::{INITIAL_EVENTS_END, ends_initial_events, ends_resync};

/// The `google.rpc.ErrorInfo` reason of a Watch ended UNAVAILABLE because
/// the server retired its connection at its maximum age: a client resumes
/// at once, from the resourceVersion the status carries, on a new
/// connection (the server sent GOAWAY first), rather than backing off or
/// failing over as from a server going away.
pub const CONNECTION_RETIRED: &str = "ConnectionRetired";

/// The domain of kube-fanout's `google.rpc.ErrorInfo` details.
pub const ERROR_DOMAIN: &str = "kube-fanout.io";

/// The `ErrorInfo` reason of a Watch or List that asked for a
/// resourceVersion older than the server's history (or inside a re-sync
/// gap): the client takes a new snapshot.
pub const EXPIRED: &str = "Expired";

/// The `ErrorInfo` reason of a request for a resourceVersion newer than
/// the server has seen yet.
pub const TOO_LARGE_RESOURCE_VERSION: &str = "TooLargeResourceVersion";

/// The `ErrorInfo` reason of a Watch, List or Get ended UNAVAILABLE
/// because the server's cache of the type did not sync within the wait
/// the request allows (the freshness timeout): the status carries a
/// `RetryInfo`, and the client retries after its delay.
pub const NOT_SYNCED: &str = "NotSynced";

/// The `ErrorInfo` reason of a Watch ended because the server is shutting
/// down: the client resumes, from the resourceVersion the status carries,
/// elsewhere.
pub const SHUTTING_DOWN: &str = "ShuttingDown";

/// The `ErrorInfo` reason of a Watch ended NOT_FOUND because the API
/// server no longer serves its type (its CustomResourceDefinition was
/// deleted): nothing to resume; the type may be served again once it is
/// back.
pub const NO_LONGER_SERVED: &str = "NoLongerServed";

/// The `ErrorInfo` reason of a Watch ended because its subscriber fell too
/// far behind: the client resumes from the resourceVersion the status
/// carries.
pub const SUBSCRIBER_LAGGED: &str = "SubscriberLagged";

/// The `ErrorInfo` reason of a call refused because too many TokenReviews
/// are in flight for unknown tokens: the client retries after the
/// `RetryInfo` delay.
pub const TOKEN_REVIEWS_THROTTLED: &str = "TokenReviewsThrottled";

/// The `ErrorInfo` reason of a call refused because its source failed to
/// authenticate too often: the connection closes unless it authenticated,
/// and new ones from the source are refused until the `RetryInfo` delay
/// has passed.
pub const AUTHENTICATION_FAILURES_EXCEEDED: &str = "AuthenticationFailuresExceeded";

/// The `ErrorInfo` reason of a call refused by the API server's
/// authorization (PERMISSION_DENIED, its message in the API server's
/// words): the metadata names the refused `group`, `resource` and `name`
/// (empty for none), what the API server's 403 Status details name.
pub const FORBIDDEN: &str = "Forbidden";

/// Package `kubefanout.v1`: its messages, and with the `grpc` feature its
/// tonic client and server.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/kubefanout.v1.rs"));
    // The server, generated apart so that Watch writes pre-encoded events
    // (see `build.rs` and [`crate::wire`]).
    #[cfg(feature = "grpc")]
    include!(concat!(env!("OUT_DIR"), "/server/kubefanout.v1.rs"));

    /// The encoded `FileDescriptorSet` of this package, for gRPC server
    /// reflection.
    #[cfg(feature = "grpc")]
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("kubefanout_descriptor");
}

/// How the generated server writes its responses: prost messages are
/// encoded as usual, and a Watch event arrives already encoded, so the
/// bytes one encode made go to every subscriber.
#[allow(missing_docs, clippy::all)]
pub mod wire {
    #[cfg(feature = "grpc")]
    use std::marker::PhantomData;
    use std::{io::Write as _, sync::Arc};

    #[cfg(feature = "grpc")]
    use prost::Message;
    use prost::{
        bytes::{BufMut, Bytes},
        encoding::{WireType, encode_key, encode_varint},
    };
    #[cfg(feature = "grpc")]
    use tonic::{
        Status,
        codec::{BufferSettings, Codec, EncodeBuf, Encoder},
    };
    #[cfg(feature = "grpc")]
    use tonic_prost::ProstDecoder;

    use crate::v1::EventType;

    /// A `kubefanout.v1.WatchEvent`, ready to write. The server's `Watch`
    /// streams these; clients receive and decode plain `WatchEvent`s.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum EncodedWatchEvent {
        /// Encoded once, and the same bytes written to every subscriber
        /// that receives the event unchanged.
        Shared(Bytes),
        /// Made for one subscriber (say a snapshot's ADDED): its object is
        /// written straight from the server's JSON, with no copy before.
        Own(OwnWatchEvent),
    }

    impl EncodedWatchEvent {
        /// The message's bytes: the shared ones themselves, or an own
        /// event's written out.
        pub fn to_bytes(&self) -> Bytes {
            match self {
                EncodedWatchEvent::Shared(bytes) => bytes.clone(),
                EncodedWatchEvent::Own(own) => own.to_bytes(),
            }
        }

        /// The length of the encoded message, without writing it out.
        pub fn encoded_len(&self) -> usize {
            match self {
                EncodedWatchEvent::Shared(bytes) => bytes.len(),
                EncodedWatchEvent::Own(own) => own.encoded_len(),
            }
        }
    }

    /// Appends the header gRPC puts before each message on the wire: a
    /// byte saying whether the message is compressed, then its length
    /// (`len` bytes, four bytes big-endian).
    pub fn put_frame_header(buf: &mut impl BufMut, compressed: bool, len: usize) {
        buf.put_u8(u8::from(compressed));
        buf.put_u32(
            u32::try_from(len).expect("an object etcd holds is at most a few MiB, far below 4 GiB"),
        );
    }

    /// The most an own event's type and resourceVersion fields take: a key
    /// and a one-byte varint, then a key, a one-byte length and the at
    /// most 20 digits of a `u64`.
    const HEAD_MAX: usize = 2 + 2 + 20;

    /// A `WatchEvent` for one subscriber. The fields before `object` are
    /// encoded in place (no allocation); `object` is shared with whoever
    /// holds the JSON and copied once, into the response buffer. The bytes
    /// written are exactly prost's encoding of the same message.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct OwnWatchEvent {
        head: [u8; HEAD_MAX],
        head_len: u8,
        object: Arc<str>,
        resync: bool,
        /// `head_resource_version`, if set.
        server_head: Option<u64>,
    }

    impl OwnWatchEvent {
        /// The event `WatchEvent { type, resource_version, object, resync }`
        /// (no `head_resource_version`: see [`Self::with_server_head`]).
        pub fn new(
            r#type: EventType,
            resource_version: u64,
            object: Arc<str>,
            resync: bool,
        ) -> Self {
            let mut head = [0u8; HEAD_MAX];
            let mut digits = [0u8; 20];
            let mut rv = &mut digits[..];
            write!(rv, "{resource_version}").expect("a u64 has at most 20 digits");
            let digits_len = 20 - rv.len();
            let mut buf = &mut head[..];
            // prost leaves out fields at their default value: so does this.
            if r#type != EventType::Unspecified {
                encode_key(1, WireType::Varint, &mut buf);
                encode_varint(r#type as u64, &mut buf);
            }
            encode_key(2, WireType::LengthDelimited, &mut buf);
            encode_varint(digits_len as u64, &mut buf);
            buf.put_slice(&digits[..digits_len]);
            let head_len = (HEAD_MAX - buf.len()) as u8;
            OwnWatchEvent {
                head,
                head_len,
                object,
                resync,
                server_head: None,
            }
        }

        /// The event with `head_resource_version` set to `rv` (the
        /// server's head as it sends a bookmark).
        pub fn with_server_head(self, rv: u64) -> Self {
            OwnWatchEvent {
                server_head: Some(rv),
                ..self
            }
        }

        /// The length of the encoded message.
        pub fn encoded_len(&self) -> usize {
            let object = match self.object.len() {
                0 => 0,
                n => 1 + prost::encoding::encoded_len_varint(n as u64) + n,
            };
            // A key and a one-byte length, then at most 20 digits.
            let server_head = self.server_head.map_or(0, |rv| 2 + digits(rv));
            usize::from(self.head_len) + object + if self.resync { 2 } else { 0 } + server_head
        }

        /// The encoded message, written out.
        pub fn to_bytes(&self) -> Bytes {
            let mut buf = Vec::with_capacity(self.encoded_len());
            self.put(&mut buf);
            buf.into()
        }

        /// Appends the message as gRPC frames it on the wire: its frame
        /// header ([`put_frame_header`], not compressed), then the encoded
        /// message. Frames written one after another are a stream's
        /// messages in that order.
        pub fn put_framed(&self, buf: &mut impl BufMut) {
            put_frame_header(buf, false, self.encoded_len());
            self.put(buf);
        }

        /// Appends the encoded message to `buf`.
        pub fn put(&self, buf: &mut impl BufMut) {
            buf.put_slice(&self.head[..usize::from(self.head_len)]);
            if !self.object.is_empty() {
                encode_key(3, WireType::LengthDelimited, buf);
                encode_varint(self.object.len() as u64, buf);
                buf.put_slice(self.object.as_bytes());
            }
            if self.resync {
                encode_key(4, WireType::Varint, buf);
                buf.put_u8(1);
            }
            if let Some(rv) = self.server_head {
                let rv = rv.to_string();
                encode_key(5, WireType::LengthDelimited, buf);
                encode_varint(rv.len() as u64, buf);
                buf.put_slice(rv.as_bytes());
            }
        }
    }

    /// How many decimal digits `n` has.
    fn digits(n: u64) -> usize {
        n.checked_ilog10().map_or(1, |log| log as usize + 1)
    }

    #[cfg(feature = "grpc")]
    /// A response the server writes.
    pub trait ServerMessage: Send + 'static {
        /// Appends the encoded message to `buf`.
        fn write(self, buf: &mut EncodeBuf<'_>) -> Result<(), Status>;
    }

    #[cfg(feature = "grpc")]
    impl<T: Message + Send + 'static> ServerMessage for T {
        fn write(self, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
            self.encode(buf)
                .map_err(|e| Status::internal(format!("encoding a response: {e}")))
        }
    }

    #[cfg(feature = "grpc")]
    impl ServerMessage for EncodedWatchEvent {
        fn write(self, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
            match self {
                EncodedWatchEvent::Shared(bytes) => buf.put(bytes),
                EncodedWatchEvent::Own(own) => {
                    // One reservation: the buffer grows at most once.
                    buf.reserve(own.encoded_len());
                    own.put(buf);
                }
            }
            Ok(())
        }
    }

    #[cfg(feature = "grpc")]
    /// The generated server's codec: requests are decoded with prost,
    /// responses written as [`ServerMessage`]s.
    #[derive(Debug)]
    pub struct ServerCodec<T, U>(PhantomData<fn() -> (T, U)>);

    #[cfg(feature = "grpc")]
    impl<T, U> Default for ServerCodec<T, U> {
        fn default() -> Self {
            ServerCodec(PhantomData)
        }
    }

    #[cfg(feature = "grpc")]
    /// Writes [`ServerMessage`]s.
    #[derive(Debug)]
    pub struct ServerEncoder<T>(PhantomData<fn(T)>);

    #[cfg(feature = "grpc")]
    impl<T: ServerMessage> Encoder for ServerEncoder<T> {
        type Item = T;
        type Error = Status;

        fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
            item.write(buf)
        }

        /// tonic allocates `buffer_size` when a call starts and holds it
        /// for as long as the call lasts. A Watch mostly idles, each on its
        /// own connection, and tonic's 8 KiB default was about a fifth of
        /// what an idle subscriber cost the server (`vs-apiserver` idle
        /// case). 2 KiB holds an event of a typical 1 KiB object; a larger
        /// write grows the buffer (by doubling), and the yield threshold
        /// keeps tonic's default, so snapshots still go out in 32 KiB
        /// chunks.
        fn buffer_settings(&self) -> BufferSettings {
            BufferSettings::new(2 * 1024, 32 * 1024)
        }
    }

    #[cfg(feature = "grpc")]
    impl<T, U> Codec for ServerCodec<T, U>
    where
        T: ServerMessage,
        U: Message + Default + Send + 'static,
    {
        type Encode = T;
        type Decode = U;
        type Encoder = ServerEncoder<T>;
        type Decoder = ProstDecoder<U>;

        fn encoder(&mut self) -> Self::Encoder {
            ServerEncoder(PhantomData)
        }

        fn decoder(&mut self) -> Self::Decoder {
            ProstDecoder::new(BufferSettings::default())
        }
    }

    #[cfg(test)]
    mod tests {
        use prost::Message;

        use super::*;
        use crate::v1::WatchEvent;

        /// An own event writes the very bytes prost makes of the same
        /// message, whatever its fields (defaults included, which prost
        /// leaves out), so clients cannot tell the two apart.
        #[test]
        fn an_own_event_is_prosts_encoding_of_the_same_message() {
            let types = [
                EventType::Unspecified,
                EventType::Added,
                EventType::Modified,
                EventType::Deleted,
                EventType::Bookmark,
            ];
            let long = "x".repeat(300);
            for r#type in types {
                for rv in [0, 7, 1234567890, u64::MAX] {
                    for object in ["", r#"{"kind":"ConfigMap"}"#, long.as_str()] {
                        for (resync, head) in [false, true]
                            .into_iter()
                            .flat_map(|r| [None, Some(0), Some(9), Some(u64::MAX)].map(|h| (r, h)))
                        {
                            let mut own = OwnWatchEvent::new(r#type, rv, object.into(), resync);
                            if let Some(head) = head {
                                own = own.with_server_head(head);
                            }
                            let expected = WatchEvent {
                                r#type: r#type.into(),
                                resource_version: rv.to_string(),
                                object: object.into(),
                                resync,
                                head_resource_version: head
                                    .map(|h| h.to_string())
                                    .unwrap_or_default(),
                            }
                            .encode_to_vec();
                            let bytes = EncodedWatchEvent::Own(own.clone()).to_bytes();
                            assert_eq!(
                                bytes, expected,
                                "{type:?} {rv} {object:?} {resync} {head:?}"
                            );
                            assert_eq!(own.encoded_len(), expected.len());
                        }
                    }
                }
            }
        }
    }
}

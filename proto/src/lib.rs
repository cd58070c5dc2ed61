//! kube-fanout's gRPC API (`kubefanout.v1`), generated from `proto/`, and
//! what its server and client must agree on beyond the messages: how a
//! resource type is named ([`GroupVersionResource`]) and how a Watch stream
//! marks the end of a unit ([`ends_initial_events`], [`ends_resync`]).

mod resource;
mod unit;

pub use resource::{GroupVersionResource, ResourceSyntaxError};
pub use unit::{INITIAL_EVENTS_END, ends_initial_events, ends_resync};

/// Package `kubefanout.v1`.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("kubefanout.v1");
    // The server, generated apart so that Watch writes pre-encoded events
    // (see `build.rs` and [`crate::wire`]).
    include!(concat!(env!("OUT_DIR"), "/server/kubefanout.v1.rs"));

    /// The encoded `FileDescriptorSet` of this package, for gRPC server
    /// reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("kubefanout_descriptor");
}

/// How the generated server writes its responses: prost messages are
/// encoded as usual, and a Watch event arrives already encoded, so the
/// bytes one encode made go to every subscriber.
#[allow(missing_docs, clippy::all)]
pub mod wire {
    use std::marker::PhantomData;

    use prost::{
        Message,
        bytes::{BufMut, Bytes},
    };
    use tonic::{
        Status,
        codec::{BufferSettings, Codec, EncodeBuf, Encoder},
    };
    use tonic_prost::ProstDecoder;

    /// A `kubefanout.v1.WatchEvent`, already encoded as protobuf. The
    /// server's `Watch` streams these; clients receive and decode plain
    /// `WatchEvent`s.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct EncodedWatchEvent(pub Bytes);

    /// A response the server writes.
    pub trait ServerMessage: Send + 'static {
        /// Appends the encoded message to `buf`.
        fn write(self, buf: &mut EncodeBuf<'_>) -> Result<(), Status>;
    }

    impl<T: Message + Send + 'static> ServerMessage for T {
        fn write(self, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
            self.encode(buf)
                .map_err(|e| Status::internal(format!("encoding a response: {e}")))
        }
    }

    impl ServerMessage for EncodedWatchEvent {
        fn write(self, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
            buf.put(self.0);
            Ok(())
        }
    }

    /// The generated server's codec: requests are decoded with prost,
    /// responses written as [`ServerMessage`]s.
    #[derive(Debug)]
    pub struct ServerCodec<T, U>(PhantomData<fn() -> (T, U)>);

    impl<T, U> Default for ServerCodec<T, U> {
        fn default() -> Self {
            ServerCodec(PhantomData)
        }
    }

    /// Writes [`ServerMessage`]s.
    #[derive(Debug)]
    pub struct ServerEncoder<T>(PhantomData<fn(T)>);

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
}

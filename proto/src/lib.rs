//! kube-fanout's gRPC API (`kubefanout.v1`), generated from `proto/`.

#![allow(missing_docs, clippy::all)]

/// Package `kubefanout.v1`.
pub mod v1 {
    tonic::include_proto!("kubefanout.v1");

    /// The encoded `FileDescriptorSet` of this package, for gRPC server
    /// reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("kubefanout_descriptor");
}

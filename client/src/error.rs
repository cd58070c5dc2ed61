//! The ways a kube-fanout client call can fail.

use tonic::{Code, Status};
use tonic_types::StatusExt;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No server address was given.
    #[error("no kube-fanout server address given")]
    NoAddress,
    /// The server address is not a URI.
    #[error("{addr:?} is not a server address such as http://127.0.0.1:50051: {source}")]
    Address {
        /// The address given.
        addr: String,
        /// Why it does not parse.
        #[source]
        source: tonic::transport::Error,
    },
    /// The TLS settings cannot be used with the address.
    #[error("TLS settings for {addr}: {source}")]
    Tls {
        /// The address they were for.
        addr: String,
        /// Why they cannot be used.
        #[source]
        source: tonic::transport::Error,
    },
    /// The bearer token cannot travel in a gRPC header.
    #[error("the bearer token is not a valid header value (it must be visible ASCII)")]
    Token(#[source] tonic::metadata::errors::InvalidMetadataValue),
    /// The token file could not be read.
    #[error("cannot read the bearer token file {}: {source}", path.display())]
    TokenFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A bearer token would go in plaintext to another machine.
    #[error(
        "refusing to send the bearer token in plaintext to {addr}, which is not a loopback address: use TLS (an https:// address or TLS settings), or, knowing that anyone on the path can read and replay it, ClientConfig::insecure_plaintext_token (kubectl-fanout --insecure-plaintext-token)"
    )]
    PlaintextToken {
        /// The address.
        addr: String,
    },
    /// No server could be reached.
    #[error("cannot connect to kube-fanout at {addr}: {source}")]
    Connect {
        /// The address(es) tried.
        addr: String,
        /// The transport error of the last one tried.
        #[source]
        source: tonic::transport::Error,
    },
    /// A resource type not of the form VERSION/RESOURCE or
    /// GROUP/VERSION/RESOURCE.
    #[error(transparent)]
    Resource(#[from] kube_fanout_proto::ResourceSyntaxError),
    /// The server answered with an error status.
    #[error("kube-fanout answered {}: {}", .0.code(), .0.message())]
    Status(#[from] Status),
    /// An object the server sent does not decode as the asked type.
    #[error("cannot decode a {kind} from kube-fanout: {source}")]
    Decode {
        /// The Rust type it was decoded as.
        kind: &'static str,
        /// Why it does not decode.
        #[source]
        source: serde_json::Error,
    },
}

impl ClientError {
    /// Whether the error is the server being unreachable (down, restarting,
    /// or the address wrong), as opposed to the server refusing the request.
    pub fn is_unreachable(&self) -> bool {
        match self {
            ClientError::Connect { .. } => true,
            ClientError::Status(status) => status.code() == Code::Unavailable,
            _ => false,
        }
    }
}

/// The reason in a status' `google.rpc.ErrorInfo`, if it has one.
pub(crate) fn reason(status: &Status) -> Option<String> {
    status.get_details_error_info().map(|info| info.reason)
}

//! Why the server could not start or stopped: the one error every part of
//! the wiring returns, and the tasks that end in it.

use std::net::SocketAddr;

use kube_fanout_core::{
    dispatch::UnindexableField,
    resource::{GroupVersionResource, ResourceError},
};
use kube_fanout_listener::tls::TlsError;
use tokio::task::JoinSet;

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A requested resource type could not be resolved.
    #[error(transparent)]
    Resource(#[from] ResourceError),
    /// `--index-field` names a field the type's subscribers cannot be
    /// indexed by.
    #[error(transparent)]
    Unindexable(#[from] UnindexableField),
    /// `--index-field` names a type that is not served.
    #[error(
        "--index-field {0}: not a served resource type (add it with --resource, or allow it with --on-demand-resources)"
    )]
    IndexFieldNotServed(GroupVersionResource),
    /// The parent kube-fanout (`--upstream-fanout`) could not be reached
    /// (or its address is not one).
    #[error("--upstream-fanout: {0}")]
    Parent(#[from] kube_fanout_client::ClientError),
    /// The CA bundle of other kube-fanouts cannot be read.
    #[error("--peer-ca-file {}: {source}", path.display())]
    ParentCa {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The parent does not serve a requested type.
    #[error("--upstream-fanout: {0}")]
    ParentDiscovery(#[from] kube_fanout_tier::DiscoveryError),
    /// The gRPC transport failed.
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// Building the reflection service failed.
    #[error("gRPC reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The listener could not be read.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
    /// TLS could not be set up.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// Unauthenticated serving on a non-loopback address, not allowed.
    #[error(
        "refusing to serve without authentication on {0}, which is not a loopback address: remove --auth=none, or add --insecure-allow-unauthenticated"
    )]
    Unauthenticated(SocketAddr),
    /// Unauthenticated metrics on a non-loopback address, not allowed.
    #[error(
        "refusing to serve metrics without authentication on {0}, which is not a loopback address: remove --auth=none and --metrics-auth=none, listen on loopback (--metrics-listen), or add --insecure-allow-unauthenticated"
    )]
    UnauthenticatedMetrics(SocketAddr),
    /// An audit log asked for with authentication off.
    #[error(
        "--audit-level needs --auth=kubernetes: with --auth=none no caller is authenticated or authorized, so there is nothing to audit"
    )]
    AuditWithoutAuth,
    /// The audit log's file cannot be opened.
    #[error("cannot open the audit log {}: {source}", path.display())]
    AuditLog {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The server's tasks (reflectors, health, listeners), each ending in the
/// failure that stops the others, if it fails.
pub(crate) type Tasks = JoinSet<Result<(), ServeError>>;

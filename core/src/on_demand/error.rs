//! Why a request's type could not be served: not configured and not
//! startable on demand, unknown upstream, over the bound, or discovery
//! failed. The gRPC layer maps each to a status.

use std::{sync::Arc, time::Duration};

use crate::{
    dispatch::UnindexableField,
    quote::quote,
    resource::{GroupVersionResource, ResourceError},
};

/// Why discovering a type for on-demand serving failed.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// Discovery refused or could not resolve the type.
    #[error(transparent)]
    Resource(#[from] ResourceError),
    /// An `--index-field` of the type names a field it cannot be indexed
    /// by.
    #[error(transparent)]
    Unindexable(#[from] UnindexableField),
    /// Discovery took longer than it may.
    #[error("discovery of {gvr} took longer than {timeout:?}")]
    TimedOut {
        /// The type.
        gvr: GroupVersionResource,
        /// The bound.
        timeout: Duration,
    },
    /// The discovery task ended without an answer (it panicked).
    #[error("discovery of {0} ended without an answer")]
    Aborted(GroupVersionResource),
}

impl DiscoveryError {
    /// Whether the API server does not serve the type (as opposed to
    /// discovery failing): answered like a type that is not served.
    pub fn is_unknown(&self) -> bool {
        matches!(
            self,
            DiscoveryError::Resource(ResourceError::Unknown(_) | ResourceError::NotWatchable(_))
        )
    }
}

/// Why a request's type is not served.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ResolveError {
    /// Not configured, and on-demand types are off. The served types are
    /// not listed: ListResources shows a caller the ones it may list.
    #[error("resource {} is not served here (ListResources shows the served types you may list)", quote(&.0.to_string()))]
    NotServed(GroupVersionResource),
    /// Not configured, and not in the on-demand allow-list.
    #[error("resource {} is not served here: on-demand types are limited to --on-demand-resources={allowed}", quote(&.gvr.to_string()))]
    NotAllowed {
        /// The type asked for.
        gvr: GroupVersionResource,
        /// The allow-list, as configured.
        allowed: String,
    },
    /// Discovering it failed, or found the API server does not serve it.
    #[error(transparent)]
    Discovery(Arc<DiscoveryError>),
    /// As many on-demand types are held as may be.
    #[error(
        "resource {} cannot be served on demand now: {max} on-demand types are held, the most --on-demand-max-types allows (one is freed after --on-demand-idle-seconds without subscribers or requests)", quote(&.gvr.to_string())
    )]
    TooManyTypes {
        /// The type asked for.
        gvr: GroupVersionResource,
        /// The bound.
        max: usize,
    },
    /// The server is stopping: no type is started any more.
    #[error("kube-fanout is shutting down")]
    ShuttingDown,
}

impl ResolveError {
    /// The label of the refusals metric: why a type was not served.
    pub fn reason(&self) -> &'static str {
        match self {
            ResolveError::NotServed(_) => "not_served",
            ResolveError::NotAllowed { .. } => "not_allowed",
            ResolveError::Discovery(d) if d.is_unknown() => "not_found",
            ResolveError::Discovery(_) => "discovery_failed",
            ResolveError::TooManyTypes { .. } => "max_types",
            ResolveError::ShuttingDown => "shutting_down",
        }
    }
}

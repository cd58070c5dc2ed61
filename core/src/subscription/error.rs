//! Why a watch cannot start or continue, and the reason a client acts on.

use kube_fanout_proto::{
    CONNECTION_RETIRED, EXPIRED, NO_LONGER_SERVED, NOT_SYNCED, SHUTTING_DOWN, SUBSCRIBER_LAGGED,
    TOO_LARGE_RESOURCE_VERSION,
};

use crate::{
    object::ResourceVersion,
    resource::GroupVersionResource,
    store::{Closing, ReadError, Store},
};

/// Why a watch cannot start or continue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    /// The starting point is not available.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The server is shutting down.
    #[error("kube-fanout is shutting down; resume from resourceVersion {resume_from}")]
    ShuttingDown {
        /// The subscriber's last resume point.
        resume_from: ResourceVersion,
    },
    /// The subscriber's connection reached its maximum age (see
    /// [`crate::retire`]): it is to resume on a new one.
    #[error(
        "connection retired after its maximum age; resume from resourceVersion {resume_from} on a new connection"
    )]
    ConnectionRetired {
        /// The subscriber's last resume point.
        resume_from: ResourceVersion,
    },
    /// The API server no longer serves the type (its
    /// CustomResourceDefinition was deleted): there is nothing to resume.
    #[error("resource {0} is no longer served by the API server")]
    Removed(GroupVersionResource),
    /// The subscriber fell too far behind what it still has to receive,
    /// or so far that the ring dropped events it had not read.
    #[error("subscriber fell behind the event history; resume from resourceVersion {resume_from}")]
    Lagged {
        /// The subscriber's last resume point.
        resume_from: ResourceVersion,
    },
}

impl WatchError {
    /// What a subscription of `store`, closing, ends with at its resume
    /// point `resume_from`: ShuttingDown, or Removed.
    pub(crate) fn closed(store: &Store, resume_from: ResourceVersion) -> Self {
        match store.closing() {
            Some(Closing::Removed) => WatchError::Removed(store.resource().gvr.clone()),
            _ => WatchError::ShuttingDown { resume_from },
        }
    }

    /// The machine-readable reason: the `google.rpc.ErrorInfo` reason of
    /// the status a client gets, and the label of the metric counting them.
    /// A resume inside a re-sync gap is "Expired" to clients too: the
    /// remedy is the same, a new snapshot.
    pub fn reason(&self) -> &'static str {
        match self {
            WatchError::Read(ReadError::Expired { .. } | ReadError::InGap { .. }) => EXPIRED,
            WatchError::Read(ReadError::TooLarge { .. }) => TOO_LARGE_RESOURCE_VERSION,
            WatchError::Read(ReadError::NotSynced) => NOT_SYNCED,
            WatchError::ShuttingDown { .. } => SHUTTING_DOWN,
            WatchError::Removed(_) => NO_LONGER_SERVED,
            WatchError::ConnectionRetired { .. } => CONNECTION_RETIRED,
            WatchError::Lagged { .. } => SUBSCRIBER_LAGGED,
        }
    }
}

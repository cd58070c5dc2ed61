//! Why a watch cannot start or continue, and the reason a client acts on.

use kube_fanout_proto::{
    CONNECTION_RETIRED, EXPIRED, NOT_SYNCED, SHUTTING_DOWN, SUBSCRIBER_LAGGED,
    TOO_LARGE_RESOURCE_VERSION,
};

use crate::{object::ResourceVersion, store::ReadError};

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
    /// The subscriber fell too far behind what it still has to receive,
    /// or so far that the ring dropped events it had not read.
    #[error("subscriber fell behind the event history; resume from resourceVersion {resume_from}")]
    Lagged {
        /// The subscriber's last resume point.
        resume_from: ResourceVersion,
    },
}

impl WatchError {
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
            WatchError::ConnectionRetired { .. } => CONNECTION_RETIRED,
            WatchError::Lagged { .. } => SUBSCRIBER_LAGGED,
        }
    }
}

//! Why a feed's watch on its parent broke.

use kube_fanout_core::quote::quote;
use tonic::Status;

/// Why a watch on the parent failed to open or stopped. Each is followed
/// by a resume from the store's RV (or a new snapshot), after a backoff
/// delay unless the parent's answer says to go on at once.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The parent answered with an error status (or the transport failed).
    #[error("the parent kube-fanout answered {}: {}", .0.code(), .0.message())]
    Status(Status),
    /// The stream ended without a status.
    #[error("the parent kube-fanout ended the watch")]
    Ended,
    /// An event inside a re-sync unit was not part of it: the unit is
    /// dropped unapplied, and the resume gets it again whole.
    #[error(
        "the parent kube-fanout broke the re-sync unit at resourceVersion {unit} with an event at {} (resync={resync})",
        quote(.at)
    )]
    BrokenUnit {
        /// The unit's resourceVersion.
        unit: String,
        /// The event's resourceVersion.
        at: String,
        /// Whether the event was flagged as part of a unit.
        resync: bool,
    },
    /// A bootstrap's time ran out before its snapshot was whole.
    #[error("the snapshot from the peer did not finish in time")]
    Deadline,
    /// A resourceVersion that is not an etcd revision.
    #[error("the parent kube-fanout sent resourceVersion {}, not an etcd revision", quote(.0))]
    ResourceVersion(String),
}

//! Why a watch stopped, and what the watcher does next because of it.

use kube_fanout_proto::CONNECTION_RETIRED;
use tonic::{Code, Status};

use crate::error::reason;

/// Why a watch failed to open or stopped.
#[derive(Debug, thiserror::Error)]
pub(super) enum Failure {
    /// The server answered with an error status (or the transport failed).
    #[error("kube-fanout answered {}: {}", .0.code(), .0.message())]
    Status(Status),
    /// The stream ended without a status.
    #[error("the server ended the watch")]
    Ended,
    /// An event inside a re-sync unit was not part of it. Applying it would
    /// mix the unit with what is not; resuming gets the unit again.
    #[error(
        "the server broke a re-sync unit at resourceVersion {unit} with a {kind} event at {at} (resync={resync})"
    )]
    BrokenUnit {
        /// The unit's resourceVersion.
        unit: String,
        /// The event's type.
        kind: &'static str,
        /// The event's resourceVersion.
        at: String,
        /// Whether the event was marked as a re-sync event.
        resync: bool,
    },
}

/// What to do after a stream ended or failed to start, with what it
/// needs of the failure.
#[derive(Debug)]
pub(super) enum Recovery {
    /// Resume after the last resourceVersion, after a backoff delay.
    Resume(Failure),
    /// Take a new snapshot right away: the resume point is gone.
    Snapshot(Status),
    /// Tell the caller, then retry after a backoff delay.
    Refused(Status),
    /// Resume at once on the same server: it retired the connection
    /// (`--max-connection-age-seconds`), a routine move, and the channel
    /// opens a new one after the server's GOAWAY.
    Move,
}

impl Failure {
    /// How to recover from it.
    pub(super) fn recovery(self) -> Recovery {
        let Failure::Status(status) = self else {
            // The server's fault, healing on a resumed (or another) watch.
            return Recovery::Resume(self);
        };
        if status.code() == Code::Unavailable
            && reason(&status).as_deref() == Some(CONNECTION_RETIRED)
        {
            return Recovery::Move;
        }
        match status.code() {
            Code::OutOfRange => Recovery::Snapshot(status),
            Code::NotFound
            | Code::InvalidArgument
            | Code::PermissionDenied
            | Code::Unauthenticated
            | Code::FailedPrecondition
            | Code::Unimplemented => Recovery::Refused(status),
            // Unavailable (shutdown, no server), ResourceExhausted (lagged),
            // DeadlineExceeded (a replica behind the asked RV), transport
            // errors: all heal by themselves.
            _ => Recovery::Resume(Failure::Status(status)),
        }
    }
}

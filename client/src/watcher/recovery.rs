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
    /// Resume at once on the same server over a new connection: it
    /// retired the current one (`--max-connection-age-seconds`), a routine
    /// move.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The recovery's name, for comparing.
    fn class(failure: Failure) -> &'static str {
        match failure.recovery() {
            Recovery::Resume(_) => "resume",
            Recovery::Snapshot(_) => "snapshot",
            Recovery::Refused(_) => "refused",
            Recovery::Move => "move",
        }
    }

    #[test]
    fn only_what_retrying_cannot_fix_is_refused_and_only_expired_re_snapshots() {
        let status = |code| Failure::Status(Status::new(code, "x"));
        for (code, expected) in [
            (Code::OutOfRange, "snapshot"),
            (Code::NotFound, "refused"),
            (Code::InvalidArgument, "refused"),
            (Code::PermissionDenied, "refused"),
            (Code::Unauthenticated, "refused"),
            (Code::FailedPrecondition, "refused"),
            (Code::Unimplemented, "refused"),
            (Code::Unavailable, "resume"),
            (Code::ResourceExhausted, "resume"),
            (Code::DeadlineExceeded, "resume"),
            (Code::Internal, "resume"),
            (Code::Unknown, "resume"),
            (Code::Cancelled, "resume"),
            (Code::Aborted, "resume"),
        ] {
            assert_eq!(class(status(code)), expected, "{code:?}");
        }
        // Retirement is told apart from other Unavailables by its reason.
        let retired = <Status as tonic_types::StatusExt>::with_error_details(
            Code::Unavailable,
            "connection retired",
            tonic_types::ErrorDetails::with_error_info(CONNECTION_RETIRED, "kube-fanout.io", []),
        );
        assert_eq!(class(Failure::Status(retired)), "move");
        assert_eq!(class(Failure::Ended), "resume");
        let broken = Failure::BrokenUnit {
            unit: "20".into(),
            kind: "MODIFIED",
            at: "21".into(),
            resync: false,
        };
        assert_eq!(class(broken), "resume");
    }
}

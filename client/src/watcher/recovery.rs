//! What a failed or ended watch does next, read from the status it ended
//! with.

use kube_fanout_proto::CONNECTION_RETIRED;
use tonic::{Code, Status};

use crate::error::reason;

/// What to do after a stream ended or failed to start.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Recovery {
    /// Resume after the last resourceVersion, after a backoff delay.
    Resume,
    /// Take a new snapshot right away: the resume point is gone.
    Snapshot,
    /// Tell the caller, then retry after a backoff delay.
    Refused,
    /// Resume at once on the same server: it retired the connection
    /// (`--max-connection-age-seconds`), a routine move, and the channel
    /// opens a new one after the server's GOAWAY.
    Move,
}

/// How to recover from `status`.
pub(super) fn recovery(status: &Status) -> Recovery {
    if status.code() == Code::Unavailable && reason(status).as_deref() == Some(CONNECTION_RETIRED) {
        return Recovery::Move;
    }
    match status.code() {
        Code::OutOfRange => Recovery::Snapshot,
        Code::NotFound
        | Code::InvalidArgument
        | Code::PermissionDenied
        | Code::Unauthenticated
        | Code::FailedPrecondition
        | Code::Unimplemented => Recovery::Refused,
        // Unavailable (shutdown, no server), ResourceExhausted (lagged),
        // DeadlineExceeded (a replica behind the asked RV), transport
        // errors: all heal by themselves.
        _ => Recovery::Resume,
    }
}

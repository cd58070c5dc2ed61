//! Why one step of the reflector failed, and what each failure means for
//! the next state (rewatch, retry at once, relist) and for its log level.

use kube_fanout_core::object::ObjectError;
use tracing::Level;

use crate::upstream::UpstreamError;

/// Why one step failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReflectorError {
    /// A request failed.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// A LIST answer that is not a list.
    #[error("could not decode the list: {0}")]
    DecodeList(#[source] serde_json::Error),
    /// A LIST answer that is not a list of the type (a Table, say): an
    /// error to back off on and retry, never an empty list.
    #[error("the LIST answer is a {found}, not a list of the type ({expected})")]
    UnexpectedList {
        /// `apiVersion kind` expected.
        expected: String,
        /// `apiVersion kind` found.
        found: String,
    },
    /// A list or bookmark with an RV that is not a number.
    #[error(transparent)]
    ResourceVersion(#[from] ObjectError),
    /// A watch that ended within a second without any event: the server is
    /// in trouble, and reopening at once would spin.
    #[error("very short watch: the watch closed within 1s without delivering an event")]
    VeryShortWatch,
    /// A watch line that is not a watch event (not JSON, or of an unknown
    /// type). Like client-go's decoder, the watch ends with an internal
    /// error rather than skip it: skipping would lose the change until the
    /// next relist.
    #[error("cannot decode a watch event: {0}")]
    DecodeEvent(String),
}

impl ReflectorError {
    pub(crate) fn upstream(&self) -> Option<&UpstreamError> {
        match self {
            ReflectorError::Upstream(e) => Some(e),
            _ => None,
        }
    }

    /// Expired or too large: the RV asked for cannot be served.
    pub(crate) fn rv_unavailable(&self) -> bool {
        self.upstream()
            .is_some_and(|e| e.is_expired() || e.is_too_large_resource_version())
    }

    /// Connection refused or 429: worth reopening the watch after a backoff,
    /// without relisting.
    pub(crate) fn can_rewatch(&self) -> bool {
        self.upstream()
            .is_some_and(|e| e.is_connection_refused() || e.is_too_many_requests())
    }

    /// A 500, or an undecodable line (client-go reports those as a 500
    /// `ClientWatchDecoding`): retried within the internal-error window.
    pub(crate) fn is_internal(&self) -> bool {
        matches!(self, ReflectorError::DecodeEvent(_))
            || self.upstream().is_some_and(UpstreamError::is_internal)
    }

    /// How loudly a failure is logged: the answers a healthy cluster gives
    /// routinely (410 after a compaction or restart, 429 under load) at the
    /// levels client-go uses (V(4) and V(2)); anything else as a warning.
    pub(crate) fn log_level(&self) -> Level {
        match self.upstream() {
            Some(e) if e.is_expired() => Level::DEBUG,
            Some(e) if e.is_too_many_requests() => Level::INFO,
            _ => Level::WARN,
        }
    }
}

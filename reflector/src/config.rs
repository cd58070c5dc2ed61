//! How a reflector talks to the API server.

use std::time::Duration;

use kube_fanout_core::object::Transform;

use crate::backoff::BackoffConfig;

/// The smallest minimum watch timeout, as client-go enforces.
pub(crate) const MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);

/// How a reflector talks to the API server.
#[derive(Debug, Clone, Copy)]
pub struct ReflectorConfig {
    /// LIST page size. `None` follows client-go: pages of 500 for RV "" and
    /// "0", and no paging for a specific RV (so the watch cache serves it)
    /// unless a list at RV "0" came back paginated.
    pub page_size: Option<u32>,
    /// Watch timeouts are drawn from [min, 2×min); never below 5 minutes.
    pub min_watch_timeout: Duration,
    /// Sync with a watch-list stream instead of LIST when the server allows.
    pub use_watch_list: bool,
    /// How long to keep retrying a watch that fails with 500 before relisting.
    pub max_internal_error_retry: Duration,
    /// After a watch-list sync, LIST at the same RV and log every difference.
    pub check_watch_list_consistency: bool,
    /// Applied to every object before it is stored.
    pub transform: Transform,
    /// Retry pacing.
    pub backoff: BackoffConfig,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        ReflectorConfig {
            page_size: None,
            min_watch_timeout: MIN_WATCH_TIMEOUT,
            use_watch_list: true,
            max_internal_error_retry: Duration::ZERO,
            check_watch_list_consistency: false,
            transform: Transform::default(),
            backoff: BackoffConfig::default(),
        }
    }
}

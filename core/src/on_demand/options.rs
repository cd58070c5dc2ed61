//! How on-demand types are bounded: the allow-list, how many may be held,
//! and how long one may go unused.

use std::time::Duration;

use super::allow::AllowList;

/// How on-demand types are bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnDemandOptions {
    /// The group/resources a request may start.
    pub allow: AllowList,
    /// The most types held at once (those being discovered included).
    pub max_types: usize,
    /// How long a type may go without subscribers or requests before its
    /// reflector stops and its store is freed.
    pub idle: Duration,
}

impl OnDemandOptions {
    /// How often each type checks whether it is idle (or gone upstream):
    /// a quarter of the idle time, at most a second, so a type stops
    /// within that of its idle time.
    pub fn check_period(&self) -> Duration {
        (self.idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }
}

//! The window in which a watch ended by an internal error (a 500, or a
//! line the reflector cannot decode) is reopened at once instead of
//! relisting: client-go's `retryWithDeadline`.
//!
//! The window opens at the first internal error of a run and closes
//! `max` later; a run ends, and the next error opens a fresh window, when
//! no internal error came for [`QUIET_RESET`], when the window closed
//! (the caller relists), or when the reflector synced again (client-go
//! builds a new one for every `watch()` after a list).

use std::time::Duration;

use tokio::time::Instant;

/// After this long without an internal error, the next one starts a new run.
pub const QUIET_RESET: Duration = Duration::from_secs(60);

/// Tracks one run of internal errors.
#[derive(Debug)]
pub struct InternalErrorRetry {
    max: Duration,
    /// When the run began and when its last error came.
    run: Option<(Instant, Instant)>,
}

impl InternalErrorRetry {
    /// A tracker that allows retrying for `max` (zero: never retry).
    pub fn new(max: Duration) -> Self {
        InternalErrorRetry { max, run: None }
    }

    /// Records an internal error now, and says whether the watch may be
    /// reopened at once. Past the window the run is over: the caller
    /// relists, and the next error starts afresh.
    pub fn retry_after_error(&mut self) -> bool {
        let now = Instant::now();
        let first = match self.run {
            Some((first, last)) if now - last < QUIET_RESET => first,
            _ => now,
        };
        self.run = Some((first, now));
        if self.max.is_zero() || now - first > self.max {
            self.run = None;
            return false;
        }
        true
    }

    /// Forgets the current run: the reflector synced again.
    pub fn reset(&mut self) {
        self.run = None;
    }
}

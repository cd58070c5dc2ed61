//! What the on-demand types did, for metrics: types started, stopped (by
//! why) and requests refused (by why).

use std::{
    collections::BTreeMap,
    sync::atomic::{AtomicU64, Ordering},
};

use parking_lot::Mutex;

/// Why an on-demand type stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Nobody used it for the idle time.
    Idle,
    /// The API server no longer serves it.
    Removed,
}

impl Stop {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Stop::Idle => "idle",
            Stop::Removed => "removed",
        }
    }
}

/// Counters since the server started.
#[derive(Debug, Default)]
pub struct Counters {
    starts: AtomicU64,
    idle: AtomicU64,
    removed: AtomicU64,
    /// Refusals by reason; rare, so a lock.
    refused: Mutex<BTreeMap<&'static str, u64>>,
}

impl Counters {
    pub(crate) fn started(&self) {
        self.starts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stopped(&self, why: Stop) {
        match why {
            Stop::Idle => &self.idle,
            Stop::Removed => &self.removed,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn refused(&self, reason: &'static str) {
        *self.refused.lock().entry(reason).or_default() += 1;
    }

    /// Types started (each start again after a stop counts).
    pub fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }

    /// Types stopped for `why`.
    pub fn stops(&self, why: Stop) -> u64 {
        match why {
            Stop::Idle => &self.idle,
            Stop::Removed => &self.removed,
        }
        .load(Ordering::Relaxed)
    }

    /// Requests refused, by reason (see `ResolveError::reason`).
    pub fn refusals(&self) -> BTreeMap<&'static str, u64> {
        self.refused.lock().clone()
    }
}

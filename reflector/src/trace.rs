//! A trace of one sync's steps, logged only when the sync was slow: what
//! client-go's `trace.New(...).LogIfLong(10s)` does around a reflector's
//! LIST and watch-list, so a slow start-up or relist says where the time
//! went (the API server's answer, or the store).

use std::{fmt::Write, time::Duration};

use tokio::time::Instant;
use tracing::info;

/// Syncs slower than this are logged with their steps (client-go's figure).
pub const SLOW_SYNC: Duration = Duration::from_secs(10);

/// The steps of one sync, timed from its start.
#[derive(Debug)]
pub struct SyncTrace {
    name: &'static str,
    start: Instant,
    steps: Vec<(String, Instant)>,
}

impl SyncTrace {
    /// Starts timing a sync called `name`.
    pub fn new(name: &'static str) -> Self {
        SyncTrace {
            name,
            start: Instant::now(),
            steps: Vec::new(),
        }
    }

    /// Marks the end of one step.
    pub fn step(&mut self, what: impl Into<String>) {
        self.steps.push((what.into(), Instant::now()));
    }

    /// Logs the trace if it took longer than [`SLOW_SYNC`]; returns whether
    /// it did.
    pub fn log_if_slow(&self) -> bool {
        let total = self.start.elapsed();
        if total < SLOW_SYNC {
            return false;
        }
        let mut steps = String::new();
        let mut previous = self.start;
        for (what, at) in &self.steps {
            let _ = write!(steps, "{what} ({:?}); ", *at - previous);
            previous = *at;
        }
        info!(
            sync = self.name,
            ?total,
            steps = steps.trim_end_matches("; "),
            "slow sync"
        );
        true
    }
}

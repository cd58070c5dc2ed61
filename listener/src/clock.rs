//! tokio's clock for governor's rate limiters, so that the rates the
//! listener and the authentication layer enforce follow paused time in
//! tests as every other timer of the server does.

use std::time::Duration;

use governor::clock::Clock;
use tokio::time::Instant;

/// Time since the clock was made, on tokio's clock.
#[derive(Debug, Clone)]
pub struct TokioClock {
    start: Instant,
}

impl TokioClock {
    /// A clock that starts now.
    pub fn new() -> Self {
        TokioClock {
            start: Instant::now(),
        }
    }
}

impl TokioClock {
    /// The instant `at` (a time on this clock) stands for.
    pub fn instant(&self, at: Duration) -> Instant {
        self.start + at
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl Clock for TokioClock {
    type Instant = Duration;

    fn now(&self) -> Duration {
        self.start.elapsed()
    }
}

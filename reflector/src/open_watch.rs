//! An open WATCH response: the stream of its lines and when it was asked
//! for, which decides whether its end was a very short watch. Its own
//! module so that the states ([`crate::state`]), which carry one, need not
//! import the phase that opens it.

use std::{fmt, time::Duration};

use tokio::time::Instant;

use crate::{error::ReflectorError, upstream::Lines};

/// A watch shorter than this that delivered nothing is an error.
pub(crate) const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);

/// An open WATCH response.
pub struct OpenWatch {
    pub(crate) lines: Lines,
    started: Instant,
}

impl OpenWatch {
    /// The watch whose response is `lines`, asked for at `started`.
    pub(crate) fn new(lines: Lines, started: Instant) -> Self {
        OpenWatch { lines, started }
    }

    /// The watch ended after `events` lines: a very short watch (within a
    /// second, with none) is an error.
    pub(crate) fn ended(&self, events: u64) -> Result<(), ReflectorError> {
        if events == 0 && self.started.elapsed() < VERY_SHORT_WATCH {
            return Err(ReflectorError::VeryShortWatch);
        }
        Ok(())
    }
}

impl fmt::Debug for OpenWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenWatch")
            .field("started", &self.started)
            .finish()
    }
}

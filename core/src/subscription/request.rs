//! What a subscriber asks for ([`WatchSpec`], starting at a [`Start`])
//! and the server's bounds on it ([`Limits`]).

use std::time::Duration;

use crate::{
    filter::Filter,
    object::{ObjectError, ResourceVersion},
    projection::Projection,
};

/// Where a watch starts, from the request's resourceVersion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// `""`: the freshest state.
    Latest,
    /// `"0"`: any state; kube-fanout always has its freshest at hand.
    Any,
    /// A resourceVersion: changes after it (or a snapshot at least as new).
    At(ResourceVersion),
}

impl Start {
    /// Whether a watch from here begins with a snapshot: asked for with
    /// `send_initial_events`, or implied by `""` and `"0"`, which (as on
    /// the API server) begin with synthetic ADDEDs for every object.
    pub fn sends_snapshot(self, send_initial_events: bool) -> bool {
        send_initial_events || !matches!(self, Start::At(_))
    }

    /// Parses a request's resourceVersion.
    pub fn parse(rv: &str) -> Result<Self, ObjectError> {
        Ok(match rv {
            "" => Start::Latest,
            "0" => Start::Any,
            rv => Start::At(rv.parse()?),
        })
    }
}

/// What a subscriber asked for.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    /// Which objects it sees.
    pub filter: Filter,
    /// Where it starts.
    pub start: Start,
    /// Snapshot first, ended by the initial-events-end bookmark.
    pub send_initial_events: bool,
    /// Forward bookmarks.
    pub allow_bookmarks: bool,
    /// With bookmarks: each carries the store's head, and one comes at
    /// least every [`HEAD_BOOKMARK_INTERVAL`] and as the stream starts
    /// (a tier's leaf, to know how far behind its parent it is).
    pub head_bookmarks: bool,
    /// What of each object it receives.
    pub projection: Projection,
}

/// The longest a stream with head bookmarks goes without one: the
/// resolution of a tier's leaf's lag behind its parent.
pub const HEAD_BOOKMARK_INTERVAL: Duration = Duration::from_secs(1);

/// Server-side bounds on a watch.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long a request for a resourceVersion newer than the store's may
    /// wait for the store to catch up, and a Watch, List or Get on a type
    /// not synced yet for its first sync.
    pub freshness_timeout: Duration,
    /// A subscriber with bookmarks on that was sent nothing for this long
    /// gets a progress bookmark, so a filtered watch's RV stays fresh.
    pub progress_interval: Duration,
    /// A subscriber that has more than this many events to receive...
    pub max_lag_events: u64,
    /// ...or more than this many bytes of objects as it receives them
    /// (only their metadata for a metadata-only subscriber), counting only
    /// events its filter lets through that arrived since its stream
    /// started, is cut off with [`WatchError::Lagged`]. (So is one past
    /// the newer half of the store's history, whatever it owes: see
    /// [`crate::store::HistoryLimits::past_newer_half`].)
    pub max_lag_bytes: u64,
    /// Coalescing: a subscriber whose events have been coming faster than
    /// one per this long, woken by new events less than this long after
    /// it was last sent something, waits out the rest before reading
    /// them, so that they go out several to an HTTP/2 frame and a write
    /// instead of one each (the marks and head changes that arrive
    /// meanwhile wake nobody). It adds at most this much latency, and only
    /// to such a subscriber's events; a lone event, a burst after a
    /// quiet, and events further apart than this go at once (see
    /// `pace`). Zero reads at once always.
    pub min_send_interval: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            freshness_timeout: Duration::from_secs(3),
            progress_interval: Duration::from_secs(60),
            max_lag_events: 10_000,
            max_lag_bytes: 64 << 20,
            min_send_interval: Duration::from_millis(3),
        }
    }
}

//! What a reflector reports of itself (its phase, lists, watches,
//! failures), for ListResources, health and metrics. Apart from the
//! reflector so the registry of served types can hold it without depending
//! on the reflector.

use std::time::SystemTime;

use tokio::time::Instant;

use crate::object::ResourceVersion;

/// What a reflector is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    /// Streaming the initial state with watch-list.
    #[default]
    WatchListing,
    /// Running a LIST.
    Listing,
    /// Following a WATCH.
    Watching,
    /// Waiting after a failure.
    BackingOff,
    /// Stopped.
    Stopped,
}

impl Phase {
    /// The phase's name as ListResources shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::WatchListing => "watch-listing",
            Phase::Listing => "listing",
            Phase::Watching => "watching",
            Phase::BackingOff => "backing off",
            Phase::Stopped => "stopped",
        }
    }
}

/// A reflector's state for ListResources, health and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReflectorStatus {
    /// What it is doing.
    pub phase: Phase,
    /// The last failure, if any.
    pub last_error: Option<String>,
    /// Completed LISTs, and the `resourceVersion` the last one asked for.
    pub lists: u64,
    /// The `resourceVersion` parameter of the last LIST ("0", "" or an RV).
    pub last_list_from: Option<String>,
    /// The requests the last LIST took (its pages, and a full list after a
    /// continue token expired).
    pub last_list_requests: u64,
    /// Completed watch-list syncs.
    pub watch_lists: u64,
    /// Watches opened (watch-lists included).
    pub watches: u64,
    /// Failures that led to a backoff.
    pub failures: u64,
    /// The last RV the store was synced to.
    pub last_sync_resource_version: Option<ResourceVersion>,
    /// When the upstream last sent something that moved the store (a
    /// list, a watch-list, a watch event or a bookmark), by the wall clock:
    /// an operator alerts on a type whose upstream has gone quiet for
    /// longer than its bookmarks allow.
    pub last_upstream_at: Option<SystemTime>,
    /// Times a watch-list went 10 s after its last event without the
    /// initial-events-end bookmark (each also logged as a warning).
    pub end_bookmark_warnings: u64,
    /// Differences the last watch-list consistency check found, if one ran.
    pub consistency_differences: Option<usize>,
    /// LISTs and watch-lists slower than the reflector's slow-sync threshold (each logged
    /// with its steps).
    pub slow_syncs: u64,
    /// Since when every attempt has failed: set by the first failure after
    /// a watch was opened, cleared when one opens again. A LIST alone does
    /// not clear it, so a reflector that may list but not watch (it only
    /// ever relists, and serves ever staler data) stays failing.
    pub failing_since: Option<Instant>,
    /// The parent kube-fanout this store follows, for a tier's leaf
    /// (`None`: the reflector lists and watches the API server itself).
    /// The counters then count the leaf's snapshots (`lists`) and watches
    /// on its parent.
    pub parent: Option<String>,
    /// The peer kube-fanout whose snapshot the store started from
    /// (`--bootstrap-from`), before the reflector watched the API server
    /// from its RV (`None`: the store started from the API server).
    pub bootstrapped_from: Option<String>,
    /// Since when every LIST and WATCH has been answered 404 Not Found:
    /// the API server no longer serves the type (its CRD was deleted),
    /// or not yet. Cleared by the next one that succeeds.
    pub not_found_since: Option<Instant>,
}

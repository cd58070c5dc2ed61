//! What a reflector reports of itself (its phase, lists, watches,
//! failures), for ListResources, health and metrics. Apart from the
//! reflector so the registry of served types can hold it without depending
//! on the reflector.

use std::{collections::VecDeque, time::SystemTime};

use tokio::time::{Duration, Instant};

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
    /// For a tier's leaf: the heads its parent was seen at, for how far the
    /// store is behind it.
    pub parent_heads: ParentHeads,
    /// The peer kube-fanout whose snapshot the store started from
    /// (`--bootstrap-from`), before the reflector watched the API server
    /// from its RV (`None`: the store started from the API server).
    pub bootstrapped_from: Option<String>,
    /// Since when every LIST and WATCH has been answered 404 Not Found:
    /// the API server no longer serves the type (its CRD was deleted),
    /// or not yet. Cleared by the next one that succeeds.
    pub not_found_since: Option<Instant>,
}

/// The most parent heads a leaf remembers. At one look a second (the
/// parent's head bookmarks) they fill in about a minute; a leaf further
/// behind then drops, for each new look, the one whose neighbours are
/// closest together, never the oldest (which says how far behind it is):
/// the figure stays exact, and the looks after it spread evenly over the
/// lag (600 s behind: about one look every 10 s).
const PARENT_HEADS: usize = 64;

/// A tier's leaf's looks at its parent's head (the resourceVersion the
/// parent's cache was at, as a bookmark of the parent's said, and when it
/// came), kept while its own store has not reached them: how long the
/// store has been behind the parent.
///
/// The store is behind by at least the age of the oldest look it has not
/// reached, and by less than the age of the look before that one: the
/// figure is exact to the interval between looks (a second), and never
/// more than the truth. Looks at one parent only: another parent's RVs
/// (its bookmarks from another API server) need not be ones the store
/// will pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParentHeads {
    /// The parent looked at (an address), and its heads the store has not
    /// reached, oldest first.
    parent: Option<String>,
    ahead: VecDeque<(Instant, ResourceVersion)>,
    /// The newest head seen, reached or not.
    newest: Option<ResourceVersion>,
}

impl ParentHeads {
    /// Records that `parent` was at `head` at `at`, the store being at
    /// `store`. A look at another parent than the last starts afresh.
    pub fn observe(
        &mut self,
        parent: &str,
        at: Instant,
        head: ResourceVersion,
        store: ResourceVersion,
    ) {
        if self.parent.as_deref() != Some(parent) {
            *self = ParentHeads {
                parent: Some(parent.to_owned()),
                ..ParentHeads::default()
            };
        }
        self.newest = Some(head);
        self.ahead.retain(|&(_, rv)| rv > store);
        if head > store {
            if self.ahead.len() == PARENT_HEADS {
                // Not the oldest nor the newest: the one whose neighbours
                // are closest in time.
                let closest = (1..self.ahead.len() - 1)
                    .min_by_key(|&i| self.ahead[i + 1].0 - self.ahead[i - 1].0);
                if let Some(i) = closest {
                    self.ahead.remove(i);
                }
            }
            self.ahead.push_back((at, head));
        }
    }

    /// The parent's newest head seen, if it was looked at.
    pub fn newest(&self) -> Option<ResourceVersion> {
        self.newest
    }

    /// How long a store at `store` has been behind the parent, as of
    /// `now`: zero when it has reached every head seen; `None` before the
    /// first look.
    pub fn behind(&self, now: Instant, store: ResourceVersion) -> Option<Duration> {
        self.newest?;
        Some(
            self.ahead
                .iter()
                .find(|&&(_, rv)| rv > store)
                .map_or(Duration::ZERO, |&(at, _)| now.duration_since(at)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::ResourceVersion as RV;

    #[tokio::test(start_paused = true)]
    async fn a_leaf_is_behind_by_the_age_of_the_oldest_head_it_has_not_reached() {
        let mut heads = ParentHeads::default();
        let start = Instant::now();
        assert_eq!(heads.behind(start, RV(1)), None, "never looked");
        heads.observe("p", start, RV(10), RV(10));
        assert_eq!(heads.behind(start, RV(10)), Some(Duration::ZERO));
        let at = |s| start + Duration::from_secs(s);
        heads.observe("p", at(5), RV(20), RV(12));
        heads.observe("p", at(10), RV(30), RV(15));
        assert_eq!(heads.behind(at(12), RV(15)), Some(Duration::from_secs(7)));
        // Past 20, not yet at 30: behind since the look that saw 30.
        assert_eq!(heads.behind(at(12), RV(25)), Some(Duration::from_secs(2)));
        assert_eq!(heads.behind(at(12), RV(30)), Some(Duration::ZERO));
        assert_eq!(heads.newest(), Some(RV(30)));
        // Reached heads are forgotten at the next look.
        heads.observe("p", at(15), RV(40), RV(30));
        assert_eq!(heads.ahead.len(), 1);
        // Another parent: its heads are not comparable with the old ones.
        heads.observe("q", at(20), RV(35), RV(30));
        assert_eq!(heads.behind(at(21), RV(30)), Some(Duration::from_secs(1)));
        assert_eq!(heads.newest(), Some(RV(35)));
    }

    /// Ten minutes behind at a look a second: at most [`PARENT_HEADS`]
    /// kept, the oldest among them, so the lag is the whole ten minutes;
    /// and once the store passes part of them, the oldest it has not
    /// reached is one of the looks spread over the lag.
    #[tokio::test(start_paused = true)]
    async fn a_leaf_far_behind_keeps_a_bounded_number_of_heads_and_its_whole_lag() {
        let mut heads = ParentHeads::default();
        let start = Instant::now();
        let looks = 600;
        for i in 0..looks {
            heads.observe("p", start + Duration::from_secs(i), RV(100 + i), RV(1));
            assert!(heads.ahead.len() <= PARENT_HEADS);
        }
        let now = start + Duration::from_secs(looks);
        assert_eq!(
            heads.behind(now, RV(1)),
            Some(Duration::from_secs(looks)),
            "the oldest look kept"
        );
        // Past the looks of the first five minutes: behind since one of
        // the looks just after, kept about 10 s apart (600 s over 64).
        let behind = heads.behind(now, RV(100 + 300)).unwrap();
        assert!(
            behind < Duration::from_secs(300) && behind >= Duration::from_secs(300 - 15),
            "{behind:?}"
        );
    }
}

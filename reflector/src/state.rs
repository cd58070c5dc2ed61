//! The reflector's states and its sync point, with their data in the
//! variants (kube-runtime's watcher is the model): each phase is handed
//! where it starts from instead of reading it from fields.

use std::time::Duration;

use kube_fanout_core::object::ResourceVersion;

use crate::open_watch::OpenWatch;

/// What the reflector has synced to: where the next LIST or watch-list
/// starts. client-go keeps this as `lastSyncResourceVersion` and
/// `isLastSyncResourceVersionUnavailable`; here the two are one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPoint {
    /// Nothing synced yet.
    Start,
    /// The last list, watch event or bookmark applied had this RV.
    At(ResourceVersion),
    /// The server said the RV asked for is expired or too large: the next
    /// sync is a consistent read at the freshest RV, until one succeeds.
    Unavailable,
}

impl SyncPoint {
    /// The RV a relist asks for (client-go's `relistResourceVersion`): "0"
    /// at first (served from the watch cache), then the synced RV, and ""
    /// (a consistent read) when that cannot be served.
    pub(crate) fn relist_from(self) -> String {
        match self {
            SyncPoint::Start => "0".into(),
            SyncPoint::At(rv) => rv.to_string(),
            SyncPoint::Unavailable => String::new(),
        }
    }

    /// The RV a watch-list asks for (client-go's `rewatchResourceVersion`):
    /// the synced RV, else "" (the freshest state).
    pub(crate) fn rewatch_from(self) -> String {
        match self {
            SyncPoint::At(rv) => rv.to_string(),
            SyncPoint::Start | SyncPoint::Unavailable => String::new(),
        }
    }
}

/// The reflector's states (see the crate docs); [`crate::Reflector::step`]
/// performs one and returns the next.
#[derive(Debug)]
pub enum State {
    /// Sync with a watch-list stream from this sync point.
    WatchList(SyncPoint),
    /// Sync with a LIST from this sync point.
    List(SyncPoint),
    /// Open a watch from this synced RV and follow it.
    Watch(ResourceVersion),
    /// Follow a watch that is already open (a watch-list's, after its
    /// initial events), synced to `at`.
    Follow {
        /// The open watch.
        open: OpenWatch,
        /// The RV its initial events were synced to.
        at: ResourceVersion,
    },
    /// Wait, then go on with `then`.
    Backoff {
        /// How long.
        delay: Duration,
        /// What comes after.
        then: Box<State>,
    },
}

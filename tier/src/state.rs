//! Where a feed is: each [`State`] says what the next step does and holds
//! what that step needs ([`Feed::step`](crate::Feed::step) performs one).
//!
//! ```text
//! Snapshot   open with send_initial_events ─────────────▶ Receiving
//! Receiving  ADDED per object; initial-events-end ─ replace ─▶ Following
//! Resume     open after the store's RV ─────────────────▶ Following
//! Following  an event: apply; a bookmark: move the RV;
//!            a flagged event ───────────────────────────▶ Unit
//!            (a closing bookmark alone: an empty unit, its gap recorded)
//! Unit       flagged events; the closing bookmark ─ apply_unit ─▶ Following
//! Backoff    wait, move to the next parent ─────────────▶ its `then`
//! Renew      a new connection to the same parent ───────▶ its `then`
//! a failure  Expired ─────────────────────────────────▶ Snapshot
//!            a retired connection ──────────────────────▶ Renew
//!            anything else ─────────────────────────────▶ Backoff
//! ```
//!
//! A failure inside the snapshot or a unit drops what was received of it:
//! the store has not moved, and the next watch gets it again whole.

use std::{fmt, time::Duration};

use kube_fanout_core::{
    event::EventKind,
    object::{Object, ResourceVersion},
};

/// The events of one watch on the parent.
pub(crate) use kube_fanout_client::watcher::EventStream as Events;

/// Where a feed is (see the module docs).
pub enum State {
    /// The next step opens a watch with a new snapshot: at the start, and
    /// after the parent no longer held the store's RV.
    Snapshot,
    /// Receiving a snapshot: the objects it has sent so far.
    Receiving {
        /// The watch.
        stream: Events,
        /// Its objects so far.
        objects: Vec<Object>,
    },
    /// The next step opens a watch after the store's RV.
    Resume,
    /// Following live events and bookmarks.
    Following {
        /// The watch.
        stream: Events,
    },
    /// Receiving a re-sync unit: the store is still before it.
    Unit {
        /// The watch.
        stream: Events,
        /// The unit's resourceVersion.
        rv: ResourceVersion,
        /// Its changes so far.
        changes: Vec<(EventKind, Object)>,
    },
    /// After a failure: wait `delay`, move to the next parent, then `then`.
    Backoff {
        /// How long.
        delay: Duration,
        /// [`State::Snapshot`] or [`State::Resume`].
        then: Box<State>,
    },
    /// The parent retired the connection: a new one to it at once, then
    /// `then`.
    Renew {
        /// [`State::Snapshot`] or [`State::Resume`].
        then: Box<State>,
    },
}

impl fmt::Debug for State {
    // The streams say nothing; the counts do.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            State::Snapshot => f.write_str("Snapshot"),
            State::Receiving { objects, .. } => write!(f, "Receiving({} objects)", objects.len()),
            State::Resume => f.write_str("Resume"),
            State::Following { .. } => f.write_str("Following"),
            State::Unit { rv, changes, .. } => write!(f, "Unit({rv}, {} changes)", changes.len()),
            State::Backoff { delay, then } => write!(f, "Backoff({delay:?}, then {then:?})"),
            State::Renew { then } => write!(f, "Renew(then {then:?})"),
        }
    }
}

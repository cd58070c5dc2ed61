//! The event vocabulary: what the store's ring holds and what dispatch,
//! subscriptions and the codec read. Apart from the store so that those
//! can name an event without importing the store that holds them.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use tokio::time::Instant;

use crate::{
    object::{Object, ResourceVersion},
    projection::Projection,
};

/// What an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The object was created (or first seen).
    Added,
    /// The object changed.
    Modified,
    /// The object was deleted.
    Deleted,
    /// No object changed; the resourceVersion moved on.
    Bookmark,
}

/// One entry of the ring.
#[derive(Debug)]
pub struct Event {
    /// Position in the ring; consecutive, starting at 1.
    pub seq: u64,
    /// What happened.
    pub kind: EventKind,
    /// The resourceVersion the store is at once this event is applied.
    pub resource_version: ResourceVersion,
    /// The object after the event; for `Deleted`, its last state. `None`
    /// for bookmarks.
    pub object: Option<Arc<Object>>,
    /// The object before the event, if the store held it. Filters compare
    /// it with `object` to turn a change of match into ADDED or DELETED,
    /// and snapshots at an older RV undo the event with it.
    pub previous: Option<Arc<Object>>,
    /// Part of a re-sync unit: a change of it, or (a `Bookmark`) the event
    /// that closes it. See the module docs.
    pub resync: bool,
    /// The JSON bytes of every event up to and including this one: how far
    /// behind a subscriber is, in bytes, is the head's total minus this.
    pub bytes_through: u64,
    /// When the event entered the ring, for the age bound.
    pub at: Instant,
    /// The event as an encoded `kubefanout.v1.WatchEvent`, one per
    /// projection, made by the first subscriber that receives the event
    /// unchanged and shared by every other one (see `crate::codec`).
    pub encoded: Encodings,
}

impl Event {
    /// The JSON bytes this event carries.
    pub fn bytes(&self) -> u64 {
        self.object.as_ref().map_or(0, |o| o.json.len() as u64)
    }

    /// The JSON bytes of every event before this one.
    pub fn bytes_before(&self) -> u64 {
        self.bytes_through - self.bytes()
    }

    /// Whether this event closes a re-sync unit.
    pub fn closes_unit(&self) -> bool {
        self.resync && self.kind == EventKind::Bookmark
    }
}

/// A ring event's shared encodings, one per projection, each made on
/// first use (an event no metadata subscriber receives never gets the
/// second). The second cell costs 40 bytes per ring entry while empty
/// (400 KB for the default 10,000-event history), and once filled the
/// encoded `PartialObjectMetadata` (a few hundred bytes) for as long as the
/// event stays in the ring.
#[derive(Debug, Default)]
pub struct Encodings {
    full: OnceLock<Bytes>,
    metadata: OnceLock<Bytes>,
}

impl Encodings {
    /// The cell holding the encoding for `projection`.
    pub(crate) fn cell(&self, projection: Projection) -> &OnceLock<Bytes> {
        match projection {
            Projection::Full => &self.full,
            Projection::Metadata => &self.metadata,
        }
    }
}

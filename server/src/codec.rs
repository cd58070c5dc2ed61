//! Watch events on the wire, encoded once.
//!
//! A live event that reaches many subscribers unchanged is encoded as a
//! `kubefanout.v1.WatchEvent` by the first of them and the bytes are kept
//! on the ring entry ([`Event::encoded`](crate::store::Event::encoded));
//! every other subscriber writes the same `Bytes`. Metadata-only
//! subscribers share a second encoding of the same event, with the
//! object's `PartialObjectMetadata` ([`crate::projection`]), so an event
//! costs at most two encodes whatever the number of subscribers. Only what
//! differs per
//! subscriber is encoded on its own: snapshot ADDEDs (at that
//! subscriber's snapshot RV), filter transitions (an event turned into
//! ADDED or DELETED) and progress bookmarks.

use std::sync::{
    OnceLock,
    atomic::{AtomicU64, Ordering},
};

use bytes::Bytes;
use kube_fanout_proto::{
    v1::{EventType, WatchEvent},
    wire::EncodedWatchEvent,
};
use prost::Message;

use crate::{projection::Projection, store::EventKind, subscription::Delivery};

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
    fn cell(&self, projection: Projection) -> &OnceLock<Bytes> {
        match projection {
            Projection::Full => &self.full,
            Projection::Metadata => &self.metadata,
        }
    }
}

/// Encodes deliveries, sharing the encoding of ring events delivered
/// unchanged, and counts the protobuf encodes it actually performs.
#[derive(Debug, Default)]
pub struct WatchEncoder {
    encodes: AtomicU64,
}

impl WatchEncoder {
    /// The delivery as an encoded `WatchEvent`.
    pub fn encode(&self, delivery: &Delivery) -> EncodedWatchEvent {
        EncodedWatchEvent(match &delivery.unchanged {
            Some(event) => event
                .0
                .encoded
                .cell(delivery.projection)
                .get_or_init(|| self.encode_new(delivery))
                .clone(),
            None => self.encode_new(delivery),
        })
    }

    /// How many deliveries were encoded rather than shared.
    pub fn encodes(&self) -> u64 {
        self.encodes.load(Ordering::Relaxed)
    }

    fn encode_new(&self, delivery: &Delivery) -> Bytes {
        self.encodes.fetch_add(1, Ordering::Relaxed);
        to_watch_event(delivery).encode_to_vec().into()
    }
}

/// The `WatchEvent` message of a delivery.
fn to_watch_event(delivery: &Delivery) -> WatchEvent {
    let kind = match delivery.kind {
        EventKind::Added => EventType::Added,
        EventKind::Modified => EventType::Modified,
        EventKind::Deleted => EventType::Deleted,
        EventKind::Bookmark => EventType::Bookmark,
    };
    WatchEvent {
        r#type: kind.into(),
        resource_version: delivery.resource_version.to_string(),
        object: delivery.object.to_string(),
        resync: delivery.resync,
    }
}

//! Watch events on the wire, encoded once.
//!
//! A live event that reaches many subscribers unchanged is encoded as a
//! `kubefanout.v1.WatchEvent` by the first of them and the bytes are kept
//! on the ring entry ([`Event::encoded`](crate::event::Event::encoded));
//! every other subscriber writes the same `Bytes`. Metadata-only
//! subscribers share a second encoding of the same event, with the
//! object's `PartialObjectMetadata` ([`crate::projection`]), so an event
//! costs at most two encodes whatever the number of subscribers. Only what
//! differs per subscriber is encoded on its own: snapshot ADDEDs (at that
//! subscriber's snapshot RV) where its snapshot is not shared (see
//! [`crate::shared_snapshot`], which encodes a snapshot once for all who
//! send it together), filter transitions (an event turned into
//! ADDED or DELETED), progress bookmarks and bookmarks stamped with the
//! server's head. Those are not written out
//! here ([`OwnWatchEvent`]): their few leading fields are encoded in place
//! and the object's JSON, shared with the store, is copied once, straight
//! into the response buffer. A snapshot's time goes mostly to copying its
//! bytes (into that buffer, into TLS records, into the socket) and to
//! encrypting them, so a copy saved is most of what there was to save.

use std::sync::atomic::{AtomicU64, Ordering};

use kube_fanout_proto::{
    v1::EventType,
    wire::{EncodedWatchEvent, OwnWatchEvent},
};

use crate::{event::EventKind, subscription::Delivery};

/// Encodes deliveries, sharing the encoding of ring events delivered
/// unchanged, and counts the protobuf encodes it actually performs.
#[derive(Debug, Default)]
pub struct WatchEncoder {
    encodes: AtomicU64,
}

impl WatchEncoder {
    /// The delivery as an encoded `WatchEvent`. A delivery of its own (a
    /// snapshot's ADDED, say) is not written out here: its object's JSON
    /// is copied once, straight into the response buffer, when tonic
    /// writes it. A shared one is written out once, for all.
    pub fn encode(&self, delivery: &Delivery) -> EncodedWatchEvent {
        match &delivery.unchanged {
            Some(event) => EncodedWatchEvent::Shared(
                event
                    .0
                    .encoded
                    .cell(delivery.projection)
                    .get_or_init(|| self.encode_new(delivery).to_bytes())
                    .clone(),
            ),
            None => EncodedWatchEvent::Own(self.encode_new(delivery)),
        }
    }

    /// How many deliveries were encoded rather than shared.
    pub fn encodes(&self) -> u64 {
        self.encodes.load(Ordering::Relaxed)
    }

    fn encode_new(&self, delivery: &Delivery) -> OwnWatchEvent {
        self.encodes.fetch_add(1, Ordering::Relaxed);
        let kind = match delivery.kind {
            EventKind::Added => EventType::Added,
            EventKind::Modified => EventType::Modified,
            EventKind::Deleted => EventType::Deleted,
            EventKind::Bookmark => EventType::Bookmark,
        };
        let own = OwnWatchEvent::new(
            kind,
            delivery.resource_version.0,
            delivery.object.clone(),
            delivery.resync,
        );
        match delivery.head {
            Some(head) => own.with_server_head(head.0),
            None => own,
        }
    }
}

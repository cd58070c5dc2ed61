//! Watch events on the wire, encoded once.
//!
//! A live event that reaches many subscribers unchanged is encoded as a
//! `kubefanout.v1.WatchEvent` by the first of them and the bytes are kept
//! on the ring entry ([`Event::encoded`](crate::store::Event::encoded));
//! every other subscriber writes the same `Bytes`. Only what differs per
//! subscriber is encoded on its own: snapshot ADDEDs (at that
//! subscriber's snapshot RV), filter transitions (an event turned into
//! ADDED or DELETED) and progress bookmarks.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use kube_fanout_proto::{
    v1::{EventType, WatchEvent},
    wire::EncodedWatchEvent,
};
use prost::Message;

use crate::{store::EventKind, subscription::Delivery};

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

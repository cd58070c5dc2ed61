//! One subscriber's stream: an optional consistent snapshot, then the
//! store's events after it, filtered, in order. No network here: the gRPC
//! layer only encodes what this yields.
//!
//! A subscription is an explicit state machine ([`state`]) stepped by one
//! function: it waits for the store to be ready, sends a snapshot if one is
//! due, then follows the ring ([`live`], itself a sub-machine). What it
//! promises the subscriber is the Watch contract of `kubefanout.v1` (see
//! the proto):
//!
//! - deliveries come in ring order, so resourceVersions never decrease;
//! - a re-sync unit's changes go out flagged and are closed by a flagged
//!   bookmark; its resourceVersion becomes the resume point only once the
//!   unit is closed, so an error in the middle names the point before it
//!   and a resume there gets the unit again whole;
//! - the lag bound counts only what this subscriber still has to receive
//!   and only since this stream started, so a resume from any resourceVersion
//!   the store still holds makes progress, and a cut-off names the last
//!   point it reached.
//!
//! A live subscriber whose filter pins an indexed value is woken only by
//! the events that concern it, and otherwise moves its cursor to the head
//! without reading the ring ([`crate::dispatch`] has the proof); the others
//! are woken by every move of the head.
//!
//! Its parts, each on the ones before it: the [`request`] vocabulary
//! ([`WatchSpec`], [`Start`], [`Limits`]), the [`error`]s that end a
//! stream, [`delivery`] shaping (what an event becomes through a filter and
//! a projection), [`lag`] accounting, [`live`] following, and the
//! [`state`] machine over them.

use std::sync::Arc;

use futures::Stream;
use tokio::time::Instant;

use crate::{shared_snapshot::SnapshotFrames, store::Store};

mod delivery;
mod error;
mod lag;
mod live;
mod pace;
mod request;
mod state;
#[cfg(test)]
pub(crate) mod tests;

pub use delivery::Delivery;
pub use error::WatchError;
pub use request::{HEAD_BOOKMARK_INTERVAL, Limits, Start, WatchSpec};
use state::Subscription;
pub use state::{Output, SnapshotHold};

/// The stream a subscriber receives (see the module docs). It ends with
/// [`WatchError::ShuttingDown`] once the store's subscribers are closed
/// ([`Store::close_subscribers`]), so that a server's graceful shutdown is
/// not held up by watches that never end.
///
/// It keeps `hold` (say a per-caller snapshot permit) until the snapshot
/// has been sent, or drops it at once if there is none. On a connection
/// retired at `retire_at`, if ever, the stream ends with
/// [`WatchError::ConnectionRetired`], at its first step in the live state
/// from that time on (a snapshot being sent is finished first).
///
/// Given `frames`, a snapshot goes out as one [`Output::Snapshot`],
/// encoded once for every subscriber of the same snapshot, filter,
/// projection and compression ([`crate::shared_snapshot`]), and `hold` is kept by it until
/// its last chunk is taken; otherwise each ADDED is an [`Output::Event`] of
/// its own.
pub fn watch_on(
    store: Arc<Store>,
    spec: WatchSpec,
    limits: Limits,
    hold: Option<SnapshotHold>,
    retire_at: Option<Instant>,
    frames: Option<SnapshotFrames>,
) -> impl Stream<Item = Result<Output, WatchError>> {
    let subscription = Subscription::new(store, spec, limits, hold, retire_at, frames);
    futures::stream::unfold(subscription, |mut subscription| async move {
        let item = subscription.next().await?;
        Some((item, subscription))
    })
}

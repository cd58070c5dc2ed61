//! What a watch yields besides its events: the [`Change`] that
//! [`changes`](super::changes) wraps each event in, and the
//! [`WatchError`]s the stream goes on after.

use kube_runtime::watcher::{self, Event};
use tonic::Status;

use crate::{error::ClientError, proto::EventType};

/// Why a watch yielded an error. The stream goes on after each: it retries
/// with backoff, as a kube-runtime watcher with `default_backoff` does.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The server refused the watch for a reason retrying will not fix by
    /// itself: an unknown resource type, a malformed selector, no
    /// permission.
    #[error("kube-fanout refused the watch: {}: {}", .0.code(), .0.message())]
    Refused(Status),
    /// An object did not decode as the watched type; it is skipped.
    #[error(transparent)]
    Decode(ClientError),
}

impl From<WatchError> for watcher::Error {
    fn from(err: WatchError) -> Self {
        watcher::Error::WatchFailed(kube::Error::Service(Box::new(err)))
    }
}

/// One item of [`changes`](super::changes): the [`Event`] [`watch`](super::watch) yields, with what the
/// server said of it, for a tool that shows changes as the server sent
/// them (kubectl-fanout's `watch`).
#[derive(Debug)]
pub struct Change<K> {
    /// The event, as [`watch`](super::watch) yields it.
    pub event: Event<K>,
    /// The server's type of the event: `Added`, `Modified` or `Deleted`
    /// for an `Apply` or `Delete`, `Added` for an `InitApply` (the server
    /// sends a snapshot's objects as added), `Bookmark` for `Init` and
    /// `InitDone`.
    pub kind: EventType,
    /// The resourceVersion of the event, or of the unit it belongs to:
    /// the re-sync unit's for its replacement, the end of the snapshot's
    /// for its `InitDone`; empty for the `Init` starting a snapshot.
    pub resource_version: String,
    /// Whether it is part of the replacement a re-sync unit yields (`Init`,
    /// `InitApply` for every object, `InitDone`).
    pub resync: bool,
}

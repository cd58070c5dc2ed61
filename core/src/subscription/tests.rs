//! What the subscription tests share (and `crate::dispatch`'s tests).

use std::{sync::Arc, time::Duration};

use futures::{Stream, StreamExt};

use super::{Delivery, Limits, Output, Start, WatchError, WatchSpec, watch_on};
use crate::{event::EventKind, filter::Filter, projection::Projection, store::Store};

/// A subscription to `store` as `spec` asks, on a connection never retired.
pub(crate) fn watch(
    store: Arc<Store>,
    spec: WatchSpec,
    limits: Limits,
) -> impl Stream<Item = Result<Delivery, WatchError>> {
    events(watch_on(store, spec, limits, None, None, None))
}

/// The events of a subscription given no shared snapshots, which sends
/// every one on its own.
pub(crate) fn events(
    stream: impl Stream<Item = Result<Output, WatchError>>,
) -> impl Stream<Item = Result<Delivery, WatchError>> {
    stream.map(|item| {
        item.map(|output| match output {
            Output::Event(delivery) => delivery,
            Output::Snapshot(framed) => panic!("sent framed without shared snapshots: {framed:?}"),
        })
    })
}

/// A cluster-wide watch with bookmarks, full objects and this label
/// selector, from `start`.
pub(crate) fn spec(label_selector: &str, start: Start, send_initial_events: bool) -> WatchSpec {
    WatchSpec {
        filter: Filter::new(
            "",
            label_selector,
            "",
            &crate::fields::SelectableFields::default(),
        )
        .unwrap(),
        start,
        send_initial_events,
        allow_bookmarks: true,
        projection: Projection::Full,
        head_bookmarks: false,
    }
}

/// Drains what the stream has ready without waiting for more.
pub(crate) async fn ready(
    stream: &mut (impl Stream<Item = Result<Delivery, WatchError>> + Unpin),
) -> Vec<Result<(EventKind, u64), WatchError>> {
    let mut out = Vec::new();
    while let Ok(Some(item)) = tokio::time::timeout(Duration::from_millis(50), stream.next()).await
    {
        out.push(item.map(|d| (d.kind, d.resource_version.0)));
    }
    out
}

/// (kind, RV, resync, name) of what a stream has ready.
pub(crate) async fn deliveries(
    stream: &mut (impl Stream<Item = Result<Delivery, WatchError>> + Unpin),
) -> Vec<Result<(EventKind, u64, bool, String), WatchError>> {
    let mut out = Vec::new();
    while let Ok(Some(item)) = tokio::time::timeout(Duration::from_millis(50), stream.next()).await
    {
        out.push(item.map(|d| {
            let value: serde_json::Value = serde_json::from_str(&d.object).unwrap();
            let name = value["metadata"]["name"].as_str().unwrap_or("").to_owned();
            (d.kind, d.resource_version.0, d.resync, name)
        }));
    }
    out
}

/// [`watch`], pinned.
pub(crate) fn stream_of(
    store: &Arc<Store>,
    spec: WatchSpec,
    limits: Limits,
) -> std::pin::Pin<Box<impl Stream<Item = Result<Delivery, WatchError>>>> {
    Box::pin(watch(store.clone(), spec, limits))
}

//! The resuming watch: kube-fanout's stream turned into the
//! [`kube_runtime::watcher::Event`]s a kube-runtime watcher yields, so a
//! reflector, a `Controller` or any `WatchStreamExt` combinator takes it
//! unchanged.
//!
//! It starts with a snapshot (`Init`, `InitApply` for each object,
//! `InitDone`), then yields `Apply` and `Delete`. When the stream breaks
//! (the server restarts, a replica goes away, the subscriber lags and gets
//! `RESOURCE_EXHAUSTED`) it resumes from its resume point, pacing attempts
//! with kube-runtime's default backoff (0.8 s doubling to 30 s, jittered,
//! reset after 2 minutes without failure): the caller sees no gap and no
//! duplicate. When the server no longer holds that resourceVersion
//! (`Expired`) it takes a new snapshot, announced by `Init` exactly as a
//! kube-runtime relist is.
//!
//! # Resume points
//!
//! The resume point is the resourceVersion of the last finished unit (see
//! the Watch comment in `fanout.proto`): a live event, a bookmark, the
//! bookmark that ends a snapshot or the one that closes a re-sync unit. It
//! never moves inside a snapshot or a re-sync unit, so a hang-up inside one
//! resumes from the point before it and the server sends the unit again
//! whole; what was received of the broken unit is dropped, never yielded.
//!
//! # Re-sync units
//!
//! After the API server lost history, kube-fanout sends the difference to
//! its new state as events with `resync=true`, all at one resourceVersion
//! L, closed by a bookmark with `resync=true` at L. The states between
//! those events never existed upstream, so they must reach the caller as
//! one change. kube-runtime's [`Event`] can say "replace everything at
//! once" only as `Init`, `InitApply`..., `InitDone` (a reflector store
//! swaps in the new contents at `InitDone`, a `Controller` reconciles each
//! `InitApply`d object, exactly as after a kube-runtime relist). So the
//! watcher keeps the objects it has delivered (namespace/name → the latest
//! object, which is what matches its selectors: the server filters) and
//! buffers the unit's changes; at the closing bookmark it applies them to
//! that copy and yields the whole new state as `Init`, `InitApply` for
//! every object, `InitDone`.
//!
//! Why not the alternatives: yielding the unit's changes as `Apply`s and
//! `Delete`s would show every intermediate state to the store and the
//! Controller; taking a new snapshot over the network instead would make
//! every subscriber of a resource type re-snapshot at the same moment after
//! each upstream relist, the load kube-fanout exists to spare, where the
//! contract promises connected subscribers converge without one. The price
//! is one more copy of the watched objects in the client (a reflector
//! store holds its own), and a unit costs as many `InitApply`s as there are
//! objects, like a relist. A unit that changes nothing (only its closing
//! bookmark) yields nothing.

use futures::{Stream, StreamExt};
use kube::{Resource, core::PartialObjectMeta};
use kube_runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;

// Re-exported: callers reading raw streams need them, and the proto crate
// is not theirs to depend on.
pub use kube_fanout_proto::{INITIAL_EVENTS_END, ends_initial_events, ends_resync};

use crate::{api::Api, proto::WatchRequest};

mod change;
mod held;
mod recovery;
mod source;
mod state;

pub use change::{Change, WatchError};
pub use source::{EventStream, Source};

/// Watches `api`'s objects matching `config`'s label and field selectors,
/// resuming by itself; errors are typed (see [`WatchError`]).
pub fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<K>, WatchError>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Send + 'static,
{
    changes(api, config, None).map(|r| r.map(|change| change.event))
}

/// [`watch`] with what the server said of each event (see [`Change`]),
/// from a snapshot, or with `since` only the changes after that
/// resourceVersion. The same resuming stream: a resume point, `since`
/// included, that the server no longer holds starts a snapshot, announced
/// by `Init`. After `since` the watcher holds only the objects changed
/// since, so a re-sync unit's replacement lists only those.
pub fn changes<K>(
    api: Api<K>,
    config: watcher::Config,
    since: Option<String>,
) -> impl Stream<Item = Result<Change<K>, WatchError>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Send + 'static,
{
    let request = WatchRequest {
        resource: Some(api.resource.clone()),
        namespace: api.namespace.clone(),
        label_selector: config.label_selector.unwrap_or_default(),
        field_selector: config.field_selector.unwrap_or_default(),
        allow_bookmarks: true,
        // `Api<PartialObjectMeta<_>>`: metadata only, as kube::Api does.
        metadata_only: K::metadata_api(),
        ..WatchRequest::default()
    };
    let start = since.map_or(state::State::Empty, |rv| {
        state::State::Resume(state::ResumePoint::after(rv))
    });
    run(api.client, request, start)
}

/// The drop-in for [`kube_runtime::metadata_watcher()`]: the same
/// [`PartialObjectMeta`] events, from kube-fanout instead of the API
/// server, which sends only each object's metadata (`metadata_only` in the
/// proto). Like kube 5, `watcher(Api::<PartialObjectMeta<K>>::all(client),
/// config)` does the same.
///
/// ```no_run
/// # use k8s_openapi::api::core::v1::Pod;
/// # use kube_runtime::{reflector, watcher, WatchStreamExt};
/// # fn f(fanout: kube_fanout_client::Client) {
/// let (reader, writer) = reflector::store();
/// // was: metadata_watcher(kube::Api::<Pod>::all(kube_client), watcher::Config::default())
/// let stream = kube_fanout_client::metadata_watcher(
///     kube_fanout_client::Api::<Pod>::all(fanout),
///     watcher::Config::default(),
/// )
/// .reflect(writer)
/// .applied_objects();
/// # }
/// ```
pub fn metadata_watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<Event<PartialObjectMeta<K>>>> + Send + 'static
where
    K: Resource + Clone + Send + 'static,
{
    watcher(api.cast::<PartialObjectMeta<K>>(), config)
}

/// The drop-in for [`kube_runtime::watcher()`]: the same events and error
/// type, from kube-fanout instead of the API server.
///
/// ```no_run
/// # use k8s_openapi::api::core::v1::ConfigMap;
/// # use kube_runtime::{reflector, watcher, WatchStreamExt};
/// # fn f(fanout: kube_fanout_client::Client) {
/// let (reader, writer) = reflector::store();
/// // was: watcher(kube::Api::<ConfigMap>::all(kube_client), watcher::Config::default())
/// let stream = kube_fanout_client::watcher(
///     kube_fanout_client::Api::<ConfigMap>::all(fanout),
///     watcher::Config::default(),
/// )
/// .reflect(writer)
/// .applied_objects();
/// # }
/// ```
pub fn watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Send + 'static,
{
    watch(api, config).map(|r| r.map_err(watcher::Error::from))
}

/// The watch over any [`Source`] from `start`: the state machine, stepped
/// once per item, as kube-runtime's watcher is.
fn run<K, S>(
    source: S,
    request: WatchRequest,
    start: state::State<K>,
) -> impl Stream<Item = Result<Change<K>, WatchError>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Send + 'static,
    S: Source,
{
    futures::stream::unfold(
        (state::Machine::new(source, request), start),
        |(mut machine, state)| async move {
            let (item, state) = machine.next(state).await;
            Some((item, (machine, state)))
        },
    )
}

#[cfg(test)]
mod tests;

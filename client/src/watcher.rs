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

use std::{collections::BTreeMap, future::Future, time::Duration};

use futures::{Stream, StreamExt, stream::BoxStream};
use kube::{Resource, core::PartialObjectMeta};
use kube_fanout_proto::{CONNECTION_RETIRED, GroupVersionResource};
use kube_runtime::watcher::{self, DefaultBackoff, Event};
use serde::de::DeserializeOwned;
use tonic::{Code, Status};
use tracing::{debug, info, warn};

// Re-exported: callers reading raw streams need them, and the proto crate
// is not theirs to depend on.
pub use kube_fanout_proto::{INITIAL_EVENTS_END, ends_initial_events, ends_resync};

use crate::{
    client::{Api, Client, decode},
    error::{ClientError, reason},
    proto::{EventType, WatchEvent, WatchRequest},
};

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

/// A stream of raw events from one `Watch` call.
pub(crate) type EventStream = BoxStream<'static, Result<WatchEvent, Status>>;

/// Where a watch's events come from: a kube-fanout server, or a script in
/// the unit tests.
pub(crate) trait Source: Send + 'static {
    /// Starts a watch.
    fn open(
        &mut self,
        request: WatchRequest,
    ) -> impl Future<Output = Result<EventStream, Status>> + Send;
    /// Moves to the next server after a failure.
    fn reconnect(&mut self) -> impl Future<Output = Result<(), ClientError>> + Send;
}

impl Source for Client {
    async fn open(&mut self, request: WatchRequest) -> Result<EventStream, Status> {
        Ok(self.grpc().watch(request).await?.into_inner().boxed())
    }

    async fn reconnect(&mut self) -> Result<(), ClientError> {
        Client::reconnect(self).await
    }
}

/// Watches `api`'s objects matching `config`'s label and field selectors,
/// resuming by itself; errors are typed (see [`WatchError`]).
pub fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<K>, WatchError>> + Send + 'static
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
    run(api.client, request)
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

/// What to do after a stream ended or failed to start.
#[derive(Debug)]
enum Next {
    /// Resume after the last resourceVersion, after a backoff delay.
    Resume,
    /// Take a new snapshot right away: the resume point is gone.
    Snapshot,
    /// Tell the caller, then retry after a backoff delay.
    Refused,
    /// Resume at once on the same server: it retired the connection
    /// (`--max-connection-age-seconds`), a routine move, and the channel
    /// opens a new one after the server's GOAWAY.
    Move,
}

fn next_after(status: &Status) -> Next {
    if status.code() == Code::Unavailable && reason(status).as_deref() == Some(CONNECTION_RETIRED) {
        return Next::Move;
    }
    match status.code() {
        Code::OutOfRange => Next::Snapshot,
        Code::NotFound
        | Code::InvalidArgument
        | Code::PermissionDenied
        | Code::Unauthenticated
        | Code::FailedPrecondition
        | Code::Unimplemented => Next::Refused,
        // Unavailable (shutdown, no server), ResourceExhausted (lagged),
        // DeadlineExceeded (a replica behind the asked RV), transport
        // errors: all heal by themselves.
        _ => Next::Resume,
    }
}

/// How the watcher keys the objects it delivered: namespace (empty for
/// cluster-scoped objects) and name.
type Key = (String, String);

fn key<K: Resource>(object: &K) -> Key {
    let meta = object.meta();
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// A re-sync unit being received: its resourceVersion and the changes so
/// far, each an object and whether it was deleted.
struct Unit<K> {
    resource_version: String,
    changes: Vec<(K, bool)>,
}

/// The watch loop over any [`Source`].
fn run<K, S>(
    mut source: S,
    request: WatchRequest,
) -> impl Stream<Item = Result<Event<K>, WatchError>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Send + 'static,
    S: Source,
{
    let mut backoff = DefaultBackoff::default();
    let resource = request
        .resource
        .clone()
        .map(|r| GroupVersionResource::from(r).to_string())
        .unwrap_or_default();
    async_stream::stream! {
        // The resume point: the RV of the last finished unit; None until a
        // snapshot has completed, and again after Expired.
        let mut resume: Option<String> = None;
        // What the caller holds as of the last finished unit: every object
        // yielded and not deleted since. A re-sync unit is applied to it.
        let mut held: BTreeMap<Key, K> = BTreeMap::new();
        loop {
            let snapshot = resume.is_none();
            let opened = source
                .open(WatchRequest {
                    resource_version: resume.clone().unwrap_or_default(),
                    send_initial_events: snapshot,
                    ..request.clone()
                })
                .await;
            let failure = match opened {
                Err(status) => status,
                Ok(mut events) => {
                    let mut in_snapshot = snapshot;
                    // The re-sync unit being received, dropped with the
                    // stream if it breaks before the unit is finished.
                    let mut unit: Option<Unit<K>> = None;
                    if snapshot {
                        held.clear();
                        yield Ok(Event::Init);
                    }
                    loop {
                        let event = match events.next().await {
                            Some(Ok(event)) => event,
                            Some(Err(status)) => break status,
                            None => break Status::unavailable("the server ended the watch"),
                        };
                        let kind = event.r#type();
                        if in_snapshot {
                            if ends_initial_events(&event) {
                                in_snapshot = false;
                                resume = Some(event.resource_version);
                                yield Ok(Event::InitDone);
                            } else if kind != EventType::Bookmark {
                                match decode::<K>(&event.object) {
                                    Err(err) => yield Err(WatchError::Decode(err)),
                                    Ok(object) => {
                                        held.insert(key(&object), object.clone());
                                        yield Ok(Event::InitApply(object));
                                    }
                                }
                            }
                            continue;
                        }
                        if let Some(open) = &unit
                            && (!event.resync || event.resource_version != open.resource_version)
                        {
                            // Applying it would mix the unit with what is
                            // not part of it; resuming gets the unit again.
                            break Status::internal(format!(
                                "the server broke a re-sync unit at resourceVersion {} with a {} event at {} (resync={})",
                                open.resource_version,
                                kind.as_str_name(),
                                event.resource_version,
                                event.resync,
                            ));
                        }
                        if ends_resync(&event) {
                            resume = Some(event.resource_version);
                            let changes = unit.take().map(|u| u.changes).unwrap_or_default();
                            if changes.is_empty() {
                                continue;
                            }
                            for (object, deleted) in changes {
                                if deleted {
                                    held.remove(&key(&object));
                                } else {
                                    held.insert(key(&object), object);
                                }
                            }
                            // Copied out first: a borrow of `held` held
                            // across a yield would need K: Sync.
                            let state: Vec<K> = held.values().cloned().collect();
                            yield Ok(Event::Init);
                            for object in state {
                                yield Ok(Event::InitApply(object));
                            }
                            yield Ok(Event::InitDone);
                            continue;
                        }
                        if event.resync {
                            let open = unit.get_or_insert_with(|| Unit {
                                resource_version: event.resource_version.clone(),
                                changes: Vec::new(),
                            });
                            match decode::<K>(&event.object) {
                                Err(err) => yield Err(WatchError::Decode(err)),
                                Ok(object) => open.changes.push((object, kind == EventType::Deleted)),
                            }
                            continue;
                        }
                        // A live event or a bookmark: a unit of its own.
                        if kind != EventType::Bookmark {
                            match decode::<K>(&event.object) {
                                Err(err) => yield Err(WatchError::Decode(err)),
                                Ok(object) if kind == EventType::Deleted => {
                                    held.remove(&key(&object));
                                    yield Ok(Event::Delete(object));
                                }
                                Ok(object) => {
                                    held.insert(key(&object), object.clone());
                                    yield Ok(Event::Apply(object));
                                }
                            }
                        }
                        resume = Some(event.resource_version);
                    }
                }
            };
            // kube-runtime's backoffs never run out; the cap is a guard.
            let mut delay = || backoff.next().unwrap_or(Duration::from_secs(30));
            match next_after(&failure) {
                Next::Snapshot => {
                    info!(%resource, reason = reason(&failure).unwrap_or_default(), "resume point expired; taking a new snapshot");
                    resume = None;
                    continue;
                }
                Next::Refused => {
                    let delay = delay();
                    warn!(%resource, code = %failure.code(), message = failure.message(), retry_in = ?delay, "watch refused");
                    yield Err(WatchError::Refused(failure));
                    tokio::time::sleep(delay).await;
                }
                Next::Move => {
                    debug!(%resource, resume_after = resume.as_deref().unwrap_or("(new snapshot)"), "connection retired by the server; resuming on a new one");
                    continue;
                }
                Next::Resume => {
                    let delay = delay();
                    warn!(
                        %resource,
                        code = %failure.code(),
                        message = failure.message(),
                        resume_after = resume.as_deref().unwrap_or("(new snapshot)"),
                        retry_in = ?delay,
                        "watch interrupted"
                    );
                    tokio::time::sleep(delay).await;
                }
            }
            if let Err(err) = source.reconnect().await {
                warn!(%resource, error = %err, "no kube-fanout server reachable; will retry");
            }
        }
    }
}

#[cfg(test)]
mod tests;

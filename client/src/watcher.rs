//! The resuming watch: kube-fanout's stream turned into the
//! [`kube_runtime::watcher::Event`]s a kube-runtime watcher yields, so a
//! reflector, a `Controller` or any `WatchStreamExt` combinator takes it
//! unchanged.
//!
//! It starts with a snapshot (`Init`, `InitApply` for each object,
//! `InitDone`), then yields `Apply` and `Delete`. When the stream breaks
//! (the server restarts, a replica goes away, the subscriber lags and gets
//! `RESOURCE_EXHAUSTED`) it resumes after the last resourceVersion it saw,
//! event or bookmark, pacing attempts with kube-runtime's default backoff
//! (0.8 s doubling to 30 s, jittered, reset after 2 minutes without
//! failure): the caller sees no gap and no duplicate. When the server no
//! longer holds that resourceVersion (`Expired`) it takes a new snapshot,
//! announced by `Init` exactly as a kube-runtime relist is.

use std::{future::Future, time::Duration};

use futures::{Stream, StreamExt, stream::BoxStream};
use kube::Resource;
use kube_runtime::watcher::{self, DefaultBackoff, Event};
use serde::de::DeserializeOwned;
use tonic::{Code, Status};
use tracing::{info, warn};

use crate::{
    client::{Api, Client, decode},
    error::{ClientError, reason},
    proto::{EventType, WatchEvent, WatchRequest},
};

/// The annotation on the bookmark that ends the initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

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
    K: Resource + DeserializeOwned + Send + 'static,
{
    let request = WatchRequest {
        resource: Some(api.resource.clone()),
        namespace: api.namespace.clone(),
        label_selector: config.label_selector.unwrap_or_default(),
        field_selector: config.field_selector.unwrap_or_default(),
        allow_bookmarks: true,
        ..WatchRequest::default()
    };
    run(api.client, request)
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
    K: Resource + DeserializeOwned + Send + 'static,
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
}

fn next_after(status: &Status) -> Next {
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

/// Whether `event` is the bookmark that ends a snapshot (annotated
/// [`INITIAL_EVENTS_END`]).
pub fn ends_initial_events(event: &WatchEvent) -> bool {
    event.r#type() == EventType::Bookmark
        && serde_json::from_str::<serde_json::Value>(&event.object)
            .ok()
            .and_then(|o| {
                o["metadata"]["annotations"][INITIAL_EVENTS_END]
                    .as_str()
                    .map(|v| v == "true")
            })
            .unwrap_or(false)
}

/// The watch loop over any [`Source`].
fn run<K, S>(
    mut source: S,
    request: WatchRequest,
) -> impl Stream<Item = Result<Event<K>, WatchError>> + Send + 'static
where
    K: DeserializeOwned + Send + 'static,
    S: Source,
{
    let mut backoff = DefaultBackoff::default();
    let resource = request
        .resource
        .as_ref()
        .map(|r| format!("{}/{}/{}", r.group, r.version, r.resource))
        .unwrap_or_default();
    async_stream::stream! {
        // The RV to resume after; None until a snapshot has completed, and
        // again after Expired.
        let mut resume: Option<String> = None;
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
                    if snapshot {
                        yield Ok(Event::Init);
                    }
                    loop {
                        let event = match events.next().await {
                            Some(Ok(event)) => event,
                            Some(Err(status)) => break status,
                            None => break Status::unavailable("the server ended the watch"),
                        };
                        let kind = event.r#type();
                        if kind == EventType::Bookmark {
                            if in_snapshot && ends_initial_events(&event) {
                                in_snapshot = false;
                                yield Ok(Event::InitDone);
                            }
                        } else {
                            match decode::<K>(&event.object) {
                                Err(err) => yield Err(WatchError::Decode(err)),
                                Ok(object) => yield Ok(match kind {
                                    EventType::Deleted => Event::Delete(object),
                                    _ if in_snapshot => Event::InitApply(object),
                                    _ => Event::Apply(object),
                                }),
                            }
                        }
                        // Inside a snapshot the objects' RVs are not stream
                        // positions; only the closing bookmark is.
                        if !in_snapshot {
                            resume = Some(event.resource_version);
                        }
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

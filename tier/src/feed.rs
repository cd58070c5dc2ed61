//! One type's feed: a store kept equal to the parent's by one watch on it
//! (see the crate docs), stepped one [`State`] at a time.

use std::{str::FromStr, sync::Arc, time::Duration};

use futures::StreamExt;
use kube_fanout_client::{
    Client, ClientError,
    proto::{EventType, ResourceRef, WatchEvent, WatchRequest},
    watcher::Source,
};
use kube_fanout_core::{
    event::EventKind,
    object::{Object, ResourceVersion, Transform},
    reflector_status::{Phase, ReflectorStatus},
    store::Store,
};
use kube_fanout_proto::{CONNECTION_RETIRED, SUBSCRIBER_LAGGED, ends_initial_events, ends_resync};
use kube_runtime::watcher::DefaultBackoff;
use parking_lot::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic_types::StatusExt;
use tracing::{debug, info, warn};

use crate::{
    error::FeedError,
    state::{Events, State},
};

/// Keeps one store equal to the parent's, through `P`: a [`Client`], or a
/// script in the tests.
pub struct Feed<P = Client> {
    parent: P,
    store: Arc<Store>,
    status: Arc<Mutex<ReflectorStatus>>,
    /// What is cut from each object (the reflector's own transform).
    transform: Transform,
    /// When every watch ends, for a bootstrap ([`Feed::first_snapshot`]).
    deadline: Option<Instant>,
    /// kube-runtime's default: 0.8 s doubling to 30 s, jittered, reset
    /// after 2 minutes without a failure (the reflector's own schedule).
    backoff: DefaultBackoff,
}

impl<P: Source> Feed<P> {
    /// A feed filling `store` from `parent`, each object cut by
    /// `transform` as the reflector's would be.
    pub fn new(parent: P, store: Arc<Store>, transform: Transform) -> Self {
        let status = ReflectorStatus {
            parent: Some(parent.address()),
            ..ReflectorStatus::default()
        };
        Feed {
            parent,
            store,
            status: Arc::new(Mutex::new(status)),
            transform,
            deadline: None,
            backoff: DefaultBackoff::default(),
        }
    }

    /// A handle on the feed's status (the reflector's, with the parent
    /// named) that stays valid while it runs.
    pub fn status(&self) -> Arc<Mutex<ReflectorStatus>> {
        self.status.clone()
    }

    /// Runs until `cancel` fires; stops promptly, mid-watch or mid-wait.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut state = State::Snapshot;
        loop {
            state = tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    self.set_phase(Phase::Stopped);
                    info!("feed stopped");
                    return;
                }
                next = self.step(state) => next,
            };
        }
    }

    /// Takes one snapshot into the store by `deadline`, for a replica
    /// that then watches the API server from its RV (`--bootstrap-from`):
    /// each of the `addresses` is tried once, in order, and the RV is
    /// returned with the address that sent it; `None` (each failure
    /// logged) when none could. The deadline ends the watch, never the
    /// store's replace: once the snapshot is whole it is stored, so that
    /// no write to the store is still in flight when this returns.
    pub async fn first_snapshot(
        &mut self,
        addresses: usize,
        deadline: Instant,
    ) -> Option<(ResourceVersion, String)> {
        self.deadline = Some(deadline);
        for _ in 0..addresses {
            let mut state = State::Snapshot;
            loop {
                state = match self.step(state).await {
                    State::Following { .. } => {
                        let rv = self.store.head().resource_version;
                        return Some((rv, self.parent.address()));
                    }
                    State::Backoff { .. } | State::Renew { .. } => break,
                    next => next,
                };
            }
            if Instant::now() >= deadline {
                break;
            }
            let moved = self.parent.reconnect().await;
            self.moved(moved);
        }
        None
    }

    /// Performs one state and returns the next: at most one open, one
    /// event read and applied, or one wait.
    pub async fn step(&mut self, state: State) -> State {
        match state {
            State::Snapshot => {
                self.set_phase(Phase::WatchListing);
                match self.open(None).await {
                    Ok(stream) => State::Receiving {
                        stream,
                        objects: Vec::new(),
                    },
                    Err(err) => self.fail(err, State::Snapshot),
                }
            }
            State::Resume => {
                let from = self.store.head().resource_version;
                match self.open(Some(from)).await {
                    Ok(stream) => {
                        self.set_phase(Phase::Watching);
                        State::Following { stream }
                    }
                    Err(err) => self.fail(err, State::Resume),
                }
            }
            State::Receiving {
                mut stream,
                mut objects,
            } => match next_event(&mut stream).await {
                Err(err) => self.fail(err, State::Snapshot),
                Ok(event) if ends_initial_events(&event) => {
                    match rv_of(&event) {
                        Err(err) => return self.fail(err, State::Snapshot),
                        Ok(rv) => self.replace(objects, rv).await,
                    }
                    self.parent_at(&event);
                    self.set_phase(Phase::Watching);
                    State::Following { stream }
                }
                Ok(event) => {
                    if event.r#type() != EventType::Bookmark
                        && let Some((_, object)) = self.object(&event)
                    {
                        objects.push(object);
                    }
                    State::Receiving { stream, objects }
                }
            },
            State::Following { mut stream } => match next_event(&mut stream).await {
                Err(err) => self.fail(err, State::Resume),
                Ok(event) => match rv_of(&event) {
                    Err(err) => self.fail(err, State::Resume),
                    Ok(rv) if ends_resync(&event) => {
                        // A unit that changed nothing: its gap still is one.
                        self.store.apply_unit(Vec::new(), rv);
                        self.synced_to(rv);
                        self.parent_at(&event);
                        State::Following { stream }
                    }
                    Ok(rv) if event.resync => self.unit_event(event, stream, rv, Vec::new()),
                    Ok(rv) => {
                        if event.r#type() == EventType::Bookmark {
                            self.store.bookmark(rv);
                            self.parent_at(&event);
                        } else if let Some((kind, object)) = self.object(&event) {
                            self.store.apply(kind, object);
                        }
                        self.synced_to(rv);
                        State::Following { stream }
                    }
                },
            },
            State::Unit {
                mut stream,
                rv,
                changes,
            } => match next_event(&mut stream).await {
                Err(err) => self.fail(err, State::Resume),
                Ok(event) if !event.resync || rv_of(&event).ok() != Some(rv) => {
                    let broken = FeedError::BrokenUnit {
                        unit: rv.to_string(),
                        at: event.resource_version,
                        resync: event.resync,
                    };
                    self.fail(broken, State::Resume)
                }
                Ok(event) => self.unit_event(event, stream, rv, changes),
            },
            State::Backoff { delay, then } => {
                self.set_phase(Phase::BackingOff);
                tokio::time::sleep(delay).await;
                let moved = self.parent.reconnect().await;
                self.moved(moved);
                *then
            }
            State::Renew { then } => {
                let moved = self.parent.renew().await;
                self.moved(moved);
                *then
            }
        }
    }

    /// Opens a watch of every object of the type on the parent, after
    /// `from`, or with a new snapshot. Bookmarks on: they move the store,
    /// so that a resume from the parent's bookmark is exact here too; and
    /// each says where the parent is ([`Feed::parent_at`]).
    async fn open(&mut self, from: Option<ResourceVersion>) -> Result<Events, FeedError> {
        let request = WatchRequest {
            resource: Some(ResourceRef::from(self.store.resource().gvr.clone())),
            resource_version: from.map(|rv| rv.to_string()).unwrap_or_default(),
            send_initial_events: from.is_none(),
            allow_bookmarks: true,
            head_bookmarks: true,
            ..WatchRequest::default()
        };
        let watch = self.parent.open(request);
        let opened = match self.deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, watch)
                .await
                .map_err(|_| FeedError::Deadline)?,
            None => watch.await,
        };
        let stream = opened.map_err(FeedError::Status)?;
        let mut status = self.status.lock();
        status.watches += 1;
        status.failing_since = None;
        Ok(match self.deadline {
            Some(deadline) => stream
                .take_until(tokio::time::sleep_until(deadline))
                .boxed(),
            None => stream,
        })
    }

    /// Takes one event of the unit at `rv` (the closing bookmark applies
    /// the unit whole).
    fn unit_event(
        &mut self,
        event: WatchEvent,
        stream: Events,
        rv: ResourceVersion,
        mut changes: Vec<(EventKind, Object)>,
    ) -> State {
        if ends_resync(&event) {
            self.store.apply_unit(changes, rv);
            self.synced_to(rv);
            self.parent_at(&event);
            return State::Following { stream };
        }
        if let Some(change) = self.object(&event) {
            changes.push(change);
        }
        State::Unit {
            stream,
            rv,
            changes,
        }
    }

    /// Replaces the store with a snapshot (off the runtime's workers: a
    /// later one compares every object, as a relist does).
    async fn replace(&mut self, objects: Vec<Object>, rv: ResourceVersion) {
        self.store.replace_blocking(objects, rv).await;
        self.status.lock().lists += 1;
        self.synced_to(rv);
    }

    /// The event's kind and object, or `None` (logged) for an object this
    /// server cannot read, dropped as the reflector drops one.
    fn object(&self, event: &WatchEvent) -> Option<(EventKind, Object)> {
        let kind = match event.r#type() {
            EventType::Added => EventKind::Added,
            EventType::Modified => EventKind::Modified,
            EventType::Deleted => EventKind::Deleted,
            EventType::Bookmark | EventType::Unspecified => return None,
        };
        let resource = self.store.resource();
        match Object::from_json(
            &event.object,
            &resource.type_meta(),
            &resource.fields,
            self.transform,
        ) {
            Ok(object) => Some((kind, object)),
            Err(err) => {
                warn!(error = %err, rv = %event.resource_version, "dropped an object the parent sent");
                None
            }
        }
    }

    /// Notes where the parent was as it sent `event`, a bookmark (its
    /// `head_resource_version`; an older parent sends none), against
    /// where the store is now: how far behind the parent the store is.
    fn parent_at(&self, event: &WatchEvent) {
        let Ok(head) = event.head_resource_version.parse::<ResourceVersion>() else {
            return;
        };
        let store = self.store.head().resource_version;
        let mut status = self.status.lock();
        let parent = self.parent.address();
        status
            .parent_heads
            .observe(&parent, Instant::now(), head, store);
    }

    /// Where a failure leaves the feed, which resumes with `then`.
    fn fail(&mut self, err: FeedError, then: State) -> State {
        if let FeedError::Status(status) = &err {
            if status.code() == Code::OutOfRange && !matches!(then, State::Snapshot) {
                info!(error = %err, "the parent no longer holds the store's resourceVersion; taking a new snapshot");
                return State::Snapshot;
            }
            let reason = status.get_details_error_info().map(|i| i.reason);
            if status.code() == Code::Unavailable && reason.as_deref() == Some(CONNECTION_RETIRED) {
                debug!("the parent retired the connection; resuming on a new one");
                return State::Renew {
                    then: Box::new(then),
                };
            }
            // This leaf read too slowly, not the parent's fault: a pause
            // would only put it further behind, past where the parent
            // still holds its place. It resumes at once, where it was.
            if status.code() == Code::ResourceExhausted
                && reason.as_deref() == Some(SUBSCRIBER_LAGGED)
            {
                info!(error = %err, "cut off by the parent for lag; resuming at once");
                self.status.lock().last_error = Some(err.to_string());
                return then;
            }
        }
        let delay = self.backoff.next().unwrap_or(Duration::from_secs(30));
        warn!(error = %err, ?delay, next = ?then, "feed backing off");
        let mut status = self.status.lock();
        status.last_error = Some(err.to_string());
        status.failures += 1;
        status.failing_since.get_or_insert_with(Instant::now);
        State::Backoff {
            delay,
            then: Box::new(then),
        }
    }

    /// Notes the parent now in use after a move (or why there is none).
    fn moved(&mut self, outcome: Result<(), ClientError>) {
        if let Err(err) = outcome {
            warn!(error = %err, "no parent kube-fanout reachable; will retry");
        }
        self.status.lock().parent = Some(self.parent.address());
    }

    fn set_phase(&self, phase: Phase) {
        self.status.lock().phase = phase;
    }

    /// Reports the RV the store got to, and when.
    fn synced_to(&self, rv: ResourceVersion) {
        let mut status = self.status.lock();
        status.last_sync_resource_version = Some(rv);
        status.last_upstream_at = Some(std::time::SystemTime::now());
    }
}

/// The stream's next event; its end is a failure like any other.
async fn next_event(stream: &mut Events) -> Result<WatchEvent, FeedError> {
    match stream.next().await {
        Some(result) => result.map_err(FeedError::Status),
        None => Err(FeedError::Ended),
    }
}

/// The event's resourceVersion.
fn rv_of(event: &WatchEvent) -> Result<ResourceVersion, FeedError> {
    ResourceVersion::from_str(&event.resource_version)
        .map_err(|_| FeedError::ResourceVersion(event.resource_version.clone()))
}

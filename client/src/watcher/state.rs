//! The watcher's state machine: each [`State`] says what the next step
//! does and holds the data that step needs; [`Machine::step`] takes one
//! step and returns what to yield, if anything, and the next state.
//!
//! ```text
//! Empty         open ─ Init ─────────────────────────────▶ InitialWatch
//! InitialWatch  InitApply per object; initial-events-end ─ InitDone ─▶ Watching
//! Resume        open ────────────────────────────────────▶ Watching
//! Watching      Apply/Delete; bookmark; a resync event ──▶ Resyncing
//!               (a closing bookmark alone moves the resume point only)
//! Resyncing     the closing bookmark ─ Init ─────────────▶ Replacing
//!               (▶ Watching, yielding nothing, if the unit changed nothing)
//! Replacing     InitApply per held object, then InitDone ▶ Watching
//! Backoff       wait, move to the next server ───────────▶ Resume, or Empty
//! Renew         a new connection to the same server ─────▶ Resume, or Empty
//! any failure   Expired ─────────────────────────────────▶ Empty
//!  (an open, or a retired connection ───────────────────▶ Renew
//!   a stream)   refused ─ Err ───────────────────────────▶ Backoff
//!               anything else ───────────────────────────▶ Backoff
//! ```
//!
//! "Resume, or Empty": `Empty` when there is no resume point yet (the
//! failure came before the snapshot finished). Every state after the first
//! snapshot carries the [`ResumePoint`]; only a finished unit moves it, so
//! a failure inside the snapshot or a re-sync unit drops what was received
//! of it, and the server sends it again whole.

use std::{collections::VecDeque, time::Duration};

use futures::StreamExt;
use kube::Resource;
use kube_fanout_proto::{GroupVersionResource, ends_initial_events, ends_resync};
use kube_runtime::watcher::{DefaultBackoff, Event};
use serde::de::DeserializeOwned;
use tracing::{debug, info, warn};

use super::{
    change::{Change, WatchError},
    held::{Held, Unit},
    recovery::{Failure, Recovery},
    source::{EventStream, Source},
};
use crate::{
    api::decode,
    error::reason,
    proto::{EventType, WatchEvent, WatchRequest},
};

/// The resourceVersion of the last finished unit (see the Watch comment in
/// `fanout.proto`), and what the caller holds as of it.
pub(super) struct ResumePoint<K> {
    resource_version: String,
    held: Held<K>,
}

impl<K> ResumePoint<K> {
    /// The point after `resource_version`, holding nothing: the caller
    /// asked for the changes after it and has seen no object yet.
    pub(super) fn after(resource_version: String) -> Self {
        ResumePoint {
            resource_version,
            held: Held::default(),
        }
    }
}

/// Where the watcher is.
pub(super) enum State<K> {
    /// No resume point (at the start, after Expired, after a break inside
    /// the snapshot): the next step opens a watch with a new snapshot.
    Empty,
    /// Receiving the snapshot: the objects it has sent so far.
    InitialWatch {
        stream: EventStream,
        objects: Held<K>,
    },
    /// No watch open: the next step opens one after the resume point.
    Resume(ResumePoint<K>),
    /// Following live events and bookmarks, each a unit of its own.
    Watching {
        point: ResumePoint<K>,
        stream: EventStream,
    },
    /// Receiving a re-sync unit; the resume point is still the one before
    /// it, and a break drops the unit.
    Resyncing {
        point: ResumePoint<K>,
        stream: EventStream,
        unit: Unit<K>,
    },
    /// A finished unit's new state is being yielded (`Init` went out):
    /// `InitApply` for each of `pending`, then `InitDone`.
    Replacing {
        point: ResumePoint<K>,
        stream: EventStream,
        pending: VecDeque<K>,
    },
    /// After a failure: wait `delay`, move to the next server, then open
    /// after `then` (a new snapshot when `None`).
    Backoff {
        delay: Duration,
        then: Option<ResumePoint<K>>,
    },
    /// The server retired the connection: open a new one to it at once,
    /// then open after `then` (a new snapshot when `None`).
    Renew { then: Option<ResumePoint<K>> },
}

/// What the watch yields.
pub(super) type Item<K> = Result<Change<K>, WatchError>;

/// An item to yield: `event`, with the server's type and the resourceVersion
/// of the unit it belongs to.
fn yielded<K>(event: Event<K>, kind: EventType, resource_version: &str, resync: bool) -> Item<K> {
    Ok(Change {
        event,
        kind,
        resource_version: resource_version.to_owned(),
        resync,
    })
}

/// What one step yields, if anything, and where it leaves the watcher.
type Step<K> = (Option<Item<K>>, State<K>);

/// What every state shares: where events come from, what is asked, and
/// the pacing of attempts.
pub(super) struct Machine<S> {
    source: S,
    request: WatchRequest,
    /// The resource type, for logs.
    resource: String,
    /// kube-runtime's default: 0.8 s doubling to 30 s, jittered, reset
    /// after 2 minutes without a failure.
    backoff: DefaultBackoff,
}

impl<S: Source> Machine<S> {
    /// A machine that opens `request`'s watch on `source`.
    pub(super) fn new(source: S, request: WatchRequest) -> Self {
        let resource = request
            .resource
            .clone()
            .map(|r| GroupVersionResource::from(r).to_string())
            .unwrap_or_default();
        Machine {
            source,
            request,
            resource,
            backoff: DefaultBackoff::default(),
        }
    }

    /// Steps from `state` until a step yields something.
    pub(super) async fn next<K>(&mut self, mut state: State<K>) -> (Item<K>, State<K>)
    where
        K: Resource + Clone + DeserializeOwned + Send + 'static,
    {
        loop {
            match self.step(state).await {
                (Some(item), next) => return (item, next),
                (None, next) => state = next,
            }
        }
    }

    /// One step: at most one open, one event read, one item or one wait.
    async fn step<K>(&mut self, state: State<K>) -> Step<K>
    where
        K: Resource + Clone + DeserializeOwned + Send + 'static,
    {
        match state {
            State::Empty => self.open(None).await,
            State::Resume(point) => self.open(Some(point)).await,
            State::InitialWatch {
                mut stream,
                objects,
            } => match next_event(&mut stream).await {
                Err(failure) => self.recover(failure, None),
                Ok(event) => initial_event(event, stream, objects),
            },
            State::Watching { point, mut stream } => match next_event(&mut stream).await {
                Err(failure) => self.recover(failure, Some(point)),
                Ok(event) => live_event(event, point, stream),
            },
            State::Resyncing {
                point,
                mut stream,
                unit,
            } => match next_event(&mut stream).await {
                Err(failure) => self.recover(failure, Some(point)),
                Ok(event) if !event.resync || event.resource_version != unit.resource_version() => {
                    let broken = Failure::BrokenUnit {
                        unit: unit.resource_version().to_owned(),
                        kind: event.r#type().as_str_name(),
                        at: event.resource_version,
                        resync: event.resync,
                    };
                    self.recover(broken, Some(point))
                }
                Ok(event) => resync_event(event, point, stream, unit),
            },
            State::Replacing {
                point,
                stream,
                mut pending,
            } => match pending.pop_front() {
                Some(object) => (
                    Some(yielded(
                        Event::InitApply(object),
                        EventType::Added,
                        &point.resource_version,
                        true,
                    )),
                    State::Replacing {
                        point,
                        stream,
                        pending,
                    },
                ),
                None => (
                    Some(yielded(
                        Event::InitDone,
                        EventType::Bookmark,
                        &point.resource_version,
                        true,
                    )),
                    State::Watching { point, stream },
                ),
            },
            State::Backoff { delay, then } => {
                tokio::time::sleep(delay).await;
                if let Err(err) = self.source.reconnect().await {
                    warn!(resource = %self.resource, error = %err, "no kube-fanout server reachable; will retry");
                }
                (None, then.map_or(State::Empty, State::Resume))
            }
            State::Renew { then } => {
                if let Err(err) = self.source.renew().await {
                    warn!(resource = %self.resource, error = %err, "cannot open a new connection after a retirement; will retry");
                }
                (None, then.map_or(State::Empty, State::Resume))
            }
        }
    }

    /// Opens a watch after `from`, or with a new snapshot.
    async fn open<K>(&mut self, from: Option<ResumePoint<K>>) -> Step<K> {
        let request = WatchRequest {
            resource_version: from
                .as_ref()
                .map(|p| p.resource_version.clone())
                .unwrap_or_default(),
            send_initial_events: from.is_none(),
            ..self.request.clone()
        };
        match (self.source.open(request).await, from) {
            (Ok(stream), None) => (
                Some(yielded(Event::Init, EventType::Bookmark, "", false)),
                State::InitialWatch {
                    stream,
                    objects: Held::default(),
                },
            ),
            (Ok(stream), Some(point)) => (None, State::Watching { point, stream }),
            (Err(status), from) => self.recover(Failure::Status(status), from),
        }
    }

    /// Where a failure leaves the watcher, resuming after `from` (a new
    /// snapshot when `None`).
    fn recover<K>(&mut self, failure: Failure, from: Option<ResumePoint<K>>) -> Step<K> {
        let resource = &self.resource;
        let resume_after = from
            .as_ref()
            .map_or("(new snapshot)", |p| p.resource_version.as_str());
        match failure.recovery() {
            Recovery::Snapshot(status) => {
                info!(%resource, reason = reason(&status).unwrap_or_default(), "resume point expired; taking a new snapshot");
                (None, State::Empty)
            }
            Recovery::Move => {
                debug!(%resource, resume_after, "connection retired by the server; resuming on a new one");
                (None, State::Renew { then: from })
            }
            Recovery::Refused(status) => {
                let delay = next_delay(&mut self.backoff);
                warn!(%resource, code = %status.code(), message = status.message(), retry_in = ?delay, "watch refused");
                (
                    Some(Err(WatchError::Refused(status))),
                    State::Backoff { delay, then: from },
                )
            }
            Recovery::Resume(failure) => {
                let delay = next_delay(&mut self.backoff);
                warn!(
                    %resource,
                    %failure,
                    resume_after,
                    retry_in = ?delay,
                    "watch interrupted"
                );
                (None, State::Backoff { delay, then: from })
            }
        }
    }
}

/// The next delay. kube-runtime's backoffs never run out; the cap is a
/// guard.
fn next_delay(backoff: &mut DefaultBackoff) -> Duration {
    backoff.next().unwrap_or(Duration::from_secs(30))
}

/// The stream's next event; its end is a failure like any other.
async fn next_event(stream: &mut EventStream) -> Result<WatchEvent, Failure> {
    match stream.next().await {
        Some(result) => result.map_err(Failure::Status),
        None => Err(Failure::Ended),
    }
}

/// The event's object, as `K`.
fn object<K: DeserializeOwned>(event: &WatchEvent) -> Result<K, WatchError> {
    decode(&event.object).map_err(WatchError::Decode)
}

/// An event of the snapshot.
fn initial_event<K>(event: WatchEvent, stream: EventStream, mut objects: Held<K>) -> Step<K>
where
    K: Resource + Clone + DeserializeOwned,
{
    if ends_initial_events(&event) {
        let item = yielded(
            Event::InitDone,
            EventType::Bookmark,
            &event.resource_version,
            false,
        );
        let point = ResumePoint {
            resource_version: event.resource_version,
            held: objects,
        };
        return (Some(item), State::Watching { point, stream });
    }
    let item = (event.r#type() != EventType::Bookmark).then(|| {
        let object = object::<K>(&event)?;
        objects.apply(&object);
        yielded(
            Event::InitApply(object),
            event.r#type(),
            &event.resource_version,
            false,
        )
    });
    (item, State::InitialWatch { stream, objects })
}

/// An event after the snapshot, outside a re-sync unit.
fn live_event<K>(event: WatchEvent, mut point: ResumePoint<K>, stream: EventStream) -> Step<K>
where
    K: Resource + Clone + DeserializeOwned,
{
    if ends_resync(&event) {
        // A unit with no change for this subscriber: it still moves the
        // resume point, and yields nothing.
        point.resource_version = event.resource_version;
        return (None, State::Watching { point, stream });
    }
    if event.resync {
        let unit = Unit::new(event.resource_version.clone());
        return resync_event(event, point, stream, unit);
    }
    // A live event or a bookmark: a unit of its own.
    let kind = event.r#type();
    let item = (kind != EventType::Bookmark).then(|| {
        let object = object::<K>(&event)?;
        let event_of = if kind == EventType::Deleted {
            point.held.delete(&object);
            Event::Delete(object)
        } else {
            point.held.apply(&object);
            Event::Apply(object)
        };
        yielded(event_of, kind, &event.resource_version, false)
    });
    point.resource_version = event.resource_version;
    (item, State::Watching { point, stream })
}

/// An event of the re-sync unit being received (at its resourceVersion,
/// with `resync` set), the first one included.
fn resync_event<K>(
    event: WatchEvent,
    mut point: ResumePoint<K>,
    stream: EventStream,
    mut unit: Unit<K>,
) -> Step<K>
where
    K: Resource + Clone + DeserializeOwned,
{
    if ends_resync(&event) {
        point.resource_version = event.resource_version;
        if !unit.apply_to(&mut point.held) {
            return (None, State::Watching { point, stream });
        }
        let pending = point.held.objects();
        return (
            Some(yielded(
                Event::Init,
                EventType::Bookmark,
                &point.resource_version,
                true,
            )),
            State::Replacing {
                point,
                stream,
                pending,
            },
        );
    }
    let item = match object::<K>(&event) {
        Err(err) => Some(Err(err)),
        Ok(object) => {
            unit.push(object, event.r#type() == EventType::Deleted);
            None
        }
    };
    (
        item,
        State::Resyncing {
            point,
            stream,
            unit,
        },
    )
}

//! One subscriber's stream: an optional consistent snapshot, then the
//! store's events after it, filtered, in order. No network here: the gRPC
//! layer only encodes what this yields.
//!
//! A [`Subscription`] is an explicit state machine ([`State`]) stepped by
//! one function, [`Subscription::next`]: it waits for the store to be ready,
//! sends a snapshot if one is due, then follows the ring. What it promises
//! the subscriber is the Watch contract of `kubefanout.v1` (see the proto):
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

use std::{collections::VecDeque, pin::Pin, sync::Arc, time::Duration};

use futures::Stream;
use kube_fanout_proto::{
    CONNECTION_RETIRED, EXPIRED, INITIAL_EVENTS_END, NOT_SYNCED, SHUTTING_DOWN, SUBSCRIBER_LAGGED,
    TOO_LARGE_RESOURCE_VERSION,
};
use tokio::{
    sync::watch,
    time::{Instant, Sleep},
};

use crate::{
    dispatch::Interest,
    event::{Event, EventKind},
    filter::Filter,
    object::{Object, ObjectError, ResourceVersion, with_resource_version},
    projection::Projection,
    store::{Head, ReadError, Snapshot, Store},
};

/// How many ring entries a subscriber copies out per lock.
const BATCH: usize = 256;

/// Where a watch starts, from the request's resourceVersion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// `""`: the freshest state.
    Latest,
    /// `"0"`: any state; kube-fanout always has its freshest at hand.
    Any,
    /// A resourceVersion: changes after it (or a snapshot at least as new).
    At(ResourceVersion),
}

impl Start {
    /// Whether a watch from here begins with a snapshot: asked for with
    /// `send_initial_events`, or implied by `""` and `"0"`, which (as on
    /// the API server) begin with synthetic ADDEDs for every object.
    pub fn sends_snapshot(self, send_initial_events: bool) -> bool {
        send_initial_events || !matches!(self, Start::At(_))
    }

    /// Parses a request's resourceVersion.
    pub fn parse(rv: &str) -> Result<Self, ObjectError> {
        Ok(match rv {
            "" => Start::Latest,
            "0" => Start::Any,
            rv => Start::At(rv.parse()?),
        })
    }
}

/// What a subscriber asked for.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    /// Which objects it sees.
    pub filter: Filter,
    /// Where it starts.
    pub start: Start,
    /// Snapshot first, ended by the initial-events-end bookmark.
    pub send_initial_events: bool,
    /// Forward bookmarks.
    pub allow_bookmarks: bool,
    /// What of each object it receives.
    pub projection: Projection,
}

/// Server-side bounds on a watch.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long a request for a resourceVersion newer than the store's may
    /// wait for the store to catch up.
    pub freshness_timeout: Duration,
    /// A subscriber with bookmarks on that was sent nothing for this long
    /// gets a progress bookmark, so a filtered watch's RV stays fresh.
    pub progress_interval: Duration,
    /// A subscriber that has more than this many events to receive...
    pub max_lag_events: u64,
    /// ...or more than this many bytes of objects as it receives them
    /// (only their metadata for a metadata-only subscriber), counting only
    /// events its filter lets through that arrived since its stream
    /// started, is cut off with [`WatchError::Lagged`].
    pub max_lag_bytes: u64,
    /// A subscriber woken by new events less than this long after it was
    /// last sent something waits out the rest before reading them, so that
    /// events arriving faster than this go out several to an HTTP/2 frame
    /// and a write instead of one each (the marks and head changes that
    /// arrive meanwhile wake nobody). It adds at most this much latency, and
    /// only to events that follow a delivery closer than this; zero (the
    /// default) reads at once.
    pub min_send_interval: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            freshness_timeout: Duration::from_secs(3),
            progress_interval: Duration::from_secs(60),
            max_lag_events: 10_000,
            max_lag_bytes: 64 << 20,
            min_send_interval: Duration::ZERO,
        }
    }
}

/// One event as a subscriber receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// What happened, as this subscriber's filter sees it.
    pub kind: EventKind,
    /// Where the stream is once this event is applied.
    pub resource_version: ResourceVersion,
    /// The object's JSON (a minimal object for bookmarks).
    pub object: Arc<str>,
    /// Part of a re-sync unit: a change of it, or the bookmark closing it.
    pub resync: bool,
    /// How `object` shows the object; it picks which of the ring event's
    /// shared encodings `unchanged` stands for.
    pub projection: Projection,
    /// The ring event, when this delivery is that event unchanged: its one
    /// encoding then serves every subscriber ([`Event::encoded`]).
    pub unchanged: Option<Unchanged>,
}

/// A ring event that a delivery passes on as it is.
#[derive(Debug, Clone)]
pub struct Unchanged(pub Arc<Event>);

impl PartialEq for Unchanged {
    // The same ring entry; what it says is in the delivery's other fields.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Unchanged {}

/// Why a watch cannot start or continue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    /// The starting point is not available.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The server is shutting down.
    #[error("kube-fanout is shutting down; resume from resourceVersion {resume_from}")]
    ShuttingDown {
        /// The subscriber's last resume point.
        resume_from: ResourceVersion,
    },
    /// The subscriber's connection reached its maximum age (see
    /// [`crate::retire`]): it is to resume on a new one.
    #[error(
        "connection retired after its maximum age; resume from resourceVersion {resume_from} on a new connection"
    )]
    ConnectionRetired {
        /// The subscriber's last resume point.
        resume_from: ResourceVersion,
    },
    /// The subscriber fell too far behind what it still has to receive,
    /// or so far that the ring dropped events it had not read.
    #[error("subscriber fell behind the event history; resume from resourceVersion {resume_from}")]
    Lagged {
        /// The subscriber's last resume point.
        resume_from: ResourceVersion,
    },
}

impl WatchError {
    /// The machine-readable reason: the `google.rpc.ErrorInfo` reason of
    /// the status a client gets, and the label of the metric counting them.
    /// A resume inside a re-sync gap is "Expired" to clients too: the
    /// remedy is the same, a new snapshot.
    pub fn reason(&self) -> &'static str {
        match self {
            WatchError::Read(ReadError::Expired { .. } | ReadError::InGap { .. }) => EXPIRED,
            WatchError::Read(ReadError::TooLarge { .. }) => TOO_LARGE_RESOURCE_VERSION,
            WatchError::Read(ReadError::NotSynced) => NOT_SYNCED,
            WatchError::ShuttingDown { .. } => SHUTTING_DOWN,
            WatchError::ConnectionRetired { .. } => CONNECTION_RETIRED,
            WatchError::Lagged { .. } => SUBSCRIBER_LAGGED,
        }
    }
}

/// The stream a subscriber receives (see the module docs). It ends with
/// [`WatchError::ShuttingDown`] once the store's subscribers are closed
/// ([`Store::close_subscribers`]), so that a server's graceful shutdown is
/// not held up by watches that never end.
pub fn watch(
    store: Arc<Store>,
    spec: WatchSpec,
    limits: Limits,
) -> impl Stream<Item = Result<Delivery, WatchError>> {
    watch_on(store, spec, limits, None, None)
}

/// [`watch`], keeping `hold` (say a per-caller snapshot permit) until the
/// snapshot has been sent, or dropping it at once if there is none, on a
/// connection retired at `retire_at`, if ever: the stream then ends with
/// [`WatchError::ConnectionRetired`], at its first step in the live state
/// from that time on (a snapshot being sent is finished first).
pub fn watch_on(
    store: Arc<Store>,
    spec: WatchSpec,
    limits: Limits,
    hold: Option<SnapshotHold>,
    retire_at: Option<Instant>,
) -> impl Stream<Item = Result<Delivery, WatchError>> {
    let mut subscription = Subscription::new(store, spec, limits);
    subscription.snapshot_hold = hold;
    subscription.retire_at = retire_at;
    futures::stream::unfold(subscription, |mut subscription| async move {
        let item = subscription.next().await?;
        Some((item, subscription))
    })
}

/// One subscriber's position and what it still owes the subscriber.
pub struct Subscription {
    store: Arc<Store>,
    spec: WatchSpec,
    limits: Limits,
    head: watch::Receiver<Head>,
    state: State,
    /// Kept while the snapshot is being sent (see [`watch_on`]).
    snapshot_hold: Option<SnapshotHold>,
    /// When the subscriber's connection is retired (see [`watch_on`]).
    retire_at: Option<Instant>,
}

/// Something a subscription keeps only while it sends its snapshot.
pub type SnapshotHold = Box<dyn Send + Sync>;

/// Where a subscription is.
enum State {
    /// Waiting for the store's first sync and for the asked resourceVersion.
    Starting,
    /// Sending a snapshot's ADDEDs; its end bookmark (if asked for) and the
    /// live events follow.
    Snapshot {
        /// The snapshot's objects (shared with others at the same point).
        objects: Arc<[Arc<Object>]>,
        /// The index of the next one to consider sending.
        next: usize,
        /// Where the filter's candidates end (see [`Filter::candidates`]).
        end: usize,
        /// The snapshot's RV and ring position.
        resource_version: ResourceVersion,
        seq: u64,
    },
    /// Following the ring.
    Live(Box<Live>),
    /// The stream has ended.
    Done,
}

/// The live part of a subscription.
struct Live {
    /// The last ring position read.
    cursor: u64,
    /// The JSON bytes of the ring up to `cursor`.
    cursor_bytes: u64,
    /// Events read from the ring but not yet handled.
    pending: VecDeque<Arc<Event>>,
    /// The last point the subscriber can resume from: the RV of its last
    /// delivery outside a unit, or of the last unit it finished.
    resume_from: ResourceVersion,
    /// The RV of the last ring event read, delivered or filtered out:
    /// what a progress bookmark may promise.
    read_rv: ResourceVersion,
    /// Inside a re-sync unit: its changes are being read.
    in_unit: bool,
    /// When the subscriber was last sent something (as of its last wait).
    last_sent: Instant,
    /// Something was sent after `last_sent` was taken. The clock is read
    /// again when the subscriber next waits, once per batch of deliveries
    /// rather than once per delivery: the progress timer only matters
    /// while it waits.
    unstamped: bool,
    /// Re-armed lazily: when it fires early it is moved to the real
    /// deadline, so sending an event costs no timer operation.
    progress: Pin<Box<Sleep>>,
    lag: LagBound,
    /// How the subscriber learns that events concern it.
    interest: Interest,
    /// Indexed, it took a mark and reads the ring until it is empty before
    /// it may take another or skip (see `crate::dispatch`).
    catching_up: bool,
}

/// The lag bound's bookkeeping (see [`Limits::max_lag_events`]).
struct LagBound {
    /// Ring position and bytes when the stream started: events before it
    /// are owed to the subscriber but never count against it.
    start_seq: u64,
    start_bytes: u64,
    /// The last exact count showed room until the head passes these.
    recheck_seq: u64,
    recheck_bytes: u64,
}

/// What woke an idle subscriber.
enum Wake {
    /// The store's head moved, or the store is gone.
    Changed { store_gone: bool },
    /// An event concerning this indexed subscriber was appended, or the
    /// store is closing.
    Marked,
    /// The progress-bookmark timer fired (perhaps early; see its re-arming).
    Progress,
}

impl Subscription {
    /// A subscription to `store` as `spec` asks, not yet started.
    pub fn new(store: Arc<Store>, spec: WatchSpec, limits: Limits) -> Self {
        Subscription {
            head: store.subscribe(),
            store,
            spec,
            limits,
            state: State::Starting,
            snapshot_hold: None,
            retire_at: None,
        }
    }

    /// The next delivery, or the error that ends the stream; `None` once it
    /// has ended.
    pub async fn next(&mut self) -> Option<Result<Delivery, WatchError>> {
        let item = self.step().await;
        if !matches!(item, Some(Ok(_))) {
            self.state = State::Done;
            self.snapshot_hold = None;
        }
        item
    }

    async fn step(&mut self) -> Option<Result<Delivery, WatchError>> {
        loop {
            match &mut self.state {
                State::Done => return None,
                State::Starting => match self.start().await {
                    Ok(state) => self.state = state,
                    Err(err) => return Some(Err(err)),
                },
                State::Snapshot {
                    objects,
                    next,
                    end,
                    resource_version,
                    seq,
                } => {
                    let (rv, seq) = (*resource_version, *seq);
                    let found = objects[*next..*end]
                        .iter()
                        .position(|o| self.spec.filter.matches_candidate(o));
                    if let Some(at) = found {
                        let object = &objects[*next + at];
                        *next += at + 1;
                        return Some(Ok(Delivery {
                            kind: EventKind::Added,
                            resource_version: rv,
                            object: self.spec.projection.json(object),
                            resync: false,
                            projection: self.spec.projection,
                            unchanged: None,
                        }));
                    }
                    self.state = self.live(seq, rv);
                    self.snapshot_hold = None;
                    if self.spec.send_initial_events {
                        return Some(Ok(bookmark(
                            &self.store,
                            rv,
                            Marker::InitialEventsEnd,
                            self.spec.projection,
                        )));
                    }
                }
                State::Live(live) => {
                    return Some(
                        follow(
                            live,
                            &self.store,
                            &self.spec,
                            &self.limits,
                            &mut self.head,
                            self.retire_at,
                        )
                        .await,
                    );
                }
            }
        }
    }

    /// Waits for the store to sync and to reach the asked resourceVersion,
    /// then picks where to start: a resume point, or a snapshot.
    async fn start(&mut self) -> Result<State, WatchError> {
        let shutting_down = WatchError::ShuttingDown {
            resume_from: ResourceVersion::default(),
        };
        let store = &self.store;
        wait_for(&mut self.head, |h| h.synced || store.is_closing(), None)
            .await
            .map_err(|_| WatchError::from(ReadError::NotSynced))?;
        if store.is_closing() {
            return Err(shutting_down);
        }
        // A resume point or minimum freshness the store has not reached
        // yet: wait for it, bounded.
        if let Start::At(rv) = self.spec.start {
            let timeout = Some(self.limits.freshness_timeout);
            let reached = |h: &Head| h.resource_version >= rv || store.is_closing();
            wait_for(&mut self.head, reached, timeout)
                .await
                .map_err(|current| ReadError::TooLarge { asked: rv, current })?;
            if store.is_closing() {
                return Err(shutting_down);
            }
        }
        Ok(match self.spec.start {
            Start::At(rv)
                if !self
                    .spec
                    .start
                    .sends_snapshot(self.spec.send_initial_events) =>
            {
                self.snapshot_hold = None;
                let cursor = self.store.cursor_after(rv)?;
                self.live(cursor, rv)
            }
            _ => {
                let Snapshot {
                    resource_version,
                    seq,
                    objects,
                } = self.store.snapshot();
                let candidates = self.spec.filter.candidates(&objects);
                State::Snapshot {
                    objects,
                    next: candidates.start,
                    end: candidates.end,
                    resource_version,
                    seq,
                }
            }
        })
    }

    /// Following the ring from position `cursor`, at resume point `rv`.
    fn live(&self, cursor: u64, rv: ResourceVersion) -> State {
        let head = *self.head.borrow();
        // The bytes up to the cursor: the head's, less what came after it.
        let cursor_bytes = match self.store.read_after(cursor, 1) {
            Ok(next) => next.first().map_or(head.bytes, |e| e.bytes_before()),
            Err(_) => head.bytes,
        };
        let now = Instant::now();
        State::Live(Box::new(Live {
            cursor,
            cursor_bytes,
            pending: VecDeque::new(),
            resume_from: rv,
            read_rv: rv,
            in_unit: false,
            last_sent: now,
            unstamped: false,
            progress: Box::pin(tokio::time::sleep_until(sooner(
                now + self.limits.progress_interval,
                self.retire_at,
            ))),
            lag: LagBound {
                start_seq: head.seq.max(cursor),
                start_bytes: head.bytes.max(cursor_bytes),
                recheck_seq: 0,
                recheck_bytes: 0,
            },
            // Registered after the start position is fixed, and followed
            // by a catch-up read from it: see `crate::dispatch`.
            interest: self.store.dispatch().register(
                self.spec.filter.pinned(),
                self.spec.filter.required_labels(),
            ),
            catching_up: true,
        }))
    }
}

/// The next live delivery: handles pending ring events, reads more, or
/// waits for the store to move or close, or the progress timer; ends the
/// stream at `retire_at`, the connection's retirement, which the progress
/// timer never passes. (Not kept in [`Live`]: an idle subscriber's memory
/// is counted, and the subscription has it.)
async fn follow(
    live: &mut Live,
    store: &Store,
    spec: &WatchSpec,
    limits: &Limits,
    head: &mut watch::Receiver<Head>,
    retire_at: Option<Instant>,
) -> Result<Delivery, WatchError> {
    loop {
        let shutting_down = WatchError::ShuttingDown {
            resume_from: live.resume_from,
        };
        // Before every delivery, so that events already read do not keep a
        // closing stream going. An atomic load of a flag written once: no
        // lock shared with the other subscribers.
        if store.is_closing() {
            return Err(shutting_down);
        }
        while let Some(event) = live.pending.pop_front() {
            live.cursor = event.seq;
            live.cursor_bytes = event.bytes_through;
            live.read_rv = event.resource_version;
            if let Some(delivery) = live.handle(store, spec, &event) {
                live.unstamped = true;
                return Ok(delivery);
            }
        }
        let now = *head.borrow_and_update();
        // Again after the head is read: a close's change of the head's
        // version is either taken by that read, and then its flag (set
        // before the change) is seen here, or still unseen by
        // `head.changed()` below, which then wakes. With the check above
        // alone, an unindexed subscriber could take the change without
        // seeing the flag, and sleep until its progress tick.
        if store.is_closing() {
            return Err(shutting_down);
        }
        let lagged = WatchError::Lagged {
            resume_from: live.resume_from,
        };
        let indexed = live.interest.is_indexed();
        // Where to read from: the cursor, or (indexed) the event before the
        // first that concerns this subscriber.
        let mut from = live.cursor;
        if indexed && !live.catching_up {
            match live.interest.take() {
                0 => live.skip_to(&now),
                first => {
                    live.catching_up = true;
                    from = from.max(first - 1);
                }
            }
        }
        // After a skip the cursor's bytes are not known until the read: the
        // bound is checked again before the next one.
        if from == live.cursor
            && live
                .lag
                .exceeded(store, spec, limits, &now, live.cursor, live.cursor_bytes)
        {
            return Err(lagged);
        }
        if !indexed || live.catching_up {
            match store.read_after(from, BATCH) {
                Err(_) => return Err(lagged),
                Ok(events) if !events.is_empty() => {
                    live.pending = events.into();
                    continue;
                }
                Ok(_) => live.catching_up = false,
            }
        }
        if std::mem::take(&mut live.unstamped) {
            live.last_sent = Instant::now();
        }
        let wake = tokio::select! {
            changed = head.changed(), if !indexed => Wake::Changed { store_gone: changed.is_err() },
            () = live.interest.marked() => Wake::Marked,
            () = live.progress.as_mut() => Wake::Progress,
        };
        match wake {
            // A store gone away goes with the server: a shutdown too.
            Wake::Changed { store_gone: true } => return Err(shutting_down),
            Wake::Changed { store_gone: false } | Wake::Marked => {
                store.dispatch().woken();
                if !limits.min_send_interval.is_zero() {
                    // `last_sent` was stamped as the subscriber began to
                    // wait, right after its last delivery went to the
                    // transport.
                    let earliest = live.last_sent + limits.min_send_interval;
                    if Instant::now() < earliest {
                        tokio::time::sleep_until(earliest).await;
                    }
                }
            }
            Wake::Progress => {
                if retire_at.is_some_and(|at| Instant::now() >= at) {
                    return Err(WatchError::ConnectionRetired {
                        resume_from: live.resume_from,
                    });
                }
                let due = live.last_sent + limits.progress_interval;
                if Instant::now() >= due {
                    // A quiet indexed subscriber catches up with the head
                    // here, without reading the ring (it is not catching up
                    // while it waits; see `crate::dispatch`).
                    if indexed {
                        let now = *head.borrow();
                        if !live.interest.is_marked() {
                            live.skip_to(&now);
                        }
                    }
                    live.last_sent = Instant::now();
                    let deadline = live.last_sent + limits.progress_interval;
                    live.progress.as_mut().reset(sooner(deadline, retire_at));
                    // Never inside a unit: its RV is no resume point yet.
                    if spec.allow_bookmarks && !live.in_unit && live.read_rv > live.resume_from {
                        live.resume_from = live.read_rv;
                        return Ok(bookmark(store, live.read_rv, Marker::None, spec.projection));
                    }
                } else {
                    live.progress.as_mut().reset(sooner(due, retire_at));
                }
            }
        }
    }
}

/// The progress timer's deadline: `due`, or the connection's retirement
/// if that comes first.
fn sooner(due: Instant, retire_at: Option<Instant>) -> Instant {
    retire_at.map_or(due, |at| due.min(at))
}

impl Live {
    /// Moves an indexed subscriber's cursor to `head` when nothing up to it
    /// concerns the subscriber (see `crate::dispatch`).
    fn skip_to(&mut self, head: &Head) {
        if head.seq > self.cursor {
            self.cursor = head.seq;
            self.cursor_bytes = head.bytes;
            self.read_rv = self.read_rv.max(head.resource_version);
        }
    }

    /// What `event` becomes for this subscriber, keeping track of units and
    /// of the resume point.
    fn handle(&mut self, store: &Store, spec: &WatchSpec, event: &Arc<Event>) -> Option<Delivery> {
        let rv = event.resource_version;
        if event.closes_unit() {
            // Every subscriber is told the unit closed, even one that got
            // nothing of it: the upstream lost history here, and a plain
            // bookmark would claim nothing it might have seen happened.
            // The same closing bookmark for all, so it is shared.
            self.in_unit = false;
            self.resume_from = rv;
            return Some(Delivery {
                unchanged: Some(Unchanged(event.clone())),
                ..bookmark(store, rv, Marker::ResyncEnd, spec.projection)
            });
        }
        if event.resync {
            self.in_unit = true;
        }
        let delivery = deliver(store, spec, event)?;
        if !self.in_unit {
            self.resume_from = rv;
        }
        Some(delivery)
    }
}

impl LagBound {
    /// Whether the subscriber at `cursor` has more left to receive than
    /// `limits` allow. The cheap check (every event since the later of the
    /// stream's start and the cursor) settles most calls; only when it
    /// fails are the events this subscriber would actually receive counted,
    /// and that count tells how far the head may move before the next one.
    fn exceeded(
        &mut self,
        store: &Store,
        spec: &WatchSpec,
        limits: &Limits,
        head: &Head,
        cursor: u64,
        cursor_bytes: u64,
    ) -> bool {
        let (from, from_bytes) = if cursor >= self.start_seq {
            (cursor, cursor_bytes)
        } else {
            (self.start_seq, self.start_bytes)
        };
        let events = head.seq.saturating_sub(from);
        let bytes = head.bytes.saturating_sub(from_bytes);
        if events <= limits.max_lag_events && bytes <= limits.max_lag_bytes {
            return false;
        }
        if head.seq < self.recheck_seq && head.bytes < self.recheck_bytes {
            return false;
        }
        let (mut owed_events, mut owed_bytes) = (0u64, 0u64);
        let mut at = from;
        while at < head.seq {
            let Ok(batch) = store.read_after(at, BATCH) else {
                // The ring dropped what the subscriber had not read.
                return true;
            };
            let Some(last) = batch.last() else { break };
            at = last.seq;
            for event in batch.iter().filter(|e| e.seq <= head.seq) {
                if let Some((_, shown)) = visible(spec, event) {
                    owed_events += 1;
                    // What this subscriber will be sent: a metadata-only
                    // subscriber owes the objects' metadata, not their
                    // full JSON.
                    owed_bytes += spec.projection.bytes(shown);
                }
            }
            if owed_events > limits.max_lag_events || owed_bytes > limits.max_lag_bytes {
                return true;
            }
        }
        self.recheck_seq = head.seq + (limits.max_lag_events - owed_events) + 1;
        self.recheck_bytes = head.bytes + (limits.max_lag_bytes - owed_bytes) + 1;
        false
    }
}

/// Waits until `ready(head)`, for at most `timeout`; on time-out returns
/// the resourceVersion the store had reached.
async fn wait_for(
    head: &mut watch::Receiver<Head>,
    ready: impl Fn(&Head) -> bool,
    timeout: Option<Duration>,
) -> Result<(), ResourceVersion> {
    let reached = {
        let wait = head.wait_for(|h| ready(h));
        match timeout {
            Some(t) => matches!(tokio::time::timeout(t, wait).await, Ok(Ok(_))),
            None => wait.await.is_ok(),
        }
    };
    if reached {
        Ok(())
    } else {
        Err(head.borrow().resource_version)
    }
}

/// What a change event looks like through `spec`'s filter: filter
/// transitions turn into ADDED or DELETED, events it cannot see into
/// nothing. `None` for bookmarks too.
fn visible<'e>(spec: &WatchSpec, event: &'e Event) -> Option<(EventKind, &'e Object)> {
    let object = event.object.as_deref()?;
    let before = event.previous.as_deref().map(|p| spec.filter.matches(p));
    if event.kind == EventKind::Deleted {
        // The subscriber holds the object iff its last state before the
        // deletion matched (or, unknown to the store, its final state does).
        return before
            .unwrap_or_else(|| spec.filter.matches(object))
            .then_some((EventKind::Deleted, object));
    }
    match (before.unwrap_or(false), spec.filter.matches(object)) {
        (false, false) => None,
        (false, true) => Some((EventKind::Added, object)),
        (true, false) => Some((EventKind::Deleted, event.previous.as_deref()?)),
        (true, true) => Some((event.kind, object)),
    }
}

/// What `event` (not one that closes a unit) becomes for this subscriber.
fn deliver(store: &Store, spec: &WatchSpec, event: &Arc<Event>) -> Option<Delivery> {
    let rv = event.resource_version;
    let Some(object) = &event.object else {
        // The same bookmark for every subscriber, so it is shared too.
        return spec.allow_bookmarks.then(|| Delivery {
            unchanged: Some(Unchanged(event.clone())),
            ..bookmark(store, rv, Marker::None, spec.projection)
        });
    };
    let (kind, shown) = visible(spec, event)?;
    let unchanged =
        (kind == event.kind && std::ptr::eq(shown, &**object)).then(|| Unchanged(event.clone()));
    // A DELETED for leaving the filter shows the last matching state at
    // the event's resourceVersion, as the API server does.
    let mut json = spec.projection.json(shown);
    if unchanged.is_none() && kind == EventKind::Deleted {
        json = with_resource_version(&json, rv);
    }
    Some(Delivery {
        kind,
        resource_version: rv,
        object: json,
        resync: event.resync,
        projection: spec.projection,
        unchanged,
    })
}

/// What a bookmark marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    /// Nothing: the resourceVersion moved on.
    None,
    /// The end of a snapshot (annotated [`INITIAL_EVENTS_END`]).
    InitialEventsEnd,
    /// The end of a re-sync unit (flagged `resync`).
    ResyncEnd,
}

/// A bookmark object of the store's kind (or `PartialObjectMetadata`) at
/// `rv`, as the API server sends one: apiVersion, kind and
/// metadata.resourceVersion only.
fn bookmark(
    store: &Store,
    rv: ResourceVersion,
    marker: Marker,
    projection: Projection,
) -> Delivery {
    let resource = store.resource();
    let api_version = resource.gvr.api_version();
    let (api_version, kind) = projection.type_meta(&api_version, &resource.kind);
    let mut metadata = serde_json::json!({ "resourceVersion": rv.to_string() });
    if marker == Marker::InitialEventsEnd {
        metadata["annotations"] = serde_json::json!({ INITIAL_EVENTS_END: "true" });
    }
    let object = serde_json::json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": metadata,
    });
    Delivery {
        kind: EventKind::Bookmark,
        resource_version: rv,
        object: object.to_string().into(),
        resync: marker == Marker::ResyncEnd,
        projection,
        unchanged: None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use futures::StreamExt;

    use super::*;
    use crate::store::tests::{configmaps, empty_store, object};

    fn spec(label_selector: &str, start: Start, send_initial_events: bool) -> WatchSpec {
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
        }
    }

    /// Drains what the stream has ready without waiting for more.
    async fn ready(
        stream: &mut (impl Stream<Item = Result<Delivery, WatchError>> + Unpin),
    ) -> Vec<Result<(EventKind, u64), WatchError>> {
        let mut out = Vec::new();
        while let Ok(Some(item)) =
            tokio::time::timeout(Duration::from_millis(50), stream.next()).await
        {
            out.push(item.map(|d| (d.kind, d.resource_version.0)));
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn filter_transitions_become_added_and_deleted() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 1, r#"{"app":"x"}"#)], ResourceVersion(1));
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("app=x", Start::Latest, true),
            Limits::default(),
        ));
        assert_eq!(
            ready(&mut stream).await,
            [Ok((EventKind::Added, 1)), Ok((EventKind::Bookmark, 1))]
        );
        store.apply(EventKind::Modified, object("a", 2, r#"{"app":"y"}"#));
        store.apply(EventKind::Modified, object("a", 3, r#"{"app":"z"}"#));
        store.apply(EventKind::Modified, object("a", 4, r#"{"app":"x"}"#));
        store.apply(EventKind::Modified, object("a", 5, r#"{"app":"x"}"#));
        store.apply(EventKind::Deleted, object("a", 6, r#"{"app":"x"}"#));
        store.apply(EventKind::Added, object("b", 7, r#"{"app":"y"}"#));
        store.apply(EventKind::Deleted, object("b", 8, r#"{"app":"y"}"#));
        store.bookmark(ResourceVersion(9));
        let seen = ready(&mut stream).await;
        assert_eq!(
            seen,
            [
                Ok((EventKind::Deleted, 2)),
                Ok((EventKind::Added, 4)),
                Ok((EventKind::Modified, 5)),
                Ok((EventKind::Deleted, 6)),
                Ok((EventKind::Bookmark, 9)),
            ]
        );
    }

    /// With a minimum send interval, events that wake a subscriber sooner
    /// than that after its last delivery wait for the interval's end and
    /// go out together; an event after a longer quiet goes at once.
    #[tokio::test(start_paused = true)]
    async fn events_within_the_min_send_interval_go_out_together_at_its_end() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 1, "{}")], ResourceVersion(1));
        let limits = Limits {
            min_send_interval: Duration::from_millis(10),
            ..Limits::default()
        };
        let mut stream = Box::pin(watch(store.clone(), spec("", Start::Latest, false), limits));
        /// The next delivery's RV, if one comes within `ms`.
        async fn next(
            stream: &mut (impl Stream<Item = Result<Delivery, WatchError>> + Unpin),
            ms: u64,
        ) -> Option<u64> {
            let item = tokio::time::timeout(Duration::from_millis(ms), stream.next()).await;
            item.ok().flatten().map(|d| d.unwrap().resource_version.0)
        }
        // Whatever the start sends (a snapshot of "a"), then a quiet longer
        // than the interval: the next event goes at once.
        while next(&mut stream, 1).await.is_some() {}
        tokio::time::advance(Duration::from_millis(20)).await;
        store.apply(EventKind::Modified, object("a", 2, "{}"));
        let sent = Instant::now();
        assert_eq!(next(&mut stream, 1).await, Some(2));
        // The subscriber waits again (and stamps its last send) here.
        assert_eq!(next(&mut stream, 1).await, None);
        store.apply(EventKind::Modified, object("a", 3, "{}"));
        tokio::time::advance(Duration::from_millis(1)).await;
        store.apply(EventKind::Modified, object("a", 4, "{}"));
        assert_eq!(
            next(&mut stream, 6).await,
            None,
            "before the interval's end"
        );
        assert_eq!(next(&mut stream, 10).await, Some(3));
        assert_eq!(Instant::now() - sent, Duration::from_millis(10));
        assert_eq!(next(&mut stream, 0).await, Some(4), "in the same batch");
        // 5 ms after that batch: waits the other 5.
        assert_eq!(next(&mut stream, 5).await, None);
        store.apply(EventKind::Modified, object("a", 5, "{}"));
        assert_eq!(next(&mut stream, 4).await, None);
        assert_eq!(next(&mut stream, 1).await, Some(5));
        assert_eq!(Instant::now() - sent, Duration::from_millis(20));
    }

    /// A watch on a retired connection ends at the retirement, not before,
    /// whatever its progress timer says, with its resume point; one inside
    /// a snapshot finishes the snapshot first.
    #[tokio::test(start_paused = true)]
    async fn a_watch_ends_when_its_connection_is_retired_with_its_resume_point() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 1, "{}")], ResourceVersion(1));
        let limits = Limits {
            progress_interval: Duration::from_secs(4),
            ..Limits::default()
        };
        let start = Instant::now();
        let retire_at = start + Duration::from_secs(10);
        let mut stream = Box::pin(watch_on(
            store.clone(),
            spec("", Start::At(ResourceVersion(1)), false),
            limits,
            None,
            Some(retire_at),
        ));
        store.apply(EventKind::Modified, object("a", 2, "{}"));
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first.resource_version, ResourceVersion(2));
        // Progress bookmarks come and go; the stream stays until 10 s.
        tokio::time::advance(Duration::from_secs(7)).await;
        store.apply(EventKind::Modified, object("a", 3, "{}"));
        let mut rvs = Vec::new();
        let ended = loop {
            match stream.next().await.unwrap() {
                Ok(delivery) => rvs.push(delivery.resource_version.0),
                Err(err) => break err,
            }
        };
        assert_eq!(rvs, [3]);
        assert_eq!(Instant::now(), retire_at);
        assert_eq!(
            ended,
            WatchError::ConnectionRetired {
                resume_from: ResourceVersion(3)
            }
        );
        assert_eq!(ended.reason(), "ConnectionRetired");
        assert!(stream.next().await.is_none());

        // Started after its connection's retirement, with a snapshot: the
        // snapshot and its end bookmark go out, then the stream ends.
        let mut late = Box::pin(watch_on(
            store.clone(),
            WatchSpec {
                send_initial_events: true,
                ..spec("", Start::Latest, false)
            },
            limits,
            None,
            Some(start),
        ));
        let mut delivered = Vec::new();
        while let Some(Ok(delivery)) = late.next().await {
            delivered.push(delivery.resource_version.0);
        }
        assert_eq!(delivered, [3, 3], "the object, then the end bookmark");
        assert_eq!(Instant::now(), retire_at, "no wait");
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_for_leaving_the_filter_shows_the_last_match_at_the_events_rv() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 1, r#"{"app":"x"}"#)], ResourceVersion(1));
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("app=x", Start::At(ResourceVersion(1)), false),
            Limits::default(),
        ));
        store.apply(EventKind::Modified, object("a", 2, r#"{"app":"y"}"#));
        let left = stream.next().await.unwrap().unwrap();
        assert_eq!(
            (left.kind, left.resource_version),
            (EventKind::Deleted, ResourceVersion(2))
        );
        let shown: serde_json::Value = serde_json::from_str(&left.object).unwrap();
        assert_eq!(shown["metadata"]["resourceVersion"], "2", "{shown}");
        assert_eq!(
            shown["metadata"]["labels"]["app"], "x",
            "the last matching state"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_end_bookmark_carries_the_annotation_and_the_snapshot_rv() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 3, "{}")], ResourceVersion(4));
        let mut stream = Box::pin(watch(
            store,
            spec("", Start::Latest, true),
            Limits::default(),
        ));
        stream.next().await.unwrap().unwrap();
        let end = stream.next().await.unwrap().unwrap();
        assert_eq!(end.kind, EventKind::Bookmark);
        let value: serde_json::Value = serde_json::from_str(&end.object).unwrap();
        assert_eq!(value["metadata"]["annotations"][INITIAL_EVENTS_END], "true");
        assert_eq!(value["metadata"]["resourceVersion"], "4");
        assert_eq!(
            (value["kind"].as_str(), value["apiVersion"].as_str()),
            (Some("ConfigMap"), Some("v1"))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn resuming_delivers_exactly_the_changes_after_the_rv() {
        let store = empty_store();
        for rv in 2..=6 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("", Start::At(ResourceVersion(4)), false),
            Limits::default(),
        ));
        assert_eq!(
            ready(&mut stream).await,
            [Ok((EventKind::Added, 5)), Ok((EventKind::Added, 6))]
        );
        store.apply(EventKind::Added, object("o7", 7, "{}"));
        let seen = ready(&mut stream).await;
        assert_eq!(seen, [Ok((EventKind::Added, 7))]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscriber_that_falls_off_the_ring_is_told_where_to_resume() {
        let store = Arc::new(Store::new(configmaps(), 4));
        store.replace(Vec::new(), ResourceVersion(1));
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("", Start::At(ResourceVersion(1)), false),
            Limits::default(),
        ));
        store.apply(EventKind::Added, object("o2", 2, "{}"));
        assert_eq!(ready(&mut stream).await, [Ok((EventKind::Added, 2))]);
        for rv in 3..=10 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        assert_eq!(
            ready(&mut stream).await,
            [Err(WatchError::Lagged {
                resume_from: ResourceVersion(2)
            })]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_filtered_subscriber_gets_progress_bookmarks_that_keep_its_rv_fresh() {
        let store = empty_store();
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("app=mine", Start::At(ResourceVersion(1)), false),
            Limits::default(),
        ));
        let next = tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let first = stream.next().await;
            (started.elapsed(), first, stream)
        });
        tokio::time::sleep(Duration::from_secs(10)).await;
        // Changes this subscriber's filter hides.
        store.apply(EventKind::Added, object("other", 2, r#"{"app":"theirs"}"#));
        store.apply(
            EventKind::Modified,
            object("other", 3, r#"{"app":"theirs"}"#),
        );
        let (waited, first, mut stream) = next.await.unwrap();
        assert_eq!(waited, Limits::default().progress_interval);
        assert_eq!(
            first,
            Some(Ok(bookmark(
                &store,
                ResourceVersion(3),
                Marker::None,
                Projection::Full
            )))
        );
        // Nothing new was read: no bookmark that says nothing.
        store.apply(EventKind::Added, object("mine", 4, r#"{"app":"mine"}"#));
        assert_eq!(ready(&mut stream).await, [Ok((EventKind::Added, 4))]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscriber_too_many_bytes_behind_is_cut_off_with_its_resume_point() {
        let store = empty_store();
        let size = object("o2", 2, "{}").json.len() as u64;
        let limits = Limits {
            max_lag_bytes: 3 * size,
            ..Limits::default()
        };
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("", Start::At(ResourceVersion(1)), false),
            limits,
        ));
        for rv in 2..=4 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        assert_eq!(
            ready(&mut stream).await.len(),
            3,
            "three objects behind is within the bound"
        );
        for rv in 5..=8 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        assert_eq!(
            ready(&mut stream).await,
            [Err(WatchError::Lagged {
                resume_from: ResourceVersion(4)
            })]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_for_a_future_rv_waits_then_fails_as_too_large() {
        let store = Arc::new(Store::new(configmaps(), 4));
        store.replace(Vec::new(), ResourceVersion(5));
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("", Start::At(ResourceVersion(7)), true),
            Limits::default(),
        ));
        let started = tokio::time::Instant::now();
        let outcome = stream.next().await.unwrap();
        assert_eq!(started.elapsed(), Limits::default().freshness_timeout);
        assert_eq!(
            outcome,
            Err(WatchError::Read(ReadError::TooLarge {
                asked: ResourceVersion(7),
                current: ResourceVersion(5)
            }))
        );

        // Caught up within the bound, the snapshot is served at once.
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("", Start::At(ResourceVersion(7)), true),
            Limits::default(),
        ));
        let waiting = tokio::spawn(async move { stream.next().await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        store.bookmark(ResourceVersion(7));
        let end = waiting.await.unwrap().unwrap().unwrap();
        assert_eq!(
            (end.kind, end.resource_version),
            (EventKind::Bookmark, ResourceVersion(7))
        );
    }

    /// Closing the store's subscribers ends every watch at once, not at its
    /// next progress tick or timeout: one following the head, one waiting
    /// on its index mark, one still waiting for the store's first sync, one
    /// waiting for an RV the store has not reached, and one opened
    /// afterwards.
    #[tokio::test(start_paused = true)]
    async fn watches_end_when_the_server_stops() {
        let store = Arc::new(Store::new(configmaps(), 4));
        store.replace(vec![object("a", 3, "{}")], ResourceVersion(3));
        let unsynced = Arc::new(Store::new(configmaps(), 4));
        let latest = || spec("", Start::Latest, true);
        let mut unindexed = stream_of(&store, latest(), Limits::default());
        let mut indexed = stream_of(
            &store,
            WatchSpec {
                filter: Filter::new("ns", "", "", &crate::fields::SelectableFields::default())
                    .unwrap(),
                ..latest()
            },
            Limits::default(),
        );
        let mut starting = stream_of(&unsynced, latest(), Limits::default());
        // Waiting for an RV the store has not reached (up to the freshness
        // timeout).
        let mut ahead = stream_of(
            &store,
            spec("", Start::At(ResourceVersion(9)), true),
            Limits::default(),
        );
        assert!(ready(&mut ahead).await.is_empty());
        assert_eq!(ready(&mut unindexed).await.len(), 2);
        assert_eq!(ready(&mut indexed).await.len(), 2);
        assert!(ready(&mut starting).await.is_empty());
        let status = store.dispatch().status();
        assert_eq!((status.indexed, status.unindexed), (1, 1));
        store.close_subscribers();
        unsynced.close_subscribers();
        let shutting_down = |rv| {
            Some(Err(WatchError::ShuttingDown {
                resume_from: ResourceVersion(rv),
            }))
        };
        // Far less than the progress interval: woken, not ticked.
        let soon = Duration::from_millis(1);
        for stream in [&mut unindexed, &mut indexed] {
            let next = tokio::time::timeout(soon, stream.next()).await;
            assert_eq!(next.expect("woken at once"), shutting_down(3));
            assert_eq!(stream.next().await, None);
        }
        for stream in [&mut starting, &mut ahead] {
            let next = tokio::time::timeout(soon, stream.next()).await;
            assert_eq!(next.expect("woken at once"), shutting_down(0));
        }
        let mut later = stream_of(&store, latest(), Limits::default());
        assert_eq!(later.next().await, shutting_down(0));
    }

    /// (kind, RV, resync, name) of what a stream has ready.
    pub(crate) async fn deliveries(
        stream: &mut (impl Stream<Item = Result<Delivery, WatchError>> + Unpin),
    ) -> Vec<Result<(EventKind, u64, bool, String), WatchError>> {
        let mut out = Vec::new();
        while let Ok(Some(item)) =
            tokio::time::timeout(Duration::from_millis(50), stream.next()).await
        {
            out.push(item.map(|d| {
                let value: serde_json::Value = serde_json::from_str(&d.object).unwrap();
                let name = value["metadata"]["name"].as_str().unwrap_or("").to_owned();
                (d.kind, d.resource_version.0, d.resync, name)
            }));
        }
        out
    }

    pub(crate) fn stream_of(
        store: &Arc<Store>,
        spec: WatchSpec,
        limits: Limits,
    ) -> std::pin::Pin<Box<impl Stream<Item = Result<Delivery, WatchError>>>> {
        Box::pin(watch(store.clone(), spec, limits))
    }

    /// Finding 1 of issue 8: a re-sync was published as ordinary events at
    /// the objects' RVs, so a subscriber held states the API server never
    /// had. Now it is one flagged unit at the list's RV, filtered, closed
    /// by a flagged bookmark.
    #[tokio::test(start_paused = true)]
    async fn a_resync_reaches_each_subscriber_as_one_flagged_unit() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(
            vec![
                object("a", 1, r#"{"app":"x"}"#),
                object("b", 2, r#"{"app":"x"}"#),
                object("c", 3, r#"{"app":"y"}"#),
            ],
            ResourceVersion(3),
        );
        let mut mine = stream_of(
            &store,
            spec("app=x", Start::At(ResourceVersion(3)), false),
            Limits::default(),
        );
        let mut others = stream_of(
            &store,
            spec("app=z", Start::At(ResourceVersion(3)), false),
            Limits::default(),
        );
        let mut quiet = stream_of(
            &store,
            WatchSpec {
                allow_bookmarks: false,
                ..spec("app=z", Start::At(ResourceVersion(3)), false)
            },
            Limits::default(),
        );
        assert!(deliveries(&mut mine).await.is_empty());
        // Upstream, while the watch was down: a deleted, b relabelled, c
        // changed, d created (at RVs 4..7); the relist sees the net result.
        store.replace(
            vec![
                object("b", 5, r#"{"app":"y"}"#),
                object("c", 6, r#"{"app":"y","v":"2"}"#),
                object("d", 7, r#"{"app":"x"}"#),
            ],
            ResourceVersion(9),
        );
        use EventKind::*;
        assert_eq!(
            deliveries(&mut mine).await,
            [
                Ok((Deleted, 9, true, "a".into())),
                Ok((Deleted, 9, true, "b".into())),
                Ok((Added, 9, true, "d".into())),
                Ok((Bookmark, 9, true, String::new())),
            ]
        );
        // Nothing of the unit concerns these: they still get its close, with
        // bookmarks off too, since the upstream lost history here.
        for stream in [&mut others, &mut quiet] {
            assert_eq!(
                deliveries(stream).await,
                [Ok((Bookmark, 9, true, String::new()))]
            );
        }
        // Live events after the unit are ordinary again.
        store.apply(Modified, object("d", 10, r#"{"app":"x"}"#));
        assert_eq!(
            deliveries(&mut mine).await,
            [Ok((Modified, 10, false, "d".into()))]
        );
    }

    /// An error in the middle of a unit names the point before it, and a
    /// resume from there (on another replica with the same history, as
    /// this one is stopping) gets the unit again, whole.
    #[tokio::test(start_paused = true)]
    async fn a_subscriber_stopped_inside_a_unit_resumes_before_it() {
        let replica = || {
            let store = Arc::new(Store::new(configmaps(), 100));
            store.replace(vec![object("a", 1, "{}")], ResourceVersion(4));
            store.replace(
                vec![object("b", 5, "{}"), object("c", 6, "{}")],
                ResourceVersion(8),
            );
            store
        };
        let store = replica();
        let mut stream = stream_of(
            &store,
            spec("", Start::At(ResourceVersion(4)), false),
            Limits::default(),
        );
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!((first.kind, first.resync), (EventKind::Deleted, true));
        store.close_subscribers();
        assert_eq!(
            stream.next().await,
            Some(Err(WatchError::ShuttingDown {
                resume_from: ResourceVersion(4)
            }))
        );
        let other = replica();
        let mut again = stream_of(
            &other,
            spec("", Start::At(ResourceVersion(4)), false),
            Limits::default(),
        );
        assert_eq!(
            deliveries(&mut again).await.len(),
            4,
            "the whole unit again"
        );
    }

    /// Finding 3 of issue 8: a resume on replica A from an RV that replica
    /// B handed out inside A's re-sync gap got A's difference, computed
    /// against A's old state (and ghosts). Now it is Expired, while the
    /// same resume on B, and one from A's own points, are exact.
    #[tokio::test(start_paused = true)]
    async fn a_resume_inside_another_replicas_resync_gap_is_expired() {
        let a = Arc::new(Store::new(configmaps(), 100));
        let b = Arc::new(Store::new(configmaps(), 100));
        for replica in [&a, &b] {
            replica.replace(vec![object("old", 5, "{}")], ResourceVersion(5));
        }
        // B follows the API server; A's API server restarts meanwhile.
        b.apply(EventKind::Added, object("ghost", 6, "{}"));
        b.apply(EventKind::Deleted, object("ghost", 7, "{}"));
        b.apply(EventKind::Added, object("new", 8, "{}"));
        b.bookmark(ResourceVersion(9));
        a.replace(
            vec![object("old", 5, "{}"), object("new", 8, "{}")],
            ResourceVersion(9),
        );
        for rv in [6, 7, 8] {
            let mut on_a = stream_of(
                &a,
                spec("", Start::At(ResourceVersion(rv)), false),
                Limits::default(),
            );
            let outcome = on_a.next().await.unwrap();
            assert!(
                matches!(&outcome, Err(e) if e.reason() == "Expired"),
                "resume from {rv} on A: {outcome:?}"
            );
            let mut on_b = stream_of(
                &b,
                spec("", Start::At(ResourceVersion(rv)), false),
                Limits::default(),
            );
            assert!(on_b.next().await.unwrap().is_ok(), "resume from {rv} on B");
        }
        // From before the gap, A's unit brings the subscriber to B's state.
        let mut from_before = stream_of(
            &a,
            spec("", Start::At(ResourceVersion(5)), false),
            Limits::default(),
        );
        assert_eq!(
            deliveries(&mut from_before).await,
            [
                Ok((EventKind::Added, 9, true, "new".into())),
                Ok((EventKind::Bookmark, 9, true, String::new())),
            ]
        );
    }

    /// Finding 4 of issue 8: the lag bound counted every event behind the
    /// head, so a resume from an RV more than the bound behind was cut off
    /// at once with that same RV, forever. Now only what the subscriber
    /// still has to receive since its stream started counts.
    #[tokio::test(start_paused = true)]
    async fn a_resume_always_makes_progress_and_a_cut_off_names_how_far_it_got() {
        let store = empty_store();
        for rv in 2..=8 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        let limits = Limits {
            max_lag_events: 2,
            ..Limits::default()
        };
        // Seven events behind, the bound two: it still gets them all.
        let mut stream = stream_of(
            &store,
            spec("", Start::At(ResourceVersion(1)), false),
            limits,
        );
        let caught_up: Vec<u64> = deliveries(&mut stream)
            .await
            .into_iter()
            .map(|d| d.unwrap().1)
            .collect();
        assert_eq!(caught_up, [2, 3, 4, 5, 6, 7, 8]);
        // Three new events arrive and it reads none of them: more than two
        // behind since it started, so it is cut off, naming the last RV it
        // got, from which a resume makes progress again.
        for rv in 9..=11 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        assert_eq!(
            stream.next().await,
            Some(Err(WatchError::Lagged {
                resume_from: ResourceVersion(8)
            }))
        );
        let mut resumed = stream_of(
            &store,
            spec("", Start::At(ResourceVersion(8)), false),
            limits,
        );
        assert_eq!(
            deliveries(&mut resumed).await.len(),
            3,
            "9..=11, no cut-off"
        );

        // Events a filter hides never count against it.
        let mut filtered = stream_of(
            &store,
            spec("app=mine", Start::At(ResourceVersion(11)), false),
            limits,
        );
        assert!(deliveries(&mut filtered).await.is_empty());
        for rv in 12..=20 {
            store.apply(
                EventKind::Added,
                object(&format!("o{rv}"), rv, r#"{"app":"theirs"}"#),
            );
        }
        store.apply(EventKind::Added, object("mine", 21, r#"{"app":"mine"}"#));
        assert_eq!(
            deliveries(&mut filtered).await,
            [Ok((EventKind::Added, 21, false, "mine".into()))]
        );
    }

    /// The progress interval counts from the last thing sent, not from
    /// when the timer was armed: a subscriber sent an event at 30 s gets
    /// its progress bookmark at 90 s, not at 60 s.
    #[tokio::test(start_paused = true)]
    async fn the_progress_interval_counts_from_the_last_delivery() {
        let store = empty_store();
        let mut stream = stream_of(
            &store,
            spec("app=mine", Start::At(ResourceVersion(1)), false),
            Limits::default(),
        );
        let started = tokio::time::Instant::now();
        assert!(
            tokio::time::timeout(Duration::from_secs(30), stream.next())
                .await
                .is_err(),
            "nothing to send in the first 30 s"
        );
        store.apply(EventKind::Added, object("mine", 2, r#"{"app":"mine"}"#));
        let sent = stream.next().await.unwrap().unwrap();
        assert_eq!((sent.kind, sent.resource_version.0), (EventKind::Added, 2));
        store.apply(EventKind::Added, object("theirs", 3, r#"{"app":"theirs"}"#));
        let progress = stream.next().await;
        assert_eq!(started.elapsed(), Duration::from_secs(90));
        assert_eq!(
            progress,
            Some(Ok(bookmark(
                &store,
                ResourceVersion(3),
                Marker::None,
                Projection::default()
            )))
        );
    }

    /// A progress bookmark promises something new: none while nothing was
    /// read since the last resume point, and none at all with bookmarks off.
    #[tokio::test(start_paused = true)]
    async fn no_progress_bookmark_without_news_or_with_bookmarks_off() {
        let store = empty_store();
        store.apply(EventKind::Added, object("theirs", 2, r#"{"app":"theirs"}"#));
        let hidden = |start| spec("app=mine", Start::At(ResourceVersion(start)), false);
        let long = 3 * Limits::default().progress_interval;
        // Read nothing after its start.
        let mut idle = stream_of(&store, hidden(2), Limits::default());
        assert!(tokio::time::timeout(long, idle.next()).await.is_err());
        // Read the hidden change, but asked for no bookmarks.
        let mut off = stream_of(
            &store,
            WatchSpec {
                allow_bookmarks: false,
                ..hidden(1)
            },
            Limits::default(),
        );
        assert!(tokio::time::timeout(long, off.next()).await.is_err());
        // The same with bookmarks on is told it moved past the change.
        let mut on = stream_of(&store, hidden(1), Limits::default());
        assert_eq!(
            on.next().await,
            Some(Ok(bookmark(
                &store,
                ResourceVersion(2),
                Marker::None,
                Projection::default()
            )))
        );
    }

    /// A delivery that is its ring event as it is carries that ring entry,
    /// so one encoding serves every subscriber (`crate::codec`); one that
    /// differs from it (a filter transition) carries none.
    #[tokio::test(start_paused = true)]
    async fn only_deliveries_equal_to_their_ring_event_share_it() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 1, r#"{"app":"x"}"#)], ResourceVersion(1));
        let mut all = stream_of(
            &store,
            spec("", Start::At(ResourceVersion(1)), false),
            Limits::default(),
        );
        let mut xs = stream_of(
            &store,
            spec("app=x", Start::At(ResourceVersion(1)), false),
            Limits::default(),
        );
        store.apply(EventKind::Modified, object("a", 2, r#"{"app":"y"}"#));
        store.apply(EventKind::Modified, object("a", 3, r#"{"app":"x"}"#));
        store.apply(EventKind::Modified, object("a", 4, r#"{"app":"x"}"#));
        store.bookmark(ResourceVersion(5));
        // A relist that finds nothing changed: a unit of its close alone.
        store.replace(vec![object("a", 4, r#"{"app":"x"}"#)], ResourceVersion(7));
        let ring = store.read_after(0, 10).unwrap();
        assert_eq!(ring.len(), 5);
        async fn shared(
            stream: &mut (impl Stream<Item = Result<Delivery, WatchError>> + Unpin),
        ) -> Vec<(EventKind, u64, Option<u64>)> {
            let mut out = Vec::new();
            while let Ok(Some(item)) =
                tokio::time::timeout(Duration::from_millis(50), stream.next()).await
            {
                let d = item.unwrap();
                out.push((d.kind, d.resource_version.0, d.unchanged.map(|u| u.0.seq)));
            }
            out
        }
        use EventKind::*;
        assert_eq!(
            shared(&mut all).await,
            [
                (Modified, 2, Some(1)),
                (Modified, 3, Some(2)),
                (Modified, 4, Some(3)),
                (Bookmark, 5, Some(4)),
                (Bookmark, 7, Some(5)),
            ]
        );
        assert_eq!(
            shared(&mut xs).await,
            [
                (Deleted, 2, None),
                (Added, 3, None),
                (Modified, 4, Some(3)),
                (Bookmark, 5, Some(4)),
                (Bookmark, 7, Some(5)),
            ]
        );
        // Equal means the same ring entry, whatever the entries say.
        assert_eq!(Unchanged(ring[2].clone()), Unchanged(ring[2].clone()));
        assert_ne!(Unchanged(ring[2].clone()), Unchanged(ring[3].clone()));
    }

    /// With initial events asked for, a resourceVersion is a minimum
    /// freshness, not a resume point: a snapshot at least that new comes
    /// first, then its end bookmark.
    #[tokio::test(start_paused = true)]
    async fn initial_events_from_an_rv_are_a_snapshot_not_a_resume() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(
            vec![object("a", 1, "{}"), object("b", 2, "{}")],
            ResourceVersion(2),
        );
        store.apply(EventKind::Added, object("c", 3, "{}"));
        let mut stream = stream_of(
            &store,
            spec("", Start::At(ResourceVersion(2)), true),
            Limits::default(),
        );
        use EventKind::*;
        assert_eq!(
            deliveries(&mut stream).await,
            [
                Ok((Added, 3, false, "a".into())),
                Ok((Added, 3, false, "b".into())),
                Ok((Added, 3, false, "c".into())),
                Ok((Bookmark, 3, false, String::new())),
            ]
        );
    }

    /// A metadata-only subscriber owes the metadata of the objects it is
    /// behind on, not their full JSON: with objects mostly data, a bound
    /// of three objects' metadata cuts off a full subscriber at once and
    /// the metadata subscriber only when it owes a fourth.
    #[tokio::test(start_paused = true)]
    async fn a_metadata_subscriber_is_held_to_the_bytes_it_receives() {
        let store = empty_store();
        let big = |rv: u64| {
            let raw = format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"o{rv}","namespace":"ns","resourceVersion":"{rv}"}},"data":{{"d":"{}"}}}}"#,
                "x".repeat(4096)
            );
            Object::from_json(
                &raw,
                &crate::object::TypeMeta {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                },
                &crate::fields::SelectableFields::default(),
                crate::object::Transform::default(),
            )
            .unwrap()
        };
        let metadata_size = Projection::Metadata.bytes(&big(2));
        assert!(big(2).json.len() as u64 > 3 * metadata_size);
        let limits = Limits {
            max_lag_bytes: 3 * metadata_size,
            ..Limits::default()
        };
        let start = |projection| WatchSpec {
            projection,
            ..spec("", Start::At(ResourceVersion(1)), false)
        };
        let mut full = stream_of(&store, start(Projection::Full), limits);
        let mut metadata = stream_of(&store, start(Projection::Metadata), limits);
        for stream in [&mut full, &mut metadata] {
            assert!(deliveries(stream).await.is_empty());
        }
        let lagged = |rv| {
            vec![Err(WatchError::Lagged {
                resume_from: ResourceVersion(rv),
            })]
        };
        for rv in 2..=4 {
            store.apply(EventKind::Added, big(rv));
        }
        assert_eq!(deliveries(&mut full).await, lagged(1));
        assert_eq!(
            deliveries(&mut metadata).await,
            (2..=4)
                .map(|rv| Ok((EventKind::Added, rv, false, format!("o{rv}"))))
                .collect::<Vec<_>>(),
            "three objects' metadata is within the bound"
        );
        for rv in 5..=8 {
            store.apply(EventKind::Added, big(rv));
        }
        assert_eq!(deliveries(&mut metadata).await, lagged(4));
    }

    /// What `app=mine` matches among these tests' objects (every one has
    /// `app`, `mine` or `theirs`), requiring no label so that dispatch
    /// cannot index it: the subscriber reads every event, and its lag is
    /// counted exactly (an indexed one skips what it is not owed).
    const MINE_UNINDEXED: &str = "app notin (theirs)";

    /// An exact count leaves the head room for exactly the bytes the bound
    /// still allows: an event that uses up that room and one byte more
    /// is counted again, so the subscriber is cut off by it, not by the
    /// next one.
    #[tokio::test(start_paused = true)]
    async fn the_byte_after_the_counted_room_is_counted() {
        let store = empty_store();
        let mine = object("o7", 7, r#"{"app":"mine"}"#);
        let limits = Limits {
            max_lag_bytes: mine.json.len() as u64 - 1,
            ..Limits::default()
        };
        let mut stream = stream_of(
            &store,
            spec(MINE_UNINDEXED, Start::At(ResourceVersion(1)), false),
            limits,
        );
        assert!(deliveries(&mut stream).await.is_empty());
        assert_eq!(store.dispatch().status().unindexed, 1, "{MINE_UNINDEXED}");
        // More bytes than the bound, none of them for this subscriber: it
        // counts exactly, owes nothing, and has the whole bound as room.
        for rv in 2..=6 {
            store.apply(
                EventKind::Added,
                object(&format!("t{rv}"), rv, r#"{"app":"theirs"}"#),
            );
        }
        assert!(deliveries(&mut stream).await.is_empty());
        store.apply(EventKind::Added, mine);
        assert_eq!(
            deliveries(&mut stream).await,
            [Err(WatchError::Lagged {
                resume_from: ResourceVersion(1)
            })]
        );
    }

    /// After an exact count of what a filtered subscriber owes, the head
    /// may move only as far as that count left room before the next one:
    /// the subscriber owing exactly the bound stays, and it is cut off as
    /// soon as it owes more, in events or in bytes.
    #[tokio::test(start_paused = true)]
    async fn an_exact_lag_count_is_repeated_once_the_head_uses_up_its_room() {
        let store = empty_store();
        let mine = |rv: u64| object(&format!("o{rv}"), rv, r#"{"app":"mine"}"#);
        // The bytes of one of o7..o9; o10 and later are one byte longer.
        let size = mine(7).json.len() as u64;
        let by_events = Limits {
            max_lag_events: 2,
            ..Limits::default()
        };
        let by_bytes = Limits {
            max_lag_bytes: 3 * size,
            ..Limits::default()
        };
        let start = || spec(MINE_UNINDEXED, Start::At(ResourceVersion(1)), false);
        let [mut a, mut b, mut d] = [(); 3].map(|()| stream_of(&store, start(), by_events));
        let [mut c, mut e] = [(); 2].map(|()| stream_of(&store, start(), by_bytes));
        for stream in [&mut a, &mut b, &mut c, &mut d, &mut e] {
            assert!(deliveries(stream).await.is_empty());
        }
        // Five changes they do not see: more than either bound behind in
        // all, so A, B and C count exactly, owe nothing, and have room.
        for rv in 2..=6 {
            store.apply(
                EventKind::Added,
                object(&format!("t{rv}"), rv, r#"{"app":"theirs"}"#),
            );
        }
        for stream in [&mut a, &mut b, &mut c] {
            assert!(deliveries(stream).await.is_empty());
        }
        let got = |rvs: &[u64]| -> Vec<Result<(EventKind, u64, bool, String), WatchError>> {
            rvs.iter()
                .map(|rv| Ok((EventKind::Added, *rv, false, format!("o{rv}"))))
                .collect()
        };
        let lagged = |rv| {
            vec![Err(WatchError::Lagged {
                resume_from: ResourceVersion(rv),
            })]
        };
        store.apply(EventKind::Added, mine(7));
        store.apply(EventKind::Added, mine(8));
        assert_eq!(deliveries(&mut d).await, got(&[7, 8]), "owes the bound");
        store.apply(EventKind::Added, mine(9));
        assert_eq!(deliveries(&mut a).await, lagged(1), "owes three events");
        assert_eq!(deliveries(&mut e).await, got(&[7, 8, 9]), "owes the bound");
        store.apply(EventKind::Added, mine(10));
        assert_eq!(deliveries(&mut b).await, lagged(1), "owes four events");
        assert_eq!(deliveries(&mut c).await, lagged(1), "owes four objects");
        store.apply(EventKind::Added, mine(11));
        assert_eq!(deliveries(&mut d).await, lagged(8), "owes 9, 10 and 11");
        store.apply(EventKind::Added, mine(12));
        assert_eq!(deliveries(&mut e).await, lagged(9), "owes 10, 11 and 12");
    }
}

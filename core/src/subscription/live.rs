//! Live following: after its start (a resume point, or a snapshot's
//! end), a subscriber reads the ring from its cursor, hands out what its
//! filter lets through, and waits to be woken, in a sub-machine ([`Phase`])
//! that [`Live::follow`] steps.
//!
//! An indexed subscriber (see [`crate::dispatch`]) reads the ring only
//! after it took a mark, and then until the ring is empty before it may
//! take another or skip; woken without a mark, it moves its cursor to the
//! head without reading. The others read on after every move of the head.

use std::{collections::VecDeque, pin::Pin, sync::Arc};

use tokio::{
    sync::watch,
    time::{Instant, Sleep},
};

use super::{
    delivery::{Delivery, Marker, Unchanged, bookmark, deliver},
    error::WatchError,
    lag::{BATCH, LagBound},
    pace::Pace,
    request::{HEAD_BOOKMARK_INTERVAL, Limits, WatchSpec},
};
use crate::{
    dispatch::Interest,
    event::{Event, EventKind},
    object::ResourceVersion,
    store::{Head, Reader, Store},
};

/// How many events a subscriber hands out of one read between two checks
/// of whether it is past the newer half of the history: a batch of
/// [`BATCH`] is checked eight times, a lone event never (its read was).
const CHECK_EVERY: usize = 32;

/// What a subscription keeps whatever its state: the store, the request,
/// its bounds and its view of the store's head. (Not kept in [`Live`]: an
/// idle subscriber's memory is counted, and the subscription has these.)
pub(super) struct Context {
    pub(super) store: Arc<Store>,
    pub(super) spec: WatchSpec,
    pub(super) limits: Limits,
    pub(super) head: watch::Receiver<Head>,
    /// When the subscriber's connection is retired (see
    /// [`super::watch_on`]).
    pub(super) retire_at: Option<Instant>,
}

/// The live part of a subscription.
pub(super) struct Live {
    /// The last ring position read.
    cursor: u64,
    /// The JSON bytes of the ring up to `cursor`.
    cursor_bytes: u64,
    /// The last point the subscriber can resume from.
    resume: Resume,
    /// The RV of the last ring event read, delivered or filtered out:
    /// what a progress bookmark may promise.
    read_rv: ResourceVersion,
    /// Where following is.
    phase: Phase,
    /// Re-armed lazily: when it fires early it is moved to the real
    /// deadline, so sending an event costs no timer operation.
    progress: Pin<Box<Sleep>>,
    lag: LagBound,
    /// How the subscriber learns that events concern it.
    interest: Interest,
    /// Its position as published for metrics: how far it is behind while
    /// it reads, caught up while it waits.
    reader: Reader,
    /// How fast its events come: whether, woken, it waits for more.
    pace: Pace,
    /// With head bookmarks: when the next is due (the stream's first at
    /// once, then one [`HEAD_BOOKMARK_INTERVAL`] after each bookmark).
    head_due: Option<Instant>,
}

/// Where live following is. Each step moves it on:
///
/// - `CatchingUp` hands out its pending events; once they are gone it
///   checks the lag bound and reads on from the cursor: more events stay
///   `CatchingUp`, none make it `Waiting`.
/// - `Waiting` waits for the head to move (unindexed), a mark (indexed),
///   or the progress timer, and becomes `Woken` (a due progress bookmark
///   goes out on the way).
/// - `Woken` reads on from the cursor (unindexed), or takes its mark
///   (indexed): a mark makes it read from the event before the first that
///   concerns it, none skips its cursor to the head and waits again.
enum Phase {
    /// Reading the ring up to its head; the subscription starts here.
    CatchingUp {
        /// Events read from the ring but not yet handled.
        pending: VecDeque<Arc<Event>>,
        last_sent: LastSent,
        /// Events handled since the lag bound was last checked.
        unchecked: usize,
    },
    /// Read up to the head as of its last read.
    Waiting {
        /// When the subscriber was last sent something.
        last_sent: Instant,
    },
    /// Woken by the store, its mark or the progress timer.
    Woken {
        /// When the subscriber was last sent something.
        last_sent: Instant,
    },
}

/// When a subscriber reading the ring was last sent something.
#[derive(Debug, Clone, Copy)]
enum LastSent {
    /// At this instant (as of its last wait).
    At(Instant),
    /// Since its last wait. The clock is read when it next waits, once per
    /// batch of deliveries rather than once per delivery: the progress
    /// timer only matters while it waits.
    SinceLastWait,
}

impl LastSent {
    /// The instant, read from the clock if something went out since the
    /// last wait.
    fn stamp(self) -> Instant {
        match self {
            LastSent::At(at) => at,
            LastSent::SinceLastWait => Instant::now(),
        }
    }
}

/// The last point a subscriber can resume from.
#[derive(Debug, Clone, Copy)]
enum Resume {
    /// The RV of its last delivery outside a re-sync unit, or of the last
    /// unit it finished.
    At(ResourceVersion),
    /// Inside a re-sync unit, whose RV is a resume point only once the
    /// unit is closed: the point before it.
    InUnit { before: ResourceVersion },
}

impl Resume {
    /// The resourceVersion an error tells the subscriber to resume from.
    fn rv(self) -> ResourceVersion {
        match self {
            Resume::At(rv) | Resume::InUnit { before: rv } => rv,
        }
    }

    /// What `event` becomes for this subscriber, keeping track of units
    /// and of the resume point.
    fn handle(&mut self, store: &Store, spec: &WatchSpec, event: &Arc<Event>) -> Option<Delivery> {
        let rv = event.resource_version;
        if event.closes_unit() {
            // Every subscriber is told the unit closed, even one that got
            // nothing of it: the upstream lost history here, and a plain
            // bookmark would claim nothing it might have seen happened.
            // The same closing bookmark for all, so it is shared.
            *self = Resume::At(rv);
            return Some(Delivery {
                unchanged: Some(Unchanged(event.clone())),
                ..bookmark(store, rv, Marker::ResyncEnd, spec.projection)
            });
        }
        if event.resync
            && let Resume::At(before) = *self
        {
            *self = Resume::InUnit { before };
        }
        let delivery = deliver(store, spec, event)?;
        if let Resume::At(_) = self {
            *self = Resume::At(rv);
        }
        Some(delivery)
    }
}

/// What woke a waiting subscriber.
enum Wake {
    /// The store's head moved, or the store is gone.
    Changed { store_gone: bool },
    /// An event concerning this indexed subscriber was appended, or the
    /// store is closing.
    Marked,
    /// The progress-bookmark timer fired (perhaps early; see its re-arming).
    Progress,
}

impl Live {
    /// Following the ring from position `cursor`, at resume point `rv`.
    pub(super) fn new(cx: &Context, cursor: u64, rv: ResourceVersion) -> Self {
        let head = *cx.head.borrow();
        // The bytes up to the cursor: the head's, less what came after it.
        let cursor_bytes = match cx.store.read_after(cursor, 1) {
            Ok(next) => next.first().map_or(head.bytes, |e| e.bytes_before()),
            Err(_) => head.bytes,
        };
        let now = Instant::now();
        Live {
            cursor,
            cursor_bytes,
            resume: Resume::At(rv),
            read_rv: rv,
            // A catch-up read from the start position: see
            // `crate::dispatch`.
            phase: Phase::CatchingUp {
                pending: VecDeque::new(),
                last_sent: LastSent::At(now),
                unchecked: 0,
            },
            progress: Box::pin(tokio::time::sleep_until(sooner(
                now + cx.limits.progress_interval,
                cx.retire_at,
            ))),
            lag: LagBound::new(head.seq.max(cursor), head.bytes.max(cursor_bytes)),
            // Registered after the start position is fixed, and followed
            // by a catch-up read from it: see `crate::dispatch`.
            interest: cx
                .store
                .dispatch()
                .register(cx.spec.filter.pinned(), cx.spec.filter.required_labels()),
            reader: cx.store.reader(),
            pace: Pace::new(now, cx.limits.min_send_interval),
            head_due: cx.spec.head_bookmarks.then_some(now),
        }
    }

    /// `delivery`, a bookmark, as this stream sends it: with head
    /// bookmarks, stamped with the store's head (its own encoding, not the
    /// shared one) and the next due an interval from now.
    pub(super) fn stamped(&mut self, cx: &Context, mut delivery: Delivery) -> Delivery {
        if let Some(due) = &mut self.head_due {
            *due = Instant::now() + HEAD_BOOKMARK_INTERVAL;
            let head = cx.head.borrow().resource_version;
            delivery.head = Some(head.max(delivery.resource_version));
            delivery.unchanged = None;
        }
        delivery
    }

    /// Whether a head bookmark is due; one never is for a stream without
    /// them, nor for one without bookmarks.
    fn head_bookmark_due(&self, cx: &Context) -> bool {
        cx.spec.allow_bookmarks && self.head_due.is_some_and(|due| Instant::now() >= due)
    }

    /// The next live delivery, or the error that ends the stream: steps
    /// the [`Phase`] until one comes. The stream ends at `cx.retire_at`,
    /// the connection's retirement, which the progress timer never passes.
    pub(super) async fn follow(&mut self, cx: &mut Context) -> Result<Delivery, WatchError> {
        loop {
            let delivery = match self.phase {
                Phase::CatchingUp { .. } => self.catch_up(cx)?,
                Phase::Waiting { last_sent } => self.wait(cx, last_sent).await?,
                Phase::Woken { last_sent } => {
                    self.woken(cx, last_sent)?;
                    None
                }
            };
            if let Some(delivery) = delivery {
                if delivery.kind == EventKind::Bookmark {
                    return Ok(self.stamped(cx, delivery));
                }
                return Ok(delivery);
            }
        }
    }

    /// `CatchingUp`: hands out the next pending event that the subscriber
    /// receives; with none left, reads on from the cursor.
    fn catch_up(&mut self, cx: &mut Context) -> Result<Option<Delivery>, WatchError> {
        let head_due = self.head_bookmark_due(cx);
        let Phase::CatchingUp {
            pending,
            last_sent,
            unchecked,
        } = &mut self.phase
        else {
            // Only stepped in this phase (see `follow`).
            return Ok(None);
        };
        // Before every delivery, so that events already read do not keep a
        // closing stream going. An atomic load of a flag written once: no
        // lock shared with the other subscribers.
        if cx.store.is_closing() {
            return Err(self.shutting_down(cx));
        }
        // A head bookmark while catching up: at the last event read, unless
        // that is inside a unit or the next event shares its RV.
        if head_due
            && let Resume::At(_) = self.resume
            && pending
                .front()
                .is_none_or(|next| next.resource_version > self.read_rv)
        {
            self.resume = Resume::At(self.read_rv);
            *last_sent = LastSent::SinceLastWait;
            return Ok(Some(bookmark(
                &cx.store,
                self.read_rv,
                Marker::None,
                cx.spec.projection,
            )));
        }
        while let Some(event) = pending.pop_front() {
            // A batch can take a slow reader longer to get through than
            // half the history lasts: the history bound is checked within
            // it too, every so many events, without the ring's lock.
            *unchecked += 1;
            if *unchecked == CHECK_EVERY {
                *unchecked = 0;
                let head = *cx.head.borrow();
                if self.lag.past_newer_half(
                    &cx.store.history(),
                    &head,
                    self.cursor,
                    self.cursor_bytes,
                    &event,
                ) {
                    return Err(lagged(self.resume, self.read_rv));
                }
            }
            self.cursor = event.seq;
            self.cursor_bytes = event.bytes_through;
            self.read_rv = event.resource_version;
            publish(&self.lag, &self.reader, self.cursor, self.cursor_bytes);
            if let Some(delivery) = self.resume.handle(&cx.store, &cx.spec, &event) {
                *last_sent = LastSent::SinceLastWait;
                self.pace.sent_one();
                return Ok(Some(delivery));
            }
        }
        let last_sent = *last_sent;
        let head = self.head(cx)?;
        self.read_on(cx, self.cursor, &head, last_sent)?;
        Ok(None)
    }

    /// `Woken`: an unindexed subscriber reads on from its cursor; an indexed
    /// one reads from the event before the first that concerns it if it
    /// has a mark to take, and otherwise skips to the head and waits again.
    fn woken(&mut self, cx: &mut Context, last_sent: Instant) -> Result<(), WatchError> {
        let head = self.head(cx)?;
        if !self.interest.is_indexed() {
            return self.read_on(cx, self.cursor, &head, LastSent::At(last_sent));
        }
        match self.interest.take() {
            0 => {
                let from = self.cursor;
                self.skip_to(&head);
                // After a skip the cursor's bytes are not known until the
                // read: the bound is checked again before the next one.
                if from == self.cursor && self.lag_exceeded(cx, &head) {
                    return Err(self.lagged());
                }
                self.phase = Phase::Waiting { last_sent };
                Ok(())
            }
            first => {
                let from = self.cursor.max(first - 1);
                self.read_on(cx, from, &head, LastSent::At(last_sent))
            }
        }
    }

    /// Reads the ring on from `from` (after checking the lag bound, if
    /// `from` is the cursor): its events are handed out next; with none,
    /// the subscriber waits.
    fn read_on(
        &mut self,
        cx: &Context,
        from: u64,
        head: &Head,
        last_sent: LastSent,
    ) -> Result<(), WatchError> {
        if from == self.cursor && self.lag_exceeded(cx, head) {
            return Err(self.lagged());
        }
        self.phase = match cx.store.read_after(from, BATCH) {
            Err(_) => return Err(self.lagged()),
            Ok(events) if !events.is_empty() => {
                // An indexed subscriber reading from its mark has skipped
                // what lies before it: its first read publishes.
                if from == self.cursor {
                    publish(&self.lag, &self.reader, self.cursor, self.cursor_bytes);
                }
                Phase::CatchingUp {
                    pending: events.into(),
                    last_sent,
                    unchecked: 0,
                }
            }
            Ok(_) => {
                self.reader.caught_up();
                let last_sent = last_sent.stamp();
                self.pace.waiting(last_sent, cx.limits.min_send_interval);
                Phase::Waiting { last_sent }
            }
        };
        Ok(())
    }

    /// `Waiting`: waits for the store to move or close, its mark, or the
    /// progress timer; `last_sent` is when the subscriber was last sent
    /// something. A due progress bookmark is returned.
    async fn wait(
        &mut self,
        cx: &mut Context,
        last_sent: Instant,
    ) -> Result<Option<Delivery>, WatchError> {
        // A head bookmark falls due sooner than the progress timer's last
        // deadline (its interval counts from the last bookmark).
        if cx.spec.allow_bookmarks
            && let Some(due) = self.head_due
            && due < self.progress.deadline()
        {
            self.progress.as_mut().reset(sooner(due, cx.retire_at));
        }
        let indexed = self.interest.is_indexed();
        let wake = tokio::select! {
            changed = cx.head.changed(), if !indexed => Wake::Changed { store_gone: changed.is_err() },
            () = self.interest.marked() => Wake::Marked,
            () = self.progress.as_mut() => Wake::Progress,
        };
        self.phase = Phase::Woken { last_sent };
        match wake {
            // A store gone away goes with the server: a shutdown too.
            Wake::Changed { store_gone: true } => Err(self.shutting_down(cx)),
            Wake::Changed { store_gone: false } | Wake::Marked => {
                cx.store.dispatch().woken();
                // `last_sent` was stamped as the subscriber began to wait,
                // right after its last delivery went to the transport.
                if let Some(until) = self.pace.hold_until(last_sent, cx.limits.min_send_interval)
                    && Instant::now() < until
                {
                    tokio::time::sleep_until(until).await;
                }
                Ok(None)
            }
            Wake::Progress => self.progress(cx, last_sent),
        }
    }

    /// The progress timer fired: ends the stream at the connection's
    /// retirement, or sends a progress bookmark once one is due and says
    /// something new, or re-arms the timer for when it is due.
    fn progress(
        &mut self,
        cx: &Context,
        last_sent: Instant,
    ) -> Result<Option<Delivery>, WatchError> {
        if cx.retire_at.is_some_and(|at| Instant::now() >= at) {
            return Err(WatchError::ConnectionRetired {
                resume_from: self.resume.rv(),
            });
        }
        let due = last_sent + cx.limits.progress_interval;
        let head_due = self.head_bookmark_due(cx);
        if Instant::now() < due && !head_due {
            self.progress.as_mut().reset(sooner(
                self.head_due.map_or(due, |d| d.min(due)),
                cx.retire_at,
            ));
            return Ok(None);
        }
        // A quiet indexed subscriber catches up with the head here, without
        // reading the ring (it is not catching up while it waits; see
        // `crate::dispatch`).
        if self.interest.is_indexed() {
            let head = *cx.head.borrow();
            if !self.interest.is_marked() {
                self.skip_to(&head);
            }
        }
        let last_sent = Instant::now();
        self.phase = Phase::Woken { last_sent };
        let mut deadline = last_sent + cx.limits.progress_interval;
        if self.head_due.is_some() {
            // The bookmark sent here (if one is) moves the next head
            // bookmark on; if none is (inside a unit), it is due again.
            deadline = deadline.min(last_sent + HEAD_BOOKMARK_INTERVAL);
        }
        self.progress.as_mut().reset(sooner(deadline, cx.retire_at));
        // Never inside a unit: its RV is no resume point yet.
        match self.resume {
            Resume::At(resume_from)
                if cx.spec.allow_bookmarks && (self.read_rv > resume_from || head_due) =>
            {
                self.resume = Resume::At(self.read_rv);
                Ok(Some(bookmark(
                    &cx.store,
                    self.read_rv,
                    Marker::None,
                    cx.spec.projection,
                )))
            }
            _ => Ok(None),
        }
    }

    /// The store's head, read (and marked seen) before a read or a skip.
    fn head(&self, cx: &mut Context) -> Result<Head, WatchError> {
        let head = *cx.head.borrow_and_update();
        // Checked again after the head is read: a close's change of the
        // head's version is either taken by that read, and then its flag
        // (set before the change) is seen here, or still unseen by
        // `head.changed()` while waiting, which then wakes. Without this,
        // an unindexed subscriber could take the change without seeing the
        // flag, and sleep until its progress tick.
        if cx.store.is_closing() {
            return Err(self.shutting_down(cx));
        }
        Ok(head)
    }

    /// Moves an indexed subscriber's cursor to `head` when nothing up to it
    /// concerns the subscriber (see `crate::dispatch`).
    fn skip_to(&mut self, head: &Head) {
        if head.seq > self.cursor {
            self.cursor = head.seq;
            self.cursor_bytes = head.bytes;
            self.read_rv = self.read_rv.max(head.resource_version);
        }
    }

    fn lag_exceeded(&mut self, cx: &Context, head: &Head) -> bool {
        self.lag.exceeded(
            &cx.store,
            &cx.spec,
            &cx.limits,
            head,
            self.cursor,
            self.cursor_bytes,
        )
    }

    /// What the stream ends with once the store closes: ShuttingDown at
    /// the last resume point, or Removed.
    fn shutting_down(&self, cx: &Context) -> WatchError {
        WatchError::closed(&cx.store, self.resume.rv())
    }

    fn lagged(&self) -> WatchError {
        lagged(self.resume, self.read_rv)
    }
}

/// A lag cut-off of a subscriber at `resume` that has read the ring up to
/// `read_rv`, naming the furthest point it can resume from: the last event
/// it read, delivered or filtered out (it was handed everything its filter
/// lets through up to there, as a progress bookmark there would say), or
/// the point before an unfinished unit. The further on, the longer the
/// store still holds what follows it. (A function, not a method: it runs
/// while the phase's pending events are borrowed.)
fn lagged(resume: Resume, read_rv: ResourceVersion) -> WatchError {
    let resume_from = match resume {
        Resume::At(_) => read_rv,
        Resume::InUnit { before } => before,
    };
    WatchError::Lagged { resume_from }
}

/// Publishes that a subscriber has read up to `cursor` (`cursor_bytes`),
/// counted as its lag bound counts: from the stream's start at the
/// earliest. (A function of the two fields, not a method: it runs while
/// the phase's pending events are borrowed.)
fn publish(lag: &LagBound, reader: &Reader, cursor: u64, cursor_bytes: u64) {
    let (seq, bytes) = lag.counted_from(cursor, cursor_bytes);
    reader.read_to(seq, bytes);
}

/// The progress timer's deadline: `due`, or the connection's retirement
/// if that comes first.
fn sooner(due: Instant, retire_at: Option<Instant>) -> Instant {
    retire_at.map_or(due, |at| due.min(at))
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use futures::{Stream, StreamExt};

    use tokio::time::Instant;

    use crate::{
        event::EventKind,
        fixtures::{configmaps, empty_store, object},
        object::ResourceVersion,
        projection::Projection,
        store::{Behind, Store},
        subscription::{
            Delivery, Limits, Start, WatchError, WatchSpec,
            delivery::{Marker, bookmark},
            tests::{deliveries, events, ready, spec, stream_of, watch},
            watch_on,
        },
    };

    /// The next delivery's RV, if one comes within `ms` (0: ready now).
    async fn next(
        stream: &mut (impl Stream<Item = Result<Delivery, WatchError>> + Unpin),
        ms: u64,
    ) -> Option<u64> {
        let item = tokio::time::timeout(Duration::from_millis(ms), stream.next()).await;
        item.ok().flatten().map(|d| d.unwrap().resource_version.0)
    }

    /// At the default hold (3 ms), events 10 ms apart (a steady 100 a
    /// second), the first after a quiet, and a burst go out at once: the
    /// subscriber's events never came faster than one per hold,
    /// so coalescing adds them no latency. A burst is ready all at once,
    /// one delivery after another, which tonic writes together.
    #[tokio::test(start_paused = true)]
    async fn at_the_default_hold_events_at_100_a_second_and_a_burst_go_at_once() {
        let store = Arc::new(Store::new(configmaps(), 1000));
        store.replace(vec![object("a", 1, "{}")], ResourceVersion(1));
        let limits = Limits::default();
        assert_eq!(limits.min_send_interval, Duration::from_millis(3));
        let mut stream = Box::pin(watch(store.clone(), spec("", Start::Latest, false), limits));
        while next(&mut stream, 1).await.is_some() {}
        let mut rv = 1;
        for _ in 0..100 {
            tokio::time::advance(Duration::from_millis(10)).await;
            rv += 1;
            store.apply(EventKind::Modified, object("a", rv, "{}"));
            assert_eq!(next(&mut stream, 0).await, Some(rv), "at once");
            // Then it waits (and its pace takes the batch in).
            assert_eq!(next(&mut stream, 0).await, None);
        }
        tokio::time::advance(Duration::from_millis(10)).await;
        for _ in 0..5 {
            rv += 1;
            store.apply(EventKind::Modified, object("a", rv, "{}"));
        }
        for expected in rv - 4..=rv {
            assert_eq!(
                next(&mut stream, 0).await,
                Some(expected),
                "the burst at once"
            );
        }
    }

    /// Events a millisecond apart (1,000 a second): the first go at once;
    /// once the subscriber's pace is known to be faster than one per half
    /// the hold, an event that follows a delivery closer than the hold
    /// waits for the hold's end and goes out with those that came
    /// meanwhile. No event waits longer than the hold, and after a quiet
    /// the next goes at once again.
    #[tokio::test(start_paused = true)]
    async fn events_a_millisecond_apart_come_to_share_writes_within_the_hold() {
        let store = Arc::new(Store::new(configmaps(), 10_000));
        store.replace(vec![object("a", 1, "{}")], ResourceVersion(1));
        let hold = Limits::default().min_send_interval;
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("", Start::Latest, false),
            Limits::default(),
        ));
        while next(&mut stream, 1).await.is_some() {}
        let (mut rv, mut applied, mut received) = (1, Vec::new(), Vec::new());
        for _ in 0..300 {
            rv += 1;
            store.apply(EventKind::Modified, object("a", rv, "{}"));
            applied.push((rv, Instant::now()));
            while let Some(got) = next(&mut stream, 0).await {
                received.push((got, Instant::now()));
            }
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        while let Some(got) = next(&mut stream, 0).await {
            received.push((got, Instant::now()));
        }
        tokio::time::advance(hold).await;
        while let Some(got) = next(&mut stream, 0).await {
            received.push((got, Instant::now()));
        }
        let rvs: Vec<u64> = received.iter().map(|(rv, _)| *rv).collect();
        assert_eq!(rvs, (2..=rv).collect::<Vec<_>>(), "every event, in order");
        let latencies: Vec<Duration> = applied
            .iter()
            .zip(&received)
            .map(|((_, sent), (_, got))| *got - *sent)
            .collect();
        assert!(latencies.iter().all(|l| *l <= hold), "{latencies:?}");
        assert!(
            latencies[..10].iter().all(Duration::is_zero),
            "{latencies:?}"
        );
        // The last 200 events: writes are the distinct instants they left at.
        let mut writes: Vec<Instant> = received[100..].iter().map(|(_, at)| *at).collect();
        writes.dedup();
        assert!(
            writes.len() * 2 <= 200,
            "{} writes for 200 events",
            writes.len()
        );
        // After a quiet, at once again.
        tokio::time::advance(Duration::from_millis(50)).await;
        rv += 1;
        store.apply(EventKind::Modified, object("a", rv, "{}"));
        assert_eq!(next(&mut stream, 0).await, Some(rv));
    }

    /// With no hold, every event goes at once, however fast they come.
    #[tokio::test(start_paused = true)]
    async fn with_a_zero_hold_events_a_millisecond_apart_go_at_once() {
        let store = Arc::new(Store::new(configmaps(), 10_000));
        store.replace(vec![object("a", 1, "{}")], ResourceVersion(1));
        let limits = Limits {
            min_send_interval: Duration::ZERO,
            ..Limits::default()
        };
        let mut stream = Box::pin(watch(store.clone(), spec("", Start::Latest, false), limits));
        while next(&mut stream, 1).await.is_some() {}
        for rv in 2..200 {
            store.apply(EventKind::Modified, object("a", rv, "{}"));
            assert_eq!(next(&mut stream, 0).await, Some(rv));
            assert_eq!(next(&mut stream, 0).await, None);
            tokio::time::advance(Duration::from_millis(1)).await;
        }
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
        let mut stream = Box::pin(events(watch_on(
            store.clone(),
            spec("", Start::At(ResourceVersion(1)), false),
            limits,
            None,
            Some(retire_at),
            None,
        )));
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
        let mut late = Box::pin(events(watch_on(
            store.clone(),
            WatchSpec {
                send_initial_events: true,
                ..spec("", Start::Latest, false)
            },
            limits,
            None,
            Some(start),
            None,
        )));
        let mut delivered = Vec::new();
        while let Some(Ok(delivery)) = late.next().await {
            delivered.push(delivery.resource_version.0);
        }
        assert_eq!(delivered, [3, 3], "the object, then the end bookmark");
        assert_eq!(Instant::now(), retire_at, "no wait");
    }

    /// A subscriber that stops reading is as far behind the head as the
    /// ring's events it has not read since its stream started; one that
    /// waits, or that nothing after its cursor concerns, is not behind.
    #[tokio::test(start_paused = true)]
    async fn how_far_a_live_subscriber_is_behind_is_what_it_has_not_read_since_it_started() {
        let store = empty_store();
        store.apply(EventKind::Added, object("o2", 2, "{}"));
        let mut resumed = stream_of(
            &store,
            spec("", Start::At(ResourceVersion(1)), false),
            Limits::default(),
        );
        let mut unread = stream_of(
            &store,
            spec("", Start::At(ResourceVersion(2)), false),
            Limits::default(),
        );
        let mut indexed = stream_of(
            &store,
            spec("app=x", Start::At(ResourceVersion(2)), false),
            Limits::default(),
        );
        assert!(ready(&mut unread).await.is_empty());
        assert!(ready(&mut indexed).await.is_empty());
        let size = object("o3", 3, "{}").json.len() as u64;
        for rv in 3..=6 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        // Events before a stream started are owed to it, not lag: the
        // resumed subscriber has read one of the five it is owed.
        assert!(matches!(resumed.next().await, Some(Ok(_))));
        assert_eq!(store.behind(), Behind::default());
        assert!(matches!(unread.next().await, Some(Ok(_))));
        assert_eq!(
            store.behind(),
            Behind {
                events: 3,
                bytes: 3 * size
            },
            "three of the four events after its start are unread"
        );
        assert_eq!(ready(&mut unread).await.len(), 3);
        assert_eq!(ready(&mut resumed).await.len(), 4);
        assert_eq!(store.behind(), Behind::default());
        drop(unread);
        drop(resumed);
        store.apply(EventKind::Added, object("o7", 7, r#"{"app":"x"}"#));
        assert_eq!(ready(&mut indexed).await, [Ok((EventKind::Added, 7))]);
        store.apply(EventKind::Added, object("o8", 8, "{}"));
        assert_eq!(
            store.behind(),
            Behind::default(),
            "nothing after its cursor concerns the indexed one"
        );
        assert!(ready(&mut indexed).await.is_empty());
        drop(indexed);
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

    /// (kind, RV, head) of the next delivery, waiting for it.
    async fn stamped(
        stream: &mut (impl Stream<Item = Result<Delivery, WatchError>> + Unpin),
    ) -> (EventKind, u64, Option<u64>) {
        let d = stream.next().await.unwrap().unwrap();
        (d.kind, d.resource_version.0, d.head.map(|h| h.0))
    }

    fn with_heads(start: Start, send_initial_events: bool) -> WatchSpec {
        WatchSpec {
            head_bookmarks: true,
            ..spec("", start, send_initial_events)
        }
    }

    /// A resumed stream with head bookmarks starts with a bookmark at its
    /// resume point naming the store's head; so does a snapshot's end
    /// bookmark. One without them gets the events alone.
    #[tokio::test(start_paused = true)]
    async fn a_stream_with_head_bookmarks_starts_with_one_naming_the_head() {
        let store = empty_store();
        for rv in 2..=5 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        let mut heads = Box::pin(watch(
            store.clone(),
            with_heads(Start::At(ResourceVersion(3)), false),
            Limits::default(),
        ));
        assert_eq!(stamped(&mut heads).await, (EventKind::Bookmark, 3, Some(5)));
        assert_eq!(stamped(&mut heads).await, (EventKind::Added, 4, None));
        assert_eq!(stamped(&mut heads).await, (EventKind::Added, 5, None));

        let mut plain = Box::pin(watch(
            store.clone(),
            spec("", Start::At(ResourceVersion(3)), false),
            Limits::default(),
        ));
        assert_eq!(stamped(&mut plain).await, (EventKind::Added, 4, None));

        let mut snapshot = Box::pin(watch(
            store.clone(),
            with_heads(Start::Latest, true),
            Limits::default(),
        ));
        for _ in 2..=5 {
            assert_eq!(stamped(&mut snapshot).await.0, EventKind::Added);
        }
        assert_eq!(
            stamped(&mut snapshot).await,
            (EventKind::Bookmark, 5, Some(5))
        );
        assert!(
            ready(&mut snapshot).await.is_empty(),
            "a second bookmark at once"
        );
    }

    /// A reader catching up slowly gets a bookmark at its resume point
    /// once a second has passed since the last, naming the head it is
    /// behind; a caught-up one waiting gets one every second too; an
    /// upstream bookmark is stamped (and starts the second again).
    #[tokio::test(start_paused = true)]
    async fn head_bookmarks_come_every_second_catching_up_or_waiting() {
        let store = empty_store();
        for rv in 2..=4 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        let mut stream = Box::pin(watch(
            store.clone(),
            with_heads(Start::At(ResourceVersion(1)), false),
            Limits::default(),
        ));
        assert_eq!(
            stamped(&mut stream).await,
            (EventKind::Bookmark, 1, Some(4))
        );
        assert_eq!(stamped(&mut stream).await, (EventKind::Added, 2, None));
        tokio::time::advance(Duration::from_millis(999)).await;
        assert_eq!(stamped(&mut stream).await, (EventKind::Added, 3, None));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(
            stamped(&mut stream).await,
            (EventKind::Bookmark, 3, Some(4))
        );
        assert_eq!(stamped(&mut stream).await, (EventKind::Added, 4, None));
        let waiting = Instant::now();
        assert_eq!(
            stamped(&mut stream).await,
            (EventKind::Bookmark, 4, Some(4))
        );
        assert_eq!(Instant::now() - waiting, Duration::from_secs(1));
        tokio::time::advance(Duration::from_millis(500)).await;
        store.bookmark(ResourceVersion(9));
        assert_eq!(
            stamped(&mut stream).await,
            (EventKind::Bookmark, 9, Some(9))
        );
        let forwarded = Instant::now();
        assert_eq!(
            stamped(&mut stream).await,
            (EventKind::Bookmark, 9, Some(9))
        );
        assert_eq!(Instant::now() - forwarded, Duration::from_secs(1));
    }
}

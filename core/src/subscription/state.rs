//! The subscription's state machine ([`State`]), stepped by one function,
//! [`Subscription::next`]: it waits for the store to be ready, sends a
//! snapshot if one is due, then follows the ring ([`super::live`]).

use std::{sync::Arc, time::Duration};

use tokio::{sync::watch, time::Instant};

use super::{
    delivery::{Delivery, Marker, bookmark},
    error::WatchError,
    live::{Context, Live},
    request::{Limits, Start, WatchSpec},
};
use crate::{
    event::EventKind,
    object::{Object, ResourceVersion},
    shared_snapshot::{FramedSnapshot, SnapshotFrames},
    store::{Head, ReadError, Snapshot, Store},
};

/// Something a subscription keeps only while it sends its snapshot.
pub type SnapshotHold = Box<dyn Send + Sync>;

/// What a subscription yields.
#[derive(Debug)]
pub enum Output {
    /// One event.
    Event(Delivery),
    /// All of a snapshot's ADDEDs at once, framed and shared with the
    /// subscribers of the same snapshot (only for a subscription given
    /// [`SnapshotFrames`], and only for a snapshot that sends something).
    /// The snapshot's end bookmark, if asked for, and the live events come
    /// after it, so they go out after its last chunk.
    Snapshot(FramedSnapshot),
}

/// One subscriber's position and what it still owes the subscriber.
pub(super) struct Subscription {
    cx: Context,
    state: State,
    /// Where the snapshot is sent from, if it is sent framed.
    frames: Option<SnapshotFrames>,
}

/// Where a subscription is. The snapshot hold (see [`super::watch_on`])
/// is owned by the states before the live one, so that whichever
/// transition leaves them, to the live state or to the end, releases it.
enum State {
    /// Waiting for the store's first sync and for the asked resourceVersion.
    Starting { hold: Option<SnapshotHold> },
    /// Sending a snapshot's ADDEDs; its end bookmark (if asked for) and the
    /// live events follow.
    Snapshot {
        /// The snapshot's objects (shared with others at the same point).
        objects: Arc<[Arc<Object>]>,
        /// The index of the next one to consider sending.
        next: usize,
        /// Where the filter's candidates end (see
        /// [`crate::filter::Filter::candidates`]).
        end: usize,
        /// The snapshot's RV and ring position.
        resource_version: ResourceVersion,
        seq: u64,
        /// Kept until the snapshot has been sent; never read.
        _hold: Option<SnapshotHold>,
    },
    /// Following the ring.
    Live(Box<Live>),
    /// The stream has ended.
    Done,
}

impl Subscription {
    /// A subscription to `store` as `spec` asks, not yet started, keeping
    /// `hold` until its snapshot is sent, on a connection retired at
    /// `retire_at`, sending its snapshot framed from `frames` if given
    /// (see [`super::watch_on`]).
    pub(super) fn new(
        store: Arc<Store>,
        spec: WatchSpec,
        limits: Limits,
        hold: Option<SnapshotHold>,
        retire_at: Option<Instant>,
        frames: Option<SnapshotFrames>,
    ) -> Self {
        Subscription {
            cx: Context {
                head: store.subscribe(),
                store,
                spec,
                limits,
                retire_at,
            },
            state: State::Starting { hold },
            frames,
        }
    }

    /// The next delivery, or the error that ends the stream; `None` once it
    /// has ended.
    pub(super) async fn next(&mut self) -> Option<Result<Output, WatchError>> {
        let item = self.step().await;
        if !matches!(item, Some(Ok(_))) {
            self.state = State::Done;
        }
        item
    }

    async fn step(&mut self) -> Option<Result<Output, WatchError>> {
        loop {
            match &mut self.state {
                State::Done => return None,
                State::Starting { hold } => match start(&mut self.cx).await {
                    // Releases the snapshot hold.
                    Ok(Begin::Resume { cursor, rv }) => {
                        self.state = State::Live(Box::new(Live::new(&self.cx, cursor, rv)));
                    }
                    Ok(Begin::Snapshot(snapshot)) => {
                        let spec = &self.cx.spec;
                        let candidates = spec.filter.candidates(&snapshot.objects);
                        let framed = self
                            .frames
                            .as_ref()
                            .map(|frames| {
                                frames.shared.join(
                                    &snapshot.objects,
                                    snapshot.resource_version,
                                    &spec.filter,
                                    spec.projection,
                                    frames.compression,
                                )
                            })
                            .filter(|framed| framed.events() > 0)
                            // The framed snapshot keeps the hold, if it goes.
                            .map(|framed| framed.holding(hold.take()));
                        self.state = State::Snapshot {
                            objects: snapshot.objects,
                            // Sent framed, nothing is left to send one by
                            // one: the next step goes on to the end bookmark.
                            next: if framed.is_some() {
                                candidates.end
                            } else {
                                candidates.start
                            },
                            end: candidates.end,
                            resource_version: snapshot.resource_version,
                            seq: snapshot.seq,
                            _hold: hold.take(),
                        };
                        if let Some(framed) = framed {
                            return Some(Ok(Output::Snapshot(framed)));
                        }
                    }
                    Err(err) => return Some(Err(err)),
                },
                State::Snapshot {
                    objects,
                    next,
                    end,
                    resource_version,
                    seq,
                    ..
                } => {
                    let (rv, seq) = (*resource_version, *seq);
                    let spec = &self.cx.spec;
                    let found = objects[*next..*end]
                        .iter()
                        .position(|o| spec.filter.matches_candidate(o));
                    if let Some(at) = found {
                        let object = &objects[*next + at];
                        *next += at + 1;
                        return Some(Ok(Output::Event(Delivery {
                            kind: EventKind::Added,
                            resource_version: rv,
                            object: spec.projection.json(object),
                            resync: false,
                            projection: spec.projection,
                            unchanged: None,
                            head: None,
                        })));
                    }
                    // Releases the snapshot hold.
                    let mut live = Box::new(Live::new(&self.cx, seq, rv));
                    let end = self.cx.spec.send_initial_events.then(|| {
                        let end = bookmark(
                            &self.cx.store,
                            rv,
                            Marker::InitialEventsEnd,
                            self.cx.spec.projection,
                        );
                        live.stamped(&self.cx, end)
                    });
                    self.state = State::Live(live);
                    if let Some(end) = end {
                        return Some(Ok(Output::Event(end)));
                    }
                }
                State::Live(live) => {
                    return Some(live.follow(&mut self.cx).await.map(Output::Event));
                }
            }
        }
    }
}

/// Where a started subscription begins.
enum Begin {
    /// Following the ring from position `cursor`, at resume point `rv`.
    Resume { cursor: u64, rv: ResourceVersion },
    /// With this snapshot.
    Snapshot(Snapshot),
}

/// Waits for the store to sync and to reach the asked resourceVersion,
/// then picks where to start: a resume point, or a snapshot.
async fn start(cx: &mut Context) -> Result<Begin, WatchError> {
    let store = &cx.store;
    let shutting_down = || WatchError::closed(store, ResourceVersion::default());
    // Not synced yet (the reflector's first list has not finished): wait,
    // bounded like a wait for a newer resourceVersion, then NotSynced.
    store.wait_synced(cx.limits.freshness_timeout).await?;
    if store.is_closing() {
        return Err(shutting_down());
    }
    // A resume point or minimum freshness the store has not reached
    // yet: wait for it, bounded.
    if let Start::At(rv) = cx.spec.start {
        let timeout = cx.limits.freshness_timeout;
        let reached = |h: &Head| h.resource_version >= rv || store.is_closing();
        wait_for(&mut cx.head, reached, timeout)
            .await
            .map_err(|current| ReadError::TooLarge { asked: rv, current })?;
        if store.is_closing() {
            return Err(shutting_down());
        }
    }
    Ok(match cx.spec.start {
        Start::At(rv) if !cx.spec.start.sends_snapshot(cx.spec.send_initial_events) => {
            Begin::Resume {
                cursor: store.cursor_after(rv)?,
                rv,
            }
        }
        _ => Begin::Snapshot(store.snapshot()),
    })
}

/// Waits until `ready(head)`, for at most `timeout`; on time-out returns
/// the resourceVersion the store had reached.
async fn wait_for(
    head: &mut watch::Receiver<Head>,
    ready: impl Fn(&Head) -> bool,
    timeout: Duration,
) -> Result<(), ResourceVersion> {
    let wait = head.wait_for(|h| ready(h));
    let reached = matches!(tokio::time::timeout(timeout, wait).await, Ok(Ok(_)));
    if reached {
        Ok(())
    } else {
        Err(head.borrow().resource_version)
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use futures::StreamExt;

    use crate::{
        event::EventKind,
        filter::Filter,
        fixtures::{configmaps, object},
        object::ResourceVersion,
        store::{ReadError, Store},
        subscription::{
            Limits, Start, WatchError, WatchSpec,
            tests::{deliveries, events, ready, spec, stream_of, watch},
            watch_on,
        },
    };

    /// The snapshot hold is kept from the start until the snapshot's last
    /// object has gone out, and released as the live state begins; a
    /// resume without a snapshot, or a start that fails, releases it at
    /// once.
    #[tokio::test(start_paused = true)]
    async fn the_snapshot_hold_is_kept_until_the_snapshot_is_sent() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(
            vec![object("a", 1, "{}"), object("b", 2, "{}")],
            ResourceVersion(2),
        );
        let hold = Arc::new(());
        let held = || Arc::strong_count(&hold) - 1;
        let on = |start, send_initial_events| {
            Box::pin(events(watch_on(
                store.clone(),
                spec("", start, send_initial_events),
                Limits::default(),
                Some(Box::new(hold.clone())),
                None,
                None,
            )))
        };
        let mut snapshot = on(Start::Latest, true);
        assert_eq!(held(), 1, "while starting");
        let mut kinds = Vec::new();
        for _ in 0..2 {
            kinds.push(snapshot.next().await.unwrap().unwrap().kind);
            assert_eq!(held(), 1, "while the snapshot is sent");
        }
        kinds.push(snapshot.next().await.unwrap().unwrap().kind);
        assert_eq!(
            kinds,
            [EventKind::Added, EventKind::Added, EventKind::Bookmark]
        );
        assert_eq!(held(), 0, "released as the live state begins");

        let mut resumed = on(Start::At(ResourceVersion(2)), false);
        assert_eq!(held(), 1);
        store.apply(EventKind::Added, object("c", 3, "{}"));
        assert_eq!(resumed.next().await.unwrap().unwrap().resource_version.0, 3);
        assert_eq!(held(), 0, "a resume sends no snapshot");

        let mut failed = on(Start::At(ResourceVersion(9)), true);
        assert!(failed.next().await.unwrap().is_err());
        assert_eq!(held(), 0, "released when the start fails");
    }

    /// Given shared snapshots, a snapshot goes out as one framed output
    /// holding all its events, which keeps the snapshot hold until its
    /// last chunk is taken; its end bookmark and the live events follow.
    /// A snapshot that sends nothing goes out as without them: its end
    /// bookmark alone, the hold released at once.
    #[tokio::test(start_paused = true)]
    async fn with_shared_snapshots_a_snapshot_goes_out_framed_then_its_bookmark() {
        use crate::{
            shared_snapshot::{SharedSnapshots, SnapshotFrames},
            subscription::Output,
        };
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(
            vec![object("a", 1, r#"{"app":"x"}"#), object("b", 2, "{}")],
            ResourceVersion(2),
        );
        let frames = SnapshotFrames {
            shared: Arc::new(SharedSnapshots::new(u64::MAX)),
            compression: Default::default(),
        };
        let hold = Arc::new(());
        let held = || Arc::strong_count(&hold) - 1;
        let on = |labels| {
            Box::pin(watch_on(
                store.clone(),
                spec(labels, Start::Latest, true),
                Limits::default(),
                Some(Box::new(hold.clone())),
                None,
                Some(frames.clone()),
            ))
        };
        let event = |output: Option<Result<Output, WatchError>>| match output {
            Some(Ok(Output::Event(d))) => (d.kind, d.resource_version.0),
            other => panic!("not an event: {other:?}"),
        };
        let mut all = on("");
        let Some(Ok(Output::Snapshot(mut framed))) = all.next().await else {
            panic!("the snapshot first, framed");
        };
        assert_eq!(framed.events(), 2);
        assert_eq!(event(all.next().await), (EventKind::Bookmark, 2));
        assert_eq!(held(), 1, "held by the framed snapshot");
        while framed.next_chunk().is_some() {}
        assert_eq!(held(), 0, "released with its last chunk");
        store.apply(EventKind::Added, object("c", 3, "{}"));
        assert_eq!(event(all.next().await), (EventKind::Added, 3));

        let mut nothing = on("app=y");
        assert_eq!(event(nothing.next().await), (EventKind::Bookmark, 3));
        assert_eq!(held(), 0);
    }

    /// A watch on a type not synced yet waits for the first sync, bounded
    /// like a wait for a newer resourceVersion; past the bound it fails
    /// NotSynced (the API server answers 429 at once while its cache
    /// initialises). One whose store syncs within the bound starts.
    #[tokio::test(start_paused = true)]
    async fn a_watch_on_an_unsynced_store_waits_bounded_then_fails_not_synced() {
        let store = Arc::new(Store::new(configmaps(), 4));
        let bound = Limits::default().freshness_timeout;
        let started = tokio::time::Instant::now();
        let mut never = Box::pin(watch(
            store.clone(),
            spec("", Start::Latest, true),
            Limits::default(),
        ));
        assert_eq!(
            never.next().await.unwrap(),
            Err(WatchError::Read(ReadError::NotSynced))
        );
        assert_eq!(started.elapsed(), bound);

        let mut synced = Box::pin(watch(
            store.clone(),
            spec("", Start::Latest, true),
            Limits::default(),
        ));
        let first = tokio::spawn(async move { synced.next().await.unwrap() });
        tokio::time::sleep(bound / 2).await;
        store.replace(vec![object("a", 3, "{}")], ResourceVersion(3));
        let first = first.await.unwrap().unwrap();
        assert_eq!(
            (first.kind, first.resource_version.0),
            (EventKind::Added, 3)
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

    /// A filtered snapshot sends each matching object once, in order,
    /// however many objects that the filter leaves out lie between them
    /// (cargo mutants: `objects[*next - at]` for `objects[*next + at]`
    /// survived, with no test's snapshot skipping an object after a match).
    #[tokio::test(start_paused = true)]
    async fn a_filtered_snapshot_skips_what_the_filter_leaves_out() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(
            vec![
                object("a", 1, r#"{"app":"x"}"#),
                object("b", 2, r#"{"app":"y"}"#),
                object("c", 3, r#"{"app":"x"}"#),
                object("d", 4, r#"{"app":"y"}"#),
                object("e", 5, r#"{"app":"y"}"#),
                object("f", 6, r#"{"app":"x"}"#),
            ],
            ResourceVersion(6),
        );
        let mut stream = stream_of(
            &store,
            spec("app=x", Start::Latest, true),
            Limits::default(),
        );
        use EventKind::{Added, Bookmark};
        assert_eq!(
            deliveries(&mut stream).await,
            [
                Ok((Added, 6, false, "a".to_owned())),
                Ok((Added, 6, false, "c".to_owned())),
                Ok((Added, 6, false, "f".to_owned())),
                Ok((Bookmark, 6, false, String::new())),
            ]
        );
    }
}

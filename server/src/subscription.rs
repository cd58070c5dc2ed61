//! One subscriber's stream: an optional consistent snapshot, then the
//! store's events after it, filtered, in order. No network here: the gRPC
//! layer only encodes what this yields.

use std::{sync::Arc, time::Duration};

use futures::Stream;
use kube_fanout_proto::INITIAL_EVENTS_END;
use tokio::{sync::watch, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::{
    filter::Filter,
    object::{Object, ObjectError, ResourceVersion},
    store::{Event, EventKind, Head, ReadError, Store},
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
    /// A subscriber further behind the head than this many events...
    pub max_lag_events: u64,
    /// ...or this many bytes of objects is cut off with
    /// [`WatchError::Lagged`], so that it resumes instead of pinning the
    /// shared history.
    pub max_lag_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            freshness_timeout: Duration::from_secs(3),
            progress_interval: Duration::from_secs(60),
            max_lag_events: 10_000,
            max_lag_bytes: 64 << 20,
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
    #[error("kube-fanout is shutting down; resume from resourceVersion {last_delivered}")]
    ShuttingDown {
        /// The resourceVersion of the last event it was sent.
        last_delivered: ResourceVersion,
    },
    /// The subscriber read so slowly that the ring dropped events it had
    /// not read yet.
    #[error(
        "subscriber fell behind the event history; resume from resourceVersion {last_delivered}"
    )]
    Lagged {
        /// The resourceVersion of the last event it was sent.
        last_delivered: ResourceVersion,
    },
}

impl WatchError {
    /// The machine-readable reason: the `google.rpc.ErrorInfo` reason of
    /// the status a client gets, and the label of the metric counting them.
    pub fn reason(&self) -> &'static str {
        match self {
            WatchError::Read(ReadError::Expired { .. }) => "Expired",
            WatchError::Read(ReadError::TooLarge { .. }) => "TooLargeResourceVersion",
            WatchError::Read(ReadError::NotSynced) => "NotSynced",
            WatchError::ShuttingDown { .. } => "ShuttingDown",
            WatchError::Lagged { .. } => "SubscriberLagged",
        }
    }
}

/// The stream a subscriber receives (see the module docs). It ends with
/// [`WatchError::ShuttingDown`] once `stop` fires, so that a server's
/// graceful shutdown is not held up by watches that never end.
pub fn watch(
    store: Arc<Store>,
    spec: WatchSpec,
    limits: Limits,
    stop: CancellationToken,
) -> impl Stream<Item = Result<Delivery, WatchError>> {
    async_stream::try_stream! {
        // Pinned once: a subscriber wakes for every event, and creating a
        // timer or a cancellation future per wake-up showed in profiles.
        let cancelled = stop.cancelled();
        tokio::pin!(cancelled);
        let mut head = store.subscribe();
        let shutting_down = |last_delivered| WatchError::ShuttingDown { last_delivered };
        let synced = tokio::select! {
            synced = wait_for(&mut head, |h| h.synced, None) => {
                synced.map_err(|_| WatchError::from(ReadError::NotSynced))
            }
            () = &mut cancelled => Err(shutting_down(ResourceVersion::default())),
        };
        synced?;
        // A resume point or minimum freshness the store has not reached
        // yet: wait for it, bounded.
        if let Start::At(rv) = spec.start {
            wait_for(&mut head, |h| h.resource_version >= rv, Some(limits.freshness_timeout))
                .await
                .map_err(|current| ReadError::TooLarge { asked: rv, current })?;
        }
        let (mut cursor, mut last) = match spec.start {
            Start::At(rv) if !spec.send_initial_events => (store.cursor_after(rv)?, rv),
            _ => {
                let snapshot = store.snapshot();
                for object in snapshot.objects.iter().filter(|o| spec.filter.matches(o)) {
                    yield Delivery {
                        kind: EventKind::Added,
                        resource_version: snapshot.resource_version,
                        object: object.json.clone(),
                        unchanged: None,
                    };
                }
                if spec.send_initial_events {
                    yield bookmark(&store, snapshot.resource_version, true);
                }
                (snapshot.seq, snapshot.resource_version)
            }
        };
        // The RV of the last ring event read, delivered or filtered out:
        // what a progress bookmark may promise.
        let mut read_rv = last;
        let mut last_sent = Instant::now();
        // Re-armed lazily: when it fires early, it is moved to the real
        // deadline, so sending an event costs no timer operation.
        let progress = tokio::time::sleep_until(last_sent + limits.progress_interval);
        tokio::pin!(progress);
        loop {
            if stop.is_cancelled() {
                Err(shutting_down(last))?;
            }
            let now = *head.borrow_and_update();
            let events = store
                .read_after(cursor, BATCH)
                .ok()
                .filter(|events| !lagging(&now, cursor, events.first(), &limits))
                .ok_or(WatchError::Lagged { last_delivered: last })?;
            if events.is_empty() {
                let wake = tokio::select! {
                    changed = head.changed() => Wake::Changed { store_gone: changed.is_err() },
                    () = &mut cancelled => Wake::Stop,
                    () = &mut progress => Wake::Progress,
                };
                match wake {
                    Wake::Changed { store_gone: true } => break,
                    Wake::Changed { store_gone: false } => {}
                    Wake::Stop => Err(shutting_down(last))?,
                    Wake::Progress => {
                        if Instant::now() >= last_sent + limits.progress_interval {
                            if spec.allow_bookmarks && read_rv > last {
                                last = read_rv;
                                yield bookmark(&store, read_rv, false);
                            }
                            last_sent = Instant::now();
                        }
                        progress.as_mut().reset(last_sent + limits.progress_interval);
                    }
                }
                continue;
            }
            for event in events {
                cursor = event.seq;
                read_rv = event.resource_version;
                if let Some(delivery) = deliver(&store, &spec, &event) {
                    last = delivery.resource_version;
                    last_sent = Instant::now();
                    yield delivery;
                }
            }
        }
    }
}

/// What woke an idle subscriber.
enum Wake {
    /// The store's head moved, or the store is gone.
    Changed { store_gone: bool },
    /// The server is shutting down.
    Stop,
    /// The progress-bookmark timer fired (perhaps early; see its re-arming).
    Progress,
}

/// Whether a subscriber at ring position `cursor`, whose next unread event
/// is `next`, is further behind `head` than `limits` allow.
fn lagging(head: &Head, cursor: u64, next: Option<&Arc<Event>>, limits: &Limits) -> bool {
    let bytes_behind = next.map_or(0, |e| head.bytes - e.bytes_before());
    head.seq - cursor > limits.max_lag_events || bytes_behind > limits.max_lag_bytes
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

/// What `event` becomes for this subscriber: filter transitions turn into
/// ADDED or DELETED, events it cannot see into nothing.
fn deliver(store: &Store, spec: &WatchSpec, event: &Arc<Event>) -> Option<Delivery> {
    let rv = event.resource_version;
    let Some(object) = &event.object else {
        // The same bookmark for every subscriber, so it is shared too.
        return spec.allow_bookmarks.then(|| Delivery {
            unchanged: Some(Unchanged(event.clone())),
            ..bookmark(store, rv, false)
        });
    };
    let before = event.previous.as_deref().map(|p| spec.filter.matches(p));
    let (kind, shown): (EventKind, &Object) = if event.kind == EventKind::Deleted {
        // The subscriber holds the object iff its last state before the
        // deletion matched (or, unknown to the store, its final state does).
        if !before.unwrap_or_else(|| spec.filter.matches(object)) {
            return None;
        }
        (EventKind::Deleted, object)
    } else {
        match (before.unwrap_or(false), spec.filter.matches(object)) {
            (false, false) => return None,
            (false, true) => (EventKind::Added, object),
            (true, false) => (EventKind::Deleted, event.previous.as_deref()?),
            (true, true) => (event.kind, object),
        }
    };
    let unchanged =
        (kind == event.kind && std::ptr::eq(shown, &**object)).then(|| Unchanged(event.clone()));
    Some(Delivery {
        kind,
        resource_version: rv,
        object: shown.json.clone(),
        unchanged,
    })
}

/// A bookmark object of the store's kind at `rv`, as the API server sends
/// one: apiVersion, kind and metadata.resourceVersion only.
fn bookmark(store: &Store, rv: ResourceVersion, initial_events_end: bool) -> Delivery {
    let resource = store.resource();
    let mut metadata = serde_json::json!({ "resourceVersion": rv.to_string() });
    if initial_events_end {
        metadata["annotations"] = serde_json::json!({ INITIAL_EVENTS_END: "true" });
    }
    let object = serde_json::json!({
        "apiVersion": resource.gvr.api_version(),
        "kind": resource.kind,
        "metadata": metadata,
    });
    Delivery {
        kind: EventKind::Bookmark,
        resource_version: rv,
        object: object.to_string().into(),
        unchanged: None,
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;
    use crate::store::tests::{configmaps, object};

    fn spec(label_selector: &str, start: Start, send_initial_events: bool) -> WatchSpec {
        WatchSpec {
            filter: Filter::new("", label_selector, "").unwrap(),
            start,
            send_initial_events,
            allow_bookmarks: true,
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
            CancellationToken::new(),
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

    #[tokio::test(start_paused = true)]
    async fn the_end_bookmark_carries_the_annotation_and_the_snapshot_rv() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 3, "{}")], ResourceVersion(4));
        let mut stream = Box::pin(watch(
            store,
            spec("", Start::Latest, true),
            Limits::default(),
            CancellationToken::new(),
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
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(Vec::new(), ResourceVersion(1));
        for rv in 2..=6 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("", Start::At(ResourceVersion(4)), false),
            Limits::default(),
            CancellationToken::new(),
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
            CancellationToken::new(),
        ));
        store.apply(EventKind::Added, object("o2", 2, "{}"));
        assert_eq!(ready(&mut stream).await, [Ok((EventKind::Added, 2))]);
        for rv in 3..=10 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        assert_eq!(
            ready(&mut stream).await,
            [Err(WatchError::Lagged {
                last_delivered: ResourceVersion(2)
            })]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_filtered_subscriber_gets_progress_bookmarks_that_keep_its_rv_fresh() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(Vec::new(), ResourceVersion(1));
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("app=mine", Start::At(ResourceVersion(1)), false),
            Limits::default(),
            CancellationToken::new(),
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
        assert_eq!(first, Some(Ok(bookmark(&store, ResourceVersion(3), false))));
        // Nothing new was read: no bookmark that says nothing.
        store.apply(EventKind::Added, object("mine", 4, r#"{"app":"mine"}"#));
        assert_eq!(ready(&mut stream).await, [Ok((EventKind::Added, 4))]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscriber_too_many_bytes_behind_is_cut_off_with_its_resume_point() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(Vec::new(), ResourceVersion(1));
        let size = object("o2", 2, "{}").json.len() as u64;
        let limits = Limits {
            max_lag_bytes: 3 * size,
            ..Limits::default()
        };
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("", Start::At(ResourceVersion(1)), false),
            limits,
            CancellationToken::new(),
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
                last_delivered: ResourceVersion(4)
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
            CancellationToken::new(),
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
            CancellationToken::new(),
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

    #[tokio::test(start_paused = true)]
    async fn watches_end_when_the_server_stops() {
        let store = Arc::new(Store::new(configmaps(), 4));
        store.replace(vec![object("a", 3, "{}")], ResourceVersion(3));
        let stop = CancellationToken::new();
        let mut stream = Box::pin(watch(
            store,
            spec("", Start::Latest, true),
            Limits::default(),
            stop.clone(),
        ));
        assert_eq!(ready(&mut stream).await.len(), 2);
        stop.cancel();
        assert_eq!(
            stream.next().await,
            Some(Err(WatchError::ShuttingDown {
                last_delivered: ResourceVersion(3)
            }))
        );
        assert_eq!(stream.next().await, None);
    }
}

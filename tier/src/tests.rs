//! The feed against a scripted parent, under paused time: which watches
//! it asks for, and what reaches the store, when the parent breaks a unit,
//! retires the connection, or no longer holds the store's RV.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use kube_fanout_client::{
    ClientError,
    proto::{EventType, WatchEvent, WatchRequest},
    watcher::{EventStream, INITIAL_EVENTS_END, Source},
};
use kube_fanout_core::{
    event::EventKind,
    fixtures::configmaps,
    object::{ResourceVersion, Transform},
    store::{Gap, Store},
};
use kube_fanout_proto::{CONNECTION_RETIRED, ERROR_DOMAIN, SUBSCRIBER_LAGGED};
use tokio::time::Instant;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::{Feed, State};

/// One watch's answer: refused, or these events and then an error (or,
/// with `None`, open and silent).
type Session = Result<(Vec<WatchEvent>, Option<Status>), Status>;

/// A parent answering each watch with the next session, recording what
/// was asked, when, and each move to another server.
#[derive(Clone, Default)]
struct Script {
    sessions: Arc<Mutex<VecDeque<Session>>>,
    asked: Arc<Mutex<Vec<(Instant, String, bool)>>>,
    moves: Arc<Mutex<Vec<&'static str>>>,
    /// Whether every watch asked for head bookmarks.
    head_bookmarks: Arc<Mutex<bool>>,
}

impl Source for Script {
    async fn open(&mut self, request: WatchRequest) -> Result<EventStream, Status> {
        let asked = (
            Instant::now(),
            request.resource_version,
            request.send_initial_events,
        );
        self.asked.lock().unwrap().push(asked);
        let mut heads = self.head_bookmarks.lock().unwrap();
        *heads = request.head_bookmarks && (*heads || self.asked.lock().unwrap().len() == 1);
        let Some(session) = self.sessions.lock().unwrap().pop_front() else {
            return Ok(futures::stream::pending().boxed());
        };
        let (events, end) = session?;
        let events = futures::stream::iter(events.into_iter().map(Ok));
        Ok(match end {
            Some(status) => events.chain(futures::stream::iter([Err(status)])).boxed(),
            None => events.chain(futures::stream::pending()).boxed(),
        })
    }

    async fn reconnect(&mut self) -> Result<(), ClientError> {
        self.moves.lock().unwrap().push("next");
        Ok(())
    }

    async fn renew(&mut self) -> Result<(), ClientError> {
        self.moves.lock().unwrap().push("renew");
        Ok(())
    }

    fn address(&self) -> String {
        "script".into()
    }
}

fn event(kind: EventType, name: &str, rv: u64, resync: bool) -> WatchEvent {
    let object = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string()},
    });
    WatchEvent {
        r#type: kind.into(),
        resource_version: rv.to_string(),
        object: object.to_string(),
        resync,
        head_resource_version: String::new(),
    }
}

fn bookmark(rv: u64, annotations: serde_json::Value, resync: bool) -> WatchEvent {
    let object = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"resourceVersion": rv.to_string(), "annotations": annotations},
    });
    WatchEvent {
        r#type: EventType::Bookmark.into(),
        resource_version: rv.to_string(),
        object: object.to_string(),
        resync,
        head_resource_version: String::new(),
    }
}

/// A snapshot of `names` at `rv`, each object at its own RV from 2 on.
fn snapshot(names: &[&str], rv: u64) -> Vec<WatchEvent> {
    let mut events: Vec<_> = (2..)
        .zip(names)
        .map(|(at, name)| event(EventType::Added, name, at, false))
        .collect();
    events.push(bookmark(
        rv,
        serde_json::json!({INITIAL_EVENTS_END: "true"}),
        false,
    ));
    events
}

fn closing(rv: u64) -> WatchEvent {
    bookmark(rv, serde_json::json!({}), true)
}

/// Steps the feed from `state` until `done` holds of the store, failing
/// after 100 steps or on a step that never ends; returns where it got to.
async fn step_until(
    feed: &mut Feed<Script>,
    mut state: State,
    store: &Store,
    done: impl Fn(&Store) -> bool,
) -> State {
    for _ in 0..100 {
        if done(store) {
            return state;
        }
        // Paused time: a step waiting on a silent watch fails at once.
        state = tokio::time::timeout(Duration::from_secs(600), feed.step(state))
            .await
            .unwrap_or_else(|_| panic!("stuck on a silent watch, {:?}", store.status()));
    }
    panic!("the store never got there: {state:?}, {:?}", store.status());
}

/// (name, RV) of the store's objects.
fn contents(store: &Store) -> Vec<(String, u64)> {
    store
        .snapshot()
        .objects
        .iter()
        .map(|o| (o.name.clone(), o.resource_version.0))
        .collect()
}

fn feed(sessions: Vec<Session>) -> (Feed<Script>, Arc<Store>, Script) {
    let script = Script {
        sessions: Arc::new(Mutex::new(sessions.into())),
        ..Script::default()
    };
    let store = Arc::new(Store::new(configmaps(), 100));
    let feed = Feed::new(script.clone(), store.clone(), Transform::default());
    (feed, store, script)
}

/// What was asked: (resourceVersion, send_initial_events) per watch.
fn asked(script: &Script) -> Vec<(String, bool)> {
    let asked = script.asked.lock().unwrap();
    asked.iter().map(|(_, rv, s)| (rv.clone(), *s)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_unit_broken_by_another_event_is_dropped_and_asked_for_again_whole() {
    let mut first = snapshot(&["a", "b"], 3);
    first.extend([
        event(EventType::Modified, "a", 4, false),
        event(EventType::Deleted, "a", 9, true),
        // Not part of the unit: applying it would mix the two.
        event(EventType::Modified, "b", 10, false),
    ]);
    let again = vec![
        event(EventType::Deleted, "a", 9, true),
        event(EventType::Added, "c", 9, true),
        closing(9),
    ];
    let (mut feed, store, script) = feed(vec![Ok((first, None)), Ok((again, None))]);
    let at_4 = step_until(&mut feed, State::Snapshot, &store, |s| {
        s.head().resource_version.0 == 4
    })
    .await;
    let before = store.head();
    step_until(&mut feed, at_4, &store, |s| {
        s.head().resource_version.0 == 9
    })
    .await;
    assert_eq!(asked(&script), [("".into(), true), ("4".into(), false)]);
    assert_eq!(*script.moves.lock().unwrap(), ["next"], "after a backoff");
    let events = store.read_after(before.seq, 10).unwrap();
    let seen: Vec<_> = events
        .iter()
        .map(|e| (e.kind, e.resource_version.0, e.resync))
        .collect();
    assert_eq!(
        seen,
        [
            (EventKind::Deleted, 9, true),
            (EventKind::Added, 9, true),
            (EventKind::Bookmark, 9, true),
        ],
        "the unit whole, nothing of the broken one"
    );
    assert_eq!(contents(&store), [("b".into(), 3), ("c".into(), 9)]);
    assert_eq!(
        store.status().gaps,
        [Gap {
            after: ResourceVersion(4),
            until: ResourceVersion(9)
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn a_retired_connection_is_resumed_at_once_on_a_new_one() {
    let retired = Status::with_error_details(
        Code::Unavailable,
        "connection retired",
        ErrorDetails::with_error_info(CONNECTION_RETIRED, ERROR_DOMAIN, []),
    );
    let after = vec![event(EventType::Added, "c", 5, false)];
    let (mut feed, store, script) = feed(vec![
        Ok((snapshot(&["a"], 3), Some(retired))),
        Ok((after, None)),
    ]);
    step_until(&mut feed, State::Snapshot, &store, |s| {
        s.head().resource_version.0 == 5
    })
    .await;
    assert_eq!(asked(&script), [("".into(), true), ("3".into(), false)]);
    assert_eq!(*script.moves.lock().unwrap(), ["renew"]);
    let asked = script.asked.lock().unwrap();
    assert_eq!(asked[1].0 - asked[0].0, Duration::ZERO, "no backoff");
}

/// A leaf the parent cut off for lag resumes at once from where its store
/// is, on the same parent and connection: a pause would only put it
/// further behind.
#[tokio::test(start_paused = true)]
async fn a_lag_cut_off_is_resumed_at_once_on_the_same_parent() {
    let lagged = Status::with_error_details(
        Code::ResourceExhausted,
        "subscriber fell behind the event history; resume from resourceVersion 4",
        ErrorDetails::with_error_info(SUBSCRIBER_LAGGED, ERROR_DOMAIN, []),
    );
    let live = vec![event(EventType::Added, "b", 4, false)];
    let after = vec![event(EventType::Added, "c", 5, false)];
    let (mut feed, store, script) = feed(vec![
        Ok((
            snapshot(&["a"], 3).into_iter().chain(live).collect(),
            Some(lagged),
        )),
        Ok((after, None)),
    ]);
    step_until(&mut feed, State::Snapshot, &store, |s| {
        s.head().resource_version.0 == 5
    })
    .await;
    assert_eq!(asked(&script), [("".into(), true), ("4".into(), false)]);
    assert!(script.moves.lock().unwrap().is_empty(), "the same parent");
    let asked = script.asked.lock().unwrap();
    assert_eq!(asked[1].0 - asked[0].0, Duration::ZERO, "no backoff");
}

#[tokio::test(start_paused = true)]
async fn a_parent_without_the_stores_rv_gives_a_new_snapshot_whose_difference_is_a_unit() {
    let ended = Status::unavailable("the parent is stopping");
    let expired = Status::out_of_range("resourceVersion 3 is too old");
    let (mut feed, store, script) = feed(vec![
        Ok((snapshot(&["a", "b"], 3), Some(ended))),
        Err(expired),
        Ok((snapshot(&["c", "b"], 7), None)),
    ]);
    step_until(&mut feed, State::Snapshot, &store, |s| {
        s.head().resource_version.0 == 7
    })
    .await;
    assert_eq!(
        asked(&script),
        [("".into(), true), ("3".into(), false), ("".into(), true)],
        "resumed where it was, then a new snapshot at once"
    );
    assert_eq!(
        *script.moves.lock().unwrap(),
        ["next"],
        "one backoff, for the end"
    );
    // The new snapshot has c at 2 and b at 3, as before: c is added and a
    // deleted, as one unit at 7 over the gap from 3; b is left alone.
    let events = store.read_after(0, 10).unwrap();
    let seen: Vec<_> = events
        .iter()
        .map(|e| (e.kind, e.object.as_ref().map(|o| o.name.clone()), e.resync))
        .collect();
    assert_eq!(
        seen,
        [
            (EventKind::Deleted, Some("a".into()), true),
            (EventKind::Added, Some("c".into()), true),
            (EventKind::Bookmark, None, true),
        ]
    );
    assert_eq!(
        store.status().gaps,
        [Gap {
            after: ResourceVersion(3),
            until: ResourceVersion(7)
        }]
    );
}

/// The parent's head bookmarks say how far behind the leaf's store is:
/// a bookmark naming a head ahead of the store is a look it has not
/// reached, aged from its arrival, until the store passes it.
#[tokio::test(start_paused = true)]
async fn the_parents_head_bookmarks_say_how_far_behind_the_store_is() {
    let mut ahead = bookmark(3, serde_json::json!({}), false);
    ahead.head_resource_version = "9".into();
    let (mut feed, store, script) = feed(vec![Ok((
        snapshot(&["a"], 3)
            .into_iter()
            .chain([ahead, event(EventType::Added, "b", 9, false)])
            .collect(),
        None,
    ))]);
    let status = feed.status();
    let mut at_3 = step_until(&mut feed, State::Snapshot, &store, |s| s.head().synced).await;
    while status.lock().parent_heads.newest().is_none() {
        at_3 = feed.step(at_3).await;
    }
    assert_eq!(
        status.lock().parent_heads.newest(),
        Some(ResourceVersion(9))
    );
    tokio::time::advance(Duration::from_secs(4)).await;
    let behind = |store: &Store| {
        status
            .lock()
            .parent_heads
            .behind(Instant::now(), store.head().resource_version)
    };
    assert_eq!(behind(&store), Some(Duration::from_secs(4)));
    step_until(&mut feed, at_3, &store, |s| {
        s.head().resource_version.0 == 9
    })
    .await;
    assert_eq!(behind(&store), Some(Duration::ZERO));
    assert!(
        *script.head_bookmarks.lock().unwrap(),
        "the watch did not ask for head bookmarks"
    );
}

//! The watch loop against scripted servers, under paused time so the
//! backoff delays are measured, not waited for.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::api::core::v1::ConfigMap;
use kube_fanout_proto::CONNECTION_RETIRED;
use kube_runtime::reflector::store::Writer;
use tokio::time::Instant;
use tonic::{Code, Status};

use super::{
    source::{EventStream, Source},
    *,
};
use crate::{
    error::ClientError,
    proto::{EventType, ResourceRef, WatchEvent},
};

/// One `Watch` call's answer.
enum Session {
    Refuse(Status),
    Stream(Vec<Step>),
}

enum Step {
    Send(WatchEvent),
    Sleep(Duration),
    Fail(Status),
}

/// A server that answers each watch with the next scripted session and
/// records what was asked when; once the script is done, watches stay open
/// and silent.
#[derive(Clone)]
struct Script {
    sessions: Arc<Mutex<VecDeque<Session>>>,
    opened: Arc<Mutex<Vec<(Instant, WatchRequest)>>>,
    reconnects: Arc<Mutex<usize>>,
    /// New connections to the same server (after a retirement).
    renewals: Arc<Mutex<usize>>,
}

impl Script {
    fn new(sessions: Vec<Session>) -> Self {
        Script {
            sessions: Arc::new(Mutex::new(sessions.into())),
            opened: Arc::default(),
            reconnects: Arc::default(),
            renewals: Arc::default(),
        }
    }

    /// (resource_version, send_initial_events) of each watch opened.
    fn requests(&self) -> Vec<(String, bool)> {
        let opened = self.opened.lock().unwrap();
        opened
            .iter()
            .map(|(_, r)| (r.resource_version.clone(), r.send_initial_events))
            .collect()
    }

    /// The time between consecutive watch attempts.
    fn gaps(&self) -> Vec<Duration> {
        let opened = self.opened.lock().unwrap();
        opened.windows(2).map(|w| w[1].0 - w[0].0).collect()
    }
}

impl Source for Script {
    async fn open(&mut self, request: WatchRequest) -> Result<EventStream, Status> {
        self.opened.lock().unwrap().push((Instant::now(), request));
        match self.sessions.lock().unwrap().pop_front() {
            None => Ok(futures::stream::pending().boxed()),
            Some(Session::Refuse(status)) => Err(status),
            Some(Session::Stream(steps)) => Ok(async_stream::stream! {
                for step in steps {
                    match step {
                        Step::Send(event) => yield Ok(event),
                        Step::Sleep(d) => tokio::time::sleep(d).await,
                        Step::Fail(status) => {
                            yield Err(status);
                            return;
                        }
                    }
                }
            }
            .boxed()),
        }
    }

    async fn reconnect(&mut self) -> Result<(), ClientError> {
        *self.reconnects.lock().unwrap() += 1;
        Ok(())
    }

    async fn renew(&mut self) -> Result<(), ClientError> {
        *self.renewals.lock().unwrap() += 1;
        Ok(())
    }

    fn address(&self) -> String {
        "script".into()
    }
}

fn event(kind: EventType, name: &str, rv: u64) -> Step {
    let object = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string()},
    });
    Step::Send(WatchEvent {
        r#type: kind.into(),
        resource_version: rv.to_string(),
        object: object.to_string(),
        ..Default::default()
    })
}

fn added(name: &str, rv: u64) -> Step {
    event(EventType::Added, name, rv)
}

fn modified(name: &str, rv: u64) -> Step {
    event(EventType::Modified, name, rv)
}

fn deleted(name: &str, rv: u64) -> Step {
    event(EventType::Deleted, name, rv)
}

fn bookmark(rv: u64, end_of_snapshot: bool) -> Step {
    let annotations = if end_of_snapshot {
        serde_json::json!({INITIAL_EVENTS_END: "true"})
    } else {
        serde_json::json!({})
    };
    let object = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"resourceVersion": rv.to_string(), "annotations": annotations},
    });
    Step::Send(WatchEvent {
        r#type: EventType::Bookmark.into(),
        resource_version: rv.to_string(),
        object: object.to_string(),
        ..Default::default()
    })
}

fn lagged() -> Status {
    Status::resource_exhausted("subscriber lagged")
}

/// The status a server ends a watch with when it retires the connection.
fn retired(rv: u64) -> Status {
    <Status as tonic_types::StatusExt>::with_error_details(
        Code::Unavailable,
        "connection retired after its maximum age",
        tonic_types::ErrorDetails::with_error_info(
            CONNECTION_RETIRED,
            "kube-fanout.io",
            [("resourceVersion".to_owned(), rv.to_string())],
        ),
    )
}

/// Whether `gap` is a first (`n` = 0), second, ... backoff delay of
/// kube-runtime's default: 0.8 s doubling, plus up to as much jitter.
fn is_backoff(gap: Duration, n: u32) -> bool {
    let base = Duration::from_millis(800) * 2u32.pow(n);
    (base..base * 2).contains(&gap)
}

/// A readable form of what the caller saw.
fn show(event: &Result<Event<ConfigMap>, WatchError>) -> String {
    let name_rv = |cm: &ConfigMap| {
        format!(
            "{}@{}",
            cm.metadata.name.as_deref().unwrap_or("?"),
            cm.metadata.resource_version.as_deref().unwrap_or("?")
        )
    };
    match event {
        Ok(Event::Init) => "Init".into(),
        Ok(Event::InitApply(cm)) => format!("InitApply {}", name_rv(cm)),
        Ok(Event::InitDone) => "InitDone".into(),
        Ok(Event::Apply(cm)) => format!("Apply {}", name_rv(cm)),
        Ok(Event::Delete(cm)) => format!("Delete {}", name_rv(cm)),
        Err(err) => format!("Err {err}"),
    }
}

fn request() -> WatchRequest {
    WatchRequest {
        resource: Some(ResourceRef {
            group: String::new(),
            version: "v1".into(),
            resource: "configmaps".into(),
        }),
        allow_bookmarks: true,
        ..WatchRequest::default()
    }
}

/// The watch against `script`, as [`watch`] yields it.
fn events(script: &Script) -> impl Stream<Item = Result<Event<ConfigMap>, WatchError>> {
    run::<ConfigMap, _>(script.clone(), request(), state::State::Empty)
        .map(|r| r.map(|change| change.event))
}

/// The first `n` items the watch yields against `script`. Fails, instead
/// of hanging, when it yields fewer: paused time jumps to the deadline once
/// the watch waits on nothing but a silent stream.
async fn first(script: &Script, n: usize) -> Vec<Result<Event<ConfigMap>, WatchError>> {
    let mut got = Vec::new();
    let mut watch = std::pin::pin!(events(script));
    while got.len() < n {
        match tokio::time::timeout(Duration::from_secs(3600), watch.next()).await {
            Ok(Some(item)) => got.push(item),
            _ => panic!(
                "the watch yielded {} items, not {n}: {:?}",
                got.len(),
                got.iter().map(show).collect::<Vec<_>>()
            ),
        }
    }
    got
}

/// `changes` after a `since`: no snapshot, each change with the server's
/// type and resourceVersion, resumed after the last one; a resume point
/// the server no longer holds starts a snapshot, announced by `Init`.
#[tokio::test(start_paused = true)]
async fn changes_after_since_carry_the_servers_types_and_an_expired_point_takes_a_snapshot() {
    let script = Script::new(vec![
        Session::Stream(vec![
            added("b", 6),
            modified("b", 7),
            deleted("b", 8),
            Step::Fail(Status::unavailable("shutting down")),
        ]),
        Session::Refuse(Status::out_of_range("too old")),
        Session::Stream(vec![added("c", 9), bookmark(9, true)]),
    ]);
    let since = state::State::Resume(state::ResumePoint::after("5".into()));
    let seen: Vec<String> = run::<ConfigMap, _>(script.clone(), request(), since)
        .take(6)
        .map(|change| {
            let change = change.expect("no error");
            format!(
                "{} {} {}",
                change.kind.as_str_name(),
                change.resource_version,
                show(&Ok(change.event))
            )
        })
        .collect()
        .await;
    assert_eq!(
        seen,
        [
            "ADDED 6 Apply b@6",
            "MODIFIED 7 Apply b@7",
            "DELETED 8 Delete b@8",
            "BOOKMARK  Init",
            "ADDED 9 InitApply c@9",
            "BOOKMARK 9 InitDone",
        ]
    );
    assert_eq!(
        script.requests(),
        [
            ("5".into(), false),
            ("8".into(), false),
            (String::new(), true)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_snapshot_is_signalled_like_kube_runtime_then_changes_follow() {
    let script = Script::new(vec![Session::Stream(vec![
        added("a", 3),
        added("b", 4),
        bookmark(5, true),
        modified("a", 6),
        bookmark(7, false),
        deleted("b", 8),
    ])]);
    let seen: Vec<String> = first(&script, 6).await.iter().map(show).collect();
    assert_eq!(
        seen,
        [
            "Init",
            "InitApply a@3",
            "InitApply b@4",
            "InitDone",
            "Apply a@6",
            "Delete b@8"
        ]
    );
    assert_eq!(script.requests(), [(String::new(), true)]);
}

#[tokio::test(start_paused = true)]
async fn a_broken_stream_resumes_after_the_last_rv_seen_even_a_bookmark() {
    let script = Script::new(vec![
        Session::Stream(vec![
            added("a", 3),
            bookmark(5, true),
            modified("a", 6),
            bookmark(9, false),
            Step::Fail(Status::unavailable("shutting down")),
        ]),
        Session::Stream(vec![modified("a", 10), Step::Fail(lagged())]),
        Session::Stream(vec![deleted("a", 11)]),
    ]);
    let seen: Vec<String> = first(&script, 6).await.iter().map(show).collect();
    assert_eq!(
        seen,
        [
            "Init",
            "InitApply a@3",
            "InitDone",
            "Apply a@6",
            "Apply a@10",
            "Delete a@11"
        ],
        "no gap, no duplicate, no new snapshot"
    );
    assert_eq!(
        script.requests(),
        [
            (String::new(), true),
            ("9".into(), false),
            ("10".into(), false)
        ]
    );
    let gaps = script.gaps();
    assert!(
        (Duration::from_millis(800)..Duration::from_millis(1600)).contains(&gaps[0]),
        "first retry after 0.8 s plus jitter: {gaps:?}"
    );
    assert!(
        (Duration::from_millis(1600)..Duration::from_millis(3200)).contains(&gaps[1]),
        "second after 1.6 s plus jitter: {gaps:?}"
    );
    assert_eq!(*script.reconnects.lock().unwrap(), 2);
}

/// A watch whose connection the server retired resumes at once, on the
/// same server over a new connection (on the retired one hyper's client
/// would drop the first call unsent), from its last resourceVersion: no
/// backoff, no failover.
#[tokio::test(start_paused = true)]
async fn a_retired_connection_resumes_at_once_on_the_same_server() {
    let script = Script::new(vec![
        Session::Stream(vec![
            added("a", 3),
            bookmark(5, true),
            modified("a", 6),
            Step::Fail(retired(6)),
        ]),
        Session::Stream(vec![modified("a", 7)]),
    ]);
    let seen: Vec<String> = first(&script, 5).await.iter().map(show).collect();
    assert_eq!(
        seen,
        [
            "Init",
            "InitApply a@3",
            "InitDone",
            "Apply a@6",
            "Apply a@7"
        ]
    );
    assert_eq!(
        script.requests(),
        [(String::new(), true), ("6".into(), false)]
    );
    assert_eq!(script.gaps(), [Duration::ZERO], "no backoff");
    assert_eq!(*script.reconnects.lock().unwrap(), 0, "no failover");
    assert_eq!(
        *script.renewals.lock().unwrap(),
        1,
        "a new connection to the same server, not the retired one"
    );
}

#[tokio::test(start_paused = true)]
async fn backoff_doubles_to_30s_and_starts_over_after_two_healthy_minutes() {
    let mut sessions: Vec<Session> = (0..8)
        .map(|_| Session::Refuse(Status::unavailable("connection refused")))
        .collect();
    sessions.push(Session::Stream(vec![
        bookmark(5, true),
        Step::Sleep(Duration::from_secs(180)),
        Step::Fail(Status::unavailable("gone")),
    ]));
    let script = Script::new(sessions);
    // Init, InitDone of the healthy session, then wait for the next attempt.
    let mut watch = std::pin::pin!(events(&script));
    assert_eq!(show(&watch.next().await.unwrap()), "Init");
    assert_eq!(show(&watch.next().await.unwrap()), "InitDone");
    tokio::time::timeout(Duration::from_secs(200), watch.next())
        .await
        .expect_err("the script's last watch stays silent");

    let gaps = script.gaps();
    assert_eq!(gaps.len(), 9, "{gaps:?}");
    for (gap, base) in gaps
        .iter()
        .zip([0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0])
    {
        let base = Duration::from_secs_f64(base);
        assert!(
            *gap >= base && *gap < base * 2,
            "{gap:?} outside [{base:?}, {:?}): {gaps:?}",
            base * 2
        );
    }
    let after_healthy = gaps[8] - Duration::from_secs(180);
    assert!(
        after_healthy < Duration::from_millis(1600),
        "back to 0.8 s after a healthy spell: {after_healthy:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn expired_takes_a_new_snapshot_and_a_reflector_store_follows_it() {
    let script = Script::new(vec![
        Session::Stream(vec![
            added("a", 3),
            added("b", 4),
            bookmark(5, true),
            modified("a", 6),
            Step::Fail(lagged()),
        ]),
        Session::Refuse(Status::out_of_range("resourceVersion 6 is too old")),
        Session::Stream(vec![added("a", 20), added("c", 21), bookmark(30, true)]),
    ]);
    let events = first(&script, 9).await;
    let seen: Vec<String> = events.iter().map(show).collect();
    assert_eq!(
        seen,
        [
            "Init",
            "InitApply a@3",
            "InitApply b@4",
            "InitDone",
            "Apply a@6",
            "Init",
            "InitApply a@20",
            "InitApply c@21",
            "InitDone"
        ][..],
        "{seen:?}"
    );
    assert_eq!(
        script.requests(),
        [
            (String::new(), true),
            ("6".into(), false),
            (String::new(), true)
        ]
    );
    assert_eq!(
        script.gaps()[1],
        Duration::ZERO,
        "no backoff before a new snapshot"
    );

    let mut writer = Writer::<ConfigMap>::default();
    for event in events.iter().flatten() {
        writer.apply_watcher_event(event);
    }
    let mut names: Vec<String> = writer
        .as_reader()
        .state()
        .iter()
        .map(|cm| cm.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["a", "c"],
        "b vanished during the gap: the new snapshot drops it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_break_inside_the_snapshot_starts_it_over() {
    let script = Script::new(vec![
        Session::Stream(vec![added("a", 3), Step::Fail(Status::unavailable("gone"))]),
        Session::Stream(vec![added("a", 3), added("b", 4), bookmark(5, true)]),
    ]);
    let seen: Vec<String> = first(&script, 6).await.iter().map(show).collect();
    assert_eq!(
        seen,
        [
            "Init",
            "InitApply a@3",
            "Init",
            "InitApply a@3",
            "InitApply b@4",
            "InitDone"
        ]
    );
    assert_eq!(
        script.requests(),
        [(String::new(), true), (String::new(), true)]
    );
}

#[tokio::test(start_paused = true)]
async fn refusals_reach_the_caller_and_are_retried_with_backoff() {
    let script = Script::new(vec![
        Session::Refuse(Status::not_found("resource v1/nope is not served here")),
        Session::Stream(vec![bookmark(5, true)]),
    ]);
    let seen = first(&script, 3).await;
    assert!(
        matches!(&seen[0], Err(WatchError::Refused(s)) if s.code() == Code::NotFound),
        "{:?}",
        seen[0]
    );
    assert_eq!(
        seen[1..].iter().map(show).collect::<Vec<_>>(),
        ["Init", "InitDone"]
    );
    assert!(script.gaps()[0] >= Duration::from_millis(800));
}

#[tokio::test(start_paused = true)]
async fn an_undecodable_object_is_reported_and_skipped() {
    let script = Script::new(vec![Session::Stream(vec![
        bookmark(5, true),
        Step::Send(WatchEvent {
            r#type: EventType::Added.into(),
            resource_version: "6".into(),
            object: "{\"data\": 42}".into(),
            ..Default::default()
        }),
        added("a", 7),
    ])]);
    let seen = first(&script, 4).await;
    assert!(
        matches!(seen[2], Err(WatchError::Decode(_))),
        "{:?}",
        seen[2]
    );
    assert_eq!(show(&seen[3]), "Apply a@7");
}

fn resync(kind: EventType, name: &str, rv: u64) -> Step {
    let Step::Send(mut event) = event(kind, name, rv) else {
        unreachable!("event() sends")
    };
    event.resync = true;
    Step::Send(event)
}

/// The bookmark that closes a re-sync unit at `rv`.
fn resync_end(rv: u64) -> Step {
    let Step::Send(mut event) = bookmark(rv, false) else {
        unreachable!("bookmark() sends")
    };
    event.resync = true;
    Step::Send(event)
}

/// A store's contents, as sorted `name@rv`s.
fn state(writer: &Writer<ConfigMap>) -> Vec<String> {
    let mut names: Vec<String> = writer
        .as_reader()
        .state()
        .iter()
        .map(|cm| {
            format!(
                "{}@{}",
                cm.metadata.name.as_deref().unwrap_or("?"),
                cm.metadata.resource_version.as_deref().unwrap_or("?")
            )
        })
        .collect();
    names.sort();
    names
}

/// Feeds `events` to a kube-runtime reflector store and returns every
/// distinct state a reader could observe, in order.
fn observed_states(events: &[Result<Event<ConfigMap>, WatchError>]) -> Vec<Vec<String>> {
    let mut writer = Writer::<ConfigMap>::default();
    let mut seen = vec![state(&writer)];
    for event in events.iter().flatten() {
        writer.apply_watcher_event(event);
        let now = state(&writer);
        if seen.last() != Some(&now) {
            seen.push(now);
        }
    }
    seen
}

#[tokio::test(start_paused = true)]
async fn a_resync_unit_reaches_a_reflector_store_at_once() {
    let script = Script::new(vec![Session::Stream(vec![
        added("a", 3),
        added("b", 4),
        added("c", 5),
        bookmark(6, true),
        modified("a", 7),
        resync(EventType::Modified, "b", 20),
        resync(EventType::Deleted, "c", 20),
        resync(EventType::Added, "d", 20),
        resync_end(20),
        modified("d", 21),
    ])]);
    let events = first(&script, 12).await;
    let seen: Vec<String> = events.iter().map(show).collect();
    assert_eq!(
        seen,
        [
            "Init",
            "InitApply a@3",
            "InitApply b@4",
            "InitApply c@5",
            "InitDone",
            "Apply a@7",
            "Init",
            "InitApply a@7",
            "InitApply b@20",
            "InitApply d@20",
            "InitDone",
            "Apply d@21",
        ],
        "the unit arrives as one replacement of the whole state"
    );
    assert_eq!(
        observed_states(&events),
        [
            vec![],
            vec!["a@3", "b@4", "c@5"],
            vec!["a@7", "b@4", "c@5"],
            vec!["a@7", "b@20", "d@20"],
            vec!["a@7", "b@20", "d@21"],
        ],
        "a store never shows a state between the API server's states at 7 and 20"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hang_up_inside_a_unit_resumes_before_it_and_applies_it_once() {
    let script = Script::new(vec![
        Session::Stream(vec![
            added("a", 3),
            added("b", 4),
            bookmark(5, true),
            modified("a", 6),
            resync(EventType::Modified, "a", 20),
            Step::Fail(Status::unavailable("replica gone")),
        ]),
        // The server sends the unit again, whole.
        Session::Stream(vec![
            resync(EventType::Modified, "a", 20),
            resync(EventType::Deleted, "b", 20),
            resync_end(20),
            modified("a", 21),
        ]),
    ]);
    let events = first(&script, 9).await;
    let seen: Vec<String> = events.iter().map(show).collect();
    assert_eq!(
        seen,
        [
            "Init",
            "InitApply a@3",
            "InitApply b@4",
            "InitDone",
            "Apply a@6",
            "Init",
            "InitApply a@20",
            "InitDone",
            "Apply a@21",
        ],
        "nothing of the broken unit, the repeated unit once"
    );
    assert_eq!(
        script.requests(),
        [(String::new(), true), ("6".into(), false)],
        "the RV seen inside the unit (20) is not a resume point"
    );
    assert_eq!(
        observed_states(&events),
        [
            vec![],
            vec!["a@3", "b@4"],
            vec!["a@6", "b@4"],
            vec!["a@20"],
            vec!["a@21"],
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_resume_point_after_a_finished_unit_is_its_rv() {
    let script = Script::new(vec![
        Session::Stream(vec![
            added("a", 3),
            bookmark(5, true),
            // A unit that changes nothing for this subscriber: only its
            // closing bookmark, which still moves the resume point.
            resync_end(10),
            Step::Fail(lagged()),
        ]),
        Session::Stream(vec![
            resync(EventType::Added, "x", 20),
            resync_end(20),
            Step::Fail(lagged()),
        ]),
        Session::Stream(vec![modified("x", 21)]),
    ]);
    let seen: Vec<String> = first(&script, 8).await.iter().map(show).collect();
    assert_eq!(
        seen,
        [
            "Init",
            "InitApply a@3",
            "InitDone",
            "Init",
            "InitApply a@3",
            "InitApply x@20",
            "InitDone",
            "Apply x@21",
        ],
        "an empty unit yields nothing"
    );
    assert_eq!(
        script.requests(),
        [
            (String::new(), true),
            ("10".into(), false),
            ("20".into(), false),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_expired_resume_inside_a_unit_re_snapshots_and_later_units_apply_to_the_new_snapshot() {
    let script = Script::new(vec![
        Session::Stream(vec![
            added("a", 3),
            added("b", 4),
            bookmark(5, true),
            resync(EventType::Deleted, "a", 20),
            Step::Fail(lagged()),
        ]),
        // The resume point (5) lies inside this replica's re-sync gap.
        Session::Refuse(Status::out_of_range(
            "resourceVersion 5 is in a re-sync gap",
        )),
        Session::Stream(vec![
            added("c", 18),
            bookmark(20, true),
            resync(EventType::Modified, "c", 30),
            resync_end(30),
        ]),
    ]);
    let events = first(&script, 10).await;
    let seen: Vec<String> = events.iter().map(show).collect();
    assert_eq!(
        seen,
        [
            "Init",
            "InitApply a@3",
            "InitApply b@4",
            "InitDone",
            "Init",
            "InitApply c@18",
            "InitDone",
            "Init",
            "InitApply c@30",
            "InitDone",
        ],
        "a and b, gone from the new snapshot, do not come back with the unit"
    );
    assert_eq!(
        script.requests(),
        [
            (String::new(), true),
            ("5".into(), false),
            (String::new(), true),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_event_breaking_into_a_unit_drops_the_unit_and_resumes_before_it() {
    let script = Script::new(vec![
        Session::Stream(vec![
            added("a", 3),
            bookmark(5, true),
            resync(EventType::Modified, "a", 20),
            modified("a", 21),
        ]),
        Session::Stream(vec![resync(EventType::Modified, "a", 20), resync_end(20)]),
    ]);
    let seen: Vec<String> = first(&script, 6).await.iter().map(show).collect();
    assert_eq!(
        seen,
        [
            "Init",
            "InitApply a@3",
            "InitDone",
            "Init",
            "InitApply a@20",
            "InitDone",
        ]
    );
    assert_eq!(
        script.requests(),
        [(String::new(), true), ("5".into(), false)]
    );
}

// The transitions of the state machine (see state.rs) that the tests above
// pass through without pinning down: each asserts the exact watches asked
// for, when, and on which server.

/// Resume → (refused) → Backoff → Resume: a refusal of a resumed watch
/// keeps the resume point, and the backoff goes on growing from the break
/// before it.
#[tokio::test(start_paused = true)]
async fn a_refused_resume_keeps_the_resume_point_and_the_backoff_grows() {
    let script = Script::new(vec![
        Session::Stream(vec![
            added("a", 3),
            bookmark(5, true),
            modified("a", 6),
            Step::Fail(Status::unavailable("replica gone")),
        ]),
        Session::Refuse(Status::permission_denied("no watch on configmaps")),
        Session::Stream(vec![modified("a", 7)]),
    ]);
    let events = first(&script, 6).await;
    assert!(
        matches!(&events[4], Err(WatchError::Refused(s)) if s.code() == Code::PermissionDenied),
        "{:?}",
        events[4]
    );
    let seen: Vec<String> = events.iter().map(show).collect();
    assert_eq!(
        [&seen[..4], &seen[5..]].concat(),
        [
            "Init",
            "InitApply a@3",
            "InitDone",
            "Apply a@6",
            "Apply a@7"
        ]
    );
    assert_eq!(
        script.requests(),
        [
            (String::new(), true),
            ("6".into(), false),
            ("6".into(), false)
        ],
        "no new snapshot after a refusal"
    );
    let gaps = script.gaps();
    assert!(
        is_backoff(gaps[0], 0) && is_backoff(gaps[1], 1),
        "0.8 s, then 1.6 s (plus jitter): {gaps:?}"
    );
    assert_eq!(*script.reconnects.lock().unwrap(), 2);
}

/// Watching → (Expired) → Empty → InitialWatch → Watching: an Expired
/// stream takes a new snapshot at once on the same server, and the next
/// resume is from that snapshot's resourceVersion.
#[tokio::test(start_paused = true)]
async fn expired_mid_stream_re_snapshots_at_once_and_resumes_from_the_new_snapshot() {
    let script = Script::new(vec![
        Session::Stream(vec![
            added("a", 3),
            bookmark(5, true),
            modified("a", 6),
            Step::Fail(Status::out_of_range("resourceVersion 6 is too old")),
        ]),
        Session::Stream(vec![
            added("a", 9),
            bookmark(10, true),
            modified("a", 11),
            Step::Fail(lagged()),
        ]),
        Session::Stream(vec![deleted("a", 12)]),
    ]);
    let seen: Vec<String> = first(&script, 9).await.iter().map(show).collect();
    assert_eq!(
        seen,
        [
            "Init",
            "InitApply a@3",
            "InitDone",
            "Apply a@6",
            "Init",
            "InitApply a@9",
            "InitDone",
            "Apply a@11",
            "Delete a@12",
        ]
    );
    assert_eq!(
        script.requests(),
        [
            (String::new(), true),
            (String::new(), true),
            ("11".into(), false)
        ]
    );
    let gaps = script.gaps();
    assert_eq!(gaps[0], Duration::ZERO, "no backoff before a new snapshot");
    assert!(is_backoff(gaps[1], 0), "a first break after it: {gaps:?}");
    assert_eq!(
        *script.reconnects.lock().unwrap(),
        1,
        "only the break moves to the next server"
    );
}

/// InitialWatch → (retired) → Empty: a connection retired inside the
/// snapshot takes the snapshot again at once, on the same server.
#[tokio::test(start_paused = true)]
async fn a_connection_retired_inside_the_snapshot_takes_it_again_at_once() {
    let script = Script::new(vec![
        Session::Stream(vec![added("a", 3), Step::Fail(retired(3))]),
        Session::Stream(vec![added("a", 3), added("b", 4), bookmark(5, true)]),
    ]);
    let seen: Vec<String> = first(&script, 6).await.iter().map(show).collect();
    assert_eq!(
        seen,
        [
            "Init",
            "InitApply a@3",
            "Init",
            "InitApply a@3",
            "InitApply b@4",
            "InitDone"
        ]
    );
    assert_eq!(
        script.requests(),
        [(String::new(), true), (String::new(), true)]
    );
    assert_eq!(script.gaps(), [Duration::ZERO], "no backoff");
    assert_eq!(*script.reconnects.lock().unwrap(), 0, "no failover");
    assert_eq!(
        *script.renewals.lock().unwrap(),
        1,
        "a new connection to the same server, not the retired one"
    );
}

/// Watching → (the stream ends) → Backoff → Resume: a watch the server
/// ends without a status is a break like any other.
#[tokio::test(start_paused = true)]
async fn a_watch_the_server_ends_resumes_after_a_backoff_on_the_next_server() {
    let script = Script::new(vec![
        Session::Stream(vec![
            added("a", 3),
            bookmark(5, true),
            modified("a", 6),
            bookmark(8, false),
        ]),
        Session::Stream(vec![modified("a", 9)]),
    ]);
    let seen: Vec<String> = first(&script, 5).await.iter().map(show).collect();
    assert_eq!(
        seen,
        [
            "Init",
            "InitApply a@3",
            "InitDone",
            "Apply a@6",
            "Apply a@9"
        ]
    );
    assert_eq!(
        script.requests(),
        [(String::new(), true), ("8".into(), false)]
    );
    let gaps = script.gaps();
    assert!(is_backoff(gaps[0], 0), "{gaps:?}");
    assert_eq!(*script.reconnects.lock().unwrap(), 1);
}

/// Resyncing → (an undecodable change) → Resyncing: the error is reported
/// and the unit goes on; its other changes still arrive as one state.
#[tokio::test(start_paused = true)]
async fn an_undecodable_change_in_a_unit_is_reported_and_the_rest_applies_at_once() {
    let undecodable = Step::Send(WatchEvent {
        r#type: EventType::Modified.into(),
        resource_version: "20".into(),
        object: "{\"data\": 42}".into(),
        resync: true,
        head_resource_version: String::new(),
    });
    let script = Script::new(vec![Session::Stream(vec![
        added("a", 3),
        added("b", 4),
        bookmark(5, true),
        resync(EventType::Modified, "a", 20),
        undecodable,
        resync(EventType::Deleted, "b", 20),
        resync_end(20),
        modified("a", 21),
    ])]);
    let events = first(&script, 9).await;
    assert!(
        matches!(events[4], Err(WatchError::Decode(_))),
        "{:?}",
        events[4]
    );
    let seen: Vec<String> = events.iter().map(show).collect();
    assert_eq!(
        seen[5..],
        ["Init", "InitApply a@20", "InitDone", "Apply a@21"],
        "{seen:?}"
    );
    assert_eq!(script.requests(), [(String::new(), true)], "no break");
}

/// Watching → (retired) → Resume takes no backoff delay: the breaks around
/// a retirement are paced as if it had not happened.
#[tokio::test(start_paused = true)]
async fn a_retired_connection_does_not_lengthen_the_backoff() {
    let script = Script::new(vec![
        Session::Stream(vec![
            bookmark(5, true),
            Step::Fail(Status::unavailable("gone")),
        ]),
        Session::Stream(vec![bookmark(6, false), Step::Fail(retired(6))]),
        Session::Stream(vec![
            bookmark(7, false),
            Step::Fail(Status::unavailable("gone")),
        ]),
        Session::Stream(vec![added("a", 8)]),
    ]);
    let seen: Vec<String> = first(&script, 3).await.iter().map(show).collect();
    assert_eq!(seen, ["Init", "InitDone", "Apply a@8"]);
    assert_eq!(
        script.requests(),
        [
            (String::new(), true),
            ("5".into(), false),
            ("6".into(), false),
            ("7".into(), false)
        ]
    );
    let gaps = script.gaps();
    assert!(
        is_backoff(gaps[0], 0) && gaps[1] == Duration::ZERO && is_backoff(gaps[2], 1),
        "0.8 s, at once, 1.6 s (plus jitter): {gaps:?}"
    );
}

/// Resyncing → (an event not of the unit) → Backoff → Resume: a server
/// breaking its own unit is paced like a break, and left for the next
/// server.
#[tokio::test(start_paused = true)]
async fn a_broken_unit_backs_off_and_fails_over_before_resuming() {
    let script = Script::new(vec![
        Session::Stream(vec![
            added("a", 3),
            bookmark(5, true),
            resync(EventType::Modified, "a", 20),
            resync(EventType::Modified, "a", 21),
        ]),
        Session::Stream(vec![modified("a", 6)]),
    ]);
    let seen: Vec<String> = first(&script, 4).await.iter().map(show).collect();
    assert_eq!(seen, ["Init", "InitApply a@3", "InitDone", "Apply a@6"]);
    assert_eq!(
        script.requests(),
        [(String::new(), true), ("5".into(), false)]
    );
    let gaps = script.gaps();
    assert!(is_backoff(gaps[0], 0), "{gaps:?}");
    assert_eq!(*script.reconnects.lock().unwrap(), 1);
}

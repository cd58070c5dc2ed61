//! The reflector against a mock upstream, for the answers a real API server
//! will not give on cue (429 with Retry-After, 500s, refused connections,
//! very short watches, expired continue tokens) and for the exact requests
//! client-go's rules produce. Time is paused: backoffs are measured, not
//! slept.

use std::{collections::HashMap, time::Duration};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use tokio::{sync::mpsc, time::Instant};
use tokio_stream::wrappers::ReceiverStream;
use tower_test::mock::{Handle, SendResponse};

use super::*;
use kube_fanout_core::fixtures::configmaps;

type MockBody = BoxBody<Bytes, std::io::Error>;
type MockHandle = Handle<Request<kube::client::Body>, Response<MockBody>>;

fn setup(config: ReflectorConfig) -> (Reflector, Arc<Store>, MockHandle) {
    let (service, handle) =
        tower_test::mock::pair::<Request<kube::client::Body>, Response<MockBody>>();
    let client = kube::Client::new(service, "default");
    let store = Arc::new(Store::new(configmaps(), 1000));
    (Reflector::new(client, store.clone(), config), store, handle)
}

fn list_watch() -> ReflectorConfig {
    ReflectorConfig {
        use_watch_list: false,
        ..ReflectorConfig::default()
    }
}

/// The query of the next request, and the handle to answer it.
async fn next(
    handle: &mut MockHandle,
) -> (HashMap<String, String>, SendResponse<Response<MockBody>>) {
    let (request, send) = handle.next_request().await.expect("a request");
    assert_eq!(request.uri().path(), "/api/v1/configmaps");
    let query = form_urlencoded::parse(request.uri().query().unwrap_or_default().as_bytes())
        .into_owned()
        .collect();
    (query, send)
}

fn full(status: u16, body: String) -> Response<MockBody> {
    Response::builder()
        .status(status)
        .body(
            Full::new(Bytes::from(body))
                .map_err(|never| match never {})
                .boxed(),
        )
        .unwrap()
}

fn cm(name: &str, rv: u64) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}}}}"#
    )
}

fn list(rv: u64, items: &[String], continue_token: &str) -> String {
    format!(
        r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}","continue":"{continue_token}"}},"items":[{}]}}"#,
        items.join(",")
    )
}

fn event(kind: &str, object: &str) -> String {
    format!(r#"{{"type":"{kind}","object":{object}}}"#)
}

fn bookmark(rv: u64, end: bool) -> String {
    let annotations = if end {
        r#","annotations":{"k8s.io/initial-events-end":"true"}"#
    } else {
        ""
    };
    event(
        "BOOKMARK",
        &format!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"{annotations}}}}}"#
        ),
    )
}

fn status(code: u16, reason: &str, message: &str) -> String {
    format!(
        r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","code":{code},"reason":"{reason}","message":"{message}"}}"#
    )
}

/// A watch response that stays open: send lines with `tx`, drop it to end.
fn streaming() -> (mpsc::Sender<String>, Response<MockBody>) {
    let (tx, rx) = mpsc::channel::<String>(16);
    let frames = ReceiverStream::new(rx).map(|line| Ok(Frame::data(Bytes::from(line + "\n"))));
    let response = Response::builder()
        .status(200)
        .body(BodyExt::boxed(StreamBody::new(frames)))
        .unwrap();
    (tx, response)
}

fn keys(store: &Store) -> Vec<String> {
    store
        .snapshot()
        .objects
        .iter()
        .map(|o| o.key.clone())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_first_list_is_at_rv_0_and_the_watch_starts_at_its_rv_with_bookmarks() {
    let (mut reflector, store, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        let watch = reflector.step(State::List).await;
        reflector.step(watch).await;
        reflector
    });
    let (query, send) = next(&mut handle).await;
    assert_eq!(query.get("resourceVersion").map(String::as_str), Some("0"));
    assert_eq!(query.get("limit").map(String::as_str), Some("500"));
    send.send_response(full(200, list(10, &[cm("a", 5)], "")));
    let (query, send) = next(&mut handle).await;
    assert_eq!(query["watch"], "true");
    assert_eq!(query["resourceVersion"], "10");
    assert_eq!(query["allowWatchBookmarks"], "true");
    let timeout: u64 = query["timeoutSeconds"].parse().unwrap();
    assert!(
        (300..600).contains(&timeout),
        "timeout {timeout} outside [300, 600)"
    );
    let lines = [event("ADDED", &cm("b", 11)), bookmark(12, false)].join("\n");
    send.send_response(full(200, lines));
    let reflector = run.await.unwrap();
    assert_eq!(keys(&store), ["ns/a", "ns/b"]);
    assert_eq!(store.head().resource_version, ResourceVersion(12));
    assert_eq!(
        reflector.status.lock().last_sync_resource_version,
        Some(ResourceVersion(12))
    );
}

#[tokio::test(start_paused = true)]
async fn watch_timeouts_are_drawn_from_min_to_twice_min_and_min_is_never_below_five_minutes() {
    let (reflector, _, _) = setup(ReflectorConfig {
        min_watch_timeout: Duration::from_secs(10),
        ..list_watch()
    });
    assert_eq!(reflector.config.min_watch_timeout, MIN_WATCH_TIMEOUT);
    let (reflector, _, _) = setup(ReflectorConfig {
        min_watch_timeout: Duration::from_secs(1000),
        ..list_watch()
    });
    let drawn: Vec<u64> = (0..200)
        .map(|_| reflector.watch_timeout().parse().unwrap())
        .collect();
    assert!(drawn.iter().all(|t| (1000..2000).contains(t)), "{drawn:?}");
    assert!(
        drawn.iter().any(|t| *t < 1500) && drawn.iter().any(|t| *t >= 1500),
        "not spread: {drawn:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_relist_asks_for_the_last_synced_rv_unpaged_and_after_expired_relists_at_once_at_rv_empty()
 {
    let (mut reflector, store, mut handle) = setup(list_watch());
    reflector.synced_to(ResourceVersion(40));
    let run = tokio::spawn(async move {
        let next = reflector.step(State::List).await;
        (reflector, next)
    });
    let (query, send) = next(&mut handle).await;
    assert_eq!(query.get("resourceVersion").map(String::as_str), Some("40"));
    assert_eq!(
        query.get("limit"),
        None,
        "a list at a specific RV is not paged"
    );
    send.send_response(full(
        410,
        status(410, "Expired", "too old resource version: 40 (50)"),
    ));
    let (query, send) = next(&mut handle).await;
    assert_eq!(query.get("resourceVersion").map(String::as_str), Some(""));
    assert_eq!(query.get("limit").map(String::as_str), Some("500"));
    send.send_response(full(200, list(60, &[cm("a", 55)], "")));
    let (reflector, next_state) = run.await.unwrap();
    assert!(matches!(next_state, State::Watch(None)));
    assert_eq!(store.head().resource_version, ResourceVersion(60));
    assert!(
        !reflector.last_sync_unavailable,
        "the flag clears after a successful list"
    );
    assert_eq!(reflector.status.lock().last_list_from.as_deref(), Some(""));
}

#[tokio::test(start_paused = true)]
async fn too_large_resource_version_in_its_old_timeout_form_also_relists_at_rv_empty() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    reflector.synced_to(ResourceVersion(40));
    let run = tokio::spawn(async move { reflector.step(State::List).await });
    let (_, send) = next(&mut handle).await;
    send.send_response(full(
        504,
        status(
            504,
            "Timeout",
            "Too large resource version: 40, current: 30",
        ),
    ));
    let (query, send) = next(&mut handle).await;
    assert_eq!(query["resourceVersion"], "");
    send.send_response(full(200, list(30, &[], "")));
    assert!(matches!(run.await.unwrap(), State::Watch(None)));
}

#[tokio::test(start_paused = true)]
async fn a_paginated_answer_to_rv_0_means_no_watch_cache_so_later_lists_keep_paging() {
    let (mut reflector, store, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        reflector.step(State::List).await;
        reflector.step(State::List).await;
        reflector
    });
    let (query, send) = next(&mut handle).await;
    assert_eq!(
        (query["resourceVersion"].as_str(), query["limit"].as_str()),
        ("0", "500")
    );
    send.send_response(full(200, list(10, &[cm("a", 5)], "token-1")));
    let (query, send) = next(&mut handle).await;
    assert_eq!(query.get("continue").map(String::as_str), Some("token-1"));
    assert_eq!(
        query.get("resourceVersion"),
        None,
        "continue pages carry no RV"
    );
    send.send_response(full(200, list(10, &[cm("b", 6)], "")));
    let (query, send) = next(&mut handle).await;
    assert_eq!(query["resourceVersion"], "10");
    assert_eq!(
        query.get("limit").map(String::as_str),
        Some("500"),
        "paging stays on"
    );
    send.send_response(full(200, list(12, &[cm("b", 6)], "")));
    let reflector = run.await.unwrap();
    assert!(reflector.paginated_result);
    assert_eq!(
        reflector.status.lock().last_list_requests,
        1,
        "the relist fitted one page"
    );
    assert_eq!(keys(&store), ["ns/b"]);
}

#[tokio::test(start_paused = true)]
async fn a_configured_page_size_is_used_for_every_list() {
    let (mut reflector, _, mut handle) = setup(ReflectorConfig {
        page_size: Some(7),
        ..list_watch()
    });
    reflector.synced_to(ResourceVersion(3));
    let run = tokio::spawn(async move { reflector.step(State::List).await });
    let (query, send) = next(&mut handle).await;
    assert_eq!(
        (query["resourceVersion"].as_str(), query["limit"].as_str()),
        ("3", "7")
    );
    send.send_response(full(200, list(3, &[], "")));
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_expired_continue_token_falls_back_to_a_full_list() {
    let (mut reflector, store, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move { reflector.step(State::List).await });
    let (_, send) = next(&mut handle).await;
    send.send_response(full(200, list(10, &[cm("a", 5)], "token-1")));
    let (query, send) = next(&mut handle).await;
    assert_eq!(query["continue"], "token-1");
    send.send_response(full(
        410,
        status(410, "Expired", "The provided continue parameter is too old"),
    ));
    let (query, send) = next(&mut handle).await;
    assert_eq!(query.get("limit"), None, "the fallback is one full list");
    assert_eq!(query["resourceVersion"], "0");
    send.send_response(full(200, list(11, &[cm("a", 5), cm("b", 11)], "")));
    assert!(matches!(run.await.unwrap(), State::Watch(None)));
    assert_eq!(keys(&store), ["ns/a", "ns/b"]);
}

#[tokio::test(start_paused = true)]
async fn too_many_requests_backs_off_at_least_retry_after_and_rewatches_without_relisting() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    reflector.synced_to(ResourceVersion(10));
    let run = tokio::spawn(async move {
        let backoff = reflector.step(State::Watch(None)).await;
        let started = Instant::now();
        let next = reflector.step(backoff).await;
        (started.elapsed(), next)
    });
    let (_, send) = next(&mut handle).await;
    let mut response = full(429, status(429, "TooManyRequests", "slow down"));
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, "7".parse().unwrap());
    send.send_response(response);
    let (waited, next_state) = run.await.unwrap();
    assert!(waited >= Duration::from_secs(7), "waited only {waited:?}");
    assert!(matches!(next_state, State::Watch(None)), "{next_state:?}");
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_backs_off_and_rewatches_from_the_last_rv() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    reflector.synced_to(ResourceVersion(10));
    let run = tokio::spawn(async move {
        let backoff = reflector.step(State::Watch(None)).await;
        let State::Backoff { delay, then } = backoff else {
            panic!("expected a backoff, got {backoff:?}")
        };
        reflector.step(*then).await;
        delay
    });
    let (_, send) = next(&mut handle).await;
    send.send_error(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    let (query, send) = next(&mut handle).await;
    assert_eq!(
        query["watch"], "true",
        "no relist after a refused connection"
    );
    assert_eq!(query["resourceVersion"], "10");
    send.send_response(full(200, bookmark(11, false)));
    let delay = run.await.unwrap();
    assert!(
        (Duration::from_millis(800)..=Duration::from_millis(1600)).contains(&delay),
        "{delay:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn internal_errors_are_retried_at_once_until_the_deadline_then_relist() {
    let (mut reflector, _, mut handle) = setup(ReflectorConfig {
        max_internal_error_retry: Duration::from_secs(30),
        ..list_watch()
    });
    reflector.synced_to(ResourceVersion(10));
    let run = tokio::spawn(async move {
        let mut states = Vec::new();
        for _ in 0..2 {
            states.push(reflector.step(State::Watch(None)).await);
            tokio::time::sleep(Duration::from_secs(35)).await;
        }
        states
    });
    for _ in 0..2 {
        let (_, send) = next(&mut handle).await;
        send.send_response(full(
            200,
            event("ERROR", &status(500, "InternalError", "etcd hiccup")),
        ));
    }
    let states = run.await.unwrap();
    assert!(
        matches!(states[0], State::Watch(None)),
        "retried at once: {:?}",
        states[0]
    );
    assert!(
        matches!(&states[1], State::Backoff { then, .. } if matches!(**then, State::List)),
        "past the deadline: {:?}",
        states[1]
    );
}

#[tokio::test(start_paused = true)]
async fn a_very_short_watch_is_an_error_that_backs_off_and_relists() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    reflector.synced_to(ResourceVersion(10));
    let run = tokio::spawn(async move { reflector.step(State::Watch(None)).await });
    let (_, send) = next(&mut handle).await;
    send.send_response(full(200, String::new()));
    let next_state = run.await.unwrap();
    assert!(
        matches!(&next_state, State::Backoff { then, .. } if matches!(**then, State::List)),
        "{next_state:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_watch_that_times_out_normally_is_reopened_from_where_it_got_to() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    reflector.synced_to(ResourceVersion(10));
    let run = tokio::spawn(async move {
        let next = reflector.step(State::Watch(None)).await;
        reflector.step(next).await
    });
    let (_, send) = next(&mut handle).await;
    let (tx, response) = streaming();
    send.send_response(response);
    tx.send(event("ADDED", &cm("a", 11))).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(tx);
    let (query, send) = next(&mut handle).await;
    assert_eq!(
        (query["watch"].as_str(), query["resourceVersion"].as_str()),
        ("true", "11")
    );
    send.send_response(full(200, bookmark(12, false)));
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn foreign_kinds_and_tables_are_skipped_and_the_watch_goes_on() {
    let (mut reflector, store, mut handle) = setup(list_watch());
    reflector.synced_to(ResourceVersion(10));
    let run = tokio::spawn(async move { reflector.step(State::Watch(None)).await });
    let (_, send) = next(&mut handle).await;
    let secret = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"ns","resourceVersion":"11"}}"#;
    let table = r#"{"apiVersion":"meta.k8s.io/v1","kind":"Table","metadata":{"name":"t","resourceVersion":"12"}}"#;
    let lines = [
        event("ADDED", secret),
        event("ADDED", table),
        event("ADDED", &cm("kept", 14)),
    ]
    .join("\n");
    send.send_response(full(200, lines));
    run.await.unwrap();
    assert_eq!(keys(&store), ["ns/kept"]);
    assert_eq!(store.head().resource_version, ResourceVersion(14));
}

#[tokio::test(start_paused = true)]
async fn watch_list_fills_a_temporary_store_replaces_at_the_end_bookmark_and_keeps_the_watch() {
    let (mut reflector, store, mut handle) = setup(ReflectorConfig::default());
    store.replace(vec![], ResourceVersion(1));
    let run = tokio::spawn(async move {
        let next = reflector.step(State::WatchList).await;
        assert!(matches!(next, State::Watch(Some(_))), "{next:?}");
        reflector.step(next).await;
        reflector
    });
    let (query, send) = next(&mut handle).await;
    assert_eq!(query["sendInitialEvents"], "true");
    assert_eq!(query["resourceVersionMatch"], "NotOlderThan");
    assert_eq!(
        query["resourceVersion"], "",
        "no synced RV yet: the freshest state"
    );
    assert_eq!(query["allowWatchBookmarks"], "true");
    let (tx, response) = streaming();
    send.send_response(response);
    tx.send(event("ADDED", &cm("a", 5))).await.unwrap();
    tx.send(event("ADDED", &cm("b", 6))).await.unwrap();
    tx.send(event("ADDED", &cm("gone", 6))).await.unwrap();
    // Only the bookmark annotated initial-events-end "true" ends the stream.
    tx.send(bookmark(6, false)).await.unwrap();
    tx.send(event(
        "BOOKMARK",
        r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"6","annotations":{"k8s.io/initial-events-end":"false"}}}"#,
    ))
    .await
    .unwrap();
    tx.send(event("DELETED", &cm("gone", 7))).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        keys(&store).is_empty(),
        "nothing reaches the store before the end bookmark"
    );
    tx.send(bookmark(8, true)).await.unwrap();
    tx.send(event("DELETED", &cm("a", 9))).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(tx);
    let reflector = run.await.unwrap();
    assert_eq!(
        keys(&store),
        ["ns/b"],
        "deleted during the initial events (gone) and after them (a)"
    );
    assert_eq!(store.head().resource_version, ResourceVersion(9));
    let status = reflector.status.lock().clone();
    assert_eq!(
        (status.watch_lists, status.lists, status.watches),
        (1, 0, 1),
        "one request did it all"
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_watch_list_falls_back_to_list_and_watch() {
    let (mut reflector, _, mut handle) = setup(ReflectorConfig::default());
    let run = tokio::spawn(async move {
        let next = reflector.step(State::WatchList).await;
        (reflector, next)
    });
    let (_, send) = next(&mut handle).await;
    send.send_response(full(
        422,
        status(
            422,
            "Invalid",
            "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
        ),
    ));
    let (reflector, next_state) = run.await.unwrap();
    assert!(matches!(next_state, State::List), "{next_state:?}");
    let last_error = reflector.status.lock().last_error.clone();
    assert!(
        last_error
            .as_deref()
            .is_some_and(|e| e.contains("422 Invalid: sendInitialEvents is forbidden")),
        "the reason for the fallback is shown: {last_error:?}"
    )
}

#[tokio::test(start_paused = true)]
async fn an_expired_watch_list_rv_retries_at_the_freshest_rv() {
    let (mut reflector, _, mut handle) = setup(ReflectorConfig::default());
    reflector.synced_to(ResourceVersion(40));
    let run = tokio::spawn(async move {
        let next = reflector.step(State::WatchList).await;
        assert!(matches!(next, State::WatchList), "{next:?}");
        let next = reflector.step(next).await;
        assert!(matches!(next, State::Watch(Some(_))), "{next:?}");
        // The next resync asks for the synced RV again: the flag set by
        // the 410 is cleared by the successful sync.
        reflector.step(State::WatchList).await
    });
    let (query, send) = next(&mut handle).await;
    assert_eq!(query["resourceVersion"], "40");
    send.send_response(full(410, status(410, "Expired", "too old")));
    let (query, send) = next(&mut handle).await;
    assert_eq!(query["resourceVersion"], "");
    send.send_response(full(200, bookmark(50, true)));
    let (query, send) = next(&mut handle).await;
    assert_eq!(query["resourceVersion"], "50");
    send.send_response(full(200, bookmark(51, true)));
    assert!(matches!(run.await.unwrap(), State::Watch(Some(_))));
}

#[tokio::test(start_paused = true)]
async fn the_reflector_stops_promptly_when_cancelled_mid_request() {
    let (reflector, _, mut handle) = setup(list_watch());
    let status = reflector.status();
    let cancel = CancellationToken::new();
    let run = tokio::spawn(reflector.run(cancel.clone()));
    let (_, _send) = next(&mut handle).await;
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(1), run)
        .await
        .expect("stopped within a second")
        .unwrap();
    assert_eq!(status.lock().phase, Phase::Stopped);
}

#[test]
fn differences_name_every_missing_extra_and_changed_object() {
    let meta = TypeMeta {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
    };
    let obj = |name: &str, rv: u64| {
        Object::from_json(
            &cm(name, rv),
            &meta,
            &kube_fanout_core::fields::SelectableFields::default(),
            Transform::default(),
        )
        .unwrap()
    };
    let found = differences(&[obj("a", 1), obj("b", 2)], &[obj("b", 3), obj("c", 4)]);
    assert_eq!(
        found,
        [
            "ns/a streamed but not listed",
            "ns/b differs: streamed RV 2, listed RV 3",
            "ns/c listed but not streamed"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_broken_stream_is_reopened_from_the_last_rv_without_relisting() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    reflector.synced_to(ResourceVersion(10));
    let run = tokio::spawn(async move {
        let next = reflector.step(State::Watch(None)).await;
        assert!(matches!(next, State::Watch(None)), "{next:?}");
        reflector.step(next).await
    });
    let (_, send) = next(&mut handle).await;
    let frames = futures::stream::iter([
        Ok(Frame::data(Bytes::from(
            event("ADDED", &cm("a", 11)) + "\n",
        ))),
        Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
    ]);
    send.send_response(
        Response::builder()
            .status(200)
            .body(BodyExt::boxed(StreamBody::new(frames)))
            .unwrap(),
    );
    let (query, send) = next(&mut handle).await;
    assert_eq!(
        (query["watch"].as_str(), query["resourceVersion"].as_str()),
        ("true", "11"),
        "reopened from the last event the broken stream delivered"
    );
    assert_eq!(query.get("sendInitialEvents"), None);
    send.send_response(full(200, bookmark(12, false)));
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_watch_list_without_its_end_bookmark_10s_after_the_last_event_warns() {
    let (mut reflector, store, mut handle) = setup(ReflectorConfig::default());
    let status = reflector.status();
    let run = tokio::spawn(async move { reflector.step(State::WatchList).await });
    let (_, send) = next(&mut handle).await;
    let (tx, response) = streaming();
    send.send_response(response);
    tx.send(event("ADDED", &cm("a", 5))).await.unwrap();
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(status.lock().end_bookmark_warnings, 0, "not yet: 9 s");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(status.lock().end_bookmark_warnings, 1);
    tx.send(bookmark(6, true)).await.unwrap();
    assert!(matches!(run.await.unwrap(), State::Watch(Some(_))));
    assert_eq!(keys(&store), ["ns/a"]);
}

/// Log lines recorded while a test runs: (level, message and fields).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl Logs {
    /// Records every log line of this thread (paused-time tests run on one)
    /// until the guard drops.
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        use tracing_subscriber::layer::SubscriberExt;
        let logs = Logs::default();
        let subscriber = tracing_subscriber::registry().with(logs.clone());
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn at(&self, level: tracing::Level) -> Vec<String> {
        self.0
            .lock()
            .iter()
            .filter(|(l, _)| *l == level)
            .map(|(_, line)| line.clone())
            .collect()
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Logs {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Line(String);
        impl tracing::field::Visit for Line {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
                use std::fmt::Write;
                let _ = write!(self.0, "{}={value:?} ", field.name());
            }
        }
        let mut line = Line(String::new());
        event.record(&mut line);
        self.0.lock().push((*event.metadata().level(), line.0));
    }
}

/// One watch from the last synced RV answered with `body`; the next state.
async fn watch_answered(reflector: &mut Reflector, handle: &mut MockHandle, body: String) -> State {
    let step = reflector.step(State::Watch(None));
    let answer = async {
        let (query, send) = next(handle).await;
        assert_eq!(query["watch"], "true");
        send.send_response(full(200, body));
    };
    tokio::join!(step, answer).0
}

fn internal_error() -> String {
    event("ERROR", &status(500, "InternalError", "etcd hiccup"))
}

fn relists(state: &State) -> bool {
    matches!(state, State::Backoff { then, .. } if matches!(**then, State::List))
}

#[tokio::test(start_paused = true)]
async fn a_relist_renews_the_internal_error_window() {
    let (mut reflector, _, mut handle) = setup(ReflectorConfig {
        max_internal_error_retry: Duration::from_secs(30),
        ..list_watch()
    });
    reflector.synced_to(ResourceVersion(10));
    let state = watch_answered(&mut reflector, &mut handle, internal_error()).await;
    assert!(matches!(state, State::Watch(None)), "{state:?}");
    tokio::time::sleep(Duration::from_secs(20)).await;
    let gone = event("ERROR", &status(410, "Expired", "too old"));
    let state = watch_answered(&mut reflector, &mut handle, gone).await;
    assert!(relists(&state), "{state:?}");
    tokio::time::sleep(Duration::from_secs(15)).await;
    let step = reflector.step(State::List);
    let answer = async {
        let (query, send) = next(&mut handle).await;
        assert_eq!(query["resourceVersion"], "10");
        send.send_response(full(200, list(20, &[], "")));
    };
    assert!(matches!(tokio::join!(step, answer).0, State::Watch(None)));
    // 35 s after the run began, with its last error 35 s ago: only because
    // client-go builds a new window for every watch after a list is this
    // error retried.
    let state = watch_answered(&mut reflector, &mut handle, internal_error()).await;
    assert!(
        matches!(state, State::Watch(None)),
        "a new window: {state:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_quiet_minute_starts_a_new_internal_error_window_and_a_normal_end_does_not() {
    let (mut reflector, _, mut handle) = setup(ReflectorConfig {
        max_internal_error_retry: Duration::from_secs(30),
        ..list_watch()
    });
    reflector.synced_to(ResourceVersion(10));
    let state = watch_answered(&mut reflector, &mut handle, internal_error()).await;
    assert!(matches!(state, State::Watch(None)), "{state:?}");
    tokio::time::sleep(Duration::from_secs(61)).await;
    let state = watch_answered(&mut reflector, &mut handle, internal_error()).await;
    assert!(
        matches!(state, State::Watch(None)),
        "61 s after the last internal error, a new run: {state:?}"
    );
    // A watch that ends normally does not end the run: 35 s after it
    // began, with the last error 35 s ago (< 1 min), the window is closed.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let state = watch_answered(&mut reflector, &mut handle, bookmark(11, false)).await;
    assert!(matches!(state, State::Watch(None)), "{state:?}");
    tokio::time::sleep(Duration::from_secs(15)).await;
    let state = watch_answered(&mut reflector, &mut handle, internal_error()).await;
    assert!(relists(&state), "the window closed: {state:?}");
}

#[tokio::test(start_paused = true)]
async fn a_malformed_line_ends_the_watch_which_reopens_from_the_last_rv_within_the_window() {
    let (mut reflector, store, mut handle) = setup(ReflectorConfig {
        max_internal_error_retry: Duration::from_secs(30),
        ..list_watch()
    });
    reflector.synced_to(ResourceVersion(10));
    let lines = [
        event("ADDED", &cm("a", 11)),
        "{not json".to_owned(),
        event("ADDED", &cm("b", 12)),
    ]
    .join("\n");
    let state = watch_answered(&mut reflector, &mut handle, lines).await;
    assert!(matches!(state, State::Watch(None)), "{state:?}");
    assert_eq!(keys(&store), ["ns/a"], "nothing after the bad line");
    let step = reflector.step(state);
    let answer = async {
        let (query, send) = next(&mut handle).await;
        assert_eq!(
            (query["watch"].as_str(), query["resourceVersion"].as_str()),
            ("true", "11")
        );
        send.send_response(full(200, event("ADDED", &cm("b", 12))));
    };
    tokio::join!(step, answer);
    assert_eq!(keys(&store), ["ns/a", "ns/b"], "the change was not lost");
}

#[tokio::test(start_paused = true)]
async fn an_unknown_event_type_without_a_retry_window_backs_off_and_relists_from_the_last_rv() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    reflector.synced_to(ResourceVersion(10));
    let lines = [
        event("ADDED", &cm("a", 11)),
        event("SURPRISE", &cm("b", 12)),
    ]
    .join("\n");
    let state = watch_answered(&mut reflector, &mut handle, lines).await;
    assert!(relists(&state), "{state:?}");
    assert!(
        reflector
            .status
            .lock()
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains(r#"unknown watch event type "SURPRISE""#)),
        "{:?}",
        reflector.status.lock().last_error
    );
    let step = async {
        let list = reflector.step(state).await;
        reflector.step(list).await
    };
    let answer = async {
        let (query, send) = next(&mut handle).await;
        assert_eq!(query.get("watch"), None);
        assert_eq!(query["resourceVersion"], "11");
        send.send_response(full(200, list(12, &[cm("a", 11), cm("b", 12)], "")));
    };
    assert!(matches!(tokio::join!(step, answer).0, State::Watch(None)));
}

#[tokio::test(start_paused = true)]
async fn a_watch_list_that_ends_before_its_end_bookmark_is_retried_not_replaced_by_a_list() {
    let (mut reflector, store, mut handle) = setup(ReflectorConfig::default());
    reflector.synced_to(ResourceVersion(4));
    let run = tokio::spawn(async move {
        let next = reflector.step(State::WatchList).await;
        assert!(matches!(next, State::WatchList), "{next:?}");
        let next = reflector.step(next).await;
        assert!(
            matches!(next, State::WatchList),
            "a broken one too: {next:?}"
        );
        reflector.step(next).await
    });
    let (query, send) = next(&mut handle).await;
    assert_eq!(query["resourceVersion"], "4");
    let (tx, response) = streaming();
    send.send_response(response);
    tx.send(event("ADDED", &cm("a", 5))).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(tx);
    let (query, send) = next(&mut handle).await;
    assert_eq!(
        (
            query["sendInitialEvents"].as_str(),
            query["resourceVersion"].as_str()
        ),
        ("true", "4"),
        "the same watch-list again"
    );
    let frames = futures::stream::iter([
        Ok(Frame::data(Bytes::from(event("ADDED", &cm("a", 5)) + "\n"))),
        Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
    ]);
    send.send_response(
        Response::builder()
            .status(200)
            .body(BodyExt::boxed(StreamBody::new(frames)))
            .unwrap(),
    );
    let (query, send) = next(&mut handle).await;
    assert_eq!(query["sendInitialEvents"], "true");
    assert!(keys(&store).is_empty(), "nothing half-streamed was stored");
    send.send_response(full(
        200,
        [event("ADDED", &cm("a", 5)), bookmark(6, true)].join("\n"),
    ));
    assert!(matches!(run.await.unwrap(), State::Watch(Some(_))));
    assert_eq!(keys(&store), ["ns/a"]);
}

#[tokio::test(start_paused = true)]
async fn a_very_short_watch_list_falls_back_to_list() {
    let (mut reflector, _, mut handle) = setup(ReflectorConfig::default());
    let run = tokio::spawn(async move { reflector.step(State::WatchList).await });
    let (_, send) = next(&mut handle).await;
    send.send_response(full(200, String::new()));
    let next_state = run.await.unwrap();
    assert!(matches!(next_state, State::List), "{next_state:?}");
}

#[tokio::test(start_paused = true)]
async fn a_watch_is_very_short_only_if_it_ends_within_a_second_with_no_event() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    reflector.synced_to(ResourceVersion(10));
    // One event, closed at once: not very short.
    let state = watch_answered(&mut reflector, &mut handle, bookmark(11, false)).await;
    assert!(matches!(state, State::Watch(None)), "{state:?}");
    // No event, closed after exactly one second: not very short either.
    let step = reflector.step(State::Watch(None));
    let answer = async {
        let (_, send) = next(&mut handle).await;
        tokio::time::sleep(VERY_SHORT_WATCH).await;
        send.send_response(full(200, String::new()));
    };
    let state = tokio::join!(step, answer).0;
    assert!(matches!(state, State::Watch(None)), "{state:?}");
    // No event, closed just under a second: very short.
    let step = reflector.step(State::Watch(None));
    let answer = async {
        let (_, send) = next(&mut handle).await;
        tokio::time::sleep(VERY_SHORT_WATCH - Duration::from_millis(1)).await;
        send.send_response(full(200, String::new()));
    };
    let state = tokio::join!(step, answer).0;
    assert!(relists(&state), "{state:?}");
}

#[tokio::test(start_paused = true)]
async fn a_first_page_410_relists_at_once_at_rv_empty_without_an_unpaged_list() {
    let (mut reflector, store, mut handle) = setup(ReflectorConfig {
        page_size: Some(100),
        ..list_watch()
    });
    reflector.synced_to(ResourceVersion(40));
    let run = tokio::spawn(async move { reflector.step(State::List).await });
    let (query, send) = next(&mut handle).await;
    assert_eq!(
        (query["resourceVersion"].as_str(), query["limit"].as_str()),
        ("40", "100")
    );
    send.send_response(full(
        410,
        status(410, "Expired", "too old resource version"),
    ));
    let (query, send) = next(&mut handle).await;
    assert_eq!(
        (query["resourceVersion"].as_str(), query["limit"].as_str()),
        ("", "100"),
        "straight to a consistent read, still paged"
    );
    send.send_response(full(200, list(60, &[cm("a", 55)], "")));
    assert!(matches!(run.await.unwrap(), State::Watch(None)));
    assert_eq!(keys(&store), ["ns/a"]);
}

#[tokio::test(start_paused = true)]
async fn a_paginated_answer_to_rv_empty_does_not_turn_paging_on_for_later_relists() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    reflector.synced_to(ResourceVersion(40));
    let run = tokio::spawn(async move {
        reflector.step(State::List).await;
        reflector.step(State::List).await;
        reflector
    });
    let (_, send) = next(&mut handle).await;
    send.send_response(full(410, status(410, "Expired", "too old")));
    let (query, send) = next(&mut handle).await;
    assert_eq!(query["resourceVersion"], "");
    send.send_response(full(200, list(50, &[cm("a", 45)], "token-1")));
    let (query, send) = next(&mut handle).await;
    assert_eq!(query["continue"], "token-1");
    send.send_response(full(200, list(50, &[cm("b", 46)], "")));
    let (query, send) = next(&mut handle).await;
    assert_eq!(query["resourceVersion"], "50");
    assert_eq!(
        query.get("limit"),
        None,
        "etcd paged the RV \"\" list; the watch cache may still serve this one"
    );
    send.send_response(full(200, list(51, &[], "")));
    assert!(!run.await.unwrap().paginated_result);
}

#[tokio::test(start_paused = true)]
async fn an_expired_continue_token_after_rv_0_still_counts_as_paginated() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        reflector.step(State::List).await;
        reflector
    });
    let (_, send) = next(&mut handle).await;
    send.send_response(full(200, list(10, &[cm("a", 5)], "token-1")));
    let (_, send) = next(&mut handle).await;
    send.send_response(full(410, status(410, "Expired", "continue too old")));
    let (query, send) = next(&mut handle).await;
    assert_eq!(
        (query.get("limit"), query["resourceVersion"].as_str()),
        (None, "0")
    );
    send.send_response(full(200, list(11, &[cm("a", 5)], "")));
    let reflector = run.await.unwrap();
    assert!(reflector.paginated_result);
    assert_eq!(reflector.status.lock().last_list_requests, 3);
}

#[tokio::test(start_paused = true)]
async fn a_list_slower_than_ten_seconds_is_logged_with_its_steps() {
    let (logs, _guard) = Logs::capture();
    let (mut reflector, _, mut handle) = setup(list_watch());
    for (delay, slow) in [(Duration::from_secs(9), 0), (Duration::from_secs(11), 1)] {
        let step = reflector.step(State::List);
        let answer = async {
            let (_, send) = next(&mut handle).await;
            tokio::time::sleep(delay).await;
            send.send_response(full(200, list(10, &[cm("a", 5)], "")));
        };
        tokio::join!(step, answer);
        assert_eq!(reflector.status.lock().slow_syncs, slow, "after {delay:?}");
    }
    let traces: Vec<String> = logs
        .at(tracing::Level::INFO)
        .into_iter()
        .filter(|l| l.contains("slow sync"))
        .collect();
    assert_eq!(traces.len(), 1, "{traces:?}");
    assert!(
        traces[0].contains(r#"1 objects listed from RV \"10\" (11s); store replaced"#),
        "{}",
        traces[0]
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_watch_list_is_logged_with_its_steps() {
    let (logs, _guard) = Logs::capture();
    let (mut reflector, _, mut handle) = setup(ReflectorConfig::default());
    let step = reflector.step(State::WatchList);
    let answer = async {
        let (_, send) = next(&mut handle).await;
        let (tx, response) = streaming();
        send.send_response(response);
        tx.send(event("ADDED", &cm("a", 5))).await.unwrap();
        tokio::time::sleep(Duration::from_secs(12)).await;
        tx.send(bookmark(6, true)).await.unwrap();
        tx
    };
    let (state, _tx) = tokio::join!(step, answer);
    assert!(matches!(state, State::Watch(Some(_))), "{state:?}");
    assert_eq!(reflector.status.lock().slow_syncs, 1);
    let info = logs.at(tracing::Level::INFO);
    assert!(
        info.iter()
            .any(|l| l.contains("slow sync") && l.contains("1 objects streamed")),
        "{info:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_routine_410_is_not_logged_as_a_warning_but_a_very_short_watch_is() {
    let (logs, _guard) = Logs::capture();
    let (mut reflector, _, mut handle) = setup(list_watch());
    reflector.synced_to(ResourceVersion(10));
    let gone = event(
        "ERROR",
        &status(410, "Expired", "too old resource version: 10 (20)"),
    );
    let state = watch_answered(&mut reflector, &mut handle, gone).await;
    assert!(relists(&state), "{state:?}");
    assert_eq!(logs.at(tracing::Level::WARN), Vec::<String>::new());
    assert!(
        logs.at(tracing::Level::DEBUG)
            .iter()
            .any(|l| l.contains("backing off") && l.contains("410")),
        "{:?}",
        logs.at(tracing::Level::DEBUG)
    );
    let state = watch_answered(&mut reflector, &mut handle, String::new()).await;
    assert!(relists(&state), "{state:?}");
    let warnings = logs.at(tracing::Level::WARN);
    assert!(
        warnings.len() == 1 && warnings[0].contains("very short watch"),
        "{warnings:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_internal_error_window_includes_its_end_and_a_minute_of_quiet_exactly() {
    let (mut reflector, _, mut handle) = setup(ReflectorConfig {
        max_internal_error_retry: Duration::from_secs(30),
        ..list_watch()
    });
    reflector.synced_to(ResourceVersion(10));
    for wait in [0, 30] {
        // At the start of the run, and exactly at its end: retried.
        tokio::time::sleep(Duration::from_secs(wait)).await;
        let state = watch_answered(&mut reflector, &mut handle, internal_error()).await;
        assert!(matches!(state, State::Watch(None)), "{wait} s: {state:?}");
    }
    // Exactly a minute after the last error, a new run starts at once.
    tokio::time::sleep(retry::QUIET_RESET).await;
    let state = watch_answered(&mut reflector, &mut handle, internal_error()).await;
    assert!(matches!(state, State::Watch(None)), "{state:?}");
    // 31 s into that run: past the window.
    tokio::time::sleep(Duration::from_secs(31)).await;
    let state = watch_answered(&mut reflector, &mut handle, internal_error()).await;
    assert!(relists(&state), "{state:?}");
}

#[tokio::test(start_paused = true)]
async fn a_one_page_answer_to_rv_0_keeps_later_relists_unpaged() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        reflector.step(State::List).await;
        reflector.step(State::List).await;
        reflector
    });
    let (query, send) = next(&mut handle).await;
    assert_eq!(
        (query["resourceVersion"].as_str(), query["limit"].as_str()),
        ("0", "500")
    );
    send.send_response(full(200, list(10, &[cm("a", 5)], "")));
    let (query, send) = next(&mut handle).await;
    assert_eq!(query["resourceVersion"], "10");
    assert_eq!(query.get("limit"), None, "served by the watch cache");
    send.send_response(full(200, list(11, &[cm("a", 5)], "")));
    assert!(!run.await.unwrap().paginated_result);
}

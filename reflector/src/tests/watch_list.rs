//! The WatchList phase: initial events into a temporary map, the end
//! bookmark, its retries and fallbacks, and the consistency check.

use super::*;

#[tokio::test(start_paused = true)]
async fn watch_list_fills_a_temporary_store_replaces_at_the_end_bookmark_and_keeps_the_watch() {
    let (mut reflector, store, mut handle) = setup(ReflectorConfig::default());
    store.replace(vec![], ResourceVersion(1));
    let run = tokio::spawn(async move {
        let next = reflector.step(State::WatchList(SyncPoint::Start)).await;
        assert!(matches!(next, State::Follow { .. }), "{next:?}");
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
    let status = reflector.context.status.lock().clone();
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
        let next = reflector.step(State::WatchList(SyncPoint::Start)).await;
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
    assert!(matches!(next_state, State::List(_)), "{next_state:?}");
    let last_error = reflector.context.status.lock().last_error.clone();
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
    let run = tokio::spawn(async move {
        let next = reflector
            .step(State::WatchList(SyncPoint::At(ResourceVersion(40))))
            .await;
        assert!(matches!(next, State::WatchList(_)), "{next:?}");
        let next = reflector.step(next).await;
        let State::Follow { at, .. } = next else {
            panic!("expected to follow the watch, got {next:?}")
        };
        // The next resync asks for the synced RV again: the unavailable
        // sync point set by the 410 is replaced by the successful sync.
        reflector.step(State::WatchList(SyncPoint::At(at))).await
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
    assert!(matches!(run.await.unwrap(), State::Follow { .. }));
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
async fn a_watch_list_without_its_end_bookmark_10s_after_the_last_event_warns() {
    let (mut reflector, store, mut handle) = setup(ReflectorConfig::default());
    let status = reflector.status();
    let run = tokio::spawn(async move { reflector.step(State::WatchList(SyncPoint::Start)).await });
    let (_, send) = next(&mut handle).await;
    let (tx, response) = streaming();
    send.send_response(response);
    tx.send(event("ADDED", &cm("a", 5))).await.unwrap();
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(status.lock().end_bookmark_warnings, 0, "not yet: 9 s");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(status.lock().end_bookmark_warnings, 1);
    tx.send(bookmark(6, true)).await.unwrap();
    assert!(matches!(run.await.unwrap(), State::Follow { .. }));
    assert_eq!(keys(&store), ["ns/a"]);
}

#[tokio::test(start_paused = true)]
async fn a_watch_list_that_ends_before_its_end_bookmark_is_retried_not_replaced_by_a_list() {
    let (mut reflector, store, mut handle) = setup(ReflectorConfig::default());
    let run = tokio::spawn(async move {
        let next = reflector
            .step(State::WatchList(SyncPoint::At(ResourceVersion(4))))
            .await;
        assert!(matches!(next, State::WatchList(_)), "{next:?}");
        let next = reflector.step(next).await;
        assert!(
            matches!(next, State::WatchList(_)),
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
    assert!(matches!(run.await.unwrap(), State::Follow { .. }));
    assert_eq!(keys(&store), ["ns/a"]);
}

#[tokio::test(start_paused = true)]
async fn a_very_short_watch_list_falls_back_to_list() {
    let (mut reflector, _, mut handle) = setup(ReflectorConfig::default());
    let run = tokio::spawn(async move { reflector.step(State::WatchList(SyncPoint::Start)).await });
    let (_, send) = next(&mut handle).await;
    send.send_response(full(200, String::new()));
    let next_state = run.await.unwrap();
    assert!(matches!(next_state, State::List(_)), "{next_state:?}");
}

#[tokio::test(start_paused = true)]
async fn a_slow_watch_list_is_logged_with_its_steps() {
    let (logs, _guard) = Logs::capture();
    let (mut reflector, _, mut handle) = setup(ReflectorConfig::default());
    let step = reflector.step(State::WatchList(SyncPoint::Start));
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
    assert!(matches!(state, State::Follow { .. }), "{state:?}");
    assert_eq!(reflector.context.status.lock().slow_syncs, 1);
    let info = logs.at(tracing::Level::INFO);
    assert!(
        info.iter()
            .any(|l| l.contains("slow sync") && l.contains("1 objects streamed")),
        "{info:?}"
    );
}

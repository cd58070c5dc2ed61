//! The Watch phase: watch queries and timeouts, reopening from where a
//! watch got to, backoffs, the internal-error window and log levels.

use super::*;

#[tokio::test(start_paused = true)]
async fn watch_timeouts_are_drawn_from_min_to_twice_min_and_min_is_never_below_five_minutes() {
    let (reflector, _, _) = setup(ReflectorConfig {
        min_watch_timeout: Duration::from_secs(10),
        ..list_watch()
    });
    assert_eq!(
        reflector.context.config.min_watch_timeout,
        MIN_WATCH_TIMEOUT
    );
    let (reflector, _, _) = setup(ReflectorConfig {
        min_watch_timeout: Duration::from_secs(1000),
        ..list_watch()
    });
    let drawn: Vec<u64> = (0..200)
        .map(|_| crate::watch::timeout(&reflector.context).parse().unwrap())
        .collect();
    assert!(drawn.iter().all(|t| (1000..2000).contains(t)), "{drawn:?}");
    assert!(
        drawn.iter().any(|t| *t < 1500) && drawn.iter().any(|t| *t >= 1500),
        "not spread: {drawn:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn too_many_requests_backs_off_at_least_retry_after_and_rewatches_without_relisting() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        let backoff = reflector.step(State::Watch(ResourceVersion(10))).await;
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
    assert!(matches!(next_state, State::Watch(_)), "{next_state:?}");
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_backs_off_and_rewatches_from_the_last_rv() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        let backoff = reflector.step(State::Watch(ResourceVersion(10))).await;
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
    let run = tokio::spawn(async move {
        let mut states = Vec::new();
        for _ in 0..2 {
            states.push(reflector.step(State::Watch(ResourceVersion(10))).await);
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
        matches!(states[0], State::Watch(_)),
        "retried at once: {:?}",
        states[0]
    );
    assert!(
        matches!(&states[1], State::Backoff { then, .. } if matches!(**then, State::List(_))),
        "past the deadline: {:?}",
        states[1]
    );
}

#[tokio::test(start_paused = true)]
async fn a_very_short_watch_is_an_error_that_backs_off_and_relists() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move { reflector.step(State::Watch(ResourceVersion(10))).await });
    let (_, send) = next(&mut handle).await;
    send.send_response(full(200, String::new()));
    let next_state = run.await.unwrap();
    assert!(
        matches!(&next_state, State::Backoff { then, .. } if matches!(**then, State::List(_))),
        "{next_state:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_watch_that_times_out_normally_is_reopened_from_where_it_got_to() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        let next = reflector.step(State::Watch(ResourceVersion(10))).await;
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
    let run = tokio::spawn(async move { reflector.step(State::Watch(ResourceVersion(10))).await });
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
async fn a_broken_stream_is_reopened_from_the_last_rv_without_relisting() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        let next = reflector.step(State::Watch(ResourceVersion(10))).await;
        assert!(matches!(next, State::Watch(_)), "{next:?}");
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
async fn a_relist_renews_the_internal_error_window() {
    let (mut reflector, _, mut handle) = setup(ReflectorConfig {
        max_internal_error_retry: Duration::from_secs(30),
        ..list_watch()
    });
    let state = watch_answered(&mut reflector, &mut handle, 10, internal_error()).await;
    assert!(matches!(state, State::Watch(_)), "{state:?}");
    tokio::time::sleep(Duration::from_secs(20)).await;
    let gone = event("ERROR", &status(410, "Expired", "too old"));
    let state = watch_answered(&mut reflector, &mut handle, 10, gone).await;
    assert!(relists(&state), "{state:?}");
    let State::Backoff { then, .. } = state else {
        unreachable!()
    };
    tokio::time::sleep(Duration::from_secs(15)).await;
    let step = reflector.step(*then);
    let answer = async {
        let (query, send) = next(&mut handle).await;
        assert_eq!(query["resourceVersion"], "10");
        send.send_response(full(200, list(20, &[], "")));
    };
    assert!(matches!(tokio::join!(step, answer).0, State::Watch(_)));
    // 35 s after the run began, with its last error 35 s ago: only because
    // client-go builds a new window for every watch after a list is this
    // error retried.
    let state = watch_answered(&mut reflector, &mut handle, 20, internal_error()).await;
    assert!(matches!(state, State::Watch(_)), "a new window: {state:?}");
}

#[tokio::test(start_paused = true)]
async fn a_quiet_minute_starts_a_new_internal_error_window_and_a_normal_end_does_not() {
    let (mut reflector, _, mut handle) = setup(ReflectorConfig {
        max_internal_error_retry: Duration::from_secs(30),
        ..list_watch()
    });
    let state = watch_answered(&mut reflector, &mut handle, 10, internal_error()).await;
    assert!(matches!(state, State::Watch(_)), "{state:?}");
    tokio::time::sleep(Duration::from_secs(61)).await;
    let state = watch_answered(&mut reflector, &mut handle, 10, internal_error()).await;
    assert!(
        matches!(state, State::Watch(_)),
        "61 s after the last internal error, a new run: {state:?}"
    );
    // A watch that ends normally does not end the run: 35 s after it
    // began, with the last error 35 s ago (< 1 min), the window is closed.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let state = watch_answered(&mut reflector, &mut handle, 10, bookmark(11, false)).await;
    assert!(matches!(state, State::Watch(_)), "{state:?}");
    tokio::time::sleep(Duration::from_secs(15)).await;
    let state = watch_answered(&mut reflector, &mut handle, 11, internal_error()).await;
    assert!(relists(&state), "the window closed: {state:?}");
}

#[tokio::test(start_paused = true)]
async fn a_malformed_line_ends_the_watch_which_reopens_from_the_last_rv_within_the_window() {
    let (mut reflector, store, mut handle) = setup(ReflectorConfig {
        max_internal_error_retry: Duration::from_secs(30),
        ..list_watch()
    });
    let lines = [
        event("ADDED", &cm("a", 11)),
        "{not json".to_owned(),
        event("ADDED", &cm("b", 12)),
    ]
    .join("\n");
    let state = watch_answered(&mut reflector, &mut handle, 10, lines).await;
    assert!(matches!(state, State::Watch(_)), "{state:?}");
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
    let lines = [
        event("ADDED", &cm("a", 11)),
        event("SURPRISE", &cm("b", 12)),
    ]
    .join("\n");
    let state = watch_answered(&mut reflector, &mut handle, 10, lines).await;
    assert!(relists(&state), "{state:?}");
    assert!(
        reflector
            .context
            .status
            .lock()
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains(r#"unknown watch event type "SURPRISE""#)),
        "{:?}",
        reflector.context.status.lock().last_error
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
    assert!(matches!(tokio::join!(step, answer).0, State::Watch(_)));
}

#[tokio::test(start_paused = true)]
async fn a_watch_is_very_short_only_if_it_ends_within_a_second_with_no_event() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    // One event, closed at once: not very short.
    let state = watch_answered(&mut reflector, &mut handle, 10, bookmark(11, false)).await;
    assert!(matches!(state, State::Watch(_)), "{state:?}");
    // No event, closed after exactly one second: not very short either.
    let step = reflector.step(State::Watch(ResourceVersion(11)));
    let answer = async {
        let (_, send) = next(&mut handle).await;
        tokio::time::sleep(VERY_SHORT_WATCH).await;
        send.send_response(full(200, String::new()));
    };
    let state = tokio::join!(step, answer).0;
    assert!(matches!(state, State::Watch(_)), "{state:?}");
    // No event, closed just under a second: very short.
    let step = reflector.step(State::Watch(ResourceVersion(11)));
    let answer = async {
        let (_, send) = next(&mut handle).await;
        tokio::time::sleep(VERY_SHORT_WATCH - Duration::from_millis(1)).await;
        send.send_response(full(200, String::new()));
    };
    let state = tokio::join!(step, answer).0;
    assert!(relists(&state), "{state:?}");
}

#[tokio::test(start_paused = true)]
async fn a_routine_410_is_not_logged_as_a_warning_but_a_very_short_watch_is() {
    let (logs, _guard) = Logs::capture();
    let (mut reflector, _, mut handle) = setup(list_watch());
    let gone = event(
        "ERROR",
        &status(410, "Expired", "too old resource version: 10 (20)"),
    );
    let state = watch_answered(&mut reflector, &mut handle, 10, gone).await;
    assert!(relists(&state), "{state:?}");
    assert_eq!(logs.at(tracing::Level::WARN), Vec::<String>::new());
    assert!(
        logs.at(tracing::Level::DEBUG)
            .iter()
            .any(|l| l.contains("backing off") && l.contains("410")),
        "{:?}",
        logs.at(tracing::Level::DEBUG)
    );
    let state = watch_answered(&mut reflector, &mut handle, 10, String::new()).await;
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
    for wait in [0, 30] {
        // At the start of the run, and exactly at its end: retried.
        tokio::time::sleep(Duration::from_secs(wait)).await;
        let state = watch_answered(&mut reflector, &mut handle, 10, internal_error()).await;
        assert!(matches!(state, State::Watch(_)), "{wait} s: {state:?}");
    }
    // Exactly a minute after the last error, a new run starts at once.
    tokio::time::sleep(retry::QUIET_RESET).await;
    let state = watch_answered(&mut reflector, &mut handle, 10, internal_error()).await;
    assert!(matches!(state, State::Watch(_)), "{state:?}");
    // 31 s into that run: past the window.
    tokio::time::sleep(Duration::from_secs(31)).await;
    let state = watch_answered(&mut reflector, &mut handle, 10, internal_error()).await;
    assert!(relists(&state), "{state:?}");
}

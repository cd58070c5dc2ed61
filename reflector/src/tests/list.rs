//! The List phase: the exact LIST queries client-go's pager rules produce,
//! the relist after an unavailable RV, and slow-list traces.

use super::*;

#[tokio::test(start_paused = true)]
async fn the_first_list_is_at_rv_0_and_the_watch_starts_at_its_rv_with_bookmarks() {
    let (mut reflector, store, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        let watch = reflector.step(State::List(SyncPoint::Start)).await;
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
        reflector.context.status.lock().last_sync_resource_version,
        Some(ResourceVersion(12))
    );
    // The freshness gauge's timestamp: set by the list, the event and the
    // bookmark (the wall clock, so only that it is recent is checked).
    let at = reflector
        .context
        .status
        .lock()
        .last_upstream_at
        .expect("set");
    assert!(
        at.elapsed().unwrap_or_default() < Duration::from_secs(60),
        "{at:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_relist_asks_for_the_last_synced_rv_unpaged_and_after_expired_relists_at_once_at_rv_empty()
 {
    let (mut reflector, store, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        let next = reflector
            .step(State::List(SyncPoint::At(ResourceVersion(40))))
            .await;
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
    assert_eq!(store.head().resource_version, ResourceVersion(60));
    assert!(
        matches!(next_state, State::Watch(ResourceVersion(60))),
        "a successful list is the sync point, no longer unavailable: {next_state:?}"
    );
    assert_eq!(
        reflector.context.status.lock().last_list_from.as_deref(),
        Some("")
    );
}

#[tokio::test(start_paused = true)]
async fn too_large_resource_version_in_its_old_timeout_form_also_relists_at_rv_empty() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        reflector
            .step(State::List(SyncPoint::At(ResourceVersion(40))))
            .await
    });
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
    assert!(matches!(run.await.unwrap(), State::Watch(_)));
}

#[tokio::test(start_paused = true)]
async fn a_paginated_answer_to_rv_0_means_no_watch_cache_so_later_lists_keep_paging() {
    let (mut reflector, store, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        let watch = reflector.step(State::List(SyncPoint::Start)).await;
        reflector.step(relist(watch)).await;
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
    assert_eq!(reflector.context.paging, Paging::NoWatchCache);
    assert_eq!(
        reflector.context.status.lock().last_list_requests,
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
    let run = tokio::spawn(async move {
        reflector
            .step(State::List(SyncPoint::At(ResourceVersion(3))))
            .await
    });
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
    let run = tokio::spawn(async move { reflector.step(State::List(SyncPoint::Start)).await });
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
    assert!(matches!(run.await.unwrap(), State::Watch(_)));
    assert_eq!(keys(&store), ["ns/a", "ns/b"]);
}

#[tokio::test(start_paused = true)]
async fn a_first_page_410_relists_at_once_at_rv_empty_without_an_unpaged_list() {
    let (mut reflector, store, mut handle) = setup(ReflectorConfig {
        page_size: Some(100),
        ..list_watch()
    });
    let run = tokio::spawn(async move {
        reflector
            .step(State::List(SyncPoint::At(ResourceVersion(40))))
            .await
    });
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
    assert!(matches!(run.await.unwrap(), State::Watch(_)));
    assert_eq!(keys(&store), ["ns/a"]);
}

#[tokio::test(start_paused = true)]
async fn a_paginated_answer_to_rv_empty_does_not_turn_paging_on_for_later_relists() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        let watch = reflector
            .step(State::List(SyncPoint::At(ResourceVersion(40))))
            .await;
        reflector.step(relist(watch)).await;
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
    assert_eq!(run.await.unwrap().context.paging, Paging::WatchCache);
}

#[tokio::test(start_paused = true)]
async fn an_expired_continue_token_after_rv_0_still_counts_as_paginated() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        reflector.step(State::List(SyncPoint::Start)).await;
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
    assert_eq!(reflector.context.paging, Paging::NoWatchCache);
    assert_eq!(reflector.context.status.lock().last_list_requests, 3);
}

#[tokio::test(start_paused = true)]
async fn a_list_slower_than_ten_seconds_is_logged_with_its_steps() {
    let (logs, _guard) = Logs::capture();
    let (mut reflector, _, mut handle) = setup(list_watch());
    let mut list_state = State::List(SyncPoint::Start);
    for (delay, slow) in [(Duration::from_secs(9), 0), (Duration::from_secs(11), 1)] {
        let step = reflector.step(list_state);
        let answer = async {
            let (_, send) = next(&mut handle).await;
            tokio::time::sleep(delay).await;
            send.send_response(full(200, list(10, &[cm("a", 5)], "")));
        };
        list_state = relist(tokio::join!(step, answer).0);
        assert_eq!(
            reflector.context.status.lock().slow_syncs,
            slow,
            "after {delay:?}"
        );
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
async fn a_one_page_answer_to_rv_0_keeps_later_relists_unpaged() {
    let (mut reflector, _, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        let watch = reflector.step(State::List(SyncPoint::Start)).await;
        reflector.step(relist(watch)).await;
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
    assert_eq!(run.await.unwrap().context.paging, Paging::WatchCache);
}

/// A LIST answered as a `meta.k8s.io/v1` Table (what a server sends when
/// asked for `as=Table`) has no `items`: read as a list it would be empty
/// and the relist would delete every object. Like client-go, the reflector
/// refuses it, backs off and lists again; the store keeps its objects.
#[tokio::test(start_paused = true)]
async fn a_table_answer_to_a_list_is_an_error_to_back_off_on_never_an_empty_list() {
    let (mut reflector, store, mut handle) = setup(list_watch());
    let run = tokio::spawn(async move {
        let watch = reflector.step(State::List(SyncPoint::Start)).await;
        let refused = reflector.step(relist(watch)).await;
        (reflector, refused)
    });
    let (_, send) = next(&mut handle).await;
    send.send_response(full(200, list(10, &[cm("a", 5), cm("b", 6)], "")));
    let (_, send) = next(&mut handle).await;
    let table = r#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"20"},"columnDefinitions":[],"rows":[]}"#;
    send.send_response(full(200, table.into()));
    let (mut reflector, refused) = run.await.unwrap();
    assert!(
        relists(&refused),
        "backs off, then lists again: {refused:?}"
    );
    assert_eq!(keys(&store), ["ns/a", "ns/b"], "nothing was deleted");
    assert_eq!(store.head().resource_version, ResourceVersion(10));
    let error = reflector.context.status.lock().last_error.clone().unwrap();
    assert!(
        error.contains("meta.k8s.io/v1 Table") && error.contains("v1 ConfigMapList"),
        "{error}"
    );
    // A list of another apiVersion, without a kind or without items is
    // refused the same way.
    for other in [
        r#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"20"},"items":[]}"#,
        r#"{"metadata":{"resourceVersion":"20"},"items":[]}"#,
        r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"20"}}"#,
    ] {
        let step = reflector.step(relist(State::Watch(ResourceVersion(10))));
        let answer = async {
            let (_, send) = next(&mut handle).await;
            send.send_response(full(200, other.into()));
        };
        let refused = tokio::join!(step, answer).0;
        assert!(relists(&refused), "{other}: {refused:?}");
    }
    assert_eq!(keys(&store), ["ns/a", "ns/b"]);
}

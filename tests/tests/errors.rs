//! Bad input gets a clear gRPC status and harms nobody else: the server
//! stays up and an open subscriber keeps receiving events.

use std::time::Duration;

use kube_fanout_client::proto::{GetRequest, ListRequest, ResourceRef, WatchRequest};
use kube_fanout_core::subscription::Limits;
use kube_fanout_tests::{controlplane::ControlPlane, fanout::Fanout, support::*};
use tonic::Code;
use tonic_types::StatusExt;

/// Opens a watch and returns the status its first message fails with.
async fn refused(fanout: &Fanout, request: WatchRequest) -> anyhow::Result<tonic::Status> {
    let mut client = fanout.client().await?;
    let outcome = match client.grpc().watch(request).await {
        Err(status) => Err(status),
        Ok(response) => response.into_inner().message().await.map(|_| ()),
    };
    match outcome {
        Err(status) => Ok(status),
        Ok(()) => anyhow::bail!("the watch was accepted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_statuses_and_leave_others_untouched() -> anyhow::Result<()> {
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, "errors").await?;
    let fanout = Fanout::start_with(cp.client.clone(), &["v1/configmaps"], |o| {
        o.limits = Limits {
            freshness_timeout: Duration::from_millis(500),
            ..Limits::default()
        }
    })
    .await?;
    let mut bystander = fanout.client().await?.watch(watch_list("errors")).await?;
    let (_, snapshot_rv) = read_snapshot(&mut bystander).await?;

    let huge_name = format!(
        "resource.resource \"{}\"… (1000 bytes) is 1000 bytes; at most 63 are accepted",
        "r".repeat(100)
    );
    let cases: Vec<(WatchRequest, Code, &str)> = vec![
        (
            WatchRequest::default(),
            Code::InvalidArgument,
            "names no resource",
        ),
        (
            WatchRequest {
                resource: Some(kube_fanout_client::resource("example.com/v1/widgets")?),
                ..WatchRequest::default()
            },
            Code::NotFound,
            "resource \"example.com/v1/widgets\" is not served here (ListResources shows the served types you may list)",
        ),
        (
            WatchRequest {
                resource: Some(ResourceRef {
                    version: "v1".into(),
                    resource: "r".repeat(1000),
                    ..ResourceRef::default()
                }),
                ..WatchRequest::default()
            },
            Code::InvalidArgument,
            // A name past its bound is quoted as its first 100 characters.
            &huge_name,
        ),
        (
            WatchRequest {
                resource_version: "abc".into(),
                ..watch_list("")
            },
            Code::InvalidArgument,
            "resourceVersion \"abc\" is not an unsigned integer",
        ),
        (
            WatchRequest {
                resource_version: "-5".into(),
                ..watch_list("")
            },
            Code::InvalidArgument,
            "\"-5\"",
        ),
        (
            WatchRequest {
                label_selector: "app in (a".into(),
                ..watch_list("")
            },
            Code::InvalidArgument,
            "invalid label selector \"app in (a\": unbalanced '('",
        ),
        (
            WatchRequest {
                field_selector: "spec.nodeName=n1".into(),
                ..watch_list("")
            },
            Code::InvalidArgument,
            "\"spec.nodeName\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
        ),
        (
            WatchRequest {
                resource_version: "1".into(),
                send_initial_events: false,
                ..watch_list("")
            },
            Code::OutOfRange,
            "resourceVersion 1 is too old",
        ),
        (
            WatchRequest {
                resource_version: (snapshot_rv.parse::<u64>()? + 1_000_000).to_string(),
                ..watch_list("")
            },
            Code::DeadlineExceeded,
            "too large resource version",
        ),
    ];
    for (request, code, message) in cases {
        let status = refused(&fanout, request.clone()).await?;
        assert_eq!(status.code(), code, "{status:?}");
        assert!(
            status.message().len() <= 300,
            "a bounded message: {:.400}",
            status.message()
        );
        assert!(
            status.message().contains(message),
            "{:?} lacks {message:?}",
            status.message()
        );
        if code == Code::OutOfRange {
            assert_eq!(
                status.get_details_error_info().map(|i| i.reason),
                Some("Expired".into())
            );
        }
    }

    // Operators see the watches that ended with an error, by reason.
    let metrics = http_get(fanout.metrics_addr.expect("metrics are served"), "/metrics").await?;
    for reason in ["Expired", "TooLargeResourceVersion"] {
        let line = format!(
            r#"kube_fanout_watch_errors_total{{resource="v1/configmaps",reason="{reason}"}} 1"#
        );
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} missing from\n{metrics}"
        );
    }

    let mut client = fanout.client().await?;
    let missing = client
        .grpc()
        .get(GetRequest {
            resource: Some(configmaps()),
            namespace: "errors".into(),
            name: "nope".into(),
            metadata_only: false,
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    assert!(
        missing
            .message()
            .contains("v1/configmaps \"errors/nope\" not found"),
        "{missing:?}"
    );
    let empty_list = client
        .grpc()
        .list(ListRequest {
            resource: Some(ResourceRef::default()),
            ..ListRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(empty_list.code(), Code::InvalidArgument);

    // An oversized request is refused by the transport, naming its size.
    let oversized = refused(
        &fanout,
        WatchRequest {
            label_selector: "x".repeat(5 << 20),
            ..watch_list("")
        },
    )
    .await?;
    assert_eq!(oversized.code(), Code::OutOfRange, "{oversized:?}");
    assert!(
        oversized.message().contains("message length too large"),
        "{oversized:?}"
    );

    // A subscriber that hangs up mid-snapshot costs nothing to the others.
    for i in 0..20 {
        create_configmap(&cp.client, "errors", &format!("cm-{i}"), "x").await?;
    }
    let mut quitter = fanout.client().await?.watch(watch_list("errors")).await?;
    next_event(&mut quitter).await?;
    drop(quitter);

    // The bystander, open all along, still gets every change.
    let mut names = Vec::new();
    while names.len() < 20 {
        let event = next_change(&mut bystander).await?;
        names.push(decode(&event)?.metadata.name.unwrap_or_default());
    }
    assert_eq!(
        names,
        (0..20).map(|i| format!("cm-{i}")).collect::<Vec<_>>()
    );
    let (after, _) =
        read_snapshot(&mut fanout.client().await?.watch(watch_list("errors")).await?).await?;
    assert_eq!(after.len(), 20);
    fanout.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_resource_at_startup_is_an_error_naming_it() -> anyhow::Result<()> {
    let cp = ControlPlane::start().await?;
    let err = Fanout::start(
        cp.client.clone(),
        &["v1/configmaps", "example.com/v1/widgets"],
    )
    .await
    .err()
    .expect("startup must fail");
    assert!(
        err.to_string()
            .contains("does not serve resource example.com/v1/widgets"),
        "{err}"
    );
    let err = Fanout::start(cp.client.clone(), &["v1/nothings"])
        .await
        .err()
        .expect("startup must fail");
    assert!(err.to_string().contains("v1/nothings"), "{err}");
    // An index field the type does not have, or on a type not served.
    let with_index = |flag: &'static str| {
        let client = cp.client.clone();
        async move {
            Fanout::start_with(client, &["v1/configmaps"], |o| {
                o.index_fields = vec![flag.parse().expect("GVR=FIELD")];
            })
            .await
            .err()
            .expect("startup must fail")
            .to_string()
        }
    };
    let err = with_index("v1/configmaps=data.x").await;
    assert!(
        err.starts_with(
            r#"--index-field v1/configmaps=data.x: "data.x" is not a known field selector"#
        ),
        "{err}"
    );
    let err = with_index("v1/pods=spec.nodeName").await;
    assert_eq!(
        err,
        "--index-field v1/pods: not a served resource type (add it with --resource, or allow it with --on-demand-resources)"
    );
    Ok(())
}

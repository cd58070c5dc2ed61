//! The real grpcurl (v1.9.3, `go install`ed) against kube-fanout on a real
//! API server: reflection, health, ListResources, Watch and errors, with no
//! proto files on the command line.

use kube_fanout_tests::{controlplane::ControlPlane, fanout::Fanout, support::*};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcurl_lists_describes_and_calls_the_service() -> anyhow::Result<()> {
    let grpcurl = tool("grpcurl")?;
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, "grpcurl").await?;
    create_configmap(&cp.client, "grpcurl", "shown-by-grpcurl", "hello").await?;
    let fanout =
        Fanout::start(cp.client.clone(), &["v1/configmaps", "apps/v1/deployments"]).await?;
    fanout.wait_synced().await?;
    let addr = fanout.addr.to_string();

    let list = run(&grpcurl, &plaintext(&[&addr, "list"])).await?;
    assert!(list.success, "{list:?}");
    for service in [
        "kubefanout.v1.KubeFanout",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(
            list.stdout.lines().any(|l| l == service),
            "{service} missing from {}",
            list.stdout
        );
    }

    let describe = run(
        &grpcurl,
        &plaintext(&[&addr, "describe", "kubefanout.v1.KubeFanout"]),
    )
    .await?;
    assert!(describe.success, "{describe:?}");
    for rpc in [
        "rpc Watch",
        "rpc List",
        "rpc Get",
        "rpc ListResources",
        "stream .kubefanout.v1.WatchEvent",
    ] {
        assert!(
            describe.stdout.contains(rpc),
            "{rpc} missing from {}",
            describe.stdout
        );
    }

    let health = run(
        &grpcurl,
        &plaintext(&[&addr, "grpc.health.v1.Health/Check"]),
    )
    .await?;
    assert!(health.stdout.contains("\"SERVING\""), "{health:?}");

    let resources = run(
        &grpcurl,
        &plaintext(&[&addr, "kubefanout.v1.KubeFanout/ListResources"]),
    )
    .await?;
    assert!(resources.success, "{resources:?}");
    let resources: serde_json::Value = serde_json::from_str(&resources.stdout)?;
    let served: Vec<(&str, &str, &str)> = resources["resources"]
        .as_array()
        .expect("a resources array")
        .iter()
        .map(|r| {
            (
                r["resource"]["resource"].as_str().unwrap_or_default(),
                r["kind"].as_str().unwrap_or_default(),
                r["syncState"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        served,
        [
            ("configmaps", "ConfigMap", "SYNCED"),
            ("deployments", "Deployment", "SYNCED")
        ]
    );

    let metrics = http_get(fanout.metrics_addr.expect("metrics are served"), "/metrics").await?;
    for line in [
        r#"kube_fanout_synced{resource="v1/configmaps"} 1"#,
        r#"kube_fanout_synced{resource="apps/v1/deployments"} 1"#,
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} missing from\n{metrics}"
        );
    }
    assert!(
        metrics.contains(r#"kube_fanout_objects{resource="v1/configmaps"}"#),
        "{metrics}"
    );

    let request = r#"{"resource":{"version":"v1","resource":"configmaps"},"namespace":"grpcurl","sendInitialEvents":true,"allowBookmarks":true}"#;
    let watch = run(
        &grpcurl,
        &plaintext(&[
            "-d",
            request,
            "-max-time",
            "3",
            &addr,
            "kubefanout.v1.KubeFanout/Watch",
        ]),
    )
    .await?;
    assert!(watch.stdout.contains(r#""type": "ADDED""#), "{watch:?}");
    assert!(watch.stdout.contains("shown-by-grpcurl"), "{watch:?}");
    assert!(watch.stdout.contains(r#""type": "BOOKMARK""#), "{watch:?}");
    assert!(
        watch
            .stdout
            .contains(r#"k8s.io/initial-events-end\":\"true\""#),
        "{watch:?}"
    );

    // Metadata only, as grpcurl users type it.
    let request = r#"{"resource":{"version":"v1","resource":"configmaps"},"namespace":"grpcurl","metadataOnly":true}"#;
    let list = run(
        &grpcurl,
        &plaintext(&["-d", request, &addr, "kubefanout.v1.KubeFanout/List"]),
    )
    .await?;
    assert!(list.success, "{list:?}");
    let list: serde_json::Value = serde_json::from_str(&list.stdout)?;
    let object: serde_json::Value =
        serde_json::from_str(list["objects"][0].as_str().unwrap_or_default())?;
    assert_eq!(object["kind"], "PartialObjectMetadata", "{list}");
    assert_eq!(object["metadata"]["name"], "shown-by-grpcurl", "{list}");
    assert!(object.get("data").is_none(), "{list}");

    let unknown = r#"{"resource":{"group":"example.com","version":"v1","resource":"widgets"}}"#;
    let refused = run(
        &grpcurl,
        &plaintext(&["-d", unknown, &addr, "kubefanout.v1.KubeFanout/Watch"]),
    )
    .await?;
    assert!(!refused.success);
    assert!(refused.stderr.contains("NotFound"), "{refused:?}");
    assert!(
        refused
            .stderr
            .contains(r#"resource "example.com/v1/widgets" is not served"#),
        "{refused:?}"
    );

    // Error details are readable: reflection serves google.rpc.ErrorInfo.
    let expired = r#"{"resource":{"version":"v1","resource":"configmaps"},"resourceVersion":"1"}"#;
    let expired = run(
        &grpcurl,
        &plaintext(&["-d", expired, &addr, "kubefanout.v1.KubeFanout/Watch"]),
    )
    .await?;
    assert!(!expired.success);
    for detail in [
        "Code: OutOfRange",
        r#""@type": "type.googleapis.com/google.rpc.ErrorInfo""#,
        r#""reason": "Expired""#,
        r#""domain": "kube-fanout.io""#,
        r#""resourceVersion": ""#,
    ] {
        assert!(
            expired.stderr.contains(detail),
            "{detail} missing: {expired:?}"
        );
    }

    fanout.stop().await?;
    Ok(())
}

fn plaintext<'a>(args: &[&'a str]) -> Vec<&'a str> {
    std::iter::once("-plaintext")
        .chain(args.iter().copied())
        .collect()
}

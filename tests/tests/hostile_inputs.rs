//! Hostile input on the real API server, against the kube-fanout binary
//! with its default flags (authentication and authorization on): a caller
//! with no rights and one allowed a single namespace send what an attacker
//! would (a 2 MB namespace, huge names and selectors, gzip-compressed
//! requests of megabytes, a hundred unpaged Lists at once), and
//!
//! - each gets a clear status naming the bound it broke;
//! - kube-fanout's RSS (its own process, read from /proc/PID/status) grows
//!   by less than [`RSS_GROWTH_BOUND`];
//! - a subscriber watching all the while receives every change, in order,
//!   with no error.
//!
//! Figures are printed (`-- --nocapture`).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, Result, bail, ensure};
use futures::future::join_all;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube_fanout_client::{
    Client, CompressionEncoding,
    proto::{EventType, GetRequest, ListRequest, ListResourcesRequest, WatchRequest},
};
use kube_fanout_tests::{
    clients::plaintext,
    controlplane::{ADMIN_TOKEN, ControlPlane, user_token},
    process::FanoutProcess,
    rbac::{grant, rule, until_api_server_lists, user},
    support::{configmaps, create_configmap, create_namespace, next_change, read_snapshot},
};
use tonic::Code;

/// The namespace the limited caller may read.
const ALLOWED: &str = "allowed";
/// Where the watched changes are written.
const OTHER: &str = "other";
/// ConfigMaps in [`ALLOWED`], each with [`OBJECT_BYTES`] of data: what
/// every unpaged List copies.
const OBJECTS: usize = 48;
const OBJECT_BYTES: usize = 256 * 1024;
/// Unpaged Lists the limited caller sends at once: its default
/// `--max-snapshots-per-caller`.
const PARALLEL_LISTS: usize = 100;
/// Changes the watching subscriber must receive while the attacks run.
const CHANGES: usize = 40;
/// The most kube-fanout's RSS may grow under the attacks: the default
/// `--max-list-bytes-in-flight` (256 MiB), twice over (a List's objects are
/// copied into its response and then into the response's encoding, both
/// alive while it is encoded), and 64 MiB for everything else. Without the
/// List budget the hundred Lists alone hold about 100 × 12 MiB, twice.
const RSS_GROWTH_BOUND: u64 = 2 * 256 * 1024 * 1024 + 64 * 1024 * 1024;

/// Resident set size of process `pid`, in bytes.
fn rss(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .context("no VmRSS")?
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse::<u64>()?;
    Ok(kb * 1024)
}

async fn connect(server: &FanoutProcess, token: &str) -> Result<Client> {
    plaintext(server.addr, token).await
}

fn list(namespace: &str) -> ListRequest {
    ListRequest {
        resource: Some(configmaps()),
        namespace: namespace.into(),
        ..ListRequest::default()
    }
}

/// Asserts `result` is refused with `code` and a message containing each
/// of `parts`, and that the message is short (the input quoted with a
/// bound).
fn refused<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, tonic::Status>,
    code: Code,
    parts: &[&str],
) -> Result<()> {
    let status = match result {
        Ok(answer) => bail!("{what}: answered {answer:?}"),
        Err(status) => status,
    };
    ensure!(status.code() == code, "{what}: {status:?}");
    for part in parts {
        ensure!(
            status.message().contains(part),
            "{what}: {:.400}",
            status.message()
        );
    }
    ensure!(
        status.message().len() < 600,
        "{what}: a {}-byte message",
        status.message().len()
    );
    println!("{what}: {:?} {:.200}", status.code(), status.message());
    Ok(())
}

/// The attacks of the caller with no rights at all (`alice`'s token is
/// valid, no role is bound to it).
async fn attacks_without_rights(server: &FanoutProcess, token: &str) -> Result<()> {
    let mut client = connect(server, token).await?;
    let grpc = client.grpc();
    let two_mb = "a".repeat(2 << 20);
    // Every one of these reached the decision cache before: 10 kept +59 MiB.
    for _ in 0..10 {
        refused(
            "ListResources, 2 MB namespace",
            grpc.list_resources(ListResourcesRequest {
                namespace: two_mb.clone(),
                resource: None,
            })
            .await,
            Code::OutOfRange,
            &["the limit is: 65536 bytes"],
        )?;
    }
    // Just past each field's bound but within the message bound: the
    // field's own refusal, before authorization.
    let namespace = "a".repeat(64);
    refused(
        "List, 64-byte namespace",
        grpc.list(list(&namespace)).await,
        Code::InvalidArgument,
        &["namespace \"aaaa", "is 64 bytes; at most 63 are accepted"],
    )?;
    refused(
        "ListResources, 64-byte namespace",
        grpc.list_resources(ListResourcesRequest {
            namespace: namespace.clone(),
            resource: None,
        })
        .await,
        Code::InvalidArgument,
        &["at most 63 are accepted"],
    )?;
    refused(
        "Get, 254-byte name",
        grpc.get(GetRequest {
            resource: Some(configmaps()),
            namespace: ALLOWED.into(),
            name: "n".repeat(254),
            metadata_only: false,
        })
        .await,
        Code::InvalidArgument,
        &["name \"nnnn", "is 254 bytes; at most 253 are accepted"],
    )?;
    refused(
        "Get, cluster-scoped ns/x",
        grpc.get(GetRequest {
            resource: Some(configmaps()),
            namespace: String::new(),
            name: format!("{ALLOWED}/cm-0"),
            metadata_only: false,
        })
        .await,
        Code::InvalidArgument,
        &["may not be '.' or '..' nor contain '/' or '%'"],
    )?;
    refused(
        "Watch, 101-term selector",
        grpc.watch(WatchRequest {
            resource: Some(configmaps()),
            label_selector: vec!["!a"; 101].join(","),
            ..WatchRequest::default()
        })
        .await,
        Code::InvalidArgument,
        &[
            "labelSelector \"!a,!a",
            "has 101 terms; at most 100 are accepted",
        ],
    )?;
    refused(
        "Watch, 5 KB field selector",
        grpc.watch(WatchRequest {
            resource: Some(configmaps()),
            field_selector: format!("metadata.name={}", "x".repeat(5000)),
            ..WatchRequest::default()
        })
        .await,
        Code::InvalidArgument,
        &["fieldSelector", "at most 4096 are accepted"],
    )?;
    refused(
        "Watch, resource of 64 bytes",
        grpc.watch(WatchRequest {
            resource: Some(kube_fanout_client::proto::ResourceRef {
                group: String::new(),
                version: "v1".into(),
                resource: "r".repeat(64),
            }),
            ..WatchRequest::default()
        })
        .await,
        Code::InvalidArgument,
        &["resource.resource", "at most 63"],
    )?;
    // A valid request is still refused for what it is: no rights.
    refused(
        "List, no rights",
        grpc.list(list(ALLOWED)).await,
        Code::PermissionDenied,
        &[r#"cannot list resource "configmaps" in API group "" in the namespace "allowed""#],
    )?;
    // A 3.6 MB `!a,!a,...` selector (1.2 M requirements once parsed) and a
    // 4 MiB namespace that gzip sends in a few KB: never decoded past the
    // message bound.
    refused(
        "Watch, 3.6 MB selector",
        grpc.watch(WatchRequest {
            resource: Some(configmaps()),
            label_selector: vec!["!a"; 1_200_000].join(","),
            ..WatchRequest::default()
        })
        .await,
        Code::OutOfRange,
        &["the limit is: 65536 bytes"],
    )?;
    let mut gzip = grpc.clone().send_compressed(CompressionEncoding::Gzip);
    for _ in 0..10 {
        refused(
            "ListResources, 4 MiB namespace in gzip",
            gzip.list_resources(ListResourcesRequest {
                namespace: "a".repeat(4 << 20),
                resource: None,
            })
            .await,
            Code::ResourceExhausted,
            &["size limit, of 65536 bytes, exceeded while decompressing"],
        )?;
        refused(
            "Watch, 4 MiB selector in gzip",
            gzip.watch(WatchRequest {
                resource: Some(configmaps()),
                label_selector: "!a,".repeat((4 << 20) / 3),
                ..WatchRequest::default()
            })
            .await,
            Code::ResourceExhausted,
            &["65536 bytes"],
        )?;
    }
    Ok(())
}

/// The attacks of the caller allowed to read configmaps in [`ALLOWED`]
/// only: a hundred unpaged Lists at once, and what ListResources tells it.
async fn attacks_with_one_namespace(
    server: &FanoutProcess,
    token: &str,
    expected: usize,
) -> Result<()> {
    let mut client = connect(server, token).await?;
    let answers = join_all((0..PARALLEL_LISTS).map(|_| {
        let mut grpc = client.grpc().clone();
        async move { grpc.list(list(ALLOWED)).await }
    }))
    .await;
    for answer in answers {
        let objects = answer?.into_inner().objects.len();
        ensure!(
            objects == expected,
            "a List of {objects} objects, not {expected}"
        );
    }
    // Its counts are its namespace's: its objects, its own watch.
    let _watch = client
        .grpc()
        .watch(WatchRequest {
            resource: Some(configmaps()),
            namespace: ALLOWED.into(),
            ..WatchRequest::default()
        })
        .await?;
    let status = client
        .grpc()
        .list_resources(ListResourcesRequest {
            namespace: ALLOWED.into(),
            resource: None,
        })
        .await?
        .into_inner()
        .resources;
    ensure!(status.len() == 1, "{status:?}");
    ensure!(
        (status[0].objects, status[0].subscribers) == (expected as u64, 1),
        "counts beyond its namespace: {} objects, {} subscribers",
        status[0].objects,
        status[0].subscribers
    );
    // Cluster-wide it may see nothing.
    let all = client
        .grpc()
        .list_resources(ListResourcesRequest::default())
        .await?
        .into_inner()
        .resources;
    ensure!(all.is_empty(), "{all:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_gets_clear_statuses_bounded_memory_and_no_lost_events() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let admin = cp.client.clone();
    for ns in [ALLOWED, OTHER] {
        create_namespace(&admin, ns).await?;
    }
    grant(
        &admin,
        ALLOWED,
        "read-configmaps",
        vec![rule(&["get", "list", "watch"], "configmaps")],
        vec![user("bob")],
    )
    .await?;
    let data = "d".repeat(OBJECT_BYTES);
    for i in 0..OBJECTS {
        create_configmap(&admin, ALLOWED, &format!("cm-{i}"), &data).await?;
    }
    let expected = Api::<ConfigMap>::namespaced(admin.clone(), ALLOWED)
        .list(&ListParams::default())
        .await?
        .items
        .len();
    // RBAC learns the binding through an informer: wait until the API
    // server itself allows it.
    until_api_server_lists(
        &cp,
        &user_token("bob"),
        ALLOWED,
        &ListParams::default().limit(1),
    )
    .await?;

    // The binary with its default flags; only addresses and credentials set.
    let server = FanoutProcess::serving(
        env!("CARGO_BIN_EXE_kube-fanout-under-test").as_ref(),
        &cp,
        &["--resource", "v1/configmaps"],
    )
    .await?;
    let pid = server.pid().context("kube-fanout exited")?;

    // The subscriber that must not notice: every configmap, all along.
    let mut watcher = connect(&server, ADMIN_TOKEN).await?;
    let mut events = watcher
        .grpc()
        .watch(kube_fanout_tests::support::watch_list(""))
        .await?
        .into_inner();
    read_snapshot(&mut events).await?;
    // It reads all along: every change, in order, nothing else.
    let reader = tokio::spawn(async move {
        for i in 0..CHANGES {
            let event = next_change(&mut events).await?;
            let cm = kube_fanout_tests::support::decode(&event)?;
            ensure!(
                event.r#type() == EventType::Added
                    && cm.metadata.name.as_deref() == Some(&format!("change-{i}")),
                "expected change-{i}, got {:?} {:?}",
                event.r#type(),
                cm.metadata.name
            );
        }
        anyhow::Ok(())
    });

    let baseline = rss(pid)?;
    let peak = Arc::new(AtomicU64::new(baseline));
    let done = Arc::new(AtomicBool::new(false));
    // A thread of its own, so that sampling never waits on the attacks'
    // work in the test's runtime.
    let sampler = std::thread::spawn({
        let (peak, done) = (peak.clone(), done.clone());
        move || {
            while !done.load(Ordering::SeqCst) {
                if let Ok(now) = rss(pid) {
                    peak.fetch_max(now, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    });
    // Changes written while the attacks run.
    let writer = tokio::spawn({
        let admin = admin.clone();
        async move {
            for i in 0..CHANGES {
                create_configmap(&admin, OTHER, &format!("change-{i}"), "x").await?;
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            anyhow::Ok(())
        }
    });
    let (alice, bob) = (user_token("alice"), user_token("bob"));
    let started = std::time::Instant::now();
    let (without, with_one) = tokio::join!(
        attacks_without_rights(&server, &alice),
        attacks_with_one_namespace(&server, &bob, expected),
    );
    without?;
    with_one?;
    writer.await??;
    let attacks_took = started.elapsed();
    done.store(true, Ordering::SeqCst);
    sampler.join().expect("the sampler panicked");

    reader.await??;
    let growth = peak.load(Ordering::SeqCst).saturating_sub(baseline);
    println!(
        "attacks took {attacks_took:?}; kube-fanout RSS {} MiB at the start, peak growth {} MiB (bound {} MiB)",
        baseline >> 20,
        growth >> 20,
        RSS_GROWTH_BOUND >> 20
    );
    ensure!(
        growth <= RSS_GROWTH_BOUND,
        "kube-fanout's RSS grew by {} MiB, more than {} MiB",
        growth >> 20,
        RSS_GROWTH_BOUND >> 20
    );
    Ok(())
}

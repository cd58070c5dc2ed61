//! A slow subscriber cut off for lag can resume from the resourceVersion
//! the cut-off names, on the real API server (issue 27's last point).
//!
//! The subscriber reads through a 4 KiB HTTP/2 window far slower than the
//! events its label selector lets through come, on a kube-fanout keeping
//! 10 s of history and cutting a subscriber off at 600 owed events; once
//! cut off, it resumes from the RV the cut-off names and reads at full
//! speed until it has caught up, then slowly again (a leaf that hiccups).
//! Owing 600 events, a subscriber that receives a third of them is 1,800
//! events (at 100 writes a second, 18 s) behind: the old bound came after
//! the history had dropped its resume point, and every resume was Expired.
//! Now it is cut off once half the history is behind it, and each resume
//! continues from the named RV: what the test requires, over at least
//! three cut-offs.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_fanout_client::proto::{
    EventType, ResourceRef, WatchRequest, kube_fanout_client::KubeFanoutClient,
};
use kube_fanout_core::store::HistoryLimits;
use kube_fanout_proto::{EXPIRED, SUBSCRIBER_LAGGED, ends_initial_events};
use kube_fanout_tests::{controlplane::ControlPlane, fanout::Fanout, support::create_namespace};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::{Code, transport::Endpoint};
use tonic_types::StatusExt;

const NAMESPACE: &str = "lag";
/// ConfigMaps written to; a third of them labelled `app=mine`.
const OBJECTS: usize = 30;
/// Each ConfigMap carries this much data, so that the 32 KiB a stream's
/// encoder hands HTTP/2 at a time holds a few events, not hundreds: the
/// slow reader then takes well under a second to read what was in flight.
const PAYLOAD: usize = 3000;
/// How long the slow subscriber takes over each event: half the rate of
/// its events when they come at 25 a second (75 writes a second).
const READ_DELAY: Duration = Duration::from_millis(80);
/// The writes a second the writers must reach, or the subscriber never
/// falls behind and the test proves nothing.
const MIN_WRITE_RATE: f64 = 75.0;
const CUT_OFFS: usize = 3;
const WITHIN: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscriber_cut_off_for_lag_resumes_from_the_named_rv() -> Result<()> {
    kube_fanout_tests::init_logging();
    let cp = ControlPlane::start().await?;
    let client = cp.client.clone();
    create_namespace(&client, NAMESPACE).await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    for i in 0..OBJECTS {
        api.create(&PostParams::default(), &configmap(i, 0)).await?;
    }
    let fanout = Fanout::start_with(client.clone(), &["v1/configmaps"], |o| {
        o.history = HistoryLimits {
            age: Duration::from_secs(10),
            ..HistoryLimits::default()
        };
        o.limits.max_lag_events = 600;
    })
    .await?;
    fanout.wait_synced().await?;

    let stop = CancellationToken::new();
    let writers: Vec<_> = (0..3)
        .map(|w| tokio::spawn(write(api.clone(), w, stop.clone())))
        .collect();
    let started = Instant::now();
    let outcome = subscribe(&fanout, started + WITHIN).await;
    stop.cancel();
    let mut writes = 0;
    for w in writers {
        writes += w.await??;
    }
    let rate = writes as f64 / started.elapsed().as_secs_f64();
    let seen = outcome?;
    println!(
        "{writes} writes ({rate:.0}/s); {} cut-offs, each {:?} behind the head as the resume began; resumes {:?}",
        seen.cut_offs.len(),
        seen.cut_offs.iter().map(|c| c.behind).collect::<Vec<_>>(),
        seen.cut_offs.iter().map(|c| &c.resumed).collect::<Vec<_>>(),
    );
    ensure!(
        rate >= MIN_WRITE_RATE,
        "the writers reached {rate:.0} writes a second, below the {MIN_WRITE_RATE} the test needs to put the subscriber behind"
    );
    ensure!(
        seen.cut_offs.len() >= CUT_OFFS,
        "{} cut-offs within {WITHIN:?}",
        seen.cut_offs.len()
    );
    for cut in &seen.cut_offs {
        ensure!(
            cut.resumed == Resumed::Exactly,
            "a resume from the cut-off's RV {} was {:?}",
            cut.rv,
            cut.resumed
        );
    }
    Ok(())
}

fn configmap(i: usize, generation: u64) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(format!("cm-{i}"));
    let app = if i.is_multiple_of(3) {
        "mine"
    } else {
        "theirs"
    };
    cm.metadata.labels = Some([("app".to_owned(), app.to_owned())].into());
    cm.data = Some(BTreeMap::from([
        ("generation".to_owned(), generation.to_string()),
        ("payload".to_owned(), "x".repeat(PAYLOAD)),
    ]));
    cm
}

/// Patches the ConfigMaps in turn until `stop`; how many writes it made.
async fn write(api: Api<ConfigMap>, writer: usize, stop: CancellationToken) -> Result<u64> {
    let mut writes = 0;
    let mut i = writer;
    while !stop.is_cancelled() {
        let patch =
            Patch::Merge(serde_json::json!({ "data": { "generation": writes.to_string() } }));
        let params = PatchParams::default();
        let name = format!("cm-{}", i % OBJECTS);
        tokio::select! {
            () = stop.cancelled() => break,
            patched = api.patch(&name, &params, &patch) => {
                patched.with_context(|| format!("patching {name}"))?;
            }
        }
        writes += 1;
        i += 3;
    }
    Ok(writes)
}

/// How a resume from a cut-off's RV went.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Resumed {
    /// Its first event came after the RV, and no other ending before it.
    Exactly,
    /// Answered Expired: the history no longer held the RV.
    Expired,
    /// Something else.
    Other(String),
}

/// One lag cut-off and how the resume from it went.
#[derive(Debug)]
struct CutOff {
    rv: u64,
    /// The head's RV, less the cut-off's, when the resume began
    /// (etcd revisions: every write in the cluster counts).
    behind: u64,
    resumed: Resumed,
}

/// What the subscriber saw.
#[derive(Debug, Default)]
struct Seen {
    cut_offs: Vec<CutOff>,
}

/// Watches `app=mine` slowly until `CUT_OFFS` cut-offs have been resumed,
/// or `deadline`.
async fn subscribe(fanout: &Fanout, deadline: Instant) -> Result<Seen> {
    let channel = Endpoint::from_shared(format!("http://{}", fanout.addr))?
        .initial_stream_window_size(Some(4096))
        .initial_connection_window_size(Some(8192))
        .connect()
        .await?;
    let mut grpc = KubeFanoutClient::new(channel);
    let mut seen = Seen::default();
    // The first watch takes a snapshot; each later one resumes.
    let mut from: Option<u64> = None;
    // The cut-off whose resume is being watched, if any.
    let mut resuming: Option<(u64, u64)> = None;
    // After a resume: the head's RV to catch up with at full speed.
    let mut fast_until: Option<u64> = None;
    while seen.cut_offs.len() < CUT_OFFS {
        if Instant::now() > deadline {
            break;
        }
        let request = WatchRequest {
            resource: Some(ResourceRef {
                group: String::new(),
                version: "v1".into(),
                resource: "configmaps".into(),
            }),
            namespace: NAMESPACE.into(),
            label_selector: "app=mine".into(),
            resource_version: from.map(|rv| rv.to_string()).unwrap_or_default(),
            send_initial_events: from.is_none(),
            allow_bookmarks: true,
            ..WatchRequest::default()
        };
        let mut stream = match grpc.watch(request).await {
            Ok(response) => response.into_inner(),
            Err(status) => {
                seen.cut_offs.push(failed_resume(resuming.take(), &status)?);
                from = None;
                continue;
            }
        };
        let mut in_snapshot = from.is_none();
        loop {
            let message = tokio::time::timeout_at(deadline, stream.message()).await;
            let Ok(message) = message else {
                return Ok(seen);
            };
            match message {
                Ok(Some(event)) => {
                    let rv: u64 = event.resource_version.parse()?;
                    if let Some((cut_at, behind)) = resuming.take() {
                        let resumed = if rv > cut_at {
                            Resumed::Exactly
                        } else {
                            Resumed::Other(format!("first event at RV {rv}"))
                        };
                        seen.cut_offs.push(CutOff {
                            rv: cut_at,
                            behind,
                            resumed,
                        });
                    }
                    if in_snapshot {
                        in_snapshot = !ends_initial_events(&event);
                    } else if event.r#type() != EventType::Bookmark || !event.resync {
                        from = Some(rv);
                    }
                    // Slow until cut off; after a resume, at full speed
                    // until it has caught up with where the head was.
                    if fast_until.is_some_and(|head| rv >= head) {
                        fast_until = None;
                    }
                    if !in_snapshot && fast_until.is_none() {
                        tokio::time::sleep(READ_DELAY).await;
                    }
                }
                Ok(None) => bail!("the stream closed without a status"),
                Err(status)
                    if status.code() == Code::ResourceExhausted
                        && reason(&status) == SUBSCRIBER_LAGGED =>
                {
                    let rv = status
                        .get_details_error_info()
                        .and_then(|i| i.metadata.get("resourceVersion").cloned())
                        .context("a cut-off without its resourceVersion")?
                        .parse()?;
                    ensure!(
                        from.is_none_or(|at| rv >= at),
                        "the cut-off names RV {rv}, behind the last resume point {from:?}"
                    );
                    let (head, oldest) = fanout_head(fanout).await?;
                    println!("cut off at {rv}: head {head}, oldest resumable {oldest}");
                    resuming = Some((rv, head.saturating_sub(rv)));
                    fast_until = Some(head);
                    from = Some(rv);
                    break;
                }
                Err(status) => {
                    seen.cut_offs.push(failed_resume(resuming.take(), &status)?);
                    from = None;
                    break;
                }
            }
        }
    }
    Ok(seen)
}

/// The cut-off `resuming` (its RV, and how far behind), whose resume
/// failed with `status`; a failure with no resume under way ends the test.
fn failed_resume(resuming: Option<(u64, u64)>, status: &tonic::Status) -> Result<CutOff> {
    let Some((rv, behind)) = resuming else {
        bail!("the watch failed: {status}");
    };
    let resumed = if reason(status) == EXPIRED {
        Resumed::Expired
    } else {
        Resumed::Other(status.to_string())
    };
    Ok(CutOff {
        rv,
        behind,
        resumed,
    })
}

/// The served configmaps' RV on `fanout` now, and the oldest it can
/// resume from.
async fn fanout_head(fanout: &Fanout) -> Result<(u64, u64)> {
    let mut client = fanout.client().await?;
    let status = client
        .list_resources()
        .await?
        .resources
        .into_iter()
        .find(|r| {
            r.resource
                .as_ref()
                .is_some_and(|r| r.resource == "configmaps")
        })
        .context("configmaps not served")?;
    Ok((
        status.resource_version.parse()?,
        status.oldest_resumable_resource_version.parse()?,
    ))
}

fn reason(status: &tonic::Status) -> String {
    status
        .get_details_error_info()
        .map(|i| i.reason)
        .unwrap_or_default()
}

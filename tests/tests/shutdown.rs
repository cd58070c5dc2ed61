//! kube-fanout stops promptly on SIGTERM, as the kubelet expects within a
//! pod's grace period: also while subscribers hold open watches, while
//! its API server is gone (the reflector then sits in a backoff or a
//! connection attempt, which must not hold the process up), and while
//! slow subscribers have a backlog queued, which it does not wait for
//! (they resume on another replica, exactly).

use std::time::Duration;

use anyhow::Result;
use kube_fanout_proto::v1::{WatchEvent, kube_fanout_client::KubeFanoutClient};
use kube_fanout_tests::{
    controlplane::ControlPlane,
    eventually::eventually,
    faults::{
        replica::Replica,
        sigterm::{self, SigtermPlan},
    },
    support::{read_snapshot, watch_list},
};
use tonic::Streaming;

const BINARY: &str = env!("CARGO_BIN_EXE_kube-fanout-under-test");

/// The binary under test: this build's, or `FAULTS_SERVER` (another
/// build's, to measure it the same way).
fn binary() -> std::path::PathBuf {
    std::env::var_os("FAULTS_SERVER").map_or_else(|| BINARY.into(), Into::into)
}

/// The longest a SIGTERM may take to end the process. Shutdown ends every
/// open watch at once (subscribers resume on another replica); nothing
/// else is worth waiting for.
const BOUND: Duration = Duration::from_secs(2);

/// An open watch on `replica`, past its snapshot.
async fn watching(replica: &Replica) -> Result<Streaming<WatchEvent>> {
    let mut client = KubeFanoutClient::connect(format!("http://{}", replica.addr)).await?;
    let mut stream = client.watch(watch_list("default")).await?.into_inner();
    read_snapshot(&mut stream).await?;
    Ok(stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_it_promptly_with_open_watches_and_with_the_api_server_gone() -> Result<()> {
    kube_fanout_tests::init_logging();
    let mut cp = ControlPlane::start().await?;
    let dir = tempfile::tempdir()?;
    let binary = binary();
    let start = |name| Replica::start(name, &binary, &cp.kubeconfig, &[], dir.path());

    let mut healthy = start("healthy").await?;
    let _open = watching(&healthy).await?;
    let took = healthy.terminate(BOUND).await?;
    println!("SIGTERM with an open watch: exited after {took:?}");

    let mut orphaned = start("orphaned").await?;
    let _open = watching(&orphaned).await?;
    cp.kill_apiserver().await?;
    // Until the reflector has found its watch broken and retries.
    eventually("the reflector noticing its API server was gone")
        .until(
            async || orphaned.status().await,
            |status| !status.last_error.is_empty(),
        )
        .await?;
    let took = orphaned.terminate(BOUND).await?;
    println!("SIGTERM with the API server gone: exited after {took:?}");
    Ok(())
}

/// 30 subscribers on one replica, 5 of them reading an event every 200 ms
/// through 4 KiB windows, far behind as it is told to stop: it exits
/// within the bound all the same, every subscriber's stream on it ends
/// UNAVAILABLE (with the resourceVersion to resume from, or with its
/// connection when its client had not read what was ahead of that), each
/// resumes on the other replica, and the checker finds nothing lost or
/// doubled. (With the process waiting for its slow readers to drain, the
/// SIGTERM outlived the bound.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_slow_readers_ends_every_watch_at_once_and_each_resumes_exactly_elsewhere()
-> Result<()> {
    kube_fanout_tests::init_logging();
    let plan = SigtermPlan {
        subscribers: 30,
        slow: 5,
        slow_read: Duration::from_millis(200),
        writers: 2,
        backlog: 100,
        exit_within: BOUND,
        seed: 3,
    };
    let report = sigterm::run(&plan, &binary()).await?;
    println!("{report:#?}");
    assert!(report.exited_after <= BOUND, "{:?}", report.exited_after);
    assert!(report.backlog >= plan.backlog);
    assert_eq!(
        report.shutting_down + report.connection_closed,
        plan.subscribers
    );
    assert!(
        report.slow_connection_closed > 0,
        "no slow reader was still behind when its replica stopped"
    );
    assert_eq!(report.resumed_on_b, plan.subscribers);
    assert!(
        report.violations.is_empty(),
        "{} violations of the Watch contract: {:#?}",
        report.violations.len(),
        &report.violations[..report.violations.len().min(20)]
    );
    Ok(())
}

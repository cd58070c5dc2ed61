//! kube-fanout stops promptly on SIGTERM, as the kubelet expects within a
//! pod's grace period: also while subscribers hold open watches, and while
//! its API server is gone (the reflector then sits in a backoff or a
//! connection attempt, which must not hold the process up).

use std::time::Duration;

use anyhow::Result;
use kube_fanout_proto::v1::{WatchEvent, kube_fanout_client::KubeFanoutClient};
use kube_fanout_tests::{
    controlplane::ControlPlane,
    eventually::eventually,
    faults::replica::Replica,
    support::{read_snapshot, watch_list},
};
use tonic::Streaming;

const BINARY: &str = env!("CARGO_BIN_EXE_kube-fanout-under-test");

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
    let start = |name| Replica::start(name, BINARY.as_ref(), &cp.kubeconfig, &[], dir.path());

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

//! Readiness follows the reflectors: kube-fanout turns NOT_SERVING (for
//! `kubefanout.v1.KubeFanout`, what the chart's readiness probe asks) when
//! a reflector has failed for longer than `--unready-after-seconds`
//! without opening a watch, and SERVING again once it follows the API
//! server; liveness (`""`) stays SERVING throughout. Both ways a replica
//! goes stale on a real API server: the API server gone, and an identity
//! that may list but not watch (it can only relist, ever staler).

use std::time::Duration;

use anyhow::Result;
use kube_fanout_tests::{
    controlplane::{ControlPlane, user_token},
    eventually::eventually,
    fanout::Fanout,
    rbac::{grant, rule, user},
    support,
};
use tonic_health::pb::health_check_response::ServingStatus;

const READINESS: &str = "kubefanout.v1.KubeFanout";
const GRACE: Duration = Duration::from_secs(2);

async fn health(fanout: &Fanout, service: &str) -> Result<ServingStatus> {
    support::health(fanout.addr, service).await
}

/// Waits until readiness says `want`; how long that took.
async fn readiness_becomes(fanout: &Fanout, want: ServingStatus) -> Result<Duration> {
    let started = tokio::time::Instant::now();
    eventually(format!("readiness {want:?}"))
        .within(Duration::from_secs(60))
        .until(async || health(fanout, READINESS).await, |now| *now == want)
        .await?;
    Ok(started.elapsed())
}

async fn start(client: kube::Client) -> Result<Fanout> {
    Fanout::start_with(client, &["v1/configmaps"], |o| {
        o.unready_after = Some(GRACE)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_turns_off_while_the_api_server_is_gone_and_back_on_after() -> Result<()> {
    kube_fanout_tests::init_logging();
    let mut cp = ControlPlane::start().await?;
    let fanout = start(cp.client.clone()).await?;
    fanout.wait_synced().await?;
    readiness_becomes(&fanout, ServingStatus::Serving).await?;

    cp.kill_apiserver().await?;
    let took = readiness_becomes(&fanout, ServingStatus::NotServing).await?;
    println!("NOT_SERVING {took:?} after the API server was killed (grace {GRACE:?})");
    assert!(took >= GRACE, "not ready after only {took:?}");
    assert_eq!(
        health(&fanout, "").await?,
        ServingStatus::Serving,
        "liveness"
    );

    cp.restart_apiserver().await?;
    let took = readiness_becomes(&fanout, ServingStatus::Serving).await?;
    println!("SERVING again {took:?} after the API server came back");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_that_may_list_but_not_watch_is_not_ready() -> Result<()> {
    kube_fanout_tests::init_logging();
    let cp = ControlPlane::start().await?;
    grant(
        &cp.client,
        "",
        "list-only",
        vec![rule(&["list"], "configmaps")],
        vec![user("alice")],
    )
    .await?;

    let fanout = start(cp.client_with_token(&user_token("alice"))?).await?;
    // The LIST fallback syncs it; every watch after it is forbidden.
    fanout.wait_synced().await?;
    readiness_becomes(&fanout, ServingStatus::NotServing).await?;
    assert_eq!(
        health(&fanout, "").await?,
        ServingStatus::Serving,
        "liveness"
    );
    Ok(())
}

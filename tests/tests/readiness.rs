//! Readiness follows the reflectors: kube-fanout turns NOT_SERVING (for
//! `kubefanout.v1.KubeFanout`, what the chart's readiness probe asks) when
//! a reflector has failed for longer than `--unready-after-seconds`
//! without opening a watch, and SERVING again once it follows the API
//! server; liveness (`""`) stays SERVING throughout. Both ways a replica
//! goes stale on a real API server: the API server gone, and an identity
//! that may list but not watch (it can only relist, ever staler).

use std::time::Duration;

use anyhow::{Result, bail};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::api::{Api, PostParams};
use kube_fanout_tests::{
    controlplane::{ControlPlane, user_token},
    fanout::Fanout,
};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

const READINESS: &str = "kubefanout.v1.KubeFanout";
const GRACE: Duration = Duration::from_secs(2);

async fn health(fanout: &Fanout, service: &str) -> Result<ServingStatus> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", fanout.addr))?
        .connect()
        .await?;
    let mut client = HealthClient::new(channel);
    let answer = client
        .check(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await?;
    Ok(answer.into_inner().status())
}

/// Waits until readiness says `want`; how long that took.
async fn readiness_becomes(fanout: &Fanout, want: ServingStatus) -> Result<Duration> {
    let started = tokio::time::Instant::now();
    while health(fanout, READINESS).await? != want {
        if started.elapsed() > Duration::from_secs(60) {
            bail!("readiness not {want:?} within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
    let mut role = ClusterRole::default();
    role.metadata.name = Some("list-only".into());
    role.rules = Some(vec![PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["configmaps".into()]),
        verbs: vec!["list".into()],
        ..PolicyRule::default()
    }]);
    Api::<ClusterRole>::all(cp.client.clone())
        .create(&PostParams::default(), &role)
        .await?;
    let mut binding = ClusterRoleBinding::default();
    binding.metadata.name = Some("list-only".into());
    binding.role_ref = RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "ClusterRole".into(),
        name: "list-only".into(),
    };
    binding.subjects = Some(vec![Subject {
        kind: "User".into(),
        name: "alice".into(),
        api_group: Some("rbac.authorization.k8s.io".into()),
        ..Subject::default()
    }]);
    Api::<ClusterRoleBinding>::all(cp.client.clone())
        .create(&PostParams::default(), &binding)
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

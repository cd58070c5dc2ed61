//! A SIGTERM under load, on the real control plane: two replicas, A and
//! B, writers, and subscribers all on A, some of them reading slowly
//! through small HTTP/2 windows with a backlog at A when it is told to
//! stop. How long A takes to exit is measured; every subscriber resumes on
//! B, and the [`checker`](super::checker) replays each one's whole life
//! against the truth: nothing lost or doubled across the stop.

use std::{
    sync::{Arc, RwLock},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use tokio::{sync::watch, time::Instant};
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tracing::Instrument;

use super::{
    checker::{self, Figures, Violation},
    model::Filter,
    replica::Replica,
    subscriber::{self, Behaviour, Ending, Entry, Final, Life},
    truth::Truth,
    writer,
};
use crate::{controlplane::ControlPlane, eventually::eventually, support};

/// The shape of a run.
#[derive(Debug, Clone)]
pub struct SigtermPlan {
    /// Subscribers, all on A.
    pub subscribers: usize,
    /// Of them, how many read slowly.
    pub slow: usize,
    /// A slow reader's pause after each event.
    pub slow_read: Duration,
    /// Concurrent writers.
    pub writers: usize,
    /// How many events A's slowest subscriber must have left to read
    /// before A is told to stop.
    pub backlog: u64,
    /// The longest A may take to exit after SIGTERM.
    pub exit_within: Duration,
    /// The random seed.
    pub seed: u64,
}

/// What a run measured and found.
#[derive(Debug)]
pub struct SigtermReport {
    /// How long A took to exit after SIGTERM.
    pub exited_after: Duration,
    /// A's slowest subscriber's backlog (events) as A was told to stop.
    pub backlog: u64,
    /// Subscribers whose stream on A ended UNAVAILABLE with the
    /// resourceVersion to resume from (ShuttingDown), and those whose
    /// stream went with its connection (a transport error).
    pub shutting_down: usize,
    /// See `shutting_down`.
    pub connection_closed: usize,
    /// Of the slow readers, how many ended with the connection.
    pub slow_connection_closed: usize,
    /// Subscribers that resumed on B after their stream on A ended.
    pub resumed_on_b: usize,
    /// The subscribers' figures, summed.
    pub figures: Figures,
    /// Every violation of the Watch contract found.
    pub violations: Vec<Violation>,
}

/// Runs `plan` with `binary` as kube-fanout.
pub async fn run(plan: &SigtermPlan, binary: &std::path::Path) -> Result<SigtermReport> {
    let cp = ControlPlane::start().await?;
    let namespaces: Vec<String> = ["sigterm-a", "sigterm-b"].map(String::from).to_vec();
    for ns in &namespaces {
        support::create_namespace(&cp.client, ns).await?;
    }
    let truth = Truth::start(cp.client.clone()).await?;
    let dir = cp.dir().to_owned();
    // No lag cut-off before the signal: the slow readers' backlog is what
    // the stop must not wait for.
    let flags = [
        "--progress-bookmark-seconds=1".to_owned(),
        "--max-lag-events=1000000".to_owned(),
    ];
    let mut a = Replica::start("A", binary, &cp.kubeconfig, &flags, &dir).await?;
    let b = Replica::start("B", binary, &cp.kubeconfig, &flags, &dir).await?;
    let addresses: subscriber::Addresses = Arc::new(RwLock::new(vec![a.addr, b.addr]));

    let stop_writing = CancellationToken::new();
    let writers: Vec<_> = (0..plan.writers)
        .map(|i| {
            tokio::spawn(
                writer::write(
                    cp.client.clone(),
                    namespaces.clone(),
                    plan.seed * 100 + i as u64,
                    stop_writing.clone(),
                )
                .instrument(tracing::info_span!("writer", i)),
            )
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(300);
    let (done_tx, done_rx) = watch::channel(None);
    let slow_ms = plan.slow_read.as_millis() as u64;
    let subscribers: Vec<_> = (0..plan.subscribers)
        .map(|i| {
            let behaviour = Behaviour {
                id: plan.seed as usize * 1000 + i,
                // Everything: each sees every change, so that the slow
                // ones fall behind whatever the seed.
                filter: Filter::default(),
                slow: i < plan.slow,
                first: 0,
                sticky: true,
                bookmarks: true,
                compression: None,
                max_connections: 100,
                // Nobody hangs up: each stream on A lasts until A stops.
                hang_up_ms: (600_000, 600_001),
                slow_read_ms: (slow_ms, slow_ms + 1),
            };
            tokio::spawn(
                subscriber::run(behaviour, addresses.clone(), done_rx.clone(), deadline)
                    .instrument(tracing::info_span!("subscriber", i)),
            )
        })
        .collect();

    // Every subscriber live on A, and the slowest owing `backlog` events.
    let subscribers_on =
        async |replica: &Replica| -> Result<u64> { Ok(replica.status().await?.subscribers) };
    let wanted = plan.subscribers as u64;
    eventually("every subscriber watching A")
        .within(Duration::from_secs(60))
        .until(async || subscribers_on(&a).await, |n| *n == wanted)
        .await?;
    let backlog = eventually(format!(
        "A's slowest subscriber {} events behind",
        plan.backlog
    ))
    .within(Duration::from_secs(120))
    .every(Duration::from_millis(200))
    .until(async || lag_events(&a).await, |lag| *lag >= plan.backlog)
    .await?;

    tracing::info!(backlog, "SIGTERM to A");
    let exited_after = a.terminate(plan.exit_within).await?;

    eventually("every subscriber watching B")
        .within(Duration::from_secs(60))
        .until(async || subscribers_on(&b).await, |n| *n == wanted)
        .await?;
    truth
        .wait_changes(
            truth.changes() + 200,
            Instant::now() + Duration::from_secs(60),
        )
        .await?;
    stop_writing.cancel();
    for w in writers {
        w.await??;
    }
    let final_rv = writer::mark(&cp.client, &namespaces[0], "final").await?;
    done_tx.send_replace(Some(Final {
        rv: final_rv,
        until: Instant::now() + Duration::from_secs(60),
    }));
    let mut lives: Vec<Life> = Vec::new();
    for s in subscribers {
        let life = tokio::time::timeout(Duration::from_secs(120), s)
            .await
            .context("a subscriber did not stop")??;
        lives.push(life);
    }
    let after = writer::mark(&cp.client, &namespaces[0], "after").await?;
    truth.wait_for(after, Duration::from_secs(60)).await?;
    let log = truth.log();

    let mut report = SigtermReport {
        exited_after,
        backlog,
        shutting_down: 0,
        connection_closed: 0,
        slow_connection_closed: 0,
        resumed_on_b: 0,
        figures: Figures::default(),
        violations: Vec::new(),
    };
    for life in &lives {
        if let Some(reason) = &life.gave_up {
            bail!("subscriber {} gave up: {reason}", life.id);
        }
        match first_ending(life) {
            Some(Ending::Failed {
                code: Code::Unavailable,
                reason,
                ..
            }) if reason == kube_fanout_proto::SHUTTING_DOWN => report.shutting_down += 1,
            Some(Ending::Failed {
                // Its connection closed under it: UNAVAILABLE from
                // grpc-go, UNKNOWN ("h2 protocol error") from tonic.
                code: Code::Unavailable | Code::Unknown,
                reason,
                ..
            }) if reason.is_empty() => {
                report.connection_closed += 1;
                report.slow_connection_closed += usize::from(life.slow);
            }
            other => bail!("subscriber {}'s stream on A ended with {other:?}", life.id),
        }
        let (violations, figures) = checker::check(&log, life);
        report.resumed_on_b += usize::from(
            figures
                .servers
                .get(&1)
                .is_some_and(|b| b.resumes_from.get(&0).is_some_and(|n| *n > 0)),
        );
        report.violations.extend(violations);
        report.figures.add(&figures);
    }
    Ok(report)
}

/// How a subscriber's first stream (on A) ended.
fn first_ending(life: &Life) -> Option<&Ending> {
    life.entries.iter().find_map(|e| match e {
        Entry::End(ending) => Some(ending),
        _ => None,
    })
}

/// `kube_fanout_subscriber_lag_events` of configmaps on `replica`.
async fn lag_events(replica: &Replica) -> Result<u64> {
    let metrics = support::http_get(replica.metrics_addr, "/metrics").await?;
    let line = metrics
        .lines()
        .find(|l| l.starts_with(r#"kube_fanout_subscriber_lag_events{resource="v1/configmaps"} "#))
        .context("no subscriber lag")?;
    Ok(line.rsplit(' ').next().unwrap_or_default().parse()?)
}

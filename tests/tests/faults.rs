//! The randomized fault test of the Watch contract on the real control
//! plane (see `kube_fanout_tests::faults`): two kube-fanout replicas as
//! processes, kill -9 of the API server one of them watches (a relist, a
//! re-sync over a real gap) and of each replica, slow readers,
//! subscribers that hang up and resume anywhere, and a checker that replays
//! every subscriber's whole life against a truth recorded from the API
//! server itself. Zero violations, and every fault really happened.
//! Replica B serves configmaps on demand (`--on-demand-resources`, no
//! `--resource`), A as a configured type: the contract holds for both. A
//! killed replica starts again from the other's snapshot and history
//! (`--bootstrap-from`), so that resumes on it from before its start are
//! exact too.
//!
//! The tier runs (issue 27) add two leaves, C and D, fed by the replicas
//! as their parents through a stable address each: subscribers on leaves
//! and parents resume across tiers, A's re-sync units pass through the
//! leaf that follows A, a killed replica's leaves fail over to the other
//! (resuming from their own RV), and killed leaves' subscribers move;
//! and a rolling restart SIGTERMs every server in turn, each of which must
//! exit well within a pod's grace whatever its slow readers still owe.
//!
//! `ci_sized_run` and `ci_sized_tier_run` run in `scripts/test` (about
//! two minutes each); the soak, with tiers, is
//!
//! ```sh
//! cargo test -p kube-fanout-tests --test faults -- --ignored soak --nocapture
//! ```

use std::time::Duration;

use kube_fanout_tests::faults::{self, Plan, Report};

const BINARY: &str = env!("CARGO_BIN_EXE_kube-fanout-under-test");

/// The binary under test: this build's, or `FAULTS_SERVER` (another
/// build's, to measure it the same way).
fn binary() -> std::path::PathBuf {
    std::env::var_os("FAULTS_SERVER").map_or_else(|| BINARY.into(), Into::into)
}

/// One fault run at a time: each takes the machine's two cores, and the
/// test harness would run this file's tests side by side.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn run(plan: Plan) -> anyhow::Result<Report> {
    kube_fanout_tests::init_logging();
    let _alone = ONE_AT_A_TIME.lock().await;
    let report = faults::run(&plan, &binary()).await?;
    println!("{report}");
    assert_eq!(report.faults.apiserver_restarts, plan.apiserver_restarts);
    assert_eq!(report.faults.replica_kills, plan.replica_kills);
    assert!(
        report.changes >= plan.min_changes,
        "{} changes",
        report.changes
    );
    assert!(
        report.figures.resumes > 0 && report.figures.failovers > 0 && report.figures.snapshots > 0,
        "the subscribers resumed, failed over and took snapshots"
    );
    // The faults reached the subscribers, not just the servers.
    assert!(report.faults.relists >= plan.apiserver_restarts as u64);
    assert!(
        report.figures.resyncs > 0,
        "a re-sync unit reached a subscriber"
    );
    assert!(report.figures.cut_offs > 0, "a slow reader was cut off");
    assert!(
        report.name_pinned > 0
            && report.label_indexed > 0
            && report.label_set_indexed > 0
            && report.label_presence_indexed > 0
            && report.metadata_only > 0,
        "subscribers woken through the name and label indexes (a label set and a label's presence too) and metadata-only ones took part"
    );
    if plan.leaves {
        let tiers = report.tiers.as_ref().expect("figures by tier");
        let done = &report.faults.tiers;
        assert_eq!(done.leaf_kills, plan.leaf_kills);
        assert!(
            done.subscribers_on_killed_leaves > 0,
            "a killed leaf had subscribers"
        );
        assert!(
            done.leaf_failovers >= plan.replica_kills,
            "each replica kill moved a leaf to the other parent"
        );
        assert_eq!(
            done.resumed_failovers, done.leaf_failovers,
            "a leaf fails over from its store's RV, without a new snapshot"
        );
        assert!(
            done.leaves_following_a > 0,
            "a leaf followed A when its API server restarted"
        );
        assert!(
            tiers.parent_to_leaf > 0 && tiers.leaf_to_parent > 0,
            "subscribers resumed across tiers both ways"
        );
        assert!(
            tiers.a_units_on_leaves > 0,
            "A's re-sync unit reached a subscriber on a leaf, at the same RV"
        );
    }
    assert_eq!(
        report.faults.sigterms.len(),
        plan.rolling_restarts * if plan.leaves { 4 } else { 2 }
    );
    assert_eq!(
        report.faults.sigterms_at_grace, 0,
        "a SIGTERM'd server waited for its slow readers until it was killed"
    );
    assert!(
        report.violations.is_empty(),
        "{} violations of the Watch contract (see above)",
        report.violations.len()
    );
    Ok(report)
}

/// The run CI makes: two replicas, about a minute of churn.
fn ci_sized() -> Plan {
    Plan {
        subscribers: 12,
        slow_share: 0.25,
        writers: 2,
        min_changes: 3000,
        min_churn: Duration::from_secs(60),
        apiserver_restarts: 2,
        replica_kills: 2,
        leaves: false,
        leaf_kills: 0,
        rolling_restarts: 0,
        changes_while_down: 80,
        max_lag_events: 100,
        hang_up_ms: (300, 3000),
        max_connections: 2000,
        final_catch_up: Duration::from_secs(30),
        deadline: Duration::from_secs(240),
        seed: 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_sized_run() -> anyhow::Result<()> {
    run(ci_sized()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_sized_tier_run() -> anyhow::Result<()> {
    run(Plan {
        subscribers: 16,
        leaves: true,
        leaf_kills: 2,
        rolling_restarts: 1,
        seed: 16,
        ..ci_sized()
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a soak of several minutes: run it by hand (see the module docs)"]
async fn soak() -> anyhow::Result<()> {
    run(Plan {
        subscribers: 30,
        slow_share: 0.2,
        writers: 3,
        min_changes: 10_000,
        min_churn: Duration::from_secs(300),
        apiserver_restarts: 3,
        replica_kills: 4,
        leaves: true,
        leaf_kills: 4,
        rolling_restarts: 3,
        changes_while_down: 150,
        max_lag_events: 300,
        hang_up_ms: (300, 6000),
        max_connections: 20_000,
        final_catch_up: Duration::from_secs(60),
        deadline: Duration::from_secs(1800),
        seed: 7,
    })
    .await?;
    Ok(())
}

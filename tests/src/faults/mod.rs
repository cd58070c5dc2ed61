//! The randomized fault test of kube-fanout's Watch contract, on the real
//! control plane: a truth recorder watching the API server directly,
//! writers that create, patch (data and labels) and delete ConfigMaps in a
//! few namespaces, two kube-fanout replicas as child processes (A watches
//! API server 1, B watches API server 2, both on one etcd), subscribers
//! with random filters that hang up, resume on either replica, read slowly
//! and re-snapshot on Expired, and faults: kill -9 and restart of API
//! server 1 (A's watch breaks and its reflector relists once the server
//! is back, over a real gap, since the writers go on through API server 2
//! meanwhile), kill -9 and
//! restart of a replica, slow readers. At the end the [`checker`] replays
//! every subscriber's whole life against the truth.
//!
//! With [`Plan::leaves`], the replicas are also the parents of two leaves
//! of a tier, C and D ([`tiers`]), which the subscribers use as they do
//! the replicas: A's re-sync units pass through the leaf following it,
//! a killed replica's leaves fail over to the other, and leaves are
//! killed and restarted too.

pub mod checker;
pub mod model;
pub mod replica;
pub mod sigterm;
pub mod subscriber;
pub mod tiers;
pub mod truth;
mod writer;

use std::{
    fmt,
    path::Path,
    sync::{Arc, RwLock},
    time::Duration,
};

use anyhow::{Context, Result};
use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio::{sync::watch, time::Instant};
use tokio_util::sync::CancellationToken;
use tonic::codec::CompressionEncoding;
use tracing::Instrument;

use crate::{controlplane::ControlPlane, support::create_namespace};
use checker::{Figures, Guarantee, Violation};
use model::{Filter, NameTerm};
use replica::Replica;
use subscriber::{Behaviour, Life};
use tiers::{PARENTS, TierFaults, TierFigures, Tiers};
use truth::Truth;

/// The shape of one run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// How many subscribers.
    pub subscribers: usize,
    /// The share of them that read slowly through small windows.
    pub slow_share: f64,
    /// Concurrent writers.
    pub writers: usize,
    /// Changes the truth must have recorded before the churn ends.
    pub min_changes: usize,
    /// And the churn lasts at least this long (from the first write).
    pub min_churn: Duration,
    /// Times API server 1 is killed and restarted.
    pub apiserver_restarts: usize,
    /// Times a replica (B and A in turn) is killed and restarted.
    pub replica_kills: usize,
    /// Two leaves of a tier, C and D, the replicas their parents, with
    /// subscribers on them too.
    pub leaves: bool,
    /// Times a leaf (D and C in turn) is killed and restarted.
    pub leaf_kills: usize,
    /// Rolling restarts: each SIGTERMs every server in turn (A, B, then
    /// the leaves), waits for it to exit (SIGKILL at [`GRACE`]) and starts
    /// it again, the replicas from the other's snapshot and history.
    pub rolling_restarts: usize,
    /// Changes written while a killed component is down.
    pub changes_while_down: usize,
    /// The replicas' `--max-lag-events`, small so that slow readers are cut off.
    pub max_lag_events: u64,
    /// Subscribers hang up after a random time in this range (ms).
    pub hang_up_ms: (u64, u64),
    /// At most this many Watch calls per subscriber.
    pub max_connections: usize,
    /// Time the subscribers get to reach the final RV once writing stops.
    pub final_catch_up: Duration,
    /// The whole run's bound.
    pub deadline: Duration,
    /// The random seed.
    pub seed: u64,
}

/// Faults injected.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// kill -9 + restart of API server 1.
    pub apiserver_restarts: usize,
    /// kill -9 + restart of a replica.
    pub replica_kills: usize,
    /// Relists of replica A after an API server restart (each a re-sync).
    pub relists: u64,
    /// Changes made while API server 1 was down: the re-syncs' gaps.
    pub gap_changes: usize,
    /// Subscribers that read slowly.
    pub slow_subscribers: usize,
    /// What the faults did to the tiers.
    pub tiers: TierFaults,
    /// How long each SIGTERM of a rolling restart took to end its
    /// server, in order.
    pub sigterms: Vec<Duration>,
    /// Of them, how many reached [`GRACE`] and were SIGKILLed.
    pub sigterms_at_grace: usize,
}

/// A pod's terminationGracePeriodSeconds by default: a SIGTERM'd server
/// still running then is killed.
pub const GRACE: Duration = Duration::from_secs(30);

/// What a run did and found.
#[derive(Debug)]
pub struct Report {
    /// Changes the truth recorded.
    pub changes: usize,
    /// Subscribers.
    pub subscribers: usize,
    /// Subscribers whose field selector pinned one name (kube-fanout
    /// wakes them through its name index).
    pub name_pinned: usize,
    /// Subscribers excluding one name (`metadata.name!=`).
    pub name_excluded: usize,
    /// Subscribers kube-fanout wakes through its label index.
    pub label_indexed: usize,
    /// Of those, the ones registered under several values (`in (a,b)`).
    pub label_set_indexed: usize,
    /// Of those, the ones registered under a label's presence (`app`).
    pub label_presence_indexed: usize,
    /// Subscribers receiving metadata only.
    pub metadata_only: usize,
    /// Subscribers receiving compressed messages (gzip or zstd).
    pub compressed: usize,
    /// Faults injected.
    pub faults: Faults,
    /// The subscribers' figures, summed.
    pub figures: Figures,
    /// Those by tier, in a run with leaves.
    pub tiers: Option<TierFigures>,
    /// Every violation found.
    pub violations: Vec<Violation>,
    /// How long it took.
    pub elapsed: Duration,
}

/// A slow reader's pause after each event (ms): slower than the writers,
/// so that it falls behind and is cut off.
const SLOW_READ_MS: (u64, u64) = (5, 40);

/// How many violations a report prints in full.
const SHOWN: usize = 25;

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.figures;
        writeln!(
            f,
            "fault run: {} changes, {} subscribers ({} slow, {} pinned to a name, {} excluding one, {} indexed by a label ({} by a set of values, {} by its presence), {} metadata-only, {} compressed), {} connections, {} resumes ({} on another server), {} snapshots, {} re-sync units seen, {} events, {} Expired, {} lag cut-offs, hang-ups inside {} units and {} snapshots, other stream failures {:?}",
            self.changes,
            self.subscribers,
            self.faults.slow_subscribers,
            self.name_pinned,
            self.name_excluded,
            self.label_indexed,
            self.label_set_indexed,
            self.label_presence_indexed,
            self.metadata_only,
            self.compressed,
            g.connections,
            g.resumes,
            g.failovers,
            g.snapshots,
            g.resyncs,
            g.events,
            g.expired,
            g.cut_offs,
            g.hang_ups_in_unit,
            g.hang_ups_in_snapshot,
            g.other_failures
        )?;
        writeln!(
            f,
            "faults injected: {} API server kill -9/restarts (replica A relisted {} times; {} changes made while it was down), {} replica kill -9/restarts; {:.0?}",
            self.faults.apiserver_restarts,
            self.faults.relists,
            self.faults.gap_changes,
            self.faults.replica_kills,
            self.elapsed
        )?;
        if let Some(tiers) = &self.tiers {
            writeln!(f, "tiers: {tiers}")?;
            writeln!(f, "tier faults: {}", self.faults.tiers)?;
        }
        if !self.faults.sigterms.is_empty() {
            let slowest = self
                .faults
                .sigterms
                .iter()
                .max()
                .copied()
                .unwrap_or_default();
            writeln!(
                f,
                "rolling restarts: {} SIGTERMs, {} reached the {GRACE:?} grace, slowest {slowest:.1?}, each {:.1?}",
                self.faults.sigterms.len(),
                self.faults.sigterms_at_grace,
                self.faults.sigterms
            )?;
        }
        let mut by: std::collections::BTreeMap<
            Guarantee,
            (usize, std::collections::BTreeSet<usize>),
        > = Default::default();
        for v in &self.violations {
            let e = by.entry(v.guarantee).or_default();
            e.0 += 1;
            e.1.insert(v.subscriber);
        }
        writeln!(f, "violations: {}", self.violations.len())?;
        for (g, (n, subs)) in &by {
            writeln!(f, "  {g:?}: {n} in {} subscriber(s)", subs.len())?;
        }
        // The first of each guarantee, then the rest in order.
        let mut shown: Vec<&Violation> = by
            .keys()
            .filter_map(|g| self.violations.iter().find(|v| v.guarantee == *g))
            .collect();
        for v in &self.violations {
            if shown.len() >= SHOWN {
                break;
            }
            if !shown.iter().any(|s| std::ptr::eq(*s, v)) {
                shown.push(v);
            }
        }
        for v in shown {
            writeln!(f, "  - {v}")?;
        }
        if self.violations.len() > SHOWN {
            writeln!(f, "  ... {} more", self.violations.len() - SHOWN)?;
        }
        Ok(())
    }
}

/// Runs `plan` with `binary` as kube-fanout.
pub async fn run(plan: &Plan, binary: &Path) -> Result<Report> {
    anyhow::ensure!(
        plan.leaves || plan.leaf_kills == 0,
        "leaf kills without leaves"
    );
    let started = Instant::now();
    let hard_deadline = started + plan.deadline;
    let mut cp = ControlPlane::start().await?;
    let client2 = cp.start_extra_apiserver().await?;
    let namespaces: Vec<String> = ["faults-a", "faults-b", "faults-c"]
        .map(String::from)
        .to_vec();
    for ns in &namespaces {
        create_namespace(&client2, ns).await?;
    }
    let truth = Truth::start(client2.clone()).await?;
    let flags = [
        "--progress-bookmark-seconds=1".to_owned(),
        format!("--max-lag-events={}", plan.max_lag_events),
    ];
    let dir = cp.dir().to_owned();
    // B serves configmaps on demand (issue 28): the contract holds for an
    // on-demand type as for a configured one. Its idle time outlasts the
    // run, so it stops only when B is killed.
    let on_demand: Vec<String> = flags
        .iter()
        .cloned()
        .chain([
            "--on-demand-resources=core/configmaps".to_owned(),
            "--on-demand-idle-seconds=3600".to_owned(),
        ])
        .collect();
    let mut servers = vec![
        Replica::start("A", binary, &cp.kubeconfig, &flags, &dir).await?,
        Replica::start("B", binary, &cp.extra_kubeconfig(), &on_demand, &dir).await?,
    ];
    let tiers = if plan.leaves {
        // The binary wants a kubeconfig (for its callers' TokenReviews
        // and SubjectAccessReviews), but with --auth=none a leaf never
        // asks the API server anything: A's, which is killed under it.
        Some(Tiers::start(&mut servers, binary, &cp.kubeconfig, &flags, &dir).await?)
    } else {
        None
    };
    // A replica starts again from the other's snapshot and history, as the
    // chart's replicas do: through the other's stable address if it has
    // one, else (set at each restart) where it listens then.
    if let Some(tiers) = &tiers {
        for (i, replica) in servers[..PARENTS].iter_mut().enumerate() {
            replica.bootstrap_from = Some(tiers.service(PARENTS - 1 - i));
        }
    }
    let addresses: subscriber::Addresses =
        Arc::new(RwLock::new(servers.iter().map(|r| r.addr).collect()));

    let stop_writing = CancellationToken::new();
    let writers: Vec<_> = (0..plan.writers)
        .map(|i| {
            tokio::spawn(
                writer::write(
                    client2.clone(),
                    namespaces.clone(),
                    plan.seed * 100 + i as u64,
                    stop_writing.clone(),
                )
                .instrument(tracing::info_span!("writer", i)),
            )
        })
        .collect();

    let (done_tx, done_rx) = watch::channel(None);
    let mut faults = Faults::default();
    let subscribers: Vec<_> = behaviours(plan, &namespaces, servers.len())
        .into_iter()
        .enumerate()
        .map(|(i, behaviour)| {
            faults.slow_subscribers += usize::from(behaviour.slow);
            tokio::spawn(
                subscriber::run(behaviour, addresses.clone(), done_rx.clone(), hard_deadline)
                    .instrument(tracing::info_span!("subscriber", i)),
            )
        })
        .collect();

    let mut cluster = Cluster {
        cp: &mut cp,
        servers: &mut servers,
        addresses: &addresses,
        tiers: tiers.as_ref(),
        truth: &truth,
        faults: &mut faults,
        deadline: hard_deadline,
    };
    let outcome = cluster.inject_faults(plan).await;
    stop_writing.cancel();
    for w in writers {
        w.await??;
    }
    outcome?;

    // The end: one more change, which every replica publishes; each
    // subscriber follows until its resume point reaches it (a filtered one
    // through a progress bookmark).
    let final_rv = writer::mark(&client2, &namespaces[0], "final").await?;
    let until = Instant::now() + plan.final_catch_up;
    done_tx.send_replace(Some(subscriber::Final {
        rv: final_rv,
        until,
    }));
    let mut lives: Vec<Life> = Vec::new();
    for s in subscribers {
        // A subscriber checks its deadline at least at every hang-up.
        let bound = until + Duration::from_millis(plan.hang_up_ms.1 * 4) + Duration::from_secs(15);
        let life = tokio::time::timeout_at(bound, s)
            .await
            .context("a subscriber did not stop by its deadline")??;
        lives.push(life);
    }
    // A change after everything any subscriber saw, so the truth surely
    // covers every RV they name.
    let after = writer::mark(&client2, &namespaces[0], "after").await?;
    truth.wait_for(after, Duration::from_secs(60)).await?;
    let log = truth.log();

    let mut report = Report {
        changes: log.changes.len(),
        subscribers: lives.len(),
        name_pinned: lives
            .iter()
            .filter(|l| matches!(l.filter.name, Some(NameTerm::Equals(_))))
            .count(),
        name_excluded: lives
            .iter()
            .filter(|l| matches!(l.filter.name, Some(NameTerm::NotEquals(_))))
            .count(),
        label_indexed: lives.iter().filter(|l| l.filter.label_indexed()).count(),
        label_set_indexed: lives
            .iter()
            .filter(|l| l.filter.label_set_indexed())
            .count(),
        label_presence_indexed: lives
            .iter()
            .filter(|l| l.filter.label_presence_indexed())
            .count(),
        metadata_only: lives.iter().filter(|l| l.filter.metadata_only).count(),
        compressed: lives.iter().filter(|l| l.compressed).count(),
        faults,
        figures: Figures::default(),
        tiers: None,
        violations: Vec::new(),
        elapsed: Duration::ZERO,
    };
    for life in &lives {
        let (violations, figures) = checker::check(&log, life);
        report.violations.extend(violations);
        report.figures.add(&figures);
    }
    if tiers.is_some() {
        report.tiers = Some(TierFigures::of(&report.figures));
    }
    for r in &mut servers {
        r.kill().await?;
    }
    keep_logs(cp.dir())?;
    report.elapsed = started.elapsed();
    Ok(report)
}

/// The subscribers of `plan` over `namespaces`, on `servers` servers.
pub fn behaviours(plan: &Plan, namespaces: &[String], servers: usize) -> Vec<Behaviour> {
    let mut rng = StdRng::seed_from_u64(plan.seed);
    (0..plan.subscribers)
        .map(|i| {
            // The first share of them read slowly, whatever the seed.
            let slow = (i as f64) < plan.slow_share * plan.subscribers as f64;
            let mut filter = Filter::random(&mut rng, namespaces, writer::NAMES);
            if slow {
                // One name's events are too few to put a reader behind
                // the lag bound; and the first slow reader watches
                // everything, so that the bound is reached whatever the
                // seed gave the others.
                filter.name = None;
                if i == 0 {
                    filter = Filter::default();
                }
            } else if i + 3 >= plan.subscribers {
                // And the last three watch apps everywhere, whatever the
                // seed: kube-fanout wakes them only through its label
                // index, the last under one value, the one before under
                // each of two, the one before that under the label's
                // presence.
                filter.namespace.clear();
                filter.name = None;
                let app = |k: usize| model::APPS[k % model::APPS.len()];
                filter.requirements = vec![match plan.subscribers - i {
                    1 => model::Requirement::Equals("app", app(i)),
                    2 => model::Requirement::In("app", vec![app(i), app(i + 1)]),
                    _ => model::Requirement::Exists("app"),
                }];
            }
            // Without bookmarks a subscriber's resume point moves only
            // with its events, so only one that sees the final marker (a
            // label-less ConfigMap in the first namespace) can go without.
            let sees_marker = filter.matches(
                &model::key(&namespaces[0], "final"),
                &model::Obj {
                    rv: 0,
                    labels: Default::default(),
                    data: Default::default(),
                },
            );
            Behaviour {
                id: (plan.seed as usize) * 1000 + i,
                filter,
                slow,
                // Round the servers in pairs, whatever the seed, so that
                // a sticky subscriber (an odd one) starts on each: on A
                // and on the leaves when A re-syncs.
                first: (i / 2) % servers,
                sticky: i % 2 == 1,
                bookmarks: !(sees_marker && rng.random_bool(0.5)),
                // Of the others, a quarter zstd and a quarter gzip,
                // whatever the seed; slow readers stay uncompressed, as
                // compression would let them through their small windows
                // fast enough not to be cut off.
                compression: match i % 4 {
                    1 if !slow => Some(CompressionEncoding::Zstd),
                    3 if !slow => Some(CompressionEncoding::Gzip),
                    _ => None,
                },
                max_connections: plan.max_connections,
                hang_up_ms: plan.hang_up_ms,
                slow_read_ms: SLOW_READ_MS,
            }
        })
        .collect()
}

/// What the faults act on, and where they are counted.
struct Cluster<'a> {
    cp: &'a mut ControlPlane,
    /// The replicas A and B, then the leaves C and D if any.
    servers: &'a mut [Replica],
    addresses: &'a subscriber::Addresses,
    tiers: Option<&'a Tiers>,
    truth: &'a Truth,
    faults: &'a mut Faults,
    deadline: Instant,
}

impl Cluster<'_> {
    /// Injects the plan's faults in turn while the writers go on, then
    /// waits until the truth has recorded `min_changes`.
    async fn inject_faults(&mut self, plan: &Plan) -> Result<()> {
        let churn_until = Instant::now() + plan.min_churn;
        let rounds = plan
            .apiserver_restarts
            .max(plan.replica_kills)
            .max(plan.leaf_kills)
            .max(plan.rolling_restarts);
        let steps = plan.apiserver_restarts
            + plan.replica_kills
            + plan.leaf_kills
            + plan.rolling_restarts * self.servers.len();
        let spacing = plan.min_changes / (steps + 1);
        for round in 0..rounds {
            if round < plan.apiserver_restarts {
                self.changes(spacing).await?;
                self.restart_apiserver(plan).await?;
            }
            if round < plan.replica_kills {
                self.changes(spacing).await?;
                // B first: its subscribers fail over to A, which re-synced.
                self.kill_replica((round + 1) % PARENTS, plan).await?;
            }
            if round < plan.leaf_kills {
                self.changes(spacing).await?;
                // D first: the leaf this round's replica kill moved (B's
                // moved D to A, A's moves C to B). Restarted, it follows
                // the first parent it names again, so every round starts
                // with C on A and D on B: at each API server restart C
                // passes A's re-sync unit on, and each replica kill moves
                // one leaf.
                let leaf = self.servers.len() - 1 - round % 2;
                self.kill_leaf(leaf, plan).await?;
            }
            if round < plan.rolling_restarts {
                for i in 0..self.servers.len() {
                    self.changes(spacing).await?;
                    self.sigterm(i).await?;
                }
            }
        }
        self.truth
            .wait_changes(plan.min_changes, self.deadline)
            .await?;
        // A bounded wait: the churn's planned length, not a condition.
        tokio::time::sleep_until(churn_until.min(self.deadline)).await;
        Ok(())
    }

    /// Waits until the truth has recorded `n` more changes.
    async fn changes(&self, n: usize) -> Result<()> {
        self.truth
            .wait_changes(self.truth.changes() + n, self.deadline)
            .await
    }

    /// kill -9 of API server 1, writes meanwhile through the other, its
    /// restart, and A's relist over the gap.
    async fn restart_apiserver(&mut self, plan: &Plan) -> Result<()> {
        let relists = self.servers[0].status().await?.relists;
        if let Some(tiers) = self.tiers {
            for leaf in &self.servers[PARENTS..] {
                // Server 0 is A.
                if tiers.following(leaf).await?.0 == Some(0) {
                    self.faults.tiers.leaves_following_a += 1;
                }
            }
        }
        tracing::info!("fault: kill -9 API server 1 (replica A's)");
        self.cp.kill_apiserver().await?;
        let before = self.truth.changes();
        self.changes(plan.changes_while_down).await?;
        self.cp.restart_apiserver().await?;
        // Writes go on while it starts, so the gap is wider still.
        self.faults.gap_changes += self.truth.changes() - before;
        let now = self.servers[0]
            .wait_relisted(relists, Duration::from_secs(120))
            .await?;
        self.faults.apiserver_restarts += 1;
        self.faults.relists += now - relists;
        Ok(())
    }

    /// kill -9 of replica `i`, the failover of the leaves that followed
    /// it, writes meanwhile, and its restart on a new port.
    async fn kill_replica(&mut self, i: usize, plan: &Plan) -> Result<()> {
        let mut followers = Vec::new();
        if let Some(tiers) = self.tiers {
            for leaf in PARENTS..self.servers.len() {
                if let (Some(parent), lists) = tiers.following(&self.servers[leaf]).await?
                    && parent == i
                {
                    followers.push((leaf, lists));
                }
            }
        }
        tracing::info!("fault: kill -9 replica {}", self.servers[i].name);
        self.servers[i].kill().await?;
        if let Some(tiers) = self.tiers {
            for (leaf, lists) in followers {
                let resumed = tiers.wait_failover(&self.servers[leaf], i, lists).await?;
                self.faults.tiers.leaf_failovers += 1;
                self.faults.tiers.resumed_failovers += usize::from(resumed);
            }
        }
        self.restart_after(i, plan).await?;
        self.faults.replica_kills += 1;
        Ok(())
    }

    /// SIGTERM of server `i` (SIGKILL if it outlives [`GRACE`]), measured,
    /// then its restart on a new port at once, as a rolling update
    /// replaces a pod; a parent's leaves move to the other meanwhile.
    async fn sigterm(&mut self, i: usize) -> Result<()> {
        tracing::info!("fault: SIGTERM {}", self.servers[i].name);
        let stopped = self.servers[i].stop(GRACE).await?;
        self.faults.sigterms.push(stopped.took);
        self.faults.sigterms_at_grace += usize::from(stopped.killed);
        self.restart(i).await
    }

    /// kill -9 of leaf `i`, writes meanwhile, and its restart on a new
    /// port.
    async fn kill_leaf(&mut self, i: usize, plan: &Plan) -> Result<()> {
        let subscribers = self.servers[i].status().await?.subscribers;
        tracing::info!(subscribers, "fault: kill -9 leaf {}", self.servers[i].name);
        self.servers[i].kill().await?;
        self.restart_after(i, plan).await?;
        self.faults.tiers.leaf_kills += 1;
        self.faults.tiers.subscribers_on_killed_leaves += subscribers;
        Ok(())
    }

    /// Restarts the killed server `i` once the writers have made the
    /// plan's changes while it was down, and tells the subscribers.
    async fn restart_after(&mut self, i: usize, plan: &Plan) -> Result<()> {
        self.changes(plan.changes_while_down).await?;
        self.restart(i).await
    }

    /// Starts the stopped server `i` again (a replica from the other's
    /// snapshot and history) and tells the subscribers and the leaves.
    async fn restart(&mut self, i: usize) -> Result<()> {
        if i < PARENTS && self.tiers.is_none() {
            self.servers[i].bootstrap_from = Some(self.servers[PARENTS - 1 - i].addr);
        }
        self.servers[i].restart().await?;
        self.addresses.write().expect("addresses")[i] = self.servers[i].addr;
        if i < PARENTS
            && let Some(tiers) = self.tiers
        {
            tiers.parent_restarted(i, self.servers[i].addr);
        }
        Ok(())
    }
}

/// With `FAULTS_KEEP_LOGS=DIR`, copies the replicas', API servers' and
/// etcd's logs there (the control plane's directory goes with it).
fn keep_logs(from: &Path) -> Result<()> {
    let Some(to) = std::env::var_os("FAULTS_KEEP_LOGS") else {
        return Ok(());
    };
    std::fs::create_dir_all(&to)?;
    for entry in std::fs::read_dir(from)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "log") {
            std::fs::copy(
                &path,
                Path::new(&to).join(path.file_name().unwrap_or_default()),
            )?;
        }
    }
    Ok(())
}

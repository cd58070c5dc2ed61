//! The restart herd over a tier (issue 27): `--tier-herd-watchers`
//! watchers, each on its own connection, each needing the herd's
//! `--herd-objects` ConfigMaps at once, spread evenly over two parent
//! replicas alone, or over `--tier-leaves` leaves of those parents
//! (`--upstream-fanout` both, over TLS). The parents' CPU and peak memory
//! in each mode, the leaves', the API server's, and the time until every
//! watcher has its snapshot. Every process is started afresh for each run
//! and synced before the window opens (a leaf's own snapshot from its
//! parent is not in the window: the herd is what is measured).

use std::fmt::Write;

use serde_json::Value;

use super::{Bench, Fanout, cpu, down, median_of, mib};

/// Parent replicas, in both modes.
const PARENTS: usize = 2;

/// Where the herd's watchers connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// To the parents themselves.
    Parents,
    /// To the leaves, which follow the parents.
    Leaves,
}

impl Mode {
    fn label(self, leaves: usize) -> String {
        match self {
            Mode::Parents => format!("on the {PARENTS} parents alone"),
            Mode::Leaves => format!("on {leaves} leaves of the {PARENTS} parents"),
        }
    }
}

/// One herd in one mode.
struct Run {
    mode: Mode,
    round: usize,
    result: Value,
}

/// The processes of one run.
struct Tier {
    parents: Vec<Fanout>,
    leaves: Vec<Fanout>,
}

impl Bench {
    /// The tier herd case: each mode `--tier-herd-rounds` times, taken in
    /// turn (parents then leaves, then the other way round, ...) so both
    /// meet the same machine load. The single kube-fanout other cases use
    /// is stopped meanwhile and started again after.
    pub(super) async fn tier_herd(&mut self) -> anyhow::Result<String> {
        self.fanout = None;
        let mut runs = Vec::new();
        for round in 0..self.args.tier_herd_rounds.max(1) {
            let mut modes = [Mode::Parents, Mode::Leaves];
            if round % 2 == 1 {
                modes.reverse();
            }
            for mode in modes {
                let result = self.tier_herd_run(mode).await?;
                runs.push(Run {
                    mode,
                    round: round + 1,
                    result,
                });
            }
        }
        self.restart_fanout(0, "v1/configmaps").await?;
        Ok(tier_herd_table(
            self.args.tier_herd_watchers,
            self.args.herd_objects,
            self.args.size,
            self.args.tier_leaves,
            &runs,
        ))
    }

    /// Starts the parents (and in [`Mode::Leaves`] the leaves), runs the
    /// herd on the mode's servers, and stops them all.
    async fn tier_herd_run(&self, mode: Mode) -> anyhow::Result<Value> {
        let tier = self.start_tier(mode).await?;
        let servers = match mode {
            Mode::Parents => &tier.parents,
            Mode::Leaves => &tier.leaves,
        };
        let addresses: Vec<&str> = servers.iter().map(|s| s.addr.as_str()).collect();
        let (apiserver, etcd) = self.cp.pids();
        let mut pids = format!(
            "kube-apiserver={},etcd={}",
            apiserver.unwrap_or(0),
            etcd.unwrap_or(0)
        );
        for (role, servers) in [("parent", &tier.parents), ("leaf", &tier.leaves)] {
            for (i, server) in servers.iter().enumerate() {
                write!(pids, ",{role}-{i}={}", server.pid)?;
            }
        }
        let args = [
            "-target".into(),
            "fanout".into(),
            "-watchers".into(),
            self.args.tier_herd_watchers.to_string(),
            "-objects".into(),
            self.args.herd_objects.to_string(),
        ];
        self.loadgen_on("herd", &addresses.join(","), &pids, &args)
            .await
    }

    /// The parents, then (for [`Mode::Leaves`]) the leaves, each synced.
    /// Leaf i follows parent i mod 2 first, so the leaves spread over
    /// both.
    async fn start_tier(&self, mode: Mode) -> anyhow::Result<Tier> {
        let bin = self.fanout_bins[0].clone();
        let mut parents = Vec::new();
        for i in 0..PARENTS {
            let flags = ["--resource".into(), "v1/configmaps".into()];
            parents.push(
                self.spawn_fanout(&bin, &format!("parent-{i}"), &flags)
                    .await?,
            );
        }
        let mut leaves = Vec::new();
        if mode == Mode::Leaves {
            for i in 0..self.args.tier_leaves {
                let mut flags = vec!["--resource".into(), "v1/configmaps".into()];
                for p in 0..PARENTS {
                    let parent = &parents[(i + p) % PARENTS];
                    flags.push(format!("--upstream-fanout=https://{}", parent.addr));
                }
                flags.push(format!("--peer-ca-file={}", self.ca.display()));
                // The bench's serving certificate names localhost.
                flags.push("--peer-tls-server-name=localhost".into());
                leaves.push(
                    self.spawn_fanout(&bin, &format!("leaf-{i}"), &flags)
                        .await?,
                );
            }
        }
        Ok(Tier { parents, leaves })
    }
}

/// CPU seconds and the largest peak RSS of the run's processes whose name
/// starts with `role` (`parent-`, `leaf-`).
fn of_role(run: &Value, role: &str) -> (f64, f64) {
    let Some(procs) = run["procs"].as_object() else {
        return (0.0, 0.0);
    };
    procs
        .iter()
        .filter(|(name, _)| name.starts_with(role))
        .fold((0.0, 0.0), |(cpu, peak), (_, p)| {
            (
                cpu + p["cpu_s"].as_f64().unwrap_or(0.0),
                f64::max(peak, p["peak_rss"].as_f64().unwrap_or(0.0)),
            )
        })
}

/// The runs laid out, and each mode's medians with the leaves' over the
/// parents alone.
fn tier_herd_table(
    watchers: usize,
    objects: usize,
    size: usize,
    leaves: usize,
    runs: &[Run],
) -> String {
    let mut out = format!(
        "\n### Restart herd over a tier: {watchers} watchers, each on its own connection, each needing {objects} ConfigMaps of {size} B at once\n\n\
         | | wall (all synced) | parents' CPU | parents' peak RSS (largest) | leaves' CPU | leaves' peak RSS (largest) | kube-apiserver + etcd CPU |\n|---|---|---|---|---|---|---|\n"
    );
    for run in runs {
        let r = &run.result;
        let (parents_cpu, parents_peak) = of_role(r, "parent-");
        let (leaves_cpu, leaves_peak) = of_role(r, "leaf-");
        let incomplete = r["error"]
            .as_str()
            .map(|e| format!(" (**incomplete**: {e})"))
            .unwrap_or_default();
        let leaf_columns = if run.mode == Mode::Leaves {
            format!(
                "{} s | {}",
                down(leaves_cpu, 2),
                mib(&Value::from(leaves_peak))
            )
        } else {
            "- | -".into()
        };
        let _ = writeln!(
            out,
            "| {}, round {} | {} s{incomplete} | {} s | {} | {leaf_columns} | {} s |",
            run.mode.label(leaves),
            run.round,
            down(r["wall_s"].as_f64().unwrap_or(0.0), 2),
            down(parents_cpu, 2),
            mib(&Value::from(parents_peak)),
            down(cpu(r, "kube-apiserver") + cpu(r, "etcd"), 2),
        );
    }
    let median = |mode, value: fn(&Value) -> f64| {
        median_of(
            &runs
                .iter()
                .filter(|r| r.mode == mode)
                .map(|r| value(&r.result))
                .collect::<Vec<_>>(),
        )
    };
    let parents_cpu = |r: &Value| of_role(r, "parent-").0;
    let parents_peak = |r: &Value| of_role(r, "parent-").1;
    let wall = |r: &Value| r["wall_s"].as_f64().unwrap_or(0.0);
    let (cpu_alone, cpu_tier) = (
        median(Mode::Parents, parents_cpu),
        median(Mode::Leaves, parents_cpu),
    );
    let (peak_alone, peak_tier) = (
        median(Mode::Parents, parents_peak),
        median(Mode::Leaves, parents_peak),
    );
    let (wall_alone, wall_tier) = (median(Mode::Parents, wall), median(Mode::Leaves, wall));
    let _ = write!(
        out,
        "\nMedians: the parents' CPU {} s alone, {} s under {leaves} leaves ({}×); \
         their largest peak RSS {} alone, {} under the leaves ({}×); \
         all synced in {} s alone, {} s through the leaves ({}×). \
         The peak is VmHWM, reset (clear_refs) at the window's start.\n",
        down(cpu_alone, 2),
        down(cpu_tier, 2),
        down(cpu_tier / cpu_alone, 3),
        mib(&Value::from(peak_alone)),
        mib(&Value::from(peak_tier)),
        down(peak_tier / peak_alone, 2),
        down(wall_alone, 2),
        down(wall_tier, 2),
        down(wall_tier / wall_alone, 2),
    );
    out
}

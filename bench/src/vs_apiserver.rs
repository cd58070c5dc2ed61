//! `fanout-bench vs-apiserver`: kube-fanout against the real kube-apiserver
//! the tests build, with clients as they really connect (issue 11).
//!
//! This side starts the control plane (`kube_fanout_tests::controlplane`),
//! kube-fanout as its release binary with TLS on (as deployed; `--auth=none`
//! on loopback, as authorization costs nothing per event), and builds the
//! Go load generator (`bench/loadgen`). Each case is one run of the load
//! generator, which opens every watcher on its own connection, writes at a
//! fixed rate, samples the servers' `/proc` at the window's edges and
//! prints a JSON result; this side lays the results out side by side.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

mod tier_herd;

use anyhow::{Context, bail};
use kube_fanout_tests::{
    controlplane::{ControlPlane, free_port, tied_command},
    pki::Ca,
};
use serde_json::Value;
use tokio::process::{Child, Command};

/// The cases, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Case {
    /// 100 and 500 watchers, `--rate` writes/s: API server JSON and
    /// protobuf, kube-fanout, the plain-TCP floor.
    Steady,
    /// 100 watchers at `--fast-rate` writes/s, for a third of `--seconds`.
    Fast,
    /// 200 watchers each needing the 10,000-object list at once.
    Herd,
    /// 10,000 idle kube-fanout subscribers, each on its own connection.
    Idle,
    /// Node-scoped pod watchers (`spec.nodeName=node-<i>`, issue 12) at
    /// `--rate` pod writes/s spread over the nodes: kube-fanout serving
    /// `v1/pods` against the API server (protobuf).
    Nodes,
    /// The restart herd on two parent replicas alone, and spread over
    /// `--tier-leaves` leaves of them (issue 27).
    TierHerd,
}

/// Arguments of `vs-apiserver`.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// Cases to run (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    cases: Vec<Case>,
    /// Watcher counts of the steady case.
    #[arg(long, value_delimiter = ',', default_values_t = [100, 500])]
    watchers: Vec<usize>,
    /// Writes per second in the steady case.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Writes per second in the fast case (100 watchers).
    #[arg(long, default_value_t = 1000.0)]
    fast_rate: f64,
    /// Length of each write window, in seconds.
    #[arg(long, default_value_t = 15.0)]
    seconds: f64,
    /// Bytes of data in each ConfigMap.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Watchers in the restart herd.
    #[arg(long, default_value_t = 200)]
    herd_watchers: usize,
    /// Objects each herd watcher needs.
    #[arg(long, default_value_t = 10_000)]
    herd_objects: usize,
    /// The herd's kube-fanout watchers ask for gzip-compressed answers
    /// (the API server's modes are as always: client-go asks for gzip).
    #[arg(long)]
    herd_gzip: bool,
    /// Watchers in the tier herd (each needing `--herd-objects`).
    #[arg(long, default_value_t = 2_000)]
    tier_herd_watchers: usize,
    /// Leaves in the tier herd's tiered mode.
    #[arg(long, default_value_t = 4)]
    tier_leaves: usize,
    /// Rounds of the tier herd, each mode once per round.
    #[arg(long, default_value_t = 2)]
    tier_herd_rounds: usize,
    /// Idle subscribers.
    #[arg(long, default_value_t = 10_000)]
    idle_watchers: usize,
    /// Times the idle case measures each `--fanout-bin` build, taking
    /// them in turn (A, B, A, B, ...), so builds compared side by side
    /// meet the same machine load.
    #[arg(long, default_value_t = 1)]
    idle_rounds: usize,
    /// Node watcher counts of the nodes case.
    #[arg(long, value_delimiter = ',', default_values_t = [500, 5000])]
    nodes: Vec<usize>,
    /// Connections the node watchers share, one per `--nodes` count (as
    /// many as watchers: each on its own).
    #[arg(long, value_delimiter = ',', default_values_t = [500, 100])]
    nodes_connections: Vec<usize>,
    /// Rounds of the nodes case, each a window of writes to watched pods
    /// and one (as long) of writes to pods no watcher watches.
    #[arg(long, default_value_t = 5)]
    nodes_rounds: usize,
    /// In the nodes case, kube-fanout's watchers use fixed HTTP/2 windows
    /// (4 MiB per stream, as client-go's), which turns off grpc-go's
    /// bandwidth-delay-product pings (by default one per event on a quiet
    /// watch).
    #[arg(long)]
    fanout_static_window: bool,
    /// In the nodes case, record each window of the API server with `perf
    /// record -g` into this directory, and add its sampled CPU per
    /// delivery, all of it and on its watch path, to the table.
    /// Needs `KUBE_FANOUT_CONTROLPLANE_SYMBOLS=1`, so that the API server
    /// is built with the symbol tables perf names its functions by.
    #[arg(long)]
    nodes_perf: Option<PathBuf>,
    /// The process `--nodes-perf` records: `kube-apiserver` (its watch
    /// path counted) or `kube-fanout` (its profile to read with `perf
    /// report`; the samples' own cost is in its CPU figures then).
    #[arg(long, default_value = "kube-apiserver")]
    nodes_perf_process: String,
    /// Where the servers run in the nodes case, each round's windows once
    /// per placement: `shared` (every process on every CPU) and
    /// `isolated` (kube-fanout alone on `--fanout-cpu`; the API server,
    /// etcd and the load generator on the other CPUs).
    #[arg(long, value_delimiter = ',', default_values_t = ["shared".to_string()])]
    nodes_placements: Vec<String>,
    /// The servers whose watchers the nodes case opens: `apiserver-proto`
    /// and `fanout`. Without the API server's own watchers (`fanout`
    /// alone) its CPU goes to the writes only, which leaves room on its
    /// CPUs when kube-fanout is isolated.
    #[arg(long, value_delimiter = ',', default_values_t = ["apiserver-proto".to_string(), "fanout".to_string()])]
    nodes_targets: Vec<String>,
    /// kube-fanout's CPU in the isolated placement.
    #[arg(long, default_value_t = 0)]
    fanout_cpu: usize,
    /// kube-fanout's tokio worker threads (`TOKIO_WORKER_THREADS`); by
    /// default one per CPU it may use when it starts, as deployed. A pod
    /// limited to one CPU starts with one: `--fanout-workers 1` measures
    /// that in the isolated placement, where kube-fanout is moved onto one
    /// CPU after it started with all of them.
    #[arg(long)]
    fanout_workers: Option<usize>,
    /// kube-fanout binaries to measure instead of this tree's release
    /// build. With several (comma-separated), the idle case measures each
    /// in turn, side by side in one table; the other cases use the first.
    #[arg(long, value_delimiter = ',')]
    fanout_bin: Vec<PathBuf>,
    /// A second kube-fanout binary (say an earlier commit's release
    /// build) whose herd and snapshot runs go next to the measured one's,
    /// in the same run and tables.
    #[arg(long)]
    baseline_bin: Option<PathBuf>,
    /// With `--baseline-bin`, rounds of the steady and herd cases'
    /// kube-fanout runs for both builds, in turn (baseline then this build,
    /// then the other way round, ...), so that both meet the same machine
    /// load.
    #[arg(long, default_value_t = 3)]
    steady_rounds: usize,
    /// Timed snapshots to one subscriber, one after another on one
    /// connection, in the herd case.
    #[arg(long, default_value_t = 9)]
    snapshots: usize,
}

/// ConfigMaps the steady writer cycles through.
const STEADY_OBJECTS: usize = 100;

/// Pods after the watched ones in the nodes case, on nodes no watcher
/// watches: its "off" windows write these.
const SPARE_PODS: usize = 100;

/// A kube-fanout binary running against the control plane.
struct Fanout {
    _child: Child,
    pid: u32,
    addr: String,
    log: PathBuf,
}

/// Everything the cases run against.
struct Bench {
    cp: ControlPlane,
    loadgen: PathBuf,
    /// The builds to measure; the first is the one started by default.
    fanout_bins: Vec<PathBuf>,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    fanout: Option<Fanout>,
    args: Args,
}

/// Runs the selected cases and prints their tables.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    eprintln!("building kube-fanout (release) and the Go load generator");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // With this package too, so cargo unifies features as it did for this
    // binary and rebuilds nothing shared.
    let mut build = Command::new(cargo);
    build
        .args(["build", "--release", "--bins"])
        .args(["-p", "kube-fanout", "-p", "kube-fanout-bench"])
        .current_dir(&root);
    // Without the variables `cargo run` set for this binary: build scripts
    // (ring's) rerun when they change, so each `cargo run` and this build
    // would otherwise rebuild ring and everything above it for the other.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || [
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "OUT_DIR",
            ]
            .contains(&&*name)
        {
            build.env_remove(&*name);
        }
    }
    status(&mut build).await?;
    let loadgen = target.join("release/loadgen");
    status(
        Command::new("go")
            .args(["build", "-o"])
            .arg(&loadgen)
            .arg(".")
            .current_dir(root.join("bench/loadgen")),
    )
    .await?;
    eprintln!("starting kube-apiserver and etcd");
    let cp = ControlPlane::start().await?;
    let ca = Ca::new("kube-fanout-bench")?;
    let serving = ca.serving()?;
    let dir = cp.dir().to_owned();
    let files = [
        ("fanout-ca.crt", ca.pem()),
        ("fanout.crt", serving.cert),
        ("fanout.key", serving.key),
    ];
    for (name, pem) in &files {
        std::fs::write(dir.join(name), pem)?;
    }
    let mut cases = args.cases.clone();
    if cases.is_empty() {
        cases = vec![Case::Steady, Case::Fast, Case::Herd, Case::Idle];
    }
    cases.sort();
    cases.dedup();
    let mut bench = Bench {
        cp,
        loadgen,
        fanout_bins: if args.fanout_bin.is_empty() {
            vec![target.join("release/kube-fanout")]
        } else {
            args.fanout_bin.clone()
        },
        ca: dir.join("fanout-ca.crt"),
        cert: dir.join("fanout.crt"),
        key: dir.join("fanout.key"),
        fanout: None,
        args,
    };
    bench.loadgen_setup("bench", STEADY_OBJECTS).await?;
    if cases.contains(&Case::Herd) || cases.contains(&Case::TierHerd) {
        bench.loadgen_setup("herd", bench.args.herd_objects).await?;
    }
    if cases.contains(&Case::Nodes) {
        let pods = bench.args.nodes.iter().max().copied().unwrap_or(0) + SPARE_PODS;
        eprintln!("creating {pods} pods in nodes, one per node ({SPARE_PODS} never watched)");
        status(Command::new(&bench.loadgen).args([
            "pods",
            "-kubeconfig",
            &bench.kubeconfig(),
            "-pods",
            &pods.to_string(),
        ]))
        .await?;
    }
    bench.restart_fanout(0, "v1/configmaps").await?;
    let mut out = String::new();
    for case in cases {
        out.push_str(&match case {
            Case::Steady => {
                let mut tables = String::new();
                for watchers in bench.args.watchers.clone() {
                    let (rate, seconds) = (bench.args.rate, bench.args.seconds);
                    tables.push_str(&bench.steady(watchers, rate, seconds).await?);
                    if bench.args.baseline_bin.is_some() {
                        tables.push_str(&bench.steady_builds(watchers, rate, seconds).await?);
                    }
                }
                tables
            }
            // A third of the window: the API server's writer alone may
            // not keep up with this rate on a small machine.
            Case::Fast => {
                let seconds = bench.args.seconds / 3.0;
                bench.steady(100, bench.args.fast_rate, seconds).await?
            }
            Case::Herd => bench.herd().await?,
            Case::TierHerd => bench.tier_herd().await?,
            Case::Idle => bench.idle().await?,
            Case::Nodes => {
                bench.restart_fanout(0, "v1/pods").await?;
                let mut tables = String::new();
                let args = bench.args.clone();
                if args.nodes.len() != args.nodes_connections.len() {
                    bail!("--nodes and --nodes-connections differ in length");
                }
                for (&watchers, &connections) in args.nodes.iter().zip(&args.nodes_connections) {
                    tables.push_str(&bench.nodes(watchers, connections).await?);
                }
                tables
            }
        });
    }
    println!("{out}");
    Ok(())
}

async fn status(command: &mut Command) -> anyhow::Result<()> {
    let status = command.status().await?;
    if !status.success() {
        bail!("{command:?}: {status}");
    }
    Ok(())
}

impl Bench {
    fn kubeconfig(&self) -> String {
        self.cp.kubeconfig.display().to_string()
    }

    async fn loadgen_setup(&self, namespace: &str, objects: usize) -> anyhow::Result<()> {
        eprintln!("creating {objects} ConfigMaps in {namespace}");
        status(Command::new(&self.loadgen).args([
            "setup",
            "-kubeconfig",
            &self.kubeconfig(),
            "-namespace",
            namespace,
            "-objects",
            &objects.to_string(),
            "-size",
            &self.args.size.to_string(),
        ]))
        .await
    }

    /// Stops kube-fanout if running and starts build `bin` (an index
    /// into `fanout_bins`) serving `resource`, waiting until it has synced.
    async fn restart_fanout(&mut self, bin: usize, resource: &str) -> anyhow::Result<()> {
        let bin = self.fanout_bins[bin].clone();
        self.restart_fanout_bin(&bin, resource).await
    }

    /// [`Bench::restart_fanout`] with the binary `bin`.
    async fn restart_fanout_bin(&mut self, bin: &Path, resource: &str) -> anyhow::Result<()> {
        self.fanout = None;
        let fanout = self
            .spawn_fanout(bin, "kube-fanout", &["--resource".into(), resource.into()])
            .await?;
        self.fanout = Some(fanout);
        Ok(())
    }

    /// Starts `bin` on a new loopback port with `flags` (beyond TLS with
    /// the bench's certificate, `--auth=none` and no per-caller bounds),
    /// logging to `<name>.log`, and waits until it has synced.
    async fn spawn_fanout(
        &self,
        bin: &Path,
        name: &str,
        flags: &[String],
    ) -> anyhow::Result<Fanout> {
        let port = free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let log = self.cp.dir().join(format!("{name}.log"));
        let file = std::fs::File::create(&log)?;
        let mut command = tied_command(bin);
        if let Some(workers) = self.args.fanout_workers {
            command.env("TOKIO_WORKER_THREADS", workers.to_string());
        }
        let child = command
            .args(flags)
            .args(["--auth=none", "--listen", &addr])
            // Without authentication the caller is the client address, so
            // every watcher here (all from 127.0.0.1) would be one caller;
            // they stand for separate controllers.
            .args(["--max-watches-per-caller=0", "--max-snapshots-per-caller=0"])
            // The idle case opens 10,000 connections from that one address.
            .args(["--max-connections=0", "--max-connections-per-ip=0"])
            .arg(format!("--metrics-listen=127.0.0.1:{}", free_port()?))
            .arg(format!("--kubeconfig={}", self.kubeconfig()))
            .arg(format!("--tls-cert-file={}", self.cert.display()))
            .arg(format!("--tls-private-key-file={}", self.key.display()))
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let pid = child.id().with_context(|| format!("{name} exited"))?;
        let fanout = Fanout {
            _child: child,
            pid,
            addr,
            log,
        };
        for _ in 0..600 {
            let text = std::fs::read_to_string(&fanout.log)?;
            if text.contains("every resource type synced") {
                return Ok(fanout);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "{name} did not sync in 60 s:\n{}",
            std::fs::read_to_string(&fanout.log)?
        )
    }

    fn fanout(&self) -> &Fanout {
        self.fanout.as_ref().expect("kube-fanout started")
    }

    /// `name=PID,...` of the control plane and kube-fanout.
    fn pids(&self) -> String {
        let (apiserver, etcd) = self.cp.pids();
        format!(
            "kube-apiserver={},etcd={},kube-fanout={}",
            apiserver.unwrap_or(0),
            etcd.unwrap_or(0),
            self.fanout().pid
        )
    }

    /// One load generator run against the kube-fanout started; its JSON
    /// result.
    async fn loadgen(&self, command: &str, extra: &[String]) -> anyhow::Result<Value> {
        self.loadgen_on(command, &self.fanout().addr, &self.pids(), extra)
            .await
    }

    /// One load generator run against the kube-fanouts at `fanout`
    /// (comma-separated), measuring the processes `pids` (`name=PID,...`).
    async fn loadgen_on(
        &self,
        command: &str,
        fanout: &str,
        pids: &str,
        extra: &[String],
    ) -> anyhow::Result<Value> {
        let mut args = vec![
            command.to_owned(),
            "-kubeconfig".into(),
            self.kubeconfig(),
            "-fanout".into(),
            fanout.to_owned(),
            "-fanout-ca".into(),
            self.ca.display().to_string(),
            "-pids".into(),
            pids.to_owned(),
        ];
        if command == "idle" {
            // The idle case talks to kube-fanout only.
            args.drain(1..3);
        }
        args.extend_from_slice(extra);
        eprintln!("loadgen {}", args.join(" "));
        // `output` captures stderr whatever was set: passed on below.
        let out = Command::new(&self.loadgen).args(&args).output().await?;
        let text = String::from_utf8(out.stdout)?;
        let errors = String::from_utf8_lossy(&out.stderr);
        eprint!("{errors}");
        if !out.status.success() {
            bail!("loadgen {command} failed ({}): {errors}", out.status);
        }
        let value: Value = serde_json::from_str(text.trim())
            .with_context(|| format!("loadgen printed {text:?}"))?;
        eprintln!("{value}");
        // A run that did not complete still reports what it measured,
        // with the reason; the tables show it.
        if let Some(error) = value.get("error") {
            let mut result = value["result"].clone();
            result["error"] = error.clone();
            return Ok(result);
        }
        Ok(value)
    }

    /// The steady-fanout comparison at `watchers` and `rate`: a writes-only
    /// baseline, the API server (JSON, protobuf), kube-fanout (its watchers
    /// with fixed HTTP/2 windows, as its Go client dials, then with
    /// grpc-go's defaults), the floor.
    async fn steady(&self, watchers: usize, rate: f64, seconds: f64) -> anyhow::Result<String> {
        let mut runs = BTreeMap::new();
        for target in [
            "none",
            "apiserver-json",
            "apiserver-proto",
            "fanout-static",
            "fanout",
            "floor",
        ] {
            let result = self.steady_run(target, watchers, rate, seconds).await?;
            runs.insert(target, result);
        }
        Ok(steady_table(watchers, rate, seconds, &runs))
    }

    /// One steady window of the load generator on `target`.
    async fn steady_run(
        &self,
        target: &str,
        watchers: usize,
        rate: f64,
        seconds: f64,
    ) -> anyhow::Result<Value> {
        self.loadgen(
            "steady",
            &[
                "-target".into(),
                target.into(),
                "-watchers".into(),
                watchers.to_string(),
                "-rate".into(),
                rate.to_string(),
                "-seconds".into(),
                seconds.to_string(),
                // The floor writes what kube-fanout writes per event: the
                // object's JSON and a few bytes of framing.
                "-size".into(),
                (self.args.size + 256).to_string(),
            ],
        )
        .await
    }

    /// kube-fanout's steady runs (fixed windows and grpc-go's defaults)
    /// for the `--baseline-bin` build and this one, `--steady-rounds`
    /// times, alternating which goes first (A B, B A, A B, ...); this
    /// build is left running.
    async fn steady_builds(
        &mut self,
        watchers: usize,
        rate: f64,
        seconds: f64,
    ) -> anyhow::Result<String> {
        let baseline = self
            .args
            .baseline_bin
            .clone()
            .context("no --baseline-bin")?;
        let builds = [baseline, self.fanout_bins[0].clone()];
        // runs[build][target] holds each round's result.
        let mut runs: [BTreeMap<&str, Vec<Value>>; 2] = Default::default();
        for round in 0..self.args.steady_rounds {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for build in order {
                self.restart_fanout_bin(&builds[build], "v1/configmaps")
                    .await?;
                for target in ["fanout-static", "fanout"] {
                    let result = self.steady_run(target, watchers, rate, seconds).await?;
                    runs[build].entry(target).or_default().push(result);
                }
            }
        }
        self.restart_fanout(0, "v1/configmaps").await?;
        Ok(builds_table(watchers, rate, seconds, &builds, &runs))
    }

    /// The restart herd: the API server's three ways to list (each on a
    /// freshly started API server), then for each kube-fanout binary,
    /// freshly started: its watch with initial events to the herd, and its
    /// snapshots to one subscriber. With `--baseline-bin`, the two builds
    /// run `--steady-rounds` times, alternating which goes first (as the
    /// steady case's rounds do), so both meet the same machine load; this
    /// build is left running for later cases.
    async fn herd(&mut self) -> anyhow::Result<String> {
        let mut runs = Vec::new();
        for (target, label) in [
            ("list", "kube-apiserver unpaged LIST (protobuf)"),
            ("paged", "kube-apiserver paged LIST (500, protobuf)"),
            ("watchlist", "kube-apiserver watch-list (protobuf)"),
        ] {
            // A fresh API server for each of its modes: Go keeps the heap
            // an earlier mode grew, which would set the next one's peak.
            self.cp.kill_apiserver().await?;
            self.cp.restart_apiserver().await?;
            runs.push((label.to_owned(), self.herd_run(target).await?));
        }
        let mut fanouts = Vec::new();
        if let Some(baseline) = self.args.baseline_bin.clone() {
            fanouts.push((BASELINE.to_owned(), baseline));
        }
        fanouts.push((THIS_BUILD.to_owned(), self.fanout_bins[0].clone()));
        let rounds = if fanouts.len() > 1 {
            self.args.steady_rounds.max(1)
        } else {
            1
        };
        let mut fanout_runs = Vec::new();
        let mut snapshots = Vec::new();
        for round in 0..rounds {
            let mut order: Vec<_> = fanouts.iter().collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for (build, bin) in order {
                self.restart_fanout_bin(bin, "v1/configmaps").await?;
                let herd = self.herd_run("fanout").await?;
                let snapshot = self
                    .loadgen(
                        "snapshot",
                        &[
                            "-objects".into(),
                            self.args.herd_objects.to_string(),
                            "-repeat".into(),
                            self.args.snapshots.to_string(),
                        ],
                    )
                    .await?;
                fanout_runs.push(BuildRun {
                    build: build.clone(),
                    round: round + 1,
                    herd,
                    snapshot,
                });
            }
        }
        if fanout_runs
            .last()
            .is_some_and(|run| run.build != THIS_BUILD)
        {
            self.restart_fanout(0, "v1/configmaps").await?;
        }
        let summary = if fanouts.len() > 1 {
            herd_builds_summary(&fanout_runs)
        } else {
            String::new()
        };
        for run in fanout_runs {
            let label = run.label(rounds);
            runs.push((
                format!(
                    "kube-fanout Watch with initial events (TLS{}), {label}",
                    if self.args.herd_gzip { ", gzip" } else { "" }
                ),
                run.herd,
            ));
            snapshots.push((label, run.snapshot));
        }
        let out = herd_table(&self.args, &runs, &snapshots) + &summary;
        Ok(out)
    }

    /// One herd of `--herd-watchers` on `target`.
    async fn herd_run(&self, target: &str) -> anyhow::Result<Value> {
        let mut args = vec![
            "-target".into(),
            target.into(),
            "-watchers".into(),
            self.args.herd_watchers.to_string(),
            "-objects".into(),
            self.args.herd_objects.to_string(),
        ];
        if self.args.herd_gzip {
            args.push("-gzip".into());
        }
        self.loadgen("herd", &args).await
    }

    /// The node-scoped case at `watchers` nodes over `connections`, both
    /// servers' watchers open side by side, writes to watched and to
    /// unwatched pods in turn.
    async fn nodes(&self, watchers: usize, connections: usize) -> anyhow::Result<String> {
        let load_before = load_average()?;
        let static_window = self.args.fanout_static_window;
        let mut perf = Vec::new();
        if let Some(dir) = &self.args.nodes_perf {
            if self.args.nodes_perf_process == "kube-apiserver"
                && std::env::var("KUBE_FANOUT_CONTROLPLANE_SYMBOLS").as_deref() != Ok("1")
            {
                bail!(
                    "--nodes-perf needs KUBE_FANOUT_CONTROLPLANE_SYMBOLS=1: perf names the API server's functions only in a build that keeps its symbols"
                );
            }
            let dir = dir.join(format!("{watchers}x{connections}"));
            std::fs::create_dir_all(&dir)?;
            perf = vec![
                "-perf-dir".into(),
                dir.display().to_string(),
                "-perf-process".into(),
                self.args.nodes_perf_process.clone(),
            ];
        }
        let result = self
            .loadgen(
                "nodes",
                &[
                    perf,
                    vec![
                        format!("-fanout-static-window={static_window}"),
                        "-targets".into(),
                        self.args.nodes_targets.join(","),
                        "-watchers".into(),
                        watchers.to_string(),
                        "-connections".into(),
                        connections.to_string(),
                        "-spare".into(),
                        SPARE_PODS.to_string(),
                        "-rate".into(),
                        self.args.rate.to_string(),
                        "-seconds".into(),
                        self.args.seconds.to_string(),
                        "-rounds".into(),
                        self.args.nodes_rounds.to_string(),
                        "-placements".into(),
                        self.args.nodes_placements.join(","),
                        "-fanout-cpu".into(),
                        self.args.fanout_cpu.to_string(),
                    ],
                ]
                .concat(),
            )
            .await?;
        let load = [load_before, load_average()?];
        Ok(nodes_table(&result, self.args.rate, static_window, &load))
    }

    /// Memory per idle subscriber, each on its own connection: each
    /// `--fanout-bin` build in turn, `--idle-rounds` times, each in a fresh
    /// process (memory freed by earlier cases would be reused by the
    /// subscribers without showing in RSS).
    async fn idle(&mut self) -> anyhow::Result<String> {
        let mut runs = Vec::new();
        for round in 1..=self.args.idle_rounds.max(1) {
            for bin in 0..self.fanout_bins.len() {
                self.restart_fanout(bin, "v1/configmaps").await?;
                let load = load_average()?;
                let result = self
                    .loadgen(
                        "idle",
                        &["-watchers".into(), self.args.idle_watchers.to_string()],
                    )
                    .await?;
                runs.push(IdleRun {
                    round,
                    bin,
                    load,
                    result,
                });
            }
        }
        // Leave the first build serving, as the other cases expect.
        self.restart_fanout(0, "v1/configmaps").await?;
        Ok(idle_table(&self.fanout_bins, &runs))
    }
}

/// One measurement of the idle case.
struct IdleRun {
    /// Which pass over the builds, from 1.
    round: usize,
    /// The build's index in `--fanout-bin`.
    bin: usize,
    /// The load average when it started.
    load: String,
    /// The load generator's result.
    result: Value,
}

/// The idle case laid out, one column per run.
fn idle_table(bins: &[PathBuf], runs: &[IdleRun]) -> String {
    let per_sub = |r: &Value| r["bytes_per_subscriber"].as_f64().unwrap_or(0.0) / 1024.0;
    let row = |label: &str, cell: &dyn Fn(&IdleRun) -> String| {
        let cells: Vec<String> = runs.iter().map(cell).collect();
        format!("| {label} | {} |\n", cells.join(" | "))
    };
    let watchers = runs
        .first()
        .map(|r| r.result["watchers"].clone())
        .unwrap_or_default();
    let mut out = format!("\n### {watchers} idle subscribers, each on its own TLS connection\n\n");
    for (i, bin) in bins.iter().enumerate() {
        out += &format!("- build {}: `{}`\n", i + 1, bin.display());
    }
    out += "\n";
    out += &row("", &|r| format!("build {}, round {}", r.bin + 1, r.round));
    out += &format!("|---|{}\n", "---|".repeat(runs.len()));
    out += &row("load average (1, 5, 15 min) at the start", &|r| {
        r.load.clone()
    });
    out += &row("RSS before / after", &|r| {
        let fanout = &r.result["procs"]["kube-fanout"];
        format!(
            "{} / {}",
            mib(&fanout["rss_start"]),
            mib(&fanout["rss_end"])
        )
    });
    out += &row("server memory per idle subscriber", &|r| {
        format!("{} KiB", down(per_sub(&r.result), 2))
    });
    out += &row("... / build 1's in the same round", &|r| {
        let first = runs
            .iter()
            .find(|other| other.round == r.round && other.bin == 0)
            .map(|other| per_sub(&other.result))
            .unwrap_or(f64::NAN);
        down(per_sub(&r.result) / first, 3)
    });
    out += &row("CPU to accept them (TLS handshakes included)", &|r| {
        format!("{} s", down(cpu(&r.result, "kube-fanout"), 2))
    });
    out += &row("time to open them all (64 at a time)", &|r| {
        format!("{} s", down(r.result["open_s"].as_f64().unwrap_or(0.0), 1))
    });
    out
}

/// A run's latency percentiles, as the tables show them. A run that did
/// not get every delivery has none: the load generator computes them only
/// over a complete run.
fn latency(r: &Value) -> String {
    if r["error"].is_string() {
        return "not computed (incomplete)".into();
    }
    let ms = |key: &str, decimals| down(r[key].as_f64().unwrap_or(0.0), decimals);
    format!(
        "{} / {} / {} ms",
        ms("p50_ms", 2),
        ms("p99_ms", 2),
        ms("max_ms", 1)
    )
}

fn mib(bytes: &Value) -> String {
    format!(
        "{} MiB",
        down(bytes.as_f64().unwrap_or(0.0) / f64::from(1 << 20), 1)
    )
}

/// `x` with `decimals` decimals, rounded down: a figure is never shown
/// better than measured (nor a ratio larger).
fn down(x: f64, decimals: usize) -> String {
    let scale = 10f64.powi(decimals as i32);
    // The epsilon keeps 2.3 from becoming 2.29 through 229.999...
    format!("{:.*}", decimals, (x * scale + 1e-9).floor() / scale)
}

fn cpu(run: &Value, process: &str) -> f64 {
    run["procs"][process]["cpu_s"].as_f64().unwrap_or(0.0)
}

/// The process that serves a steady-case target's watchers.
fn process(target: &str) -> &'static str {
    match target {
        "fanout" | "fanout-static" => "kube-fanout",
        "floor" => "floor",
        _ => "kube-apiserver",
    }
}

/// The steady case laid out: server CPU per delivery (the API server's
/// above the writes-only baseline; kube-fanout's and the floor writer's
/// own), as a ratio to the floor, latency and memory.
fn steady_table(watchers: usize, rate: f64, seconds: f64, runs: &BTreeMap<&str, Value>) -> String {
    let baseline = cpu(&runs["none"], "kube-apiserver");
    let per_delivery = |target: &str| {
        let run = &runs[target];
        let server = match process(target) {
            "kube-apiserver" => cpu(run, "kube-apiserver") - baseline,
            own => cpu(run, own),
        };
        server / run["delivered"].as_f64().unwrap_or(f64::NAN) * 1e6
    };
    let floor = per_delivery("floor");
    let columns = [
        "apiserver-json",
        "apiserver-proto",
        "fanout-static",
        "fanout",
        "floor",
    ];
    let row = |label: &str, cell: &dyn Fn(&str) -> String| {
        let cells: Vec<String> = columns.iter().map(|c| cell(c)).collect();
        format!("| {label} | {} |\n", cells.join(" | "))
    };
    let mut out = format!(
        "\n### {watchers} watchers, {rate} writes/s for {seconds} s, each watcher on its own connection\n\n\
         | | kube-apiserver (JSON) | kube-apiserver (protobuf) | kube-fanout (TLS; fixed windows, as its Go client) | kube-fanout (TLS; grpc-go's default windows) | plain-TCP floor |\n\
         |---|---|---|---|---|---|\n"
    );
    out += &row("deliveries (all checked)", &|c| {
        let r = &runs[c];
        match r["error"].as_str() {
            Some(error) => format!(
                "**{} of {}, incomplete**: {error}",
                r["delivered"], r["expected"]
            ),
            None => format!("{}", r["delivered"]),
        }
    });
    out += &row("server CPU per delivery", &|c| {
        format!("{} µs", down(per_delivery(c), 2))
    });
    out += &row("... / the floor", &|c| down(per_delivery(c) / floor, 2));
    out += &row("latency p50 / p99 / max", &|c| latency(&runs[c]));
    out += &row("server RSS at the window's end", &|c| {
        mib(&runs[c]["procs"][process(c)]["rss_end"])
    });
    out += &format!(
        "\nkube-apiserver's writes-only baseline: {} s CPU for {} writes. \
         The API server's columns are its CPU above that baseline; kube-fanout's and the floor's are their own. \
         kube-fanout's watchers are grpc-go channels: with fixed HTTP/2 windows (4 MiB a stream, 16 MiB a connection, as kube-fanout's Go client dials), \
         and with grpc-go's defaults, whose bandwidth-delay-product estimator sends a PING (and a WINDOW_UPDATE) after the first DATA frame following each ack: on a watch quieter than the round trip, one per event.\n",
        down(baseline, 2),
        runs["none"]["writes"]
    );
    out
}

/// kube-fanout's own CPU per delivery in a steady run, in µs (NaN when
/// the run did not complete).
fn fanout_per_delivery(run: &Value) -> f64 {
    if run["error"].is_string() {
        return f64::NAN;
    }
    cpu(run, "kube-fanout") / run["delivered"].as_f64().unwrap_or(f64::NAN) * 1e6
}

/// The median of unsorted `xs`, NaN if any is (a run that did not
/// complete has no figure, and no median is made without it).
fn median_of(xs: &[f64]) -> f64 {
    if xs.iter().any(|x| x.is_nan()) {
        return f64::NAN;
    }
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    median(&sorted)
}

/// The two builds' steady runs side by side: each round's CPU per
/// delivery, the medians, and this build's median over the baseline's.
fn builds_table(
    watchers: usize,
    rate: f64,
    seconds: f64,
    builds: &[PathBuf; 2],
    runs: &[BTreeMap<&str, Vec<Value>>; 2],
) -> String {
    let mut out = format!(
        "\n### Two builds, {watchers} watchers, {rate} writes/s for {seconds} s, in turn\n\n\
         baseline: `{}`; this build: `{}`. kube-fanout's own CPU per delivery, each round's, in the order run \
         (rounds alternate which build goes first).\n\n\
         | watchers' windows | baseline, each round (µs) | this build, each round (µs) | median baseline | median this build | this / baseline |\n\
         |---|---|---|---|---|---|\n",
        builds[0].display(),
        builds[1].display()
    );
    for (target, label) in [("fanout-static", "fixed"), ("fanout", "grpc-go's default")] {
        let per_round = |build: usize| -> Vec<f64> {
            runs[build]
                .get(target)
                .map(|rs| rs.iter().map(fanout_per_delivery).collect())
                .unwrap_or_default()
        };
        let (before, after) = (per_round(0), per_round(1));
        let list = |xs: &[f64]| {
            xs.iter()
                .map(|x| down(*x, 2))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (m0, m1) = (median_of(&before), median_of(&after));
        // Rounded up, so the ratio never reads better than measured (the
        // epsilon keeps 1.25 from becoming 1.251 through 1.2500000001).
        let ratio = ((m1 / m0) * 1000.0 - 1e-9).ceil() / 1000.0;
        out += &format!(
            "| {label} | {} | {} | {} | {} | {ratio:.3} |\n",
            list(&before),
            list(&after),
            down(m0, 2),
            down(m1, 2),
        );
    }
    out += "\n| watchers' windows | baseline latency p50 / p99 / max, each round | this build's, each round |\n|---|---|---|\n";
    for (target, label) in [("fanout-static", "fixed"), ("fanout", "grpc-go's default")] {
        let each = |build: usize| -> String {
            runs[build]
                .get(target)
                .map(|rs| rs.iter().map(latency).collect::<Vec<_>>().join("; "))
                .unwrap_or_default()
        };
        out += &format!("| {label} | {} | {} |\n", each(0), each(1));
    }
    out
}

/// The herd laid out: wall time, CPU (the API server's plus etcd's;
/// kube-fanout's own) and peak RSS, each as a ratio to the measured
/// kube-fanout's (the last run); then each build's snapshots to one
/// subscriber.
/// The label of the `--baseline-bin` build in the tables.
const BASELINE: &str = "baseline";
/// The label of the measured build in the tables.
const THIS_BUILD: &str = "this build";

/// One build's herd and snapshot runs in one round of the herd case.
struct BuildRun {
    build: String,
    round: usize,
    herd: Value,
    snapshot: Value,
}

impl BuildRun {
    fn label(&self, rounds: usize) -> String {
        if rounds > 1 {
            format!("{}, round {}", self.build, self.round)
        } else {
            self.build.clone()
        }
    }
}

/// The MB/s of each timed snapshot in a snapshot run.
fn snapshot_rates(run: &Value) -> Vec<f64> {
    let mb = run["object_bytes"].as_f64().unwrap_or(0.0) / 1e6;
    run["wall_s"]
        .as_array()
        .map(|walls| {
            walls
                .iter()
                .map(|w| mb / w.as_f64().unwrap_or(f64::NAN))
                .collect()
        })
        .unwrap_or_default()
}

/// The two builds' herd CPU and snapshot rates over all rounds: each
/// build's median, and this build's over the baseline's.
fn herd_builds_summary(runs: &[BuildRun]) -> String {
    let of = |build: &'static str| runs.iter().filter(move |r| r.build == build);
    let herd_cpu = |build| {
        median_of(
            &of(build)
                .map(|r| cpu(&r.herd, "kube-fanout"))
                .collect::<Vec<_>>(),
        )
    };
    let rate = |build| {
        median_of(
            &of(build)
                .flat_map(|r| snapshot_rates(&r.snapshot))
                .collect::<Vec<_>>(),
        )
    };
    let (herd_base, herd_this) = (herd_cpu(BASELINE), herd_cpu(THIS_BUILD));
    let (rate_base, rate_this) = (rate(BASELINE), rate(THIS_BUILD));
    format!(
        "
Both builds over all rounds (each round ran them in turn, alternating which went first): \
         kube-fanout's herd CPU, median {} s baseline, {} s this build ({}×); \
         snapshot rate, median of every timed snapshot, {} MB/s baseline, {} MB/s this build ({}×).\n",
        down(herd_base, 2),
        down(herd_this, 2),
        down(herd_this / herd_base, 2),
        down(rate_base, 0),
        down(rate_this, 0),
        down(rate_this / rate_base, 2),
    )
}

fn herd_table(args: &Args, runs: &[(String, Value)], snapshots: &[(String, Value)]) -> String {
    let cost = |run: &Value| {
        let (cpu_s, peak_of) = if run["target"] == "fanout" {
            (cpu(run, "kube-fanout"), "kube-fanout")
        } else {
            (
                cpu(run, "kube-apiserver") + cpu(run, "etcd"),
                "kube-apiserver",
            )
        };
        let peak = run["procs"][peak_of]["peak_rss"].as_f64().unwrap_or(0.0);
        (cpu_s, peak)
    };
    // The reference is this build's last herd (the last run when there is
    // no baseline).
    let (fanout_cpu, fanout_peak) = runs
        .iter()
        .rev()
        .find(|(label, _)| label.contains(THIS_BUILD))
        .or(runs.last())
        .map_or((f64::NAN, f64::NAN), |(_, r)| cost(r));
    let mut out = format!(
        "\n### Restart herd: {} watchers, each on its own connection, each needing {} ConfigMaps of {} B at once\n\n\
         | | wall | server CPU | / kube-fanout's | peak server RSS | / kube-fanout's |\n|---|---|---|---|---|---|\n",
        args.herd_watchers, args.herd_objects, args.size
    );
    for (label, run) in runs {
        let (cpu, peak) = cost(run);
        let incomplete = run["error"]
            .as_str()
            .map(|e| format!(" (**incomplete**: {e})"))
            .unwrap_or_default();
        out += &format!(
            "| {label} | {} s{incomplete} | {} s | {} | {} | {} |\n",
            down(run["wall_s"].as_f64().unwrap_or(0.0), 2),
            down(cpu, 2),
            down(cpu / fanout_cpu, 2),
            mib(&Value::from(peak)),
            down(peak / fanout_peak, 2),
        );
    }
    out += "\nThe peak is VmHWM, reset (clear_refs) at the window's start, so it is the peak within the window.\n";
    out += &format!(
        "\nSnapshots to one subscriber, {} in turn on one connection opened before (after one untimed): \
         object JSON per snapshot, each one's MB/s, and the server's and the client's CPU per snapshot.\n\n\
         | | objects | MB | MB/s, each run | best | median | server CPU | client CPU |\n|---|---|---|---|---|---|---|---|\n",
        args.snapshots
    );
    for (build, run) in snapshots {
        let mb = run["object_bytes"].as_f64().unwrap_or(0.0) / 1e6;
        let mut rates = snapshot_rates(run);
        let each = rates
            .iter()
            .map(|r| down(*r, 0))
            .collect::<Vec<_>>()
            .join(", ");
        rates.sort_by(f64::total_cmp);
        let n = rates.len().max(1) as f64;
        let per_snapshot = |process| format!("{} ms", down(cpu(run, process) * 1e3 / n, 1));
        let error = run["error"]
            .as_str()
            .map(|e| format!(" (**incomplete**: {e})"))
            .unwrap_or_default();
        out += &format!(
            "| kube-fanout, {build}{error} | {} | {} | {each} | {} | {} | {} | {} |\n",
            run["objects"],
            down(mb, 1),
            rates.last().map_or("-".into(), |r| down(*r, 0)),
            rates
                .get(rates.len() / 2)
                .map_or("-".into(), |r| down(*r, 0)),
            per_snapshot("kube-fanout"),
            per_snapshot("loadgen"),
        );
    }
    out
}

/// The first three fields of `/proc/loadavg`: the 1, 5 and 15 minute
/// load averages.
fn load_average() -> anyhow::Result<String> {
    let text = std::fs::read_to_string("/proc/loadavg")?;
    Ok(text
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" / "))
}

/// One server's CPU in the nodes case: per window, split by whether the
/// window's writes went to watched pods.
struct WindowCpu {
    /// (on, off) CPU seconds of each round, in round order.
    rounds: Vec<(f64, f64)>,
    /// Writes per window.
    writes: f64,
}

impl WindowCpu {
    /// `process`'s CPU time in each window of `placement` (from `/proc`).
    fn of(result: &Value, process: &str, placement: &str) -> Self {
        Self::measured(result, placement, |window| cpu(window, process))
    }

    /// `process`'s CPU time in each window as perf sampled it: the samples
    /// with `count` ("samples": all, "watch_path": on the API server's
    /// watch path), over the sampling frequency.
    fn sampled(result: &Value, process: &str, count: &str, placement: &str) -> Self {
        Self::measured(result, placement, |window| {
            let perf = &window["perf"][process];
            perf[count].as_f64().unwrap_or(f64::NAN) / perf["freq"].as_f64().unwrap_or(f64::NAN)
        })
    }

    /// Seconds of CPU per window of `placement` as `seconds` reads them
    /// from a window. (Each placement's on and off windows of a round run
    /// one after the other, so its windows pair up as a round's.)
    fn measured(result: &Value, placement: &str, seconds: impl Fn(&Value) -> f64) -> Self {
        let windows: Vec<Value> = result["windows"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|w| placement_of(w) == placement)
            .cloned()
            .collect();
        let writes = windows
            .first()
            .and_then(|w| w["writes"].as_f64())
            .unwrap_or(f64::NAN);
        let rounds = windows
            .chunks_exact(2)
            .map(|pair| {
                let (on, off) = if pair[0]["on"] == true {
                    (&pair[0], &pair[1])
                } else {
                    (&pair[1], &pair[0])
                };
                (seconds(on), seconds(off))
            })
            .collect();
        WindowCpu { rounds, writes }
    }

    fn on(&self) -> f64 {
        self.rounds.iter().map(|r| r.0).sum()
    }

    fn off(&self) -> f64 {
        self.rounds.iter().map(|r| r.1).sum()
    }

    /// `seconds` of CPU over one kind of window's writes, in µs.
    fn per_write_of(&self, seconds: f64) -> f64 {
        seconds / (self.writes * self.rounds.len() as f64) * 1e6
    }

    /// All the CPU of the on windows, over their writes (one delivery
    /// each): what one lone event costs, reading it and delivering it.
    fn per_write(&self) -> f64 {
        self.per_write_of(self.on())
    }

    /// CPU per delivery: the on windows less the off windows, over the on
    /// windows' writes (one delivery each).
    fn per_delivery(&self) -> f64 {
        self.per_write_of(self.on() - self.off())
    }

    /// Each round's on − off per delivery, sorted.
    fn round_deltas(&self) -> Vec<f64> {
        let mut deltas: Vec<f64> = self
            .rounds
            .iter()
            .map(|(on, off)| (on - off) / self.writes * 1e6)
            .collect();
        deltas.sort_by(f64::total_cmp);
        deltas
    }

    fn median_delta(&self) -> f64 {
        median(&self.round_deltas())
    }

    /// The standard error of [`Self::per_delivery`], the rounds' mean:
    /// their sample standard deviation over the square root of their count.
    fn std_error(&self) -> f64 {
        let deltas = self.round_deltas();
        let n = deltas.len() as f64;
        let mean = deltas.iter().sum::<f64>() / n;
        let variance = deltas.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (variance / n).sqrt()
    }
}

/// Where a window's servers ran (see the load generator's `placement.go`);
/// windows of a load generator that did not place them ran shared.
fn placement_of(window: &Value) -> &str {
    window["placement"].as_str().unwrap_or("shared")
}

/// The placements a result's windows ran in: isolated first.
fn placements(result: &Value) -> Vec<&str> {
    let mut found: Vec<&str> = result["windows"]
        .as_array()
        .into_iter()
        .flatten()
        .map(placement_of)
        .collect();
    found.sort_by_key(|p| (*p != "isolated", p.to_string()));
    found.dedup();
    found
}

/// The median of sorted `xs` (NaN if empty).
fn median(xs: &[f64]) -> f64 {
    match xs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

/// The nodes case laid out: each server's CPU per delivery (on windows
/// less off windows), each round's, latency, open time and memory; a pair
/// of columns per placement (isolated, shared) the windows ran in.
fn nodes_table(result: &Value, rate: f64, static_window: bool, load: &[String; 2]) -> String {
    let servers = [
        (
            "apiserver-proto",
            "kube-apiserver",
            "kube-apiserver (protobuf)",
        ),
        ("fanout", "kube-fanout", "kube-fanout (TLS)"),
    ];
    let placements = placements(result);
    // The servers whose watchers were open, each with a column per placement.
    let servers: Vec<_> = servers
        .into_iter()
        .filter(|(target, _, _)| result["targets"][target].is_object())
        .collect();
    let columns: Vec<(&str, &str, &str, &str)> = placements
        .iter()
        .flat_map(|&placement| {
            servers
                .iter()
                .map(move |&(target, process, title)| (target, process, title, placement))
        })
        .collect();
    let cpus: Vec<WindowCpu> = columns
        .iter()
        .map(|&(_, process, _, placement)| WindowCpu::of(result, process, placement))
        .collect();
    let row = |label: &str, cell: &dyn Fn(&Value, &WindowCpu, &str, &str) -> String| {
        let cells: Vec<String> = columns
            .iter()
            .zip(&cpus)
            .map(|(&(target, process, _, placement), cpu)| {
                cell(&result["targets"][target], cpu, process, placement)
            })
            .collect();
        format!("| {label} | {} |\n", cells.join(" | "))
    };
    let writes = cpus.first().map_or(f64::NAN, |c| c.writes);
    let header: Vec<String> = columns
        .iter()
        .map(|&(_, _, title, placement)| format!("{title}, {placement}"))
        .collect();
    let mut out = format!(
        "\n### {} node watchers per server over {} connections each, both servers' watchers open side by side\n\n\
         {} rounds, each a window of {} writes to the watched pods (on: one delivery per server each) \
         and one of {} writes to pods no watcher watches (off) in each placement ({}), {} writes/s, \
         alternating on-off, off-on. \
         kube-fanout's watchers: grpc-go with {}. Load average (1 / 5 / 15 min) before: {}, after: {}.\n\n\
         | | {} |\n|---|{}\n",
        result["watchers"],
        result["connections"],
        cpus.first().map_or(0, |c| c.rounds.len()),
        writes,
        writes,
        placements.join(", "),
        rate,
        if static_window {
            "fixed 4 MiB stream windows (no BDP pings)"
        } else {
            "its default dynamic windows (a BDP ping per event on a quiet watch)"
        },
        load[0],
        load[1],
        header.join(" | "),
        "---|".repeat(columns.len()),
    );
    if let Some(error) = result["error"].as_str() {
        out += &format!(
            "| **incomplete** | {error} |{}\n",
            " |".repeat(columns.len() - 1)
        );
    }
    out += &row(
        "deliveries, all windows (all checked, each to its node's watcher; none of the off writes)",
        &|t, _, _, _| format!("{} of {}", t["delivered"], t["expected"]),
    );
    out += &row("server CPU: on windows / off windows", &|_, c, _, _| {
        format!("{} s / {} s", down(c.on(), 2), down(c.off(), 2))
    });
    out += &row(
        "**server CPU per delivery** (on − off) / deliveries",
        &|_, c, _, _| {
            format!(
                "**{} µs** (± {} µs standard error)",
                down(c.per_delivery(), 1),
                down(c.std_error(), 1)
            )
        },
    );
    out += &row(
        "each round's (on − off) per delivery, sorted: median",
        &|_, c, _, _| {
            let deltas: Vec<String> = c.round_deltas().iter().map(|d| down(*d, 1)).collect();
            format!("{}: {} µs", deltas.join(", "), down(c.median_delta(), 1))
        },
    );
    // Only the process the load generator recorded has a `perf` entry.
    let perf = &result["windows"][0]["perf"];
    let sampled = |count: &'static str| {
        move |_: &Value, _: &WindowCpu, process: &str, placement: &str| {
            if !perf[process].is_object() {
                return "(not sampled: its whole CPU is above)".to_string();
            }
            let c = WindowCpu::sampled(result, process, count, placement);
            format!(
                "{} µs (± {} µs standard error); rounds' median {} µs",
                down(c.per_delivery(), 1),
                down(c.std_error(), 1),
                down(c.median_delta(), 1)
            )
        }
    };
    if let Some(freq) = perf
        .as_object()
        .and_then(|p| p.values().find_map(|s| s["freq"].as_f64()))
    {
        out += &row(
            &format!("perf's samples ({freq} a CPU-second), all: (on − off) / deliveries"),
            &sampled("samples"),
        );
        if perf["kube-apiserver"].is_object() {
            out += &row(
                "**perf's samples on the watch path** (the watch handler, the watch cache's watchers and dispatch, the HTTP/2 connections outside request handlers): (on − off) / deliveries",
                &sampled("watch_path"),
            );
        }
    }
    out += &row(
        "**all its CPU in the on windows, per write** (one delivery each)",
        &|_, c, _, _| format!("**{} µs**", down(c.per_write(), 1)),
    );
    out += &row(
        "all its CPU in the off windows, per write (no delivery)",
        &|_, c, _, _| format!("{} µs", down(c.per_write_of(c.off()), 1)),
    );
    out += &row("latency p50 / p99 / max, all windows", &|t, _, _, _| {
        latency(t)
    });
    out += &row("time to open the watches (32 at a time)", &|t, _, _, _| {
        format!("{} s", down(t["open_s"].as_f64().unwrap_or(0.0), 1))
    });
    out += &row("server RSS at the end", &|_, _, process, _| {
        let last = result["windows"]
            .as_array()
            .and_then(|w| w.last())
            .cloned()
            .unwrap_or_default();
        mib(&last["procs"][process]["rss_end"])
    });
    out.push('\n');
    for (placement, pair) in placements.iter().zip(cpus.chunks_exact(servers.len())) {
        let [api, fanout] = pair else { continue };
        out += &format!(
            "{placement}: kube-apiserver / kube-fanout per delivery: {} (all rounds), {} (the rounds' medians).\n",
            down(api.per_delivery() / fanout.per_delivery(), 2),
            down(api.median_delta() / fanout.median_delta(), 2),
        );
    }
    if let (Some(i), Some(s), Some(f)) = (
        placements.iter().position(|p| *p == "isolated"),
        placements.iter().position(|p| *p == "shared"),
        servers
            .iter()
            .position(|(_, process, _)| *process == "kube-fanout"),
    ) {
        // Each placement's columns are the servers in turn.
        let n = servers.len();
        let (isolated, shared) = (&cpus[n * i + f], &cpus[n * s + f]);
        out += &format!(
            "kube-fanout per write, shared / isolated: {} in the on windows, {} in the off windows.\n",
            down(shared.per_write() / isolated.per_write(), 2),
            down(shared.off() / isolated.off(), 2),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn window(on: bool, cpu_s: f64) -> Value {
        json!({"on": on, "writes": 1000, "procs": {"server": {"cpu_s": cpu_s}}})
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    fn steady(cpu_s: f64, delivered: u64) -> Value {
        json!({"delivered": delivered, "procs": {"kube-fanout": {"cpu_s": cpu_s}},
            "p50_ms": 1.5, "p99_ms": 4.25, "max_ms": 9.0})
    }

    #[test]
    fn two_builds_are_compared_by_their_median_cpu_per_delivery() {
        // Baseline rounds: 20, 30, 10 µs (median 20); this build's: 21,
        // 25, 100 µs (median 25): the outlier moves neither median.
        let rounds = |cpus: [f64; 3]| -> BTreeMap<&'static str, Vec<Value>> {
            let runs: Vec<Value> = cpus.iter().map(|c| steady(*c, 100_000)).collect();
            BTreeMap::from([("fanout-static", runs.clone()), ("fanout", runs)])
        };
        let table = builds_table(
            100,
            100.0,
            10.0,
            &[PathBuf::from("old"), PathBuf::from("new")],
            &[rounds([2.0, 3.0, 1.0]), rounds([2.1, 2.5, 10.0])],
        );
        assert!(
            table.contains(
                "| fixed | 20.00, 30.00, 10.00 | 21.00, 25.00, 100.00 | 20.00 | 25.00 | 1.250 |"
            ),
            "{table}"
        );
        let each_round = ["1.50 / 4.25 / 9.0 ms"; 3].join("; ");
        assert!(
            table.contains(&format!("| fixed | {each_round} | {each_round} |")),
            "{table}"
        );
        assert!(close(median_of(&[4.0, 1.0, 3.0, 2.0]), 2.5));
        assert!(median_of(&[1.0, f64::NAN]).is_nan());
    }

    /// perf's counts are seconds of CPU at its frequency, paired by round
    /// as `/proc`'s are: all samples and the watch path's apart.
    #[test]
    fn sampled_cpu_is_samples_over_the_frequency() {
        let sampled = |on: bool, samples: u64, watch_path: u64| {
            json!({"on": on, "writes": 1000, "perf": {"server": {
                "freq": 1000, "samples": samples, "watch_path": watch_path}}})
        };
        // Round 1: 2,000 more samples, 100 more on the watch path; round
        // 2 (off first): 1,000 and 300 more.
        let result = json!({"windows": [
            sampled(true, 9000, 600), sampled(false, 7000, 500),
            sampled(false, 8000, 400), sampled(true, 9000, 700),
        ]});
        let all = WindowCpu::sampled(&result, "server", "samples", "shared");
        assert!(close(all.per_delivery(), 1500.0), "{}", all.per_delivery());
        let path = WindowCpu::sampled(&result, "server", "watch_path", "shared");
        assert!(close(path.per_delivery(), 200.0), "{}", path.per_delivery());
        assert_eq!(path.round_deltas().len(), 2);
        assert!(close(path.round_deltas()[0], 100.0) && close(path.round_deltas()[1], 300.0));
    }

    /// The perf rows name the frequency the windows were sampled at and
    /// give figures only for the process that was sampled.
    #[test]
    fn the_nodes_table_reports_perf_only_for_the_sampled_process() {
        let window = |on: bool, samples: u64| {
            json!({"on": on, "writes": 1000, "procs": {
                "kube-apiserver": {"cpu_s": 1.0}, "kube-fanout": {"cpu_s": 1.0}},
                "perf": {"kube-apiserver": {"freq": 499, "samples": samples, "watch_path": samples}}})
        };
        let result = json!({"watchers": 5, "connections": 5,
            "targets": {"apiserver-proto": {}, "fanout": {}}, "windows": [
            window(true, 998), window(false, 499),
        ]});
        let table = nodes_table(&result, 100.0, true, &["0".into(), "0".into()]);
        let perf_rows: Vec<&str> = table
            .lines()
            .filter(|l| l.contains("perf's samples"))
            .collect();
        assert_eq!(perf_rows.len(), 2, "{table}");
        assert!(perf_rows[0].contains("(499 a CPU-second)"), "{table}");
        for row in perf_rows {
            // 499 more samples at 499/s over 1,000 deliveries: 1,000 µs.
            let cells: Vec<&str> = row.split(" | ").collect();
            assert!(cells[1].starts_with("1000.0 µs"), "{row}");
            assert!(cells[2].starts_with("(not sampled"), "{row}");
        }
    }

    #[test]
    fn cpu_per_delivery_pairs_each_rounds_on_and_off_whatever_their_order() {
        // On-off, off-on, on-off: 300, 100 and 500 µs per delivery.
        let result = json!({"windows": [
            window(true, 1.3), window(false, 1.0),
            window(false, 2.0), window(true, 2.1),
            window(true, 1.5), window(false, 1.0),
        ]});
        let cpu = WindowCpu::of(&result, "server", "shared");
        let deltas = cpu.round_deltas();
        assert!(
            deltas.len() == 3 && close(deltas[0], 100.0) && close(deltas[1], 300.0),
            "{deltas:?}"
        );
        assert!(close(deltas[2], 500.0), "{deltas:?}");
        assert!(close(cpu.on(), 4.9) && close(cpu.off(), 4.0));
        assert!(close(cpu.per_delivery(), 300.0), "{}", cpu.per_delivery());
        assert!(close(cpu.median_delta(), 300.0));
        // Sample standard deviation 200 µs, over √3.
        assert!(
            close(cpu.std_error(), 200.0 / 3f64.sqrt()),
            "{}",
            cpu.std_error()
        );
    }

    /// Each placement's windows pair up among themselves, whatever lies
    /// between them, and the table compares kube-fanout's cost per write
    /// across placements.
    #[test]
    fn each_placements_windows_are_paired_and_compared_apart() {
        let placed = |placement: &str, on: bool, api: f64, fanout: f64| {
            json!({"on": on, "writes": 1000, "placement": placement, "procs": {
                "kube-apiserver": {"cpu_s": api}, "kube-fanout": {"cpu_s": fanout}}})
        };
        // Isolated: kube-fanout 0.2 s on, 0.1 s off; shared: 0.5 and 0.3.
        let result = json!({"watchers": 5, "connections": 5,
            "targets": {"apiserver-proto": {}, "fanout": {}}, "windows": [
            placed("isolated", true, 4.0, 0.2), placed("isolated", false, 3.9, 0.1),
            placed("shared", true, 4.1, 0.5), placed("shared", false, 4.0, 0.3),
            placed("shared", false, 4.0, 0.3), placed("shared", true, 4.1, 0.5),
            placed("isolated", false, 3.9, 0.1), placed("isolated", true, 4.0, 0.2),
        ]});
        assert_eq!(placements(&result), ["isolated", "shared"]);
        let isolated = WindowCpu::of(&result, "kube-fanout", "isolated");
        assert_eq!(isolated.rounds.len(), 2);
        assert!(
            close(isolated.per_delivery(), 100.0),
            "{}",
            isolated.per_delivery()
        );
        assert!(
            close(isolated.per_write(), 200.0),
            "{}",
            isolated.per_write()
        );
        let shared = WindowCpu::of(&result, "kube-fanout", "shared");
        assert!(
            close(shared.per_delivery(), 200.0),
            "{}",
            shared.per_delivery()
        );
        let table = nodes_table(&result, 100.0, true, &["0".into(), "0".into()]);
        assert!(
            table.contains("| | kube-apiserver (protobuf), isolated | kube-fanout (TLS), isolated | kube-apiserver (protobuf), shared | kube-fanout (TLS), shared |"),
            "{table}"
        );
        assert!(
            table.contains("shared / isolated: 2.50 in the on windows, 3.00 in the off windows"),
            "{table}"
        );
        // The API server's watchers alone: no kube-fanout line to draw.
        let mut api_only = result.clone();
        api_only["targets"] = json!({"apiserver-proto": {}});
        let table = nodes_table(&api_only, 100.0, true, &["0".into(), "0".into()]);
        assert!(!table.contains("shared / isolated"), "{table}");
        // kube-fanout's watchers alone: its columns only, compared alike.
        let mut alone = result.clone();
        alone["targets"] = json!({"fanout": {}});
        let table = nodes_table(&alone, 100.0, true, &["0".into(), "0".into()]);
        assert!(
            table.contains("| | kube-fanout (TLS), isolated | kube-fanout (TLS), shared |"),
            "{table}"
        );
        assert!(
            table.contains("shared / isolated: 2.50 in the on windows, 3.00 in the off windows"),
            "{table}"
        );
    }

    #[test]
    fn an_incomplete_run_shows_no_latency() {
        let complete = json!({"p50_ms": 4.5, "p99_ms": 8.68, "max_ms": 22.6});
        assert_eq!(latency(&complete), "4.50 / 8.68 / 22.6 ms");
        let incomplete = json!({"error": "EOF", "p50_ms": 0, "p99_ms": 0, "max_ms": 0});
        assert_eq!(latency(&incomplete), "not computed (incomplete)");
    }

    #[test]
    fn median_of_an_even_count_is_the_middle_twos_mean() {
        assert!(close(median(&[-40.0, 120.0]), 40.0));
        assert!(close(median(&[1.0, 2.0, 7.0]), 2.0));
        assert!(median(&[]).is_nan());
    }
}

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
    /// Idle subscribers.
    #[arg(long, default_value_t = 10_000)]
    idle_watchers: usize,
    /// Node watcher counts of the nodes case.
    #[arg(long, value_delimiter = ',', default_values_t = [500, 5000])]
    nodes: Vec<usize>,
    /// Connections the node watchers share, one per `--nodes` count (as
    /// many as watchers: each on its own).
    #[arg(long, value_delimiter = ',', default_values_t = [500, 100])]
    nodes_connections: Vec<usize>,
    /// A kube-fanout binary to measure instead of this tree's release
    /// build, to compare two builds.
    #[arg(long)]
    fanout_bin: Option<PathBuf>,
    /// A second kube-fanout binary (say an earlier commit's release
    /// build) whose herd and snapshot runs go next to the measured one's,
    /// in the same run and tables.
    #[arg(long)]
    baseline_bin: Option<PathBuf>,
    /// Timed snapshots to one subscriber, one after another on one
    /// connection, in the herd case.
    #[arg(long, default_value_t = 9)]
    snapshots: usize,
}

/// ConfigMaps the steady writer cycles through.
const STEADY_OBJECTS: usize = 100;

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
    fanout_bin: PathBuf,
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
    status(
        Command::new(cargo)
            .args(["build", "--release", "--bins"])
            .args(["-p", "kube-fanout", "-p", "kube-fanout-bench"])
            .current_dir(&root),
    )
    .await?;
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
        fanout_bin: args
            .fanout_bin
            .clone()
            .unwrap_or_else(|| target.join("release/kube-fanout")),
        ca: dir.join("fanout-ca.crt"),
        cert: dir.join("fanout.crt"),
        key: dir.join("fanout.key"),
        fanout: None,
        args,
    };
    bench.loadgen_setup("bench", STEADY_OBJECTS).await?;
    if cases.contains(&Case::Herd) {
        bench.loadgen_setup("herd", bench.args.herd_objects).await?;
    }
    if cases.contains(&Case::Nodes) {
        let pods = bench.args.nodes.iter().max().copied().unwrap_or(0);
        eprintln!("creating {pods} pods in nodes, one per node");
        status(Command::new(&bench.loadgen).args([
            "pods",
            "-kubeconfig",
            &bench.kubeconfig(),
            "-pods",
            &pods.to_string(),
        ]))
        .await?;
    }
    bench.restart_fanout("v1/configmaps").await?;
    let mut out = String::new();
    for case in cases {
        out.push_str(&match case {
            Case::Steady => {
                let mut tables = String::new();
                for watchers in bench.args.watchers.clone() {
                    let (rate, seconds) = (bench.args.rate, bench.args.seconds);
                    tables.push_str(&bench.steady(watchers, rate, seconds).await?);
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
            Case::Idle => {
                // A fresh process: memory freed by earlier cases would be
                // reused by the subscribers without showing in RSS.
                bench.restart_fanout("v1/configmaps").await?;
                bench.idle().await?
            }
            Case::Nodes => {
                bench.restart_fanout("v1/pods").await?;
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

    /// Stops kube-fanout if running and starts it again serving
    /// `resource`, waiting until it has synced.
    async fn restart_fanout(&mut self, resource: &str) -> anyhow::Result<()> {
        let bin = self.fanout_bin.clone();
        self.restart_fanout_bin(&bin, resource).await
    }

    /// [`Bench::restart_fanout`] with the binary `bin`.
    async fn restart_fanout_bin(&mut self, bin: &Path, resource: &str) -> anyhow::Result<()> {
        self.fanout = None;
        let port = free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let log = self.cp.dir().join("kube-fanout.log");
        let file = std::fs::File::create(&log)?;
        let child = tied_command(bin)
            .args(["--resource", resource, "--auth=none", "--listen", &addr])
            // Without authentication the caller is the client address, so
            // every watcher here (all from 127.0.0.1) would be one caller;
            // they stand for separate controllers.
            .args(["--max-watches-per-caller=0", "--max-snapshots-per-caller=0"])
            .arg(format!("--metrics-listen=127.0.0.1:{}", free_port()?))
            .arg(format!("--kubeconfig={}", self.kubeconfig()))
            .arg(format!("--tls-cert-file={}", self.cert.display()))
            .arg(format!("--tls-private-key-file={}", self.key.display()))
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .context("starting kube-fanout")?;
        let pid = child.id().context("kube-fanout exited")?;
        let fanout = Fanout {
            _child: child,
            pid,
            addr,
            log,
        };
        for _ in 0..600 {
            let text = std::fs::read_to_string(&fanout.log)?;
            if text.contains("every resource type synced") {
                self.fanout = Some(fanout);
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "kube-fanout did not sync in 60 s:\n{}",
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

    /// One load generator run; its JSON result.
    async fn loadgen(&self, command: &str, extra: &[String]) -> anyhow::Result<Value> {
        let fanout = self.fanout();
        let mut args = vec![
            command.to_owned(),
            "-kubeconfig".into(),
            self.kubeconfig(),
            "-fanout".into(),
            fanout.addr.clone(),
            "-fanout-ca".into(),
            self.ca.display().to_string(),
            "-pids".into(),
            self.pids(),
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
    /// baseline, the API server (JSON, protobuf), kube-fanout, the floor.
    async fn steady(&self, watchers: usize, rate: f64, seconds: f64) -> anyhow::Result<String> {
        let mut runs = BTreeMap::new();
        for target in [
            "none",
            "apiserver-json",
            "apiserver-proto",
            "fanout",
            "floor",
        ] {
            let result = self
                .loadgen(
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
                        // The floor writes what kube-fanout writes per
                        // event: the object's JSON and a few bytes of
                        // framing.
                        "-size".into(),
                        (self.args.size + 256).to_string(),
                    ],
                )
                .await?;
            runs.insert(target, result);
        }
        Ok(steady_table(watchers, rate, seconds, &runs))
    }

    /// The restart herd: the API server's three ways to list (each on a
    /// freshly started API server), then for each kube-fanout binary (the
    /// baseline's first, if any, then the measured one's, which stays up
    /// for later cases), freshly started: its watch with initial events to
    /// the herd, and its snapshots to one subscriber.
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
            fanouts.push((format!("baseline {}", baseline.display()), baseline));
        }
        fanouts.push(("this build".to_owned(), self.fanout_bin.clone()));
        let mut snapshots = Vec::new();
        for (build, bin) in fanouts {
            self.restart_fanout_bin(&bin, "v1/configmaps").await?;
            let label = format!("kube-fanout Watch with initial events (TLS), {build}");
            runs.push((label, self.herd_run("fanout").await?));
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
            snapshots.push((build, snapshot));
        }
        Ok(herd_table(&self.args, &runs, &snapshots))
    }

    /// One herd of `--herd-watchers` on `target`.
    async fn herd_run(&self, target: &str) -> anyhow::Result<Value> {
        self.loadgen(
            "herd",
            &[
                "-target".into(),
                target.into(),
                "-watchers".into(),
                self.args.herd_watchers.to_string(),
                "-objects".into(),
                self.args.herd_objects.to_string(),
            ],
        )
        .await
    }

    /// The node-scoped case at `watchers` nodes over `connections`: the
    /// API server's writes-only baseline, the API server, kube-fanout.
    async fn nodes(&self, watchers: usize, connections: usize) -> anyhow::Result<String> {
        let mut runs = BTreeMap::new();
        for target in ["none", "apiserver-proto", "fanout"] {
            let result = self
                .loadgen(
                    "nodes",
                    &[
                        "-target".into(),
                        target.into(),
                        "-watchers".into(),
                        watchers.to_string(),
                        "-connections".into(),
                        connections.to_string(),
                        "-rate".into(),
                        self.args.rate.to_string(),
                        "-seconds".into(),
                        self.args.seconds.to_string(),
                    ],
                )
                .await?;
            runs.insert(target, result);
        }
        Ok(nodes_table(&runs))
    }

    /// Memory per idle subscriber, each on its own connection.
    async fn idle(&self) -> anyhow::Result<String> {
        let result = self
            .loadgen(
                "idle",
                &["-watchers".into(), self.args.idle_watchers.to_string()],
            )
            .await?;
        let fanout = &result["procs"]["kube-fanout"];
        Ok(format!(
            "\n### {n} idle subscribers, each on its own TLS connection\n\n\
             | | kube-fanout |\n|---|---|\n\
             | RSS before / after | {before} / {after} |\n\
             | server memory per idle subscriber | {per} KiB |\n\
             | CPU to accept them (TLS handshakes included) | {cpu} s |\n\
             | time to open them all (64 at a time) | {open} s |\n",
            n = result["watchers"],
            before = mib(&fanout["rss_start"]),
            after = mib(&fanout["rss_end"]),
            per = down(
                result["bytes_per_subscriber"].as_f64().unwrap_or(0.0) / 1024.0,
                1
            ),
            cpu = down(fanout["cpu_s"].as_f64().unwrap_or(0.0), 2),
            open = down(result["open_s"].as_f64().unwrap_or(0.0), 1),
        ))
    }
}

/// A run's latency percentiles, as the tables show them.
fn latency(r: &Value) -> String {
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

/// The steady case laid out: server CPU per delivery (the API server's
/// above the writes-only baseline; kube-fanout's and the floor writer's
/// own), as a ratio to the floor, latency and memory.
fn steady_table(watchers: usize, rate: f64, seconds: f64, runs: &BTreeMap<&str, Value>) -> String {
    let baseline = cpu(&runs["none"], "kube-apiserver");
    let per_delivery = |target: &str| {
        let run = &runs[target];
        let server = match target {
            "fanout" => cpu(run, "kube-fanout"),
            "floor" => cpu(run, "floor"),
            _ => cpu(run, "kube-apiserver") - baseline,
        };
        server / run["delivered"].as_f64().unwrap_or(f64::NAN) * 1e6
    };
    let floor = per_delivery("floor");
    let columns = ["apiserver-json", "apiserver-proto", "fanout", "floor"];
    let row = |label: &str, cell: &dyn Fn(&str) -> String| {
        let cells: Vec<String> = columns.iter().map(|c| cell(c)).collect();
        format!("| {label} | {} |\n", cells.join(" | "))
    };
    let mut out = format!(
        "\n### {watchers} watchers, {rate} writes/s for {seconds} s, each watcher on its own connection\n\n\
         | | kube-apiserver (JSON) | kube-apiserver (protobuf) | kube-fanout (TLS) | plain-TCP floor |\n\
         |---|---|---|---|---|\n"
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
        let process = match c {
            "fanout" => "kube-fanout",
            "floor" => "floor",
            _ => "kube-apiserver",
        };
        mib(&runs[c]["procs"][process]["rss_end"])
    });
    out += &format!(
        "\nkube-apiserver's writes-only baseline: {} s CPU for {} writes. \
         The API server's columns are its CPU above that baseline; kube-fanout's and the floor's are their own.\n",
        down(baseline, 2),
        runs["none"]["writes"]
    );
    out
}

/// The herd laid out: wall time, CPU (the API server's plus etcd's;
/// kube-fanout's own) and peak RSS, each as a ratio to the measured
/// kube-fanout's (the last run); then each build's snapshots to one
/// subscriber.
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
    let (fanout_cpu, fanout_peak) = runs.last().map_or((f64::NAN, f64::NAN), |(_, r)| cost(r));
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
        let mut rates: Vec<f64> = run["wall_s"]
            .as_array()
            .map(|walls| {
                walls
                    .iter()
                    .map(|w| mb / w.as_f64().unwrap_or(f64::NAN))
                    .collect()
            })
            .unwrap_or_default();
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

/// The nodes case laid out: server CPU per event (each event is one
/// delivery, to its node's watcher), latency, open time and memory.
fn nodes_table(runs: &BTreeMap<&str, Value>) -> String {
    let baseline = cpu(&runs["none"], "kube-apiserver");
    let server_cpu = |target: &str| match target {
        "fanout" => cpu(&runs[target], "kube-fanout"),
        _ => cpu(&runs[target], "kube-apiserver") - baseline,
    };
    let per_event = |target: &str| {
        server_cpu(target) / runs[target]["writes"].as_f64().unwrap_or(f64::NAN) * 1e6
    };
    let (api, fanout) = (&runs["apiserver-proto"], &runs["fanout"]);
    let row = |label: &str, cell: &dyn Fn(&Value, &str) -> String| {
        format!(
            "| {label} | {} | {} |\n",
            cell(api, "apiserver-proto"),
            cell(fanout, "fanout")
        )
    };
    let mut out = format!(
        "\n### {} node watchers over {} connections, {} pod writes in {} s\n\n\
         | | kube-apiserver (protobuf) | kube-fanout (TLS) |\n|---|---|---|\n",
        fanout["watchers"],
        fanout["connections"],
        fanout["writes"],
        down(fanout["wall_s"].as_f64().unwrap_or(0.0), 1)
    );
    out += &row(
        "deliveries (all checked, each to its node's watcher)",
        &|r, _| match r["error"].as_str() {
            Some(error) => format!(
                "**{} of {}, incomplete**: {error}",
                r["delivered"], r["expected"]
            ),
            None => format!("{}", r["delivered"]),
        },
    );
    out += &row("server CPU in the window", &|_, t| {
        format!("{} s", down(server_cpu(t), 2))
    });
    out += &row("server CPU per event = per delivery", &|_, t| {
        format!("{} µs", down(per_event(t), 1))
    });
    // kube-fanout's own baseline: its reflector following the same
    // writes with no watcher open (measured in the writes-only run).
    let fanout_baseline = cpu(&runs["none"], "kube-fanout");
    out += &row(
        "... above its own writes-only baseline, per delivery",
        &|r, t| {
            let own = if t == "fanout" {
                cpu(r, "kube-fanout") - fanout_baseline
            } else {
                server_cpu(t)
            };
            format!(
                "{} µs",
                down(own / r["writes"].as_f64().unwrap_or(f64::NAN) * 1e6, 1)
            )
        },
    );
    out += &row("latency p50 / p99 / max", &|r, _| latency(r));
    out += &row("time to open the watches (32 at a time)", &|r, _| {
        format!("{} s", down(r["open_s"].as_f64().unwrap_or(0.0), 1))
    });
    out += &row("server RSS at the window's end", &|r, t| {
        let process = if t == "fanout" {
            "kube-fanout"
        } else {
            "kube-apiserver"
        };
        mib(&r["procs"][process]["rss_end"])
    });
    out += &format!(
        "\nWrites-only baseline (no watcher open): kube-apiserver {} s CPU, kube-fanout {} s (its reflector), for {} writes. \
         kube-apiserver's CPU rows are above its baseline; kube-fanout's first is all its own CPU. \
         kube-apiserver / kube-fanout per delivery: {}.\n",
        down(baseline, 2),
        down(fanout_baseline, 2),
        runs["none"]["writes"],
        down(per_event("apiserver-proto") / per_event("fanout"), 2)
    );
    out
}

//! `scripts/demo` leaves no process behind however it is stopped: a
//! SIGTERM stops it cleanly, and after a SIGKILL (no clean-up at all) its
//! children's watchers kill them.

use std::{collections::BTreeMap, process::Stdio, time::Duration};

use anyhow::{Context, Result, bail, ensure};
use kube_fanout_tests::eventually::eventually;
use tokio::io::{AsyncBufReadExt, BufReader};

const DEMO: &str = env!("CARGO_BIN_EXE_kube-fanout-demo");
const SERVER: &str = env!("CARGO_BIN_EXE_kube-fanout-under-test");

/// How long the processes may outlive the demo.
const BOUND: Duration = Duration::from_secs(5);

/// A live process's start time (clock ticks after boot), its name and its
/// parent, from `/proc/PID/stat`; `None` if it is gone or a zombie.
fn process(pid: u32) -> Option<(u64, String, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(") ")?;
    let name = head.split_once(" (")?.1.to_owned();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state, ppid, …; starttime is field 22 of the line.
    if fields.first() == Some(&"Z") {
        return None;
    }
    Some((
        fields.get(19)?.parse().ok()?,
        name,
        fields.get(1)?.parse().ok()?,
    ))
}

/// Every live descendant of `root`: PID → (start time, name).
fn descendants(root: u32) -> BTreeMap<u32, (u64, String)> {
    let all: Vec<(u32, (u64, String, u32))> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, process(pid)?)))
        .collect();
    let mut found = BTreeMap::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for (pid, (start, name, ppid)) in &all {
            if *ppid == parent && found.insert(*pid, (*start, name.clone())).is_none() {
                parents.push(*pid);
            }
        }
    }
    found
}

async fn stopped_by(signal: &str) -> Result<()> {
    let mut demo = tokio::process::Command::new(DEMO)
        .args(["--kube-fanout", SERVER, "--seconds", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let pid = demo.id().context("the demo's PID")?;
    let mut lines = BufReader::new(demo.stderr.take().context("stderr")?).lines();
    tokio::time::timeout(Duration::from_secs(180), async {
        while let Some(line) = lines.next_line().await? {
            if line.contains("kube-fanout serving") {
                return Ok(());
            }
        }
        bail!("the demo ended before serving")
    })
    .await
    .context("the demo did not serve within 180 s")??;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let before = descendants(pid);
    let names: Vec<&str> = before.values().map(|(_, name)| name.as_str()).collect();
    for started in ["etcd", "kube-apiserver", "kube-fanout-und"] {
        ensure!(names.contains(&started), "{started} not among {names:?}");
    }
    let killed = std::process::Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .status()?;
    ensure!(killed.success(), "kill -s {signal} {pid}");
    let stopped = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(30), demo.wait()).await??;
    eventually(format!(
        "{signal}: no process left {BOUND:?} after the demo was stopped"
    ))
    .within(BOUND.saturating_sub(stopped.elapsed()))
    .until(
        async || {
            Ok(before
                .iter()
                .filter(|(pid, (start, _))| process(**pid).is_some_and(|(s, ..)| s == *start))
                .collect::<Vec<_>>())
        },
        Vec::is_empty,
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_to_the_demo_leaves_no_process_behind() -> Result<()> {
    stopped_by("TERM").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_to_the_demo_leaves_no_process_behind() -> Result<()> {
    stopped_by("KILL").await
}

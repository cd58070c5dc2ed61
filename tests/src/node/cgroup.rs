//! The cgroup a test's node keeps its pods in: a directory of its own in
//! every cgroup hierarchy, given to the kubelet as `cgroupRoot`, removed
//! when dropped (and, when a killed test could not, by the next start).

use std::{
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
};

use anyhow::{Context, Result, bail};

/// Where the cgroup hierarchies are mounted.
const CGROUP_FS: &str = "/sys/fs/cgroup";
/// The prefix of the cgroups this module makes: PREFIX-<pid>-<n>, the PID
/// of the test process that made it.
const PREFIX: &str = "kube-fanout-node";

/// One cgroup, created in every hierarchy.
pub struct Cgroup {
    name: String,
    dirs: Vec<PathBuf>,
}

impl Cgroup {
    /// Creates a fresh cgroup (first removing those of test processes that
    /// are gone).
    pub fn create() -> Result<Self> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let hierarchies = hierarchies()?;
        for hierarchy in &hierarchies {
            remove_stale(hierarchy);
        }
        let name = format!(
            "{PREFIX}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut cgroup = Cgroup {
            name,
            dirs: Vec::new(),
        };
        for hierarchy in hierarchies {
            let dir = hierarchy.join(&cgroup.name);
            std::fs::create_dir(&dir)
                .with_context(|| format!("creating the cgroup {}", dir.display()))?;
            cgroup.dirs.push(dir);
        }
        Ok(cgroup)
    }

    /// Its path in each hierarchy, as the kubelet's `cgroupRoot` takes it.
    pub fn path(&self) -> String {
        format!("/{}", self.name)
    }

    /// Whether no process is left in it or below it.
    pub fn is_empty(&self) -> bool {
        self.dirs.iter().all(|d| no_processes(d))
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for dir in &self.dirs {
            if let Err(e) = remove_tree(dir) {
                tracing::warn!(cgroup = %dir.display(), "removing the node's cgroup: {e:#}");
            }
        }
    }
}

/// The hierarchies to make a cgroup in: with cgroup v2 alone (one unified
/// hierarchy at /sys/fs/cgroup) that one; otherwise every hierarchy
/// mounted below it (a directory with a `cgroup.procs` file): the v1 ones
/// and, on a hybrid host, the v2 one, where the kubelet makes its
/// cgroups too.
fn hierarchies() -> Result<Vec<PathBuf>> {
    let root = Path::new(CGROUP_FS);
    if root.join("cgroup.controllers").exists() {
        return Ok(vec![root.to_owned()]);
    }
    let mut found = Vec::new();
    for entry in std::fs::read_dir(root).with_context(|| format!("reading {CGROUP_FS}"))? {
        let path = entry?.path();
        // A controller mounted under two names (cpu,cpuacct) shows up as a
        // symbolic link beside the real mount: one directory is enough.
        if path.join("cgroup.procs").exists() && !path.is_symlink() {
            found.push(path);
        }
    }
    if found.is_empty() {
        bail!("no cgroup hierarchy found under {CGROUP_FS}");
    }
    found.sort();
    Ok(found)
}

/// Removes the cgroups of test processes that have exited (killed before
/// they could remove their own); errors are only logged, the cgroup may
/// still hold a process of a node being torn down.
fn remove_stale(hierarchy: &Path) {
    let Ok(entries) = std::fs::read_dir(hierarchy) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(&format!("{PREFIX}-"))
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists()
            && let Err(e) = remove_tree(&entry.path())
        {
            tracing::warn!(cgroup = %entry.path().display(), "removing a stale cgroup: {e:#}");
        }
    }
}

/// Whether no process is in `dir` or a cgroup below it.
fn no_processes(dir: &Path) -> bool {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    procs.trim().is_empty()
        && std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .all(|e| no_processes(&e.path()))
            })
            .unwrap_or(true)
}

/// Removes a cgroup and every cgroup below it, deepest first (a cgroup
/// directory goes with rmdir, its control files with it).
fn remove_tree(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_tree(&entry.path())?;
        }
    }
    std::fs::remove_dir(dir).with_context(|| format!("rmdir {}", dir.display()))
}

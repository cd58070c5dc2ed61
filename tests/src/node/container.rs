//! A container's process as the node runs it, seen from the host: found by
//! its cgroup (the kubelet names each container's cgroup after its
//! container ID), with the user it runs as and its root filesystem
//! (`/proc/PID/root`, the container's own mount of it) and the limits its
//! cgroups enforce. What a pod spec promises (`runAsUser`,
//! `readOnlyRootFilesystem`, `resources.limits`) is then checked on the
//! process itself, not on the object the API server accepted.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use super::Limits;

/// One running container's first process.
#[derive(Debug)]
pub struct ContainerProcess {
    pid: u32,
}

impl ContainerProcess {
    /// The process of the container a pod's status names
    /// (`containerd://ID`).
    pub fn find(container_id: &str) -> Result<Self> {
        let id = container_id
            .rsplit_once("://")
            .map_or(container_id, |(_, id)| id);
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc")? {
            let Some(pid) = entry?.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            // A process may exit between the listing and the read.
            let Ok(cgroups) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
                continue;
            };
            if cgroups.lines().any(|l| l.ends_with(id)) {
                found.push(pid);
            }
        }
        // The container's first process is the oldest, the lowest PID
        // unless PIDs wrapped: a single-process image has just the one.
        match found.iter().min() {
            Some(&pid) => Ok(ContainerProcess { pid }),
            None => bail!("no process in the cgroup of container {id}"),
        }
    }

    /// The real, effective, saved and filesystem user IDs, as
    /// /proc/PID/status says.
    pub fn uids(&self) -> Result<Vec<u32>> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .context("no Uid line in /proc/PID/status")?;
        Ok(line
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()?)
    }

    /// The memory and CPU limits its cgroups enforce.
    pub fn limits(&self) -> Result<Limits> {
        Limits::enforced(self.pid)
    }

    /// Tries to create `path` (absolute, in the container's view) in the
    /// container's root filesystem, as root on the host: only a read-only
    /// mount stops that (root passes every permission check). The error,
    /// or `Ok` when the file was written (and removed again).
    pub fn write_in_root(&self, path: &str) -> std::io::Result<()> {
        let outside = self.in_root(path);
        std::fs::write(&outside, b"kube-fanout's node test\n")?;
        std::fs::remove_file(&outside)
    }

    /// `path` of the container's filesystem as the host reaches it.
    fn in_root(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.pid)).join(path.trim_start_matches('/'))
    }
}

//! A kube-fanout replica as a child process of the real `kube-fanout`
//! binary, so that `kill -9` is real: no graceful shutdown, no status to
//! its subscribers, its history gone. A restarted replica listens on a new
//! port, as a new pod behind the same Service would get a new address.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use kube_fanout_proto::v1::{
    ListRequest, ListResourcesRequest, ResourceStatus, SyncState,
    kube_fanout_client::KubeFanoutClient,
};
use tokio::process::Child;

use crate::{
    controlplane::{free_port, spawn},
    eventually::{Look, eventually},
    process::terminate,
};

/// How long a replica may take to sync after it starts.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// One running (or killed) replica.
pub struct Replica {
    /// Its name in logs and reports ("A", "B").
    pub name: &'static str,
    binary: PathBuf,
    kubeconfig: PathBuf,
    flags: Vec<String>,
    dir: PathBuf,
    child: Option<Child>,
    /// Where it listens now.
    pub addr: SocketAddr,
    /// Where it serves its metrics now.
    pub metrics_addr: SocketAddr,
    /// The peer it takes its first snapshot (and history) from when it
    /// starts again (`--bootstrap-from`), if any.
    pub bootstrap_from: Option<SocketAddr>,
    starts: u32,
}

/// How a SIGTERM'd replica went.
#[derive(Debug, Clone, Copy)]
pub struct Stopped {
    /// From the signal to its exit, or to the SIGKILL at the grace.
    pub took: Duration,
    /// Whether it outlived the grace and was killed.
    pub killed: bool,
}

impl Replica {
    /// Starts `binary` against the API server of `kubeconfig` with `flags`
    /// (beyond the listeners), logging into `dir`, and waits until synced.
    pub async fn start(
        name: &'static str,
        binary: &Path,
        kubeconfig: &Path,
        flags: &[String],
        dir: &Path,
    ) -> Result<Replica> {
        let mut replica = Replica {
            name,
            binary: binary.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            flags: flags.to_vec(),
            dir: dir.to_owned(),
            child: None,
            addr: "127.0.0.1:0".parse()?,
            metrics_addr: "127.0.0.1:0".parse()?,
            bootstrap_from: None,
            starts: 0,
        };
        replica.restart().await?;
        Ok(replica)
    }

    /// Kills the process with SIGKILL and reaps it.
    pub async fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
        Ok(())
    }

    /// Sends SIGTERM (as the kubelet does when a pod is deleted) and waits
    /// for the process to exit; how long it took, or an error if it was not
    /// running or outlived `within` (it is then killed).
    pub async fn terminate(&mut self, within: Duration) -> Result<Duration> {
        let child = self.child.take().context("not running")?;
        let sent = tokio::time::Instant::now();
        match terminate(child, within).await? {
            Some(exit) => {
                anyhow::ensure!(exit.success(), "replica {} exited with {exit}", self.name);
                Ok(sent.elapsed())
            }
            None => bail!(
                "replica {} still running {within:?} after SIGTERM:\n{}",
                self.name,
                self.log_tail()
            ),
        }
    }

    /// Sends SIGTERM as the kubelet does at a pod's deletion, and SIGKILL
    /// if it outlives `grace` (the pod's terminationGracePeriodSeconds).
    pub async fn stop(&mut self, grace: Duration) -> Result<Stopped> {
        let child = self.child.take().context("not running")?;
        let sent = tokio::time::Instant::now();
        let exit = terminate(child, grace).await?;
        if let Some(exit) = exit {
            anyhow::ensure!(exit.success(), "replica {} exited with {exit}", self.name);
        }
        Ok(Stopped {
            took: sent.elapsed(),
            killed: exit.is_none(),
        })
    }

    /// Starts the process (again) on fresh ports and waits until synced.
    pub async fn restart(&mut self) -> Result<()> {
        self.kill().await?;
        self.starts += 1;
        self.addr = format!("127.0.0.1:{}", free_port()?).parse()?;
        self.metrics_addr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let on_demand = self
            .flags
            .iter()
            .any(|f| f.starts_with("--on-demand-resources"));
        let mut args = vec![
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--listen={}", self.addr),
            format!("--metrics-listen={}", self.metrics_addr),
            // Loopback, raw subscribers without credentials: the contract is
            // under test here, authorization in tests/tests/auth.rs.
            "--auth=none".to_owned(),
        ];
        // An on-demand replica serves configmaps once asked (see `status`).
        if !on_demand {
            args.push("--resource=v1/configmaps".to_owned());
        }
        args.extend(self.flags.iter().cloned());
        if let Some(peer) = self.bootstrap_from {
            args.push(format!("--bootstrap-from=http://{peer}"));
        }
        self.child = Some(spawn(self.binary.clone(), &args, &self.log_path())?);
        self.wait_synced()
            .await
            .with_context(|| format!("replica {}:\n{}", self.name, self.log_tail()))
    }

    fn log_path(&self) -> PathBuf {
        self.dir
            .join(format!("kube-fanout-{}-{}.log", self.name, self.starts))
    }

    /// The last lines of its current log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Its status of v1/configmaps.
    pub async fn status(&self) -> Result<ResourceStatus> {
        status(self.addr).await
    }

    async fn wait_synced(&mut self) -> Result<()> {
        let name = self.name;
        eventually(format!("replica {name} synced"))
            .within(SYNC_TIMEOUT)
            .every(Duration::from_millis(200))
            .until_done(async || {
                if let Some(child) = self.child.as_mut()
                    && let Some(exit) = child.try_wait()?
                {
                    bail!("replica {name} exited with {exit}");
                }
                Ok(match self.status().await {
                    Ok(s) if s.sync_state() == SyncState::Synced => Look::Done(()),
                    other => Look::NotYet(other),
                })
            })
            .await
    }

    /// Waits until the replica has relisted more than `relists` times (a
    /// re-sync after its API server came back), or fails after `within`.
    pub async fn wait_relisted(&self, relists: u64, within: Duration) -> Result<u64> {
        eventually(format!(
            "replica {} relisted more than {relists} times and synced",
            self.name
        ))
        .within(within)
        .every(Duration::from_millis(200))
        .until_done(async || {
            Ok(match self.status().await {
                Ok(s) if s.relists > relists && s.sync_state() == SyncState::Synced => {
                    Look::Done(s.relists)
                }
                other => Look::NotYet(other),
            })
        })
        .await
        .with_context(|| format!("its log:\n{}", self.log_tail()))
    }
}

/// The status of v1/configmaps on the kube-fanout at `addr`.
async fn status(addr: SocketAddr) -> Result<ResourceStatus> {
    let mut client = tokio::time::timeout(
        Duration::from_secs(5),
        KubeFanoutClient::connect(format!("http://{addr}")),
    )
    .await
    .context("connecting timed out")??;
    // A List first: on a replica serving configmaps on demand it starts
    // the type (answered NotSynced until it has synced, which is fine
    // here); on the others it is one cheap page.
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        client.list(ListRequest {
            resource: Some(kube_fanout_proto::v1::ResourceRef {
                group: String::new(),
                version: "v1".into(),
                resource: "configmaps".into(),
            }),
            limit: 1,
            ..ListRequest::default()
        }),
    )
    .await;
    let resources = tokio::time::timeout(
        Duration::from_secs(5),
        client.list_resources(ListResourcesRequest::default()),
    )
    .await
    .context("ListResources timed out")??
    .into_inner()
    .resources;
    resources
        .into_iter()
        .find(|r| {
            r.resource
                .as_ref()
                .is_some_and(|r| r.resource == "configmaps")
        })
        .context("v1/configmaps not served")
}

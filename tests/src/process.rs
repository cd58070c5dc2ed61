//! The kube-fanout binary run as a child process, the way a pod runs it
//! (its own flags, environment and credentials), killed when dropped.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    time::Duration,
};

use crate::{
    controlplane::{ControlPlane, free_port},
    eventually::{Look, eventually},
    support,
};
use anyhow::{Context, Result, bail};
use tokio::process::{Child, Command};

use tonic_health::pb::health_check_response::ServingStatus;

/// The health service the chart's readiness probe asks for: SERVING once
/// every resource type has synced.
pub const READINESS_SERVICE: &str = "kubefanout.v1.KubeFanout";

/// How long a child may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running kube-fanout process.
pub struct FanoutProcess {
    child: Child,
    log: PathBuf,
    /// Where its gRPC server listens.
    pub addr: SocketAddr,
    /// Where health is asked: `addr`, or a plaintext `--health-listen`.
    health_addr: SocketAddr,
}

impl FanoutProcess {
    /// Starts `command` (a kube-fanout, told to listen on `addr`), with its
    /// output in `log`.
    pub fn spawn(mut command: Command, addr: SocketAddr, log: PathBuf) -> Result<Self> {
        let file = std::fs::File::create(&log)?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .context("starting kube-fanout")?;
        Ok(FanoutProcess {
            child,
            log,
            addr,
            health_addr: addr,
        })
    }

    /// Starts `binary` against the API server of `cp` with `args` and
    /// otherwise its default flags (only its listeners, on free loopback
    /// ports, and the kubeconfig set), logging into the control plane's
    /// directory, and waits until it is ready.
    pub async fn serving(binary: &Path, cp: &ControlPlane, args: &[&str]) -> Result<Self> {
        Self::serving_with_env(binary, cp, args, &[]).await
    }

    /// [`FanoutProcess::serving`] with `env` set in its environment too.
    pub async fn serving_with_env(
        binary: &Path,
        cp: &ControlPlane,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let mut command = Command::new(binary);
        command
            .envs(env.iter().copied())
            .args(args)
            .arg(format!("--listen={addr}"))
            .arg(format!("--metrics-listen=127.0.0.1:{}", free_port()?))
            .arg(format!("--kubeconfig={}", cp.kubeconfig.display()));
        let log = cp.dir().join(format!("kube-fanout-{}.log", addr.port()));
        let mut server = Self::spawn(command, addr, log)?;
        server.wait_serving(READINESS_SERVICE).await?;
        Ok(server)
    }

    /// Asks health on `addr` (the process's plaintext `--health-listen`,
    /// when its gRPC port serves TLS) instead of the gRPC port.
    pub fn with_health_addr(mut self, addr: SocketAddr) -> Self {
        self.health_addr = addr;
        self
    }

    /// The process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// What grpc.health.v1 says of `service`, as the kubelet's gRPC probe
    /// asks it.
    pub async fn health(&self, service: &str) -> Result<ServingStatus> {
        support::health(self.health_addr, service).await
    }

    /// Waits until health reports `service` SERVING; fails with the log if
    /// the process exits or [`READY_TIMEOUT`] passes.
    pub async fn wait_serving(&mut self, service: &str) -> Result<()> {
        let waited = eventually(format!("kube-fanout SERVING {service:?}"))
            .within(READY_TIMEOUT)
            .every(Duration::from_millis(200))
            .until_done(async || {
                if let Some(status) = self.child.try_wait()? {
                    bail!("kube-fanout exited with {status}");
                }
                Ok(match self.health(service).await {
                    Ok(ServingStatus::Serving) => Look::Done(()),
                    other => Look::NotYet(other),
                })
            })
            .await;
        waited.with_context(|| format!("kube-fanout's log:\n{}", self.log_tail()))
    }

    /// Sends SIGTERM, as the kubelet does, and waits up to `within` for a
    /// clean exit (it is killed if it outlives that).
    pub async fn terminate(self, within: Duration) -> Result<()> {
        let tail = self.log_tail();
        match terminate(self.child, within).await? {
            Some(exit) if exit.success() => Ok(()),
            Some(exit) => bail!("kube-fanout exited with {exit}:\n{tail}"),
            None => bail!("kube-fanout still running {within:?} after SIGTERM:\n{tail}"),
        }
    }

    /// The last lines of its log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

/// Sends SIGTERM to `child` and waits up to `within` for it to exit: its
/// exit status, or `None` if it outlived that (it is killed then).
pub async fn terminate(mut child: Child, within: Duration) -> Result<Option<ExitStatus>> {
    let pid = child.id().context("already reaped")?;
    // `Child::wait` closes stdin, which is the tie that kills a tied
    // program (`controlplane::tied_command`): hold it until it exited.
    let _tie = child.stdin.take();
    let killed = std::process::Command::new("kill")
        .args(["-s", "TERM", &pid.to_string()])
        .status()?;
    anyhow::ensure!(killed.success(), "kill -s TERM {pid}");
    match tokio::time::timeout(within, child.wait()).await {
        Ok(exit) => Ok(Some(exit?)),
        Err(_) => {
            child.kill().await?;
            Ok(None)
        }
    }
}

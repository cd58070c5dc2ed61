//! The kube-fanout binary run as a child process, the way a pod runs it
//! (its own flags, environment and credentials), killed when dropped.

use std::{net::SocketAddr, path::PathBuf, process::Stdio, time::Duration};

use anyhow::{Context, Result, bail};
use tokio::process::{Child, Command};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

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
        let channel =
            tonic::transport::Channel::from_shared(format!("http://{}", self.health_addr))?
                .connect()
                .await?;
        let mut client = HealthClient::new(channel);
        let response = client
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await?;
        Ok(response.into_inner().status())
    }

    /// Waits until health reports `service` SERVING; fails with the log if
    /// the process exits or [`READY_TIMEOUT`] passes.
    pub async fn wait_serving(&mut self, service: &str) -> Result<()> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("kube-fanout exited with {status}:\n{}", self.log_tail());
            }
            if let Ok(ServingStatus::Serving) = self.health(service).await {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "kube-fanout not SERVING {service:?} after {READY_TIMEOUT:?}:\n{}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The last lines of its log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

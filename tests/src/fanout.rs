//! kube-fanout started in process against a [`ControlPlane`], with a
//! subscriber client, stopped when dropped.
//!
//! [`ControlPlane`]: crate::controlplane::ControlPlane

use std::{net::SocketAddr, time::Duration};

use anyhow::{Context, Result};
use kube_fanout::{
    options::{Peers, ServerOptions},
    security::Security,
    server::{self, Running},
};
use kube_fanout_client::Client;
use kube_fanout_core::{store::HistoryLimits, subscription::Limits};
use kube_fanout_listener::{
    connections::ConnectionLimits, drain::DrainGrace, keepalive::Keepalive,
};
use kube_fanout_reflector::ReflectorConfig;
use tokio_util::sync::CancellationToken;

use crate::eventually::eventually;

/// A running kube-fanout.
pub struct Fanout {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Where it serves Prometheus metrics.
    pub metrics_addr: Option<SocketAddr>,
    /// Where it serves plaintext health, if asked to.
    pub health_addr: Option<SocketAddr>,
    /// What it was started with, to start it again.
    pub options: ServerOptions,
    running: Option<Running>,
    cancel: CancellationToken,
}

impl Fanout {
    /// Starts kube-fanout serving `resources` with default options.
    pub async fn start(client: kube::Client, resources: &[&str]) -> Result<Self> {
        Self::start_with(client, resources, |_| {}).await
    }

    /// Starts kube-fanout after `adjust` has changed the default options.
    pub async fn start_with(
        client: kube::Client,
        resources: &[&str],
        adjust: impl FnOnce(&mut ServerOptions),
    ) -> Result<Self> {
        let mut options = ServerOptions {
            resources: resources
                .iter()
                .map(|r| r.parse())
                .collect::<Result<_, _>>()?,
            index_fields: Vec::new(),
            reflector: ReflectorConfig::default(),
            history: HistoryLimits::default(),
            limits: Limits::default(),
            metrics_addr: Some("127.0.0.1:0".parse()?),
            health_addr: None,
            unready_after: None,
            security: Security::default(),
            keepalive: Keepalive::default(),
            max_connection_age: None,
            drain: DrainGrace::default(),
            connections: ConnectionLimits::default(),
            shared_snapshot_bytes: kube_fanout::options::DEFAULT_SHARED_SNAPSHOT_BYTES,
            request_spans: false,
            upstream_fanout: None,
            bootstrap_from: None,
            on_demand: None,
        };
        adjust(&mut options);
        Self::start_on(client, "127.0.0.1:0".parse()?, options).await
    }

    /// Starts a tier's leaf serving `resources`, fed by the servers at
    /// `parents` (in order), and waits until it has synced.
    pub async fn start_leaf(
        client: kube::Client,
        resources: &[&str],
        parents: &[SocketAddr],
    ) -> Result<Self> {
        let leaf = Self::start_with(client, resources, |o| {
            o.upstream_fanout = Some(plaintext_peers(parents));
        })
        .await?;
        leaf.wait_synced().await?;
        Ok(leaf)
    }

    /// Starts kube-fanout on `addr`: the address of one that was stopped
    /// restarts it in place, as a restarted pod behind the same Service.
    pub async fn start_on(
        client: kube::Client,
        addr: SocketAddr,
        options: ServerOptions,
    ) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let cancel = CancellationToken::new();
        let running = server::start(client, listener, options.clone(), cancel.clone()).await?;
        Ok(Fanout {
            addr: running.local_addr,
            metrics_addr: running.metrics_addr,
            health_addr: running.health_addr,
            options,
            running: Some(running),
            cancel,
        })
    }

    /// A subscriber connected to this server.
    pub async fn client(&self) -> Result<Client> {
        Ok(Client::connect(&format!("http://{}", self.addr)).await?)
    }

    /// Waits until every reflector has synced.
    pub async fn wait_synced(&self) -> Result<()> {
        let cache = &self.running.as_ref().context("stopped")?.cache;
        eventually("every reflector of kube-fanout synced")
            .every(Duration::from_millis(50))
            .until(async || Ok(cache.all_synced()), |synced| *synced)
            .await?;
        Ok(())
    }

    /// Stops the server and waits until every task has ended.
    pub async fn stop(mut self) -> Result<()> {
        if let Some(running) = self.running.take() {
            running.shutdown().await?;
        }
        Ok(())
    }
}

/// The servers at `addresses`, in order, as parents or bootstrap peers:
/// plaintext and without a token, as the tests' servers listen.
pub fn plaintext_peers(addresses: &[SocketAddr]) -> Peers {
    Peers {
        addresses: addresses.iter().map(|a| format!("http://{a}")).collect(),
        ca_file: None,
        tls_server_name: None,
        token_file: None,
    }
}

impl Drop for Fanout {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

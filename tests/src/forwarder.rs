//! A stable loopback address in front of a server that restarts on new
//! ports, as a Kubernetes Service is in front of a Deployment's pods: each
//! new connection is forwarded to the target's address of that moment
//! (moved with [`Forwarder::point_at`] once a restarted target is ready,
//! as a Service routes only to ready pods). When either side of a
//! forwarded connection ends, both are closed: a target killed with
//! SIGKILL breaks its clients' connections as a dead pod's do, and their
//! reconnects go wherever the forwarder points then (while it points at a
//! dead target, a new connection is closed at once).

use std::{
    net::SocketAddr,
    sync::{Arc, RwLock},
};

use anyhow::Result;
use tokio::{
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};
use tracing::Instrument;

use crate::proxy::pipe;

/// A running forwarder; stops accepting when dropped (connections already
/// forwarded end with their target's).
pub struct Forwarder {
    /// The stable address clients connect to.
    pub addr: SocketAddr,
    target: Arc<RwLock<SocketAddr>>,
    task: JoinHandle<()>,
}

impl Forwarder {
    /// Forwards every connection made to a new loopback port to `target`
    /// (until pointed elsewhere).
    pub async fn start(target: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let current = Arc::new(RwLock::new(target));
        let target = current.clone();
        let task = tokio::spawn(
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let to = *target.read().expect("forwarder target");
                    tokio::spawn(
                        forward(client, to).instrument(tracing::info_span!("forwarded", %to)),
                    );
                }
            }
            .instrument(tracing::info_span!("forwarder", %addr)),
        );
        Ok(Forwarder {
            addr,
            target: current,
            task,
        })
    }

    /// Sends new connections to `target` from now on.
    pub fn point_at(&self, target: SocketAddr) {
        *self.target.write().expect("forwarder target") = target;
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Carries `client` to `target` and back until either side ends, then
/// closes both (an HTTP/2 client never half-closes a live connection, so
/// one side's end is the connection's).
async fn forward(client: TcpStream, target: SocketAddr) {
    // A target that is down: the client's connection is dropped, closed.
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        () = pipe(client_read, server_write, None, None) => {}
        () = pipe(server_read, client_write, None, None) => {}
    }
}

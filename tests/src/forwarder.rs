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

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A server that writes `name` to each connection and then holds it
    /// open until the connection is handed back for closing.
    async fn server(name: &'static [u8]) -> Result<(SocketAddr, JoinHandle<TcpStream>)> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(
            async move {
                let (mut conn, _) = listener.accept().await.expect("a connection");
                conn.write_all(name).await.expect("written");
                conn
            }
            .instrument(tracing::info_span!("test server")),
        );
        Ok((addr, task))
    }

    async fn read_some(conn: &mut TcpStream) -> Result<Vec<u8>> {
        let mut buf = [0u8; 16];
        let n = conn.read(&mut buf).await?;
        Ok(buf[..n].to_vec())
    }

    #[tokio::test]
    async fn a_connection_goes_to_the_current_target_and_ends_with_it() -> Result<()> {
        let (first, first_task) = server(b"first").await?;
        let forwarder = Forwarder::start(first).await?;
        let mut to_first = TcpStream::connect(forwarder.addr).await?;
        assert_eq!(read_some(&mut to_first).await?, b"first");

        let (second, second_task) = server(b"second").await?;
        forwarder.point_at(second);
        let mut to_second = TcpStream::connect(forwarder.addr).await?;
        assert_eq!(read_some(&mut to_second).await?, b"second");

        // The first target's end closes its client's side at once (EOF),
        // while the connection to the second stays open.
        drop(first_task.await?);
        assert_eq!(read_some(&mut to_first).await?, b"");
        let mut held = second_task.await?;
        to_second.write_all(b"ping").await?;
        let mut buf = [0u8; 4];
        held.read_exact(&mut buf).await?;
        assert_eq!(&buf, b"ping");
        Ok(())
    }

    #[tokio::test]
    async fn a_connection_while_the_target_is_down_is_closed_at_once() -> Result<()> {
        let gone = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
        let forwarder = Forwarder::start(gone).await?;
        let mut conn = TcpStream::connect(forwarder.addr).await?;
        assert_eq!(read_some(&mut conn).await?, b"");
        Ok(())
    }
}

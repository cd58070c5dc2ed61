//! A loopback TCP proxy that counts the bytes it carries each way: what a
//! stream really costs on the wire (HTTP/2 frames, gRPC framing,
//! compression and all), measured between a client and kube-fanout; and
//! that can hold back one connection's bytes from the server, to slow what
//! goes over it (a leaf's feed) while other connections go on.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, Result};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
};
use tracing::Instrument;

/// A running proxy to one target; stops when dropped.
pub struct CountingProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    from_server: Arc<AtomicU64>,
    /// Per connection, in the order they were accepted: how fast the
    /// server's bytes may go (see [`CountingProxy::limit`]).
    held: Arc<Mutex<Vec<watch::Sender<Limit>>>>,
    task: JoinHandle<()>,
}

impl CountingProxy {
    /// Proxies every connection made to a new loopback port to `target`.
    pub async fn start(target: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let from_server = Arc::new(AtomicU64::new(0));
        let counter = from_server.clone();
        let held = Arc::new(Mutex::new(Vec::new()));
        let connections = held.clone();
        let task = tokio::spawn(
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = TcpStream::connect(target).await else {
                        continue;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let counter = counter.clone();
                    let (hold, holding) = watch::channel(None);
                    connections.lock().expect("connections").push(hold);
                    tokio::spawn(
                        pipe(client_read, server_write, None, None)
                            .instrument(tracing::info_span!("proxy upstream")),
                    );
                    tokio::spawn(
                        pipe(server_read, client_write, Some(counter), Some(holding))
                            .instrument(tracing::info_span!("proxy downstream")),
                    );
                }
            }
            .instrument(tracing::info_span!("counting proxy", %addr, %target)),
        );
        Ok(CountingProxy {
            addr,
            from_server,
            held,
            task,
        })
    }

    /// Bytes sent by the server to clients so far.
    pub fn bytes_from_server(&self) -> u64 {
        self.from_server.load(Ordering::SeqCst)
    }

    /// Lets the server's bytes to the `n`th connection accepted (from 0)
    /// go at most `limit` bytes a second (`Some(0)`: held; `None`: as fast
    /// as they come); what arrives meanwhile waits.
    pub fn limit(&self, n: usize, limit: Limit) -> Result<()> {
        let connections = self.held.lock().expect("connections");
        let connection = connections
            .get(n)
            .with_context(|| format!("only {} connections", connections.len()))?;
        connection.send_replace(limit);
        Ok(())
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Bytes a second a connection's server bytes may go at (`Some(0)`: none;
/// `None`: no bound).
pub type Limit = Option<u64>;

/// Copies `from` to `to` until either side closes, adding what it
/// forwarded to `counter` and going no faster than `limit` says; then
/// shuts `to` down (also used by [`crate::forwarder`]).
pub(crate) async fn pipe(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    counter: Option<Arc<AtomicU64>>,
    mut limit: Option<watch::Receiver<Limit>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // Under a limit, a tenth of a second's worth at a time.
        let rate = limit.as_ref().and_then(|l| *l.borrow());
        let most = rate.map_or(buf.len(), |r| (r as usize / 10).clamp(1, buf.len()));
        let n = match from.read(&mut buf[..most]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(limit) = &mut limit
            && limit.wait_for(|l| *l != Some(0)).await.is_err()
        {
            break;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        if let Some(counter) = &counter {
            counter.fetch_add(n as u64, Ordering::SeqCst);
        }
        if let Some(rate) = limit.as_ref().and_then(|l| *l.borrow()) {
            tokio::time::sleep(Duration::from_secs_f64(n as f64 / rate as f64)).await;
        }
    }
    let _ = to.shutdown().await;
}

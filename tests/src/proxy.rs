//! A loopback TCP proxy that counts the bytes it carries each way: what a
//! stream really costs on the wire (HTTP/2 frames, gRPC framing,
//! compression and all), measured between a client and kube-fanout.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use anyhow::Result;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};
use tracing::Instrument;

/// A running proxy to one target; stops when dropped.
pub struct CountingProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    from_server: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl CountingProxy {
    /// Proxies every connection made to a new loopback port to `target`.
    pub async fn start(target: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let from_server = Arc::new(AtomicU64::new(0));
        let counter = from_server.clone();
        let task = tokio::spawn(
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = TcpStream::connect(target).await else {
                        continue;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let counter = counter.clone();
                    tokio::spawn(
                        pipe(client_read, server_write, None)
                            .instrument(tracing::info_span!("proxy upstream")),
                    );
                    tokio::spawn(
                        pipe(server_read, client_write, Some(counter))
                            .instrument(tracing::info_span!("proxy downstream")),
                    );
                }
            }
            .instrument(tracing::info_span!("counting proxy", %addr, %target)),
        );
        Ok(CountingProxy {
            addr,
            from_server,
            task,
        })
    }

    /// Bytes sent by the server to clients so far.
    pub fn bytes_from_server(&self) -> u64 {
        self.from_server.load(Ordering::SeqCst)
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to` until either side closes, adding what it
/// forwarded to `counter`.
async fn pipe(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    counter: Option<Arc<AtomicU64>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        if let Some(counter) = &counter {
            counter.fetch_add(n as u64, Ordering::SeqCst);
        }
    }
    let _ = to.shutdown().await;
}

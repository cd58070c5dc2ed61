//! TCP between two network namespaces: the test's (where kube-apiserver
//! listens on 127.0.0.1) and the node's (where the kubelet, kube-proxy and
//! the pods live, apart from the host's interfaces and iptables). A
//! forwarder listens in one and connects in the other; a socket stays in
//! the namespace of the thread that created it, so one thread that binds
//! its listener in the first and then moves into the second does both.

use std::{fs::File, net::SocketAddr, os::fd::AsFd, thread::JoinHandle};

use anyhow::{Context, Result, anyhow};
use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// A running forwarder; stops when dropped.
pub struct Forwarder {
    stop: CancellationToken,
    thread: Option<JoinHandle<()>>,
}

impl Forwarder {
    /// Listens on `listen` in the network namespace `listen_ns` (a
    /// `/proc/PID/ns/net` file) and carries each connection to `target`
    /// in `target_ns`.
    pub fn start(
        name: &str,
        listen_ns: &File,
        listen: SocketAddr,
        target_ns: &File,
        target: SocketAddr,
    ) -> Result<Self> {
        let (listen_ns, target_ns) = (listen_ns.try_clone()?, target_ns.try_clone()?);
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let span = tracing::info_span!("forward", name, %listen, %target);
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("forward-{name}"))
            .spawn(move || {
                let _entered = span.enter();
                let listener = (|| -> Result<std::net::TcpListener> {
                    move_into_link_name_space(listen_ns.as_fd(), Some(LinkNameSpaceType::Network))
                        .context("setns into the listening namespace")?;
                    let listener = std::net::TcpListener::bind(listen)
                        .with_context(|| format!("binding {listen}"))?;
                    listener.set_nonblocking(true)?;
                    move_into_link_name_space(target_ns.as_fd(), Some(LinkNameSpaceType::Network))
                        .context("setns into the target namespace")?;
                    Ok(listener)
                })();
                let listener = match listener {
                    Ok(l) => {
                        let _ = bound_tx.send(Ok(()));
                        l
                    }
                    Err(e) => {
                        let _ = bound_tx.send(Err(e));
                        return;
                    }
                };
                // A runtime of this thread alone: every connect runs here,
                // so every outgoing socket is made in the target namespace.
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!("forwarder runtime: {e}");
                        return;
                    }
                };
                runtime.block_on(
                    async move {
                        if let Err(e) = serve(listener, target, stopped).await {
                            tracing::error!("forwarder stopped: {e:#}");
                        }
                    }
                    .in_current_span(),
                );
            })?;
        bound_rx
            .recv()
            .map_err(|_| anyhow!("the forwarder thread ended before binding"))??;
        Ok(Forwarder {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts until `stop`, carrying each connection to `target` in a task.
async fn serve(
    listener: std::net::TcpListener,
    target: SocketAddr,
    stop: CancellationToken,
) -> Result<()> {
    let listener = TcpListener::from_std(listener)?;
    loop {
        let (mut client, peer) = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            accepted = listener.accept() => accepted?,
        };
        tokio::spawn(
            async move {
                match TcpStream::connect(target).await {
                    Ok(mut server) => {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                    Err(e) => tracing::debug!("connecting to the target: {e}"),
                }
            }
            .instrument(tracing::debug_span!("connection", %peer)),
        );
    }
}

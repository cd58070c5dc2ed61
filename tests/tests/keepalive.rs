//! A subscriber whose peer vanished without closing its connection (a lost
//! node, a partition) is found by TCP keepalive and dropped with its
//! watches; a live subscriber on an idle connection stays.
//!
//! The vanished peer is a client socket with a socket filter that drops
//! every segment arriving for it: its kernel then answers nothing (no ACK,
//! no RST), as a peer that is gone. No root and no firewall rule needed.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use hyper_util::rt::TokioIo;
use kube_fanout::keepalive::Keepalive;
use kube_fanout_proto::v1::kube_fanout_client::KubeFanoutClient;
use kube_fanout_tests::{controlplane::ControlPlane, fanout::Fanout, support::*};
use socket2::{SockFilter, Socket};
use tonic::transport::{Channel, Endpoint};

/// Classic BPF: `ret #0`, keep no byte of any packet (drop it).
const DROP_ALL: [SockFilter; 1] = [SockFilter::new(0x06, 0, 0, 0)];

/// A channel to `fanout` over one TCP connection, and a handle on that
/// connection's socket.
async fn connect(fanout: &Fanout) -> Result<(Channel, Socket)> {
    let tcp = std::net::TcpStream::connect(fanout.addr)?;
    tcp.set_nonblocking(true)?;
    let socket = Socket::from(tcp.try_clone()?);
    let tcp = Arc::new(Mutex::new(Some(tokio::net::TcpStream::from_std(tcp)?)));
    let channel = Endpoint::from_shared(format!("http://{}", fanout.addr))?
        .connect_with_connector(tower::service_fn(move |_| {
            let tcp = tcp.lock().unwrap().take();
            async move { tcp.map(TokioIo::new).context("one connection only") }
        }))
        .await?;
    Ok((channel, socket))
}

/// The `kube_fanout_subscribers` gauge for configmaps.
async fn subscribers(fanout: &Fanout) -> Result<u64> {
    let metrics = http_get(
        fanout.metrics_addr.context("metrics are served")?,
        "/metrics",
    )
    .await?;
    let line = metrics
        .lines()
        .find(|l| l.starts_with(r#"kube_fanout_subscribers{resource="v1/configmaps"}"#))
        .context("no kube_fanout_subscribers for configmaps")?;
    Ok(line.rsplit(' ').next().unwrap_or_default().parse()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_subscriber_is_dropped_and_a_quiet_live_one_stays() -> Result<()> {
    kube_fanout_tests::init_logging();
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, "keepalive").await?;
    let keepalive = Keepalive {
        idle: Some(Duration::from_secs(1)),
        timeout: Duration::from_secs(2),
    };
    let fanout = Fanout::start_with(cp.client.clone(), &["v1/configmaps"], |o| {
        o.keepalive = keepalive;
    })
    .await?;

    let (live, _) = connect(&fanout).await?;
    let mut live = KubeFanoutClient::new(live)
        .watch(watch_list("keepalive"))
        .await?
        .into_inner();
    read_snapshot(&mut live).await?;
    let (doomed, socket) = connect(&fanout).await?;
    let mut doomed = KubeFanoutClient::new(doomed)
        .watch(watch_list("keepalive"))
        .await?
        .into_inner();
    read_snapshot(&mut doomed).await?;
    assert_eq!(subscribers(&fanout).await?, 2);

    socket.attach_filter(&DROP_ALL)?;
    let vanished = tokio::time::Instant::now();
    // Dropped once nothing was acknowledged for idle + timeout (3 s), after
    // the probe that finds it (probes are a second apart).
    let bound = Duration::from_secs(10);
    while subscribers(&fanout).await? != 1 {
        if vanished.elapsed() > bound {
            bail!("the vanished subscriber's watch is still open after {bound:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "the vanished subscriber was dropped {:?} after it went",
        vanished.elapsed()
    );

    // The live one was as quiet, for longer than idle + timeout: its kernel
    // answered the probes, and it still gets events.
    let created = create_configmap(&cp.client, "keepalive", "after", "v").await?;
    let event = next_event(&mut live).await?;
    assert_eq!(
        Some(event.resource_version),
        created.metadata.resource_version,
        "the live watch's next event is the new object"
    );
    assert_eq!(subscribers(&fanout).await?, 1);
    Ok(())
}

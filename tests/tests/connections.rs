//! Connections over their lifetime, on the real API server.
//!
//! A subscriber whose peer vanished without closing its connection (a lost
//! node, a partition) is found by TCP keepalive and dropped with its
//! watches, whether its stream was quiet or busy; a live subscriber on an
//! idle connection stays. The vanished peer is a client socket with a
//! socket filter that drops every segment arriving for it: its kernel then
//! answers nothing (no ACK, no RST), as a peer that is gone. No root and no
//! firewall rule needed.
//!
//! A connection older than the maximum age is retired: its watch ends with
//! the resourceVersion to resume from, and resuming from it on the same
//! channel goes over a new connection and misses and repeats nothing.

// The vanished-peer test needs a socket filter (Linux only); elsewhere the
// helpers it shares with the other test are partly unused.
#![cfg_attr(not(target_os = "linux"), allow(unused))]

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, Result, bail};
use hyper_util::rt::TokioIo;
use kube_fanout_listener::{keepalive::Keepalive, retire::MaxConnectionAge};
use kube_fanout_proto::v1::{
    EventType, WatchEvent, WatchRequest, kube_fanout_client::KubeFanoutClient,
};
use kube_fanout_tests::{
    controlplane::ControlPlane,
    eventually::{Look, eventually},
    fanout::Fanout,
    support::*,
};
#[cfg(target_os = "linux")]
use socket2::SockFilter;
use socket2::Socket;
use tokio::net::TcpStream;
use tonic::{
    Streaming,
    transport::{Channel, Endpoint},
};
use tonic_types::StatusExt;

/// Classic BPF: `ret #0`, keep no byte of any packet (drop it). A peer
/// made to vanish needs a socket filter, which only Linux has.
#[cfg(target_os = "linux")]
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

/// A watch on `namespace` over a connection of its own, past its snapshot,
/// and that connection's socket.
async fn watching(fanout: &Fanout, namespace: &str) -> Result<(Streaming<WatchEvent>, Socket)> {
    let (channel, socket) = connect(fanout).await?;
    let mut stream = KubeFanoutClient::new(channel)
        .watch(watch_list(namespace))
        .await?
        .into_inner();
    read_snapshot(&mut stream).await?;
    Ok((stream, socket))
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vanished_subscribers_are_dropped_quiet_or_busy_and_a_quiet_live_one_stays() -> Result<()> {
    kube_fanout_tests::init_logging();
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, "quiet").await?;
    create_namespace(&cp.client, "busy").await?;
    let keepalive = Keepalive {
        idle: Some(Duration::from_secs(1)),
        timeout: Duration::from_secs(2),
    };
    let fanout = Fanout::start_with(cp.client.clone(), &["v1/configmaps"], |o| {
        o.keepalive = keepalive;
    })
    .await?;

    let (mut live, _) = watching(&fanout, "quiet").await?;
    // One that goes while its stream is quiet (found by the probes), one
    // while events are being sent to it (found by TCP_USER_TIMEOUT: with
    // keepalive alone the kernel would retransmit for about 15 minutes).
    let (_quiet, quiet) = watching(&fanout, "quiet").await?;
    let (_busy, busy) = watching(&fanout, "busy").await?;
    assert_eq!(subscribers(&fanout).await?, 3);

    quiet.attach_filter(&DROP_ALL)?;
    busy.attach_filter(&DROP_ALL)?;
    let vanished = tokio::time::Instant::now();
    // Each is dropped once it has acknowledged nothing for idle + timeout
    // (3 s), at the next probe or retransmission after that.
    let bound = Duration::from_secs(10);
    let mut writes = 0;
    eventually("the vanished subscribers' watches closed")
        .within(bound.saturating_sub(vanished.elapsed()))
        .until_done(async || {
            let open = subscribers(&fanout).await?;
            if open == 1 {
                return Ok(Look::Done(()));
            }
            create_configmap(&cp.client, "busy", &format!("cm-{writes}"), "v").await?;
            writes += 1;
            Ok(Look::NotYet(format!("{} of them still open", open - 1)))
        })
        .await?;
    println!(
        "both vanished subscribers were dropped {:?} after they went ({writes} writes to the busy one's namespace meanwhile)",
        vanished.elapsed()
    );

    // The live one was as quiet, for longer than idle + timeout: its kernel
    // answered the probes, and it still gets events.
    let created = create_configmap(&cp.client, "quiet", "after", "v").await?;
    let event = next_event(&mut live).await?;
    assert_eq!(
        Some(event.resource_version),
        created.metadata.resource_version,
        "the live watch's next event is the new object"
    );
    assert_eq!(subscribers(&fanout).await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_connection_is_retired_and_its_watch_resumes_exactly_on_a_new_one() -> Result<()> {
    kube_fanout_tests::init_logging();
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, "aging").await?;
    let age = MaxConnectionAge(Duration::from_secs(2));
    let fanout = Fanout::start_with(cp.client.clone(), &["v1/configmaps"], |o| {
        o.max_connection_age = Some(age);
    })
    .await?;
    let dials = Arc::new(AtomicUsize::new(0));
    let (addr, counted) = (fanout.addr, dials.clone());
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_with_connector(tower::service_fn(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, std::io::Error>(TokioIo::new(TcpStream::connect(addr).await?)) }
        }))
        .await?;
    let mut client = KubeFanoutClient::new(channel);
    let connected = tokio::time::Instant::now();
    let mut stream = client.watch(watch_list("aging")).await?.into_inner();
    read_snapshot(&mut stream).await?;

    // A change every 200 ms, until well past the retirement (2 s, then up
    // to a tenth more, plus tonic's second).
    let writer = tokio::spawn({
        let client = cp.client.clone();
        async move {
            let mut rvs = Vec::new();
            for i in 0..25 {
                let cm = create_configmap(&client, "aging", &format!("cm-{i}"), "v").await?;
                rvs.push(cm.metadata.resource_version.context("no resourceVersion")?);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            anyhow::Ok(rvs)
        }
    });
    let mut seen = Vec::new();
    let status = loop {
        let next = tokio::time::timeout(Duration::from_secs(15), stream.message());
        match next
            .await
            .context("the watch was not retired within 15 s")?
        {
            Ok(Some(event)) if event.r#type() == EventType::Bookmark => {}
            Ok(Some(event)) => seen.push(event.resource_version),
            Ok(None) => bail!("the watch ended without a status"),
            Err(status) => break status,
        }
    };
    let lived = connected.elapsed();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    let info = status.get_details_error_info().context("no ErrorInfo")?;
    assert_eq!(info.reason, "ConnectionRetired");
    let resume = info.metadata["resourceVersion"].clone();
    assert_eq!(Some(&resume), seen.last(), "resume from the last event");
    assert!(
        // Connected a moment after the server started counting.
        lived >= Duration::from_millis(2_900) && lived < Duration::from_secs(5),
        "retired after {lived:?}"
    );
    println!("retired after {lived:?}, {} events in", seen.len());

    let resume = WatchRequest {
        resource_version: resume,
        send_initial_events: false,
        ..watch_list("aging")
    };
    // hyper's HTTP/2 client task looks at its connection's state (here:
    // the GOAWAY received a second ago) only when it is next handed a
    // request, and then drops that request unsent (tonic: Cancelled, from
    // hyper's Canceled "connection closed", or "connection was not ready"
    // when the close is seen as the request is queued, as a CI run met);
    // the channel connects anew for
    // the next call. Whether the first call meets it is a race with the
    // old connection's close. This client, like any that resumes after a
    // retirement, tries again once; the dial count below still proves
    // where the watch went.
    let mut resumed = match client.watch(resume.clone()).await {
        Err(status)
            if status.code() == tonic::Code::Cancelled
                && [
                    "Canceled, \"connection closed\"",
                    "Canceled, \"connection was not ready\"",
                ]
                .iter()
                .any(|unsent| format!("{status:?}").contains(unsent)) =>
        {
            println!("first resume dropped by the client: {status:?}");
            client.watch(resume).await?
        }
        other => other?,
    }
    .into_inner();
    let written = writer.await??;
    while seen.len() < written.len() {
        seen.push(next_change(&mut resumed).await?.resource_version);
    }
    assert_eq!(
        seen, written,
        "every change once, in order, across the move"
    );
    assert_eq!(
        dials.load(Ordering::SeqCst),
        2,
        "the resumed watch is on a new connection"
    );
    Ok(())
}

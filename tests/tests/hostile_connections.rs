//! Hostile connections on the real API server, with kube-fanout's default
//! flags plus TLS (and a short unauthenticated-connection timeout and a
//! small per-IP bound, so that the test is quick): one connection opening
//! more streams than the bound, one address opening more connections than
//! the bound, connections that never authenticate, huge headers, and a
//! health Watch without credentials. A legitimate subscriber keeps
//! receiving events throughout, and a quiet authenticated watch stays.
//! The header bound is raised to 32 KiB, above hyper's own default, so
//! that a 20 KiB header passing shows the flag is the one deciding.
//!
//! The attacker connects from 127.0.0.2 and 127.0.0.3 (all of 127.0.0.0/8
//! is loopback), the legitimate clients from 127.0.0.1.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use kube_fanout::{connections::ConnectionLimits, server::AuthOptions, tls::TlsFiles};
use kube_fanout_client::{Client, proto::EventType, watcher::ends_initial_events};
use kube_fanout_tests::{
    clients::{over_tls, rustls_config},
    controlplane::{ADMIN_TOKEN, ControlPlane, user_token},
    fanout::Fanout,
    pki::Ca,
    rbac::{grant, rule, user},
    support::{
        create_configmap, create_namespace, decode, https_get, next_change, read_snapshot,
        watch_list,
    },
};
use rustls::pki_types::ServerName;
use tokio::{
    io::AsyncReadExt,
    net::{TcpSocket, TcpStream},
};
use tokio_rustls::{TlsConnector, client::TlsStream};
use tonic::Code;

/// The attacker's address.
const ATTACKER: &str = "127.0.0.2";
/// The address the attacker opens too many streams from (its connection
/// may take a moment to be closed after the test drops it).
const STREAMER: &str = "127.0.0.3";
/// Connections one address may hold in this test.
const PER_IP: usize = 8;
/// How long a connection may go without authenticating, in this test.
/// It counts from the accept to the end of the first authentication (a
/// TokenReview): with 2 s, a legitimate client's first watch once failed
/// with a transport error on a loaded machine (most likely closed before
/// its first review came back).
const UNAUTHENTICATED: Duration = Duration::from_secs(5);

/// Raw TLS connections to the server, from any loopback address.
struct Raw {
    addr: SocketAddr,
    connector: TlsConnector,
}

impl Raw {
    fn new(addr: SocketAddr, ca: &str) -> Result<Self> {
        Ok(Raw {
            addr,
            connector: TlsConnector::from(rustls_config(ca, b"h2")?),
        })
    }

    /// A TLS connection from `source`, handshake done.
    async fn connect_from(&self, source: &str) -> Result<TlsStream<TcpStream>> {
        let socket = TcpSocket::new_v4()?;
        socket.bind(format!("{source}:0").parse()?)?;
        let tcp = socket.connect(self.addr).await?;
        let tls = tokio::time::timeout(
            Duration::from_secs(10),
            self.connector
                .connect(ServerName::try_from("localhost")?, tcp),
        )
        .await
        .context("TLS handshake hung")??;
        Ok(tls)
    }
}

/// A gRPC client over TLS from 127.0.0.1 with `user`'s token.
async fn client(fanout: &Fanout, ca: &str, user: &str) -> Result<Client> {
    Ok(over_tls(fanout.addr, ca, None, Some(&user_token(user)))
        .connect()
        .await?)
}

/// A gRPC request for `path` with an empty message, for the raw client.
fn grpc_request(path: &str, token: Option<&str>, pad: usize) -> Result<http::Request<()>> {
    let mut request = http::Request::post(format!("https://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if pad > 0 {
        request = request.header("x-pad", "p".repeat(pad));
    }
    Ok(request.body(())?)
}

/// The five bytes of an empty gRPC message (uncompressed, length 0).
const EMPTY_MESSAGE: Bytes = Bytes::from_static(&[0, 0, 0, 0, 0]);

/// Waits until the legitimate subscriber has seen the configmap `name`
/// that was just created: it is still receiving.
async fn still_receiving(
    admin: &kube::Client,
    subscriber: &mut tokio::sync::mpsc::Receiver<Result<String>>,
    name: &str,
) -> Result<()> {
    create_configmap(admin, "a", name, "v").await?;
    loop {
        match tokio::time::timeout(Duration::from_secs(10), subscriber.recv()).await {
            Ok(Some(Ok(seen))) if seen == name => return Ok(()),
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(err))) => return Err(err.context("the legitimate subscriber failed")),
            Ok(None) => bail!("the legitimate subscriber ended"),
            Err(_) => bail!("the legitimate subscriber did not see {name} within 10 s"),
        }
    }
}

/// The value of one metric line of kube-fanout's `/metrics` (over TLS,
/// scraped as the admin).
async fn metric(fanout: &Fanout, ca: &str, line: &str) -> Result<u64> {
    let addr = fanout.metrics_addr.context("no metrics")?;
    let (status, text) = https_get(addr, "localhost", ca, "/metrics", Some(ADMIN_TOKEN)).await?;
    ensure!(status == 200, "/metrics: {status} {text}");
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix(line)?.strip_prefix(' '))
        .with_context(|| format!("{line} missing from\n{text}"))?;
    Ok(value.parse()?)
}

/// One connection opens 10 streams more than `--max-concurrent-streams`
/// before it has read the server's SETTINGS (as a client ignoring them
/// would): the first ones are served (health Watch, with credentials),
/// the rest refused with `REFUSED_STREAM`.
async fn streams_beyond_the_bound_are_refused(raw: &Raw, bound: u32) -> Result<()> {
    let tls = raw.connect_from(STREAMER).await?;
    // Nothing is read until every stream is sent: h2 lets the client open
    // any number before the server's SETTINGS arrive.
    let (mut send, connection) = h2::client::handshake(tls).await?;
    let token = user_token("alice");
    let mut responses = Vec::new();
    for _ in 0..bound + 10 {
        let (response, mut body) = send.send_request(
            grpc_request("/grpc.health.v1.Health/Watch", Some(&token), 0)?,
            false,
        )?;
        body.send_data(EMPTY_MESSAGE, true)?;
        responses.push(response);
    }
    let driver = tokio::spawn(connection);
    let (mut served, mut refused) = (0, 0);
    for (i, response) in responses.into_iter().enumerate() {
        match tokio::time::timeout(Duration::from_secs(10), response).await {
            Ok(Ok(response)) => {
                ensure!(response.status() == 200, "stream {i}: {response:?}");
                if served == 0 {
                    // The first stream works: the current status arrives.
                    let mut body = response.into_body();
                    let message = body.data().await.context("no health status")??;
                    ensure!(message.len() > 5, "stream {i}: {message:?}");
                }
                served += 1;
            }
            Ok(Err(err)) if err.reason() == Some(h2::Reason::REFUSED_STREAM) => refused += 1,
            Ok(Err(err)) => bail!("stream {i}: {err}"),
            Err(_) => bail!("stream {i}: no answer within 10 s"),
        }
    }
    println!("streams: {served} served, {refused} refused");
    ensure!(
        (served, refused) == (bound, 10),
        "{served} served and {refused} refused of {}",
        bound + 10
    );
    driver.abort();
    Ok(())
}

/// When the server closed `tls` (end of stream or an error), if it did
/// within `within`; what it sends before (its HTTP/2 SETTINGS) is read
/// and dropped.
async fn closed_within(tls: &mut TlsStream<TcpStream>, within: Duration) -> Option<Instant> {
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0; 1024];
    loop {
        match tokio::time::timeout_at(deadline, tls.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return Some(Instant::now()),
            Ok(Ok(_)) => {}
            Err(_) => return None,
        }
    }
}

#[tokio::test]
async fn hostile_connections_are_bounded_while_legitimate_subscribers_carry_on() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let admin = cp.client.clone();
    for ns in ["a", "quiet"] {
        create_namespace(&admin, ns).await?;
        grant(
            &admin,
            ns,
            "readers",
            vec![rule(&["list", "watch"], "configmaps")],
            vec![user("alice")],
        )
        .await?;
    }
    let dir = tempfile::tempdir()?;
    let ca = Ca::new("serving")?;
    let (cert, key) = ca.serving()?.write_to(dir.path())?;
    let limits = ConnectionLimits {
        max_connections_per_ip: PER_IP,
        unauthenticated_timeout: UNAUTHENTICATED,
        // Above hyper's own 16 KiB, so that the flag is seen to decide.
        max_header_list_bytes: 32 * 1024,
        ..ConnectionLimits::default()
    };
    let fanout = Fanout::start_with(admin.clone(), &["v1/configmaps"], |o| {
        o.security.tls = Some(TlsFiles {
            cert,
            key,
            client_ca: None,
        });
        o.security.auth = Some(AuthOptions::default());
        o.connections = limits;
    })
    .await?;
    fanout.wait_synced().await?;
    let ca = ca.pem();
    let raw = Raw::new(fanout.addr, &ca)?;

    // The legitimate subscriber, throughout.
    let mut legitimate = client(&fanout, &ca, "alice").await?;
    let mut stream = legitimate.watch(watch_list("a")).await?;
    let (seen, mut subscriber) = tokio::sync::mpsc::channel(1024);
    tokio::spawn(async move {
        loop {
            // No deadline here: `still_receiving` has one per event.
            let name = match stream.message().await {
                Ok(Some(event))
                    if ends_initial_events(&event) || event.r#type() == EventType::Bookmark =>
                {
                    continue;
                }
                Ok(Some(event)) => decode(&event).map(|cm| cm.metadata.name.unwrap_or_default()),
                Ok(None) => Err(anyhow::anyhow!("the watch ended")),
                Err(status) => Err(anyhow::anyhow!("the watch failed: {status:?}")),
            };
            let failed = name.is_err();
            if seen.send(name).await.is_err() || failed {
                return;
            }
        }
    });
    still_receiving(&admin, &mut subscriber, "before").await?;

    // A quiet authenticated watch, on a connection of its own.
    let mut quiet_client = client(&fanout, &ca, "alice").await?;
    let mut quiet = quiet_client.watch(watch_list("quiet")).await?;
    let quiet_since = Instant::now();
    let (snapshot, _) = read_snapshot(&mut quiet)
        .await
        .context("the quiet watch's snapshot")?;
    ensure!(snapshot.is_empty(), "{snapshot:?}");

    // Health: Check is open to anyone, Watch needs credentials.
    let anonymous = tonic::transport::Channel::from_shared(format!("https://{}", fanout.addr))?
        .tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(&ca))
                .domain_name("localhost"),
        )?
        .connect()
        .await?;
    let mut health = tonic_health::pb::health_client::HealthClient::new(anonymous);
    health
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await?;
    let watch = health
        .watch(tonic_health::pb::HealthCheckRequest::default())
        .await
        .expect_err("a health Watch without credentials was served");
    ensure!(watch.code() == Code::Unauthenticated, "{watch:?}");

    // Streams beyond the bound on one connection.
    streams_beyond_the_bound_are_refused(&raw, limits.max_concurrent_streams).await?;
    still_receiving(&admin, &mut subscriber, "after-streams").await?;

    // Headers over the bound: answered 431 before anything reads them,
    // and the connection carries on; far over it (more CONTINUATION
    // frames than the bound needs), the connection is ended. The
    // legitimate subscriber's connection is not touched either way.
    let over = limits.max_header_list_bytes as usize + 4 * 1024;
    let mut padder = client(&fanout, &ca, "alice").await?;
    let refused = padder
        .grpc()
        .list(with_pad(over))
        .await
        .expect_err("headers over the bound were served");
    ensure!(refused.message().contains("431"), "{refused:?}");
    padder.grpc().list(with_pad(20 * 1024)).await?;
    let mut huge = client(&fanout, &ca, "alice").await?;
    huge.grpc()
        .list(with_pad(1 << 20))
        .await
        .expect_err("a 1 MiB header was served");
    still_receiving(&admin, &mut subscriber, "after-headers").await?;

    // One address at its bound: more are closed at once; the legitimate
    // clients' address still connects. None of these authenticate.
    let refused_before = metric(&fanout, &ca, REFUSED_PER_IP).await?;
    let mut held = Vec::new();
    for _ in 0..PER_IP {
        held.push((raw.connect_from(ATTACKER).await?, Instant::now()));
    }
    match raw.connect_from(ATTACKER).await {
        Err(_) => {}
        Ok(mut tls) => ensure!(
            closed_within(&mut tls, Duration::from_secs(1))
                .await
                .is_some(),
            "connection {} from {ATTACKER} was kept",
            PER_IP + 1
        ),
    }
    ensure!(metric(&fanout, &ca, REFUSED_PER_IP).await? == refused_before + 1);
    let mut another = client(&fanout, &ca, "alice").await?;
    another.list_resources().await?;
    still_receiving(&admin, &mut subscriber, "at-the-bound").await?;

    // The connections that never authenticated are closed after the
    // timeout (counted from the accept, a moment before `opened`), and
    // the address may connect again.
    for (tls, opened) in &mut held {
        let closed = closed_within(tls, UNAUTHENTICATED * 3)
            .await
            .context("an unauthenticated connection was kept")?;
        let after = closed - *opened;
        println!("unauthenticated connection closed after {after:?}");
        ensure!(
            after >= UNAUTHENTICATED - Duration::from_millis(200),
            "{after:?}"
        );
    }
    ensure!(metric(&fanout, &ca, CLOSED_UNAUTHENTICATED).await? >= PER_IP as u64);
    drop(held);
    raw.connect_from(ATTACKER).await?;

    // The quiet authenticated watch outlives the timeout twice over (the
    // wait is for that age, the thing checked) and still works.
    tokio::time::sleep_until((quiet_since + UNAUTHENTICATED * 2).into()).await;
    create_configmap(&admin, "quiet", "late", "v").await?;
    let late = decode(&next_change(&mut quiet).await.context("the quiet watch")?)?;
    ensure!(late.metadata.name.as_deref() == Some("late"), "{late:?}");
    still_receiving(&admin, &mut subscriber, "after").await?;
    fanout.stop().await
}

const REFUSED_PER_IP: &str =
    r#"kube_fanout_connections_refused_total{listener="grpc",bound="per_ip"}"#;
const CLOSED_UNAUTHENTICATED: &str =
    r#"kube_fanout_connections_closed_unauthenticated_total{listener="grpc"}"#;

/// A List of `a` carrying a header of `pad` bytes.
fn with_pad(pad: usize) -> tonic::Request<kube_fanout_client::proto::ListRequest> {
    let mut request = tonic::Request::new(kube_fanout_client::proto::ListRequest {
        resource: Some(kube_fanout_tests::support::configmaps()),
        namespace: "a".into(),
        ..Default::default()
    });
    request.metadata_mut().insert(
        "x-pad",
        "p".repeat(pad).parse().expect("an ASCII header value"),
    );
    request
}

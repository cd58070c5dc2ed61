//! The accept loop every listener shares (gRPC, health, metrics):
//! connections beyond the bounds ([`crate::connections`]) are closed at
//! once (sources shut out for their failed authentications are kept out
//! before that, by the listener's packet filter, [`crate::gate`]), the
//! others get keepalive ([`crate::keepalive`]), Nagle off and,
//! if asked, a deadline to authenticate by, and with TLS ([`crate::tls`])
//! a handshake in a task of its own, bounded in time.
//!
//! Every task the loop starts is owned: when the listener shuts down, the
//! handshakes in flight are cancelled, and the future [`incoming`] returns
//! beside its connections resolves only once the loop and all of them have
//! ended, so no handshake outlives the server that accepted it.

use std::{future::Future, io, sync::Arc, time::Duration};

use futures::Stream;
use tokio::{net::TcpListener, sync::mpsc, time::Instant};
use tokio_rustls::TlsAcceptor;
use tokio_util::{either::Either, sync::CancellationToken, task::TaskTracker};
use tracing::{Instrument, debug, info_span, warn};

use crate::{
    conn::Conn, connections::Connections, drain::Drain, keepalive::Keepalive,
    retire::MaxConnectionAge,
};

/// How [`incoming`] accepts connections.
#[derive(Clone)]
pub struct Accept {
    /// TLS, or plaintext if `None`.
    pub tls: Option<TlsAcceptor>,
    /// Set on every accepted socket.
    pub keepalive: Keepalive,
    /// When connections are retired, if they are.
    pub max_age: Option<MaxConnectionAge>,
    /// The open connections, counted against their bounds (which also
    /// give the handshake and unauthenticated timeouts).
    pub connections: Arc<Connections>,
    /// Whether a connection on which no request has been authenticated
    /// within the unauthenticated timeout is closed: with authentication
    /// on (without it nothing ever is), and on the health listener (where
    /// nothing ever is either, so each connection lasts that long at most).
    pub close_unauthenticated: bool,
    /// The server's drain, which closes the connections when it stops.
    pub drain: Drain,
}

/// The connections accepted on `listener` until `cancel` fires: beyond
/// the connection bounds closed at once (counted, logged at a bounded
/// rate), each other with keepalive set and a deadline to authenticate by
/// if asked; with TLS, each handshake runs in its own task (a slow client
/// delays no other, and holds its connection slot meanwhile) and one that
/// fails or times out is counted, logged and dropped.
///
/// Beside the connections, the drain: a future that resolves once the
/// accept loop and every handshake task have ended after `cancel` (a
/// handshake in flight then is cancelled, its socket closed and its slot
/// given back). Await it after the server stops serving the connections.
pub fn incoming(
    listener: TcpListener,
    accept: Accept,
    cancel: CancellationToken,
) -> (
    impl Stream<Item = io::Result<Conn>>,
    impl Future<Output = ()> + Send + 'static,
) {
    let (tx, rx) = mpsc::channel(64);
    let tasks = TaskTracker::new();
    let handshakes = tasks.clone();
    tasks.spawn(
        async move {
            let mut gate = accept.connections.gate();
            loop {
                let keep_out = async {
                    match &mut gate {
                        Some(gate) => gate.next().await,
                        None => std::future::pending().await,
                    }
                };
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    sources = keep_out => {
                        if let Err(err) = crate::gate::apply(&listener, &sources) {
                            warn!(error = %err, "the filter keeping out shut-out sources was not put on the listener");
                        }
                        continue;
                    }
                    () = cancel.cancelled() => return,
                };
                let (tcp, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        // Out of file descriptors and the like: transient.
                        warn!(error = %err, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                // Refused before a handshake is spent on it; dropping the
                // socket closes it.
                let Ok(slot) = accept.connections.admit(peer.ip()) else {
                    continue;
                };
                // Watch events are small writes on a long-lived stream:
                // with Nagle's algorithm on, each one written while the
                // previous is unacknowledged waits for the peer's (delayed)
                // ACK, tens of milliseconds. tonic's own `tcp_nodelay`
                // applies only to its own listener, not to this accept loop.
                if let Err(err) = tcp.set_nodelay(true) {
                    debug!(error = %err, %peer, "TCP_NODELAY not set");
                }
                if let Err(err) = accept.keepalive.apply(&tcp) {
                    warn!(error = %err, %peer, "TCP keepalive not set");
                }
                let limits = *accept.connections.limits();
                // Counted from the accept: the handshake is part of the
                // time a connection holds a slot without proving anything.
                let deadline = accept
                    .close_unauthenticated
                    .then(|| Instant::now() + limits.unauthenticated_timeout);
                let max_age = accept.max_age;
                let Some(acceptor) = accept.tls.clone() else {
                    let conn =
                        Conn::new(Either::Left(tcp), max_age, slot, deadline, accept.drain.join());
                    if !deliver(&tx, conn, &cancel).await {
                        return;
                    }
                    continue;
                };
                let (tx, cancel, drain) = (tx.clone(), cancel.clone(), accept.drain.clone());
                handshakes.spawn(
                    async move {
                        let handshake = tokio::time::timeout(
                            limits.handshake_timeout,
                            acceptor.accept(tcp),
                        );
                        let outcome = tokio::select! {
                            outcome = handshake => outcome,
                            () = cancel.cancelled() => {
                                // Dropping the socket closes it; the slot
                                // goes with it.
                                debug!("TLS handshake cancelled: shutting down");
                                return;
                            }
                        };
                        match outcome {
                            Ok(Ok(tls)) => {
                                let io = Either::Right(Box::new(tls));
                                let conn = Conn::new(io, max_age, slot, deadline, drain.join());
                                deliver(&tx, conn, &cancel).await;
                            }
                            Ok(Err(err)) => {
                                slot.connections().handshake_failed();
                                debug!(error = %err, "TLS handshake failed");
                            }
                            Err(_) => {
                                slot.connections().handshake_failed();
                                debug!(timeout = ?limits.handshake_timeout, "TLS handshake timed out");
                            }
                        }
                    }
                    .instrument(info_span!("handshake", %peer)),
                );
            }
        }
        .instrument(info_span!("accept")),
    );
    // Closed now so the drain resolves once the tracker is empty; the
    // accept loop, in it until it ends, still adds handshakes.
    tasks.close();
    let drained = async move { tasks.wait().await };
    (tokio_stream::wrappers::ReceiverStream::new(rx), drained)
}

/// Hands `conn` to the server, unless it stopped taking connections
/// (false): it dropped them, or shut down and may never take another,
/// which would leave the sender waiting on a full channel for ever.
async fn deliver(
    tx: &mpsc::Sender<io::Result<Conn>>,
    conn: Conn,
    cancel: &CancellationToken,
) -> bool {
    tokio::select! {
        sent = tx.send(Ok(conn)) => sent.is_ok(),
        () = cancel.cancelled() => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::{net::SocketAddr, num::NonZeroU32};

    use tonic::transport::server::Connected;

    use futures::StreamExt;
    use rustls::{RootCertStore, pki_types::ServerName};
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpStream,
    };
    use tokio_rustls::TlsConnector;

    use crate::{
        connections::ConnectionLimits,
        failures::FailureBound,
        tls::{TlsFiles, acceptor},
    };

    /// The connections of [`incoming`], its drain left alone.
    fn conns_of(
        listener: TcpListener,
        accept: Accept,
        cancel: CancellationToken,
    ) -> impl Stream<Item = io::Result<Conn>> {
        incoming(listener, accept, cancel).0
    }

    /// A self-signed certificate for `localhost` written into `dir`, and
    /// a client configuration (HTTP/2) that trusts it.
    fn self_signed(dir: &tempfile::TempDir) -> (TlsFiles, rustls::ClientConfig) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let files = TlsFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
            client_ca: None,
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec()];
        (files, config)
    }

    /// `accept` with plaintext, the default keepalive, no maximum age.
    fn plain(connections: &Arc<Connections>, close_unauthenticated: bool) -> Accept {
        Accept {
            tls: None,
            keepalive: Keepalive::default(),
            max_age: None,
            connections: connections.clone(),
            close_unauthenticated,
            drain: Drain::default(),
        }
    }

    fn bounded(limits: ConnectionLimits) -> Arc<Connections> {
        Connections::new(limits)
    }

    /// A client socket bound to `source` connected to `addr`.
    async fn connect_from(source: &str, addr: SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
        socket.connect(addr).await.unwrap()
    }

    #[tokio::test]
    async fn connections_beyond_the_bound_from_one_address_are_closed_and_others_accepted() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = bounded(ConnectionLimits {
            max_connections_per_ip: 2,
            ..ConnectionLimits::default()
        });
        let cancel = CancellationToken::new();
        let mut conns = Box::pin(conns_of(
            listener,
            plain(&connections, false),
            cancel.clone(),
        ));
        let mut held = Vec::new();
        for _ in 0..2 {
            let client = connect_from("127.0.0.1", addr).await;
            held.push((client, conns.next().await.unwrap().unwrap()));
        }
        let mut refused = connect_from("127.0.0.1", addr).await;
        let mut byte = [0; 1];
        assert_eq!(refused.read(&mut byte).await.unwrap_or(0), 0, "not closed");
        let _other = connect_from("127.0.0.2", addr).await;
        let other = conns.next().await.unwrap().unwrap();
        assert_eq!(
            other.socket().peer_addr().unwrap().ip(),
            "127.0.0.2".parse::<std::net::IpAddr>().unwrap()
        );
        let stats = connections.stats();
        assert_eq!((stats.open, stats.refused_per_ip), (3, 1));
        drop(held.pop());
        let _again = connect_from("127.0.0.1", addr).await;
        let _accepted = conns.next().await.unwrap().unwrap();
        assert_eq!(connections.stats().open, 3);
        cancel.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_authenticates_nothing_is_closed_at_its_deadline_and_others_stay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let timeout = Duration::from_secs(30);
        let connections = bounded(ConnectionLimits {
            unauthenticated_timeout: timeout,
            ..ConnectionLimits::default()
        });
        let cancel = CancellationToken::new();
        let mut conns = Box::pin(conns_of(
            listener,
            plain(&connections, true),
            cancel.clone(),
        ));
        let mut quiet_client = TcpStream::connect(addr).await.unwrap();
        let mut quiet = conns.next().await.unwrap().unwrap();
        let accepted = Instant::now();
        let _client = TcpStream::connect(addr).await.unwrap();
        let mut authenticated = conns.next().await.unwrap().unwrap();
        authenticated.connect_info().standing.set_authenticated();
        let mut byte = [0; 1];

        assert_eq!(quiet.read(&mut byte).await.unwrap(), 0);
        assert_eq!(Instant::now() - accepted, timeout);
        assert_eq!(quiet_client.read(&mut byte).await.unwrap(), 0, "no FIN");
        assert_eq!(connections.stats().closed_unauthenticated, 1);
        let read = tokio::time::timeout(timeout * 10, authenticated.read(&mut byte)).await;
        assert!(read.is_err(), "an authenticated connection was closed");

        // Without the deadline (authentication off), nothing is closed.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut conns = Box::pin(conns_of(
            listener,
            plain(&connections, false),
            cancel.clone(),
        ));
        let _client = TcpStream::connect(addr).await.unwrap();
        let mut open = conns.next().await.unwrap().unwrap();
        let read = tokio::time::timeout(timeout * 10, open.read(&mut byte)).await;
        assert!(read.is_err(), "closed without a deadline");
        assert_eq!(connections.stats().closed_unauthenticated, 1);
        cancel.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_that_spends_its_failures_loses_its_unauthenticated_connections_and_new_ones()
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let bound = FailureBound {
            rate: NonZeroU32::new(2).unwrap(),
            burst: NonZeroU32::new(3).unwrap(),
        };
        let connections = bounded(ConnectionLimits {
            auth_failures: Some(bound),
            ..ConnectionLimits::default()
        });
        let cancel = CancellationToken::new();
        let mut conns = Box::pin(conns_of(
            listener,
            plain(&connections, true),
            cancel.clone(),
        ));
        let mut accept_from = async |source: &str| {
            let client = connect_from(source, addr).await;
            (client, conns.next().await.unwrap().unwrap())
        };
        let (_kept_client, mut kept) = accept_from("127.0.0.1").await;
        kept.connect_info().standing.set_authenticated();
        let (mut flooding_client, mut flooding) = accept_from("127.0.0.1").await;
        let (_other_client, mut other) = accept_from("127.0.0.2").await;
        let standing = flooding.connect_info().standing;
        for _ in 0..3 {
            standing.failed_authentication().unwrap();
        }
        assert_eq!(standing.refusal(), None, "within its burst");
        let out = standing.failed_authentication().unwrap_err();
        assert_eq!(
            out.retry_after,
            Duration::from_secs(1),
            "2/s, but at least a second"
        );
        // Its connection closes at once (no timer: the standing's waker);
        // the authenticated one from the same source and another source's
        // stay open.
        let started = Instant::now();
        let mut byte = [0; 1];
        assert_eq!(flooding.read(&mut byte).await.unwrap(), 0);
        assert_eq!(flooding_client.read(&mut byte).await.unwrap(), 0, "no FIN");
        assert_eq!(Instant::now(), started);
        let stats = connections.stats();
        assert_eq!(
            (stats.closed_shut_out, stats.closed_unauthenticated),
            (1, 0)
        );
        let (mut kept_byte, mut other_byte) = ([0; 1], [0; 1]);
        let either = tokio::time::timeout(Duration::from_millis(400), async {
            tokio::select! {
                read = kept.read(&mut kept_byte) => read,
                read = other.read(&mut other_byte) => read,
            }
        })
        .await;
        assert!(
            either.is_err(),
            "a connection that is not shut out was closed"
        );
        // Shut out for 600 ms more: once the accept loop has put the
        // filter on the listener (it runs as soon as this task yields), a
        // new connection from it is not even let in (its SYN is dropped),
        // and one from elsewhere is served.
        tokio::task::yield_now().await;
        let kept_out =
            tokio::time::timeout(Duration::from_millis(50), connect_from("127.0.0.1", addr)).await;
        assert!(kept_out.is_err(), "a shut-out source's SYN was let in");
        let _elsewhere = accept_from("127.0.0.3").await;
        // The shut-out over, the filter comes off.
        tokio::time::advance(Duration::from_millis(550)).await;
        tokio::task::yield_now().await;
        let (_client, again) = accept_from("127.0.0.1").await;
        assert_eq!(again.connect_info().standing.refusal(), None);
        assert_eq!(connections.stats().refused_shut_out, 0);
        cancel.cancel();
    }

    /// Once the server's drain begins, a connection with no request in
    /// flight is closed at the streams' grace (its reads end, its client
    /// sees the end), one with a request in flight at the requests' grace
    /// unless the request ends first: closed then, at once.
    #[tokio::test(start_paused = true)]
    async fn the_drain_closes_idle_connections_at_once_and_busy_ones_when_their_requests_end() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let grace = crate::drain::DrainGrace {
            streams: Duration::from_millis(500),
            requests: Duration::from_secs(10),
        };
        let drain = Drain::new(grace);
        let connections = bounded(ConnectionLimits::default());
        let accept = Accept {
            drain: drain.clone(),
            ..plain(&connections, false)
        };
        let cancel = CancellationToken::new();
        let mut conns = Box::pin(conns_of(listener, accept, cancel.clone()));
        let mut idle_client = TcpStream::connect(addr).await.unwrap();
        let mut idle = conns.next().await.unwrap().unwrap();
        let _busy_client = TcpStream::connect(addr).await.unwrap();
        let mut busy = conns.next().await.unwrap().unwrap();
        let request = busy.connect_info().requests.start();
        let mut byte = [0; 1];
        let quiet = tokio::time::timeout(Duration::from_secs(3600), idle.read(&mut byte)).await;
        assert!(quiet.is_err(), "closed before the drain");

        let began = Instant::now();
        drain.begin();
        assert_eq!(idle.read(&mut byte).await.unwrap(), 0);
        assert_eq!(Instant::now() - began, grace.streams);
        assert_eq!(idle_client.read(&mut byte).await.unwrap(), 0, "no FIN");
        let still = tokio::time::timeout(Duration::from_secs(2), busy.read(&mut byte)).await;
        assert!(still.is_err(), "closed with a request in flight");
        drop(request);
        assert_eq!(busy.read(&mut byte).await.unwrap(), 0);
        assert_eq!(
            Instant::now() - began,
            grace.streams + Duration::from_secs(2)
        );
        let stats = drain.stats();
        assert_eq!(
            (
                stats.open_at_start,
                stats.closed_with_streams,
                stats.closed_with_requests
            ),
            (2, 2, 0)
        );
        cancel.cancel();
    }

    #[tokio::test]
    async fn accepted_connections_have_nagle_off_and_keepalive_on_plain_and_tls() {
        let dir = tempfile::tempdir().unwrap();
        let (files, config) = self_signed(&dir);
        let cancel = CancellationToken::new();

        let plain = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let plain_addr = plain.local_addr().unwrap();
        let keepalive = Keepalive {
            idle: Some(Duration::from_secs(11)),
            timeout: Duration::from_secs(20),
        };
        // Set on the socket, whatever the connection carries.
        let probing = |conn: &Conn| {
            let socket = socket2::SockRef::from(conn.socket());
            socket.keepalive().unwrap()
                && socket.tcp_keepalive_time().unwrap() == Duration::from_secs(11)
        };
        let connections = bounded(ConnectionLimits::default());
        let accept = Accept {
            keepalive,
            ..self::plain(&connections, false)
        };
        let mut conns = Box::pin(conns_of(plain, accept.clone(), cancel.clone()));
        let _client = TcpStream::connect(plain_addr).await.unwrap();
        let conn = conns.next().await.unwrap().unwrap();
        assert!(matches!(conn.io, Either::Left(_)));
        assert!(conn.socket().nodelay().unwrap(), "plain: Nagle is on");
        assert!(probing(&conn), "plain: no keepalive");

        let secure = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let secure_addr = secure.local_addr().unwrap();
        let accept = Accept {
            tls: Some(acceptor(&files).unwrap()),
            ..accept
        };
        let mut conns = Box::pin(conns_of(secure, accept, cancel.clone()));
        let tcp = TcpStream::connect(secure_addr).await.unwrap();
        let client = TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("localhost").unwrap(), tcp);
        let (client, conn) = tokio::join!(client, conns.next());
        client.unwrap();
        let conn = conn.unwrap().unwrap();
        assert!(matches!(conn.io, Either::Right(_)));
        assert!(conn.socket().nodelay().unwrap(), "TLS: Nagle is on");
        assert!(probing(&conn), "TLS: no keepalive");
        cancel.cancel();
    }

    /// A handshake in flight when the listener shuts down is cancelled and
    /// waited for: once the drain resolves, no handshake task holds its
    /// connection's slot or socket, and it did not wait for the
    /// handshake timeout (an hour here) to get there.
    #[tokio::test]
    async fn a_handshake_in_flight_at_shutdown_is_cancelled_and_drained() {
        let dir = tempfile::tempdir().unwrap();
        let (files, config) = self_signed(&dir);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = bounded(ConnectionLimits {
            handshake_timeout: Duration::from_secs(3600),
            ..ConnectionLimits::default()
        });
        let accept = Accept {
            tls: Some(acceptor(&files).unwrap()),
            ..plain(&connections, false)
        };
        let cancel = CancellationToken::new();
        let (_conns, drained) = incoming(listener, accept, cancel.clone());

        // The client sends its hello, reads the server's first answer and
        // goes quiet: the server's handshake waits for the client's
        // Finished.
        let mut client = rustls::ClientConnection::new(
            Arc::new(config),
            ServerName::try_from("localhost").unwrap(),
        )
        .unwrap();
        let mut hello = Vec::new();
        client.write_tls(&mut hello).unwrap();
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(&hello).await.unwrap();
        let mut answer = [0; 1];
        assert_eq!(tcp.read(&mut answer).await.unwrap(), 1, "no ServerHello");
        assert_eq!(connections.stats().open, 1);

        cancel.cancel();
        // A bound on a failure, not a wait: the drain ends at once.
        tokio::time::timeout(Duration::from_secs(60), drained)
            .await
            .expect("the drain waited for the handshake");
        let stats = connections.stats();
        assert_eq!(stats.open, 0, "a handshake task outlived the drain");
        assert_eq!(stats.handshake_failures, 0, "a shutdown is no failure");
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(60), tcp.read_to_end(&mut rest))
            .await
            .expect("the socket of the cancelled handshake is still open")
            .unwrap();
    }
}

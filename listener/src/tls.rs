//! TLS on the gRPC listener: the serving certificate and the client CA are
//! read again when their files change (checked at each handshake, so
//! rotation needs no restart and open connections are untouched, as
//! Kubernetes components do); the optional client CA verifies client
//! certificates, which go to the gRPC layers as they are (DER), for the
//! auth module to map to a user (`kube_fanout_auth::x509`).

use std::{
    io,
    net::SocketAddr,
    path::{Path, PathBuf},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::{Duration, SystemTime},
};

use futures::{FutureExt, Stream};
use parking_lot::Mutex;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
    client::danger::HandshakeSignatureValid,
    crypto::CryptoProvider,
    server::{
        ClientHello, ResolvesServerCert, WebPkiClientVerifier,
        danger::{ClientCertVerified, ClientCertVerifier},
    },
    sign::CertifiedKey,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime, pem::PemObject};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::mpsc,
    time::{Instant, Sleep},
};
use tokio_rustls::{TlsAcceptor, server::TlsStream};
use tokio_util::{either::Either, sync::CancellationToken};
use tonic::transport::server::Connected;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::{
    connections::{Authenticated, Connections, Slot},
    keepalive::Keepalive,
    retire::MaxConnectionAge,
};

/// The files TLS is served from.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// PEM CA bundle that client certificates must chain to, for mTLS.
    pub client_ca: Option<PathBuf>,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or parsed as PEM.
    #[error("{}: {source}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rustls_pki_types::pem::Error,
    },
    /// A PEM file without a certificate.
    #[error("{}: no certificate in it", .0.display())]
    NoCertificate(PathBuf),
    /// The key does not fit the certificate, or is of an unsupported kind.
    #[error("{} with {}: {source}", cert.display(), key.display())]
    Key {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why.
        source: rustls::Error,
    },
    /// The client CA bundle holds no usable CA.
    #[error("client CA {}: {source}", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rustls::server::VerifierBuilderError,
    },
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |source| TlsError::Pem {
        path: path.to_owned(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(pem)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.to_owned()));
    }
    Ok(certs)
}

/// What identifies a file's contents without reading it.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    // Follows symlinks: a Kubernetes Secret volume swaps a symlink.
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Something built from files and built again when they change (checked
/// on each use, by modification time and length): a replacement that does
/// not load, say a certificate written before its key, keeps the previous
/// one in service.
struct Reloading<T> {
    files: Vec<PathBuf>,
    what: &'static str,
    load: Box<dyn Fn() -> Result<T, TlsError> + Send + Sync>,
    current: Mutex<(Vec<Stamp>, T)>,
}

impl<T: Clone> Reloading<T> {
    /// Loads it; fails if the files cannot be used now.
    fn new(
        what: &'static str,
        files: Vec<PathBuf>,
        load: impl Fn() -> Result<T, TlsError> + Send + Sync + 'static,
    ) -> Result<Self, TlsError> {
        let stamps = files.iter().map(|f| stamp(f)).collect();
        let loaded = load()?;
        Ok(Reloading {
            files,
            what,
            load: Box::new(load),
            current: Mutex::new((stamps, loaded)),
        })
    }

    /// The current one, built again first if a file changed.
    fn current(&self) -> T {
        let stamps: Vec<Stamp> = self.files.iter().map(|f| stamp(f)).collect();
        let mut current = self.current.lock();
        if current.0 != stamps {
            current.0 = stamps;
            match (self.load)() {
                Ok(loaded) => {
                    info!(files = ?self.files, "{} reloaded", self.what);
                    current.1 = loaded;
                }
                Err(err) => {
                    warn!(error = %err, "{} not reloaded; keeping the previous one", self.what)
                }
            }
        }
        current.1.clone()
    }
}

impl<T> std::fmt::Debug for Reloading<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading")
            .field("what", &self.what)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// The serving certificate, read again when its files change.
#[derive(Debug)]
pub struct ReloadingCertificate(Reloading<Arc<CertifiedKey>>);

impl ReloadingCertificate {
    /// Loads the certificate and key; fails if they cannot be used.
    pub fn new(cert: &Path, key: &Path, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let (cert, key) = (cert.to_owned(), key.to_owned());
        let files = vec![cert.clone(), key.clone()];
        Ok(ReloadingCertificate(Reloading::new(
            "serving certificate",
            files,
            move || Self::load(&cert, &key, &provider),
        )?))
    }

    fn load(
        cert: &Path,
        key: &Path,
        provider: &CryptoProvider,
    ) -> Result<Arc<CertifiedKey>, TlsError> {
        let chain = certificates(cert)?;
        let private = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsError::Pem {
            path: key.to_owned(),
            source,
        })?;
        let certified =
            CertifiedKey::from_der(chain, private, provider).map_err(|source| TlsError::Key {
                cert: cert.to_owned(),
                key: key.to_owned(),
                source,
            })?;
        Ok(Arc::new(certified))
    }

    /// The certificate to serve now, reloaded if either file changed.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.0.current()
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Verifies client certificates against the client CA bundle, read again
/// when the file changes, so a CA rotation needs no restart either. A
/// certificate is optional: a bearer token will do as well. No CA names
/// are hinted to clients (they may not match the reloaded bundle).
#[derive(Debug)]
pub struct ReloadingClientVerifier(Reloading<Arc<dyn ClientCertVerifier>>);

impl ReloadingClientVerifier {
    /// Loads the bundle; fails if it holds no usable CA.
    pub fn new(path: &Path, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let path = path.to_owned();
        Ok(ReloadingClientVerifier(Reloading::new(
            "client CA",
            vec![path.clone()],
            move || Self::load(&path, &provider),
        )?))
    }

    fn load(
        path: &Path,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(certificates(path)?);
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .allow_unauthenticated()
            .build()
            .map_err(|source| TlsError::ClientCa {
                path: path.to_owned(),
                source,
            })
    }
}

impl ClientCertVerifier for ReloadingClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.0
            .current()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.current().supported_verify_schemes()
    }
}

/// A TLS acceptor for `files`: HTTP/2 only (gRPC), the serving certificate
/// and the client CA reloaded on change, client certificates verified
/// against the client CA if one is given (and optional, since a bearer
/// token will do as well).
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    server_config(files, files.client_ca.as_deref(), b"h2")
}

/// A TLS acceptor for the metrics endpoint (HTTP/1.1): the same serving
/// certificate, reloaded on change, and no client certificates (scrapers
/// authenticate with a bearer token).
pub fn metrics_acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    server_config(files, None, b"http/1.1")
}

fn server_config(
    files: &TlsFiles,
    client_ca: Option<&Path>,
    alpn: &[u8],
) -> Result<TlsAcceptor, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Key {
            cert: files.cert.clone(),
            key: files.key.clone(),
            source,
        })?;
    let builder = match client_ca {
        Some(path) => builder.with_client_cert_verifier(Arc::new(ReloadingClientVerifier::new(
            path,
            provider.clone(),
        )?)),
        None => builder.with_no_client_auth(),
    };
    let resolver = ReloadingCertificate::new(&files.cert, &files.key, provider)?;
    let mut config = builder.with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A client connection, when it is retired if connections have a maximum
/// age, its place among the open connections, and when it is closed if it
/// authenticates nothing.
pub struct Conn {
    io: Io,
    max_age: Option<MaxConnectionAge>,
    slot: Slot,
    unauthenticated: Unauthenticated,
}

/// Where a connection is in closing for authenticating nothing.
enum Unauthenticated {
    /// Not closed for that: authenticated, or not asked to.
    Off,
    /// Closed at this deadline unless a request authenticates first.
    Until(Pin<Box<Sleep>>),
    /// Past the deadline: the TLS close_notify and the TCP FIN going out.
    ShuttingDown,
    /// Closed: reads see the end of the stream, so hyper ends the
    /// connection as if the client had closed it.
    Closed,
}

impl Conn {
    /// Moves a connection past its deadline without an authenticated
    /// request towards being closed: `Some` is what a read returns
    /// instead of reading, `None` lets it read. Polled with every read,
    /// which hyper always has pending, so the deadline's timer wakes the
    /// connection's task; after authentication it costs one comparison.
    fn close_if_unauthenticated(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<()>>> {
        loop {
            match &mut self.unauthenticated {
                Unauthenticated::Off => return None,
                Unauthenticated::Until(deadline) => {
                    if self.slot.authenticated().is_set() {
                        self.unauthenticated = Unauthenticated::Off;
                        return None;
                    }
                    if deadline.poll_unpin(cx).is_pending() {
                        return None;
                    }
                    self.slot.connections().closed_unauthenticated();
                    debug!(
                        peer = ?self.socket().peer_addr().ok(),
                        timeout = ?self.slot.connections().limits().unauthenticated_timeout,
                        "closing a connection on which nothing was authenticated in time"
                    );
                    self.unauthenticated = Unauthenticated::ShuttingDown;
                }
                Unauthenticated::ShuttingDown => {
                    if Pin::new(&mut self.io).poll_shutdown(cx).is_pending() {
                        return Some(Poll::Pending);
                    }
                    // An error leaves the socket to be closed on drop.
                    self.unauthenticated = Unauthenticated::Closed;
                }
                Unauthenticated::Closed => return Some(Poll::Ready(Ok(()))),
            }
        }
    }

    /// The socket under the connection.
    fn socket(&self) -> &TcpStream {
        match &self.io {
            Either::Left(tcp) => tcp,
            Either::Right(tls) => tls.get_ref().0,
        }
    }
}

/// A connection's stream: plain (`Left`) or after a TLS handshake
/// (`Right`). tokio-util's `Either` forwards every read and write,
/// vectored writes included.
type Io = Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// What the gRPC layers learn about a connection (in each request's
/// extensions).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The client's address.
    pub remote_addr: Option<SocketAddr>,
    /// The client's certificate (the leaf, DER), present only when
    /// verified against the client CA.
    pub peer_certificate: Option<Arc<CertificateDer<'static>>>,
    /// When the connection's watches end, with a maximum connection age
    /// (see [`crate::retire`]).
    pub retire_at: Option<Instant>,
    /// Set by the authentication layer once a request on the connection
    /// has been authenticated; until then the connection is closed after
    /// `--unauthenticated-connection-timeout-seconds`.
    pub authenticated: Authenticated,
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    /// Called once, as tonic starts serving the connection (and starts
    /// counting its age); every request on it gets a copy.
    fn connect_info(&self) -> ConnInfo {
        let retire_at = self.max_age.map(|age| age.retire_at(Instant::now()));
        let authenticated = self.slot.authenticated().clone();
        match &self.io {
            Either::Left(tcp) => ConnInfo {
                remote_addr: tcp.peer_addr().ok(),
                peer_certificate: None,
                retire_at,
                authenticated,
            },
            Either::Right(tls) => {
                let (tcp, session) = tls.get_ref();
                ConnInfo {
                    remote_addr: tcp.peer_addr().ok(),
                    // Only present when verified against the client CA.
                    peer_certificate: session
                        .peer_certificates()
                        .and_then(|chain| chain.first())
                        .map(|leaf| Arc::new(leaf.clone().into_owned())),
                    retire_at,
                    authenticated,
                }
            }
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(closing) = this.close_if_unauthenticated(cx) {
            return closing;
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

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
}

/// The connections accepted on `listener` until `cancel` fires: beyond
/// the connection bounds closed at once (counted, logged at a bounded
/// rate), each other with keepalive set and a deadline to authenticate by
/// if asked; with TLS, each handshake runs in its own task (a slow client
/// delays no other, and holds its connection slot meanwhile) and one that
/// fails or times out is counted, logged and dropped.
pub fn incoming(
    listener: TcpListener,
    accept: Accept,
    cancel: CancellationToken,
) -> impl Stream<Item = io::Result<Conn>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(
        async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
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
                let unauthenticated = if accept.close_unauthenticated {
                    Unauthenticated::Until(Box::pin(tokio::time::sleep(
                        limits.unauthenticated_timeout,
                    )))
                } else {
                    Unauthenticated::Off
                };
                let max_age = accept.max_age;
                let Some(acceptor) = accept.tls.clone() else {
                    let conn = Conn {
                        io: Either::Left(tcp),
                        max_age,
                        slot,
                        unauthenticated,
                    };
                    if tx.send(Ok(conn)).await.is_err() {
                        return;
                    }
                    continue;
                };
                let tx = tx.clone();
                tokio::spawn(
                    async move {
                        let handshake = acceptor.accept(tcp);
                        match tokio::time::timeout(limits.handshake_timeout, handshake).await {
                            Ok(Ok(tls)) => {
                                let conn = Conn {
                                    io: Either::Right(Box::new(tls)),
                                    max_age,
                                    slot,
                                    unauthenticated,
                                };
                                let _ = tx.send(Ok(conn)).await;
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
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    use futures::StreamExt;
    use rustls::pki_types::ServerName;
    use tokio::io::AsyncReadExt;

    use crate::connections::ConnectionLimits;
    use tokio_rustls::TlsConnector;

    /// `accept` with plaintext, the default keepalive, no maximum age.
    fn plain(connections: &Arc<Connections>, close_unauthenticated: bool) -> Accept {
        Accept {
            tls: None,
            keepalive: Keepalive::default(),
            max_age: None,
            connections: connections.clone(),
            close_unauthenticated,
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
        let mut conns = Box::pin(incoming(
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
        let mut conns = Box::pin(incoming(
            listener,
            plain(&connections, true),
            cancel.clone(),
        ));
        let mut quiet_client = TcpStream::connect(addr).await.unwrap();
        let mut quiet = conns.next().await.unwrap().unwrap();
        let accepted = Instant::now();
        let _client = TcpStream::connect(addr).await.unwrap();
        let mut authenticated = conns.next().await.unwrap().unwrap();
        authenticated.connect_info().authenticated.set();
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
        let mut conns = Box::pin(incoming(
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

    #[tokio::test]
    async fn accepted_connections_have_nagle_off_and_keepalive_on_plain_and_tls() {
        let dir = tempfile::tempdir().unwrap();
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
        let mut conns = Box::pin(incoming(plain, accept.clone(), cancel.clone()));
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
        let mut conns = Box::pin(incoming(secure, accept, cancel.clone()));
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
}

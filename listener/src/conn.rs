//! One accepted connection ([`Conn`]), plain or TLS, as tonic and axum
//! serve it, and what the gRPC layers learn about it ([`ConnInfo`]): its
//! peer, its verified client certificate, when it is retired, its
//! standing with the authentication layer, and its requests in flight. A
//! connection on which nothing is authenticated in time, one that is shut
//! out for its source's failed authentications before it authenticated,
//! and one past its time in a server's drain ([`crate::drain`]) are closed
//! here, by their reads.

use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use futures::FutureExt;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    time::{Instant, Sleep},
};
use tokio_rustls::server::TlsStream;
use tokio_util::either::Either;
use tonic::transport::server::Connected;
use tracing::debug;

use crate::{
    connections::Slot,
    drain::{ConnDrain, Requests},
    peer::PeerCertificates,
    retire::MaxConnectionAge,
    standing::Standing,
};

/// A client connection, when it is retired if connections have a maximum
/// age, its place among the open connections, when it is closed if it
/// authenticates nothing, and its part in the server's drain.
pub struct Conn {
    pub(crate) io: Io,
    max_age: Option<MaxConnectionAge>,
    slot: Slot,
    unauthenticated: Unauthenticated,
    drain: ConnDrain,
}

/// Where a connection is in closing: for authenticating nothing, or for
/// the server's drain.
enum Unauthenticated {
    /// Not closed for authenticating nothing: authenticated, or not asked
    /// to.
    Off,
    /// Closed at this deadline unless a request authenticates first (or
    /// before it, if the connection is shut out).
    Until(Pin<Box<Sleep>>),
    /// Closing: the TLS close_notify and the TCP FIN going out.
    ShuttingDown,
    /// Closed: reads see the end of the stream, so hyper ends the
    /// connection as if the client had closed it.
    Closed,
}

impl Conn {
    /// A connection accepted (and through its handshake, with TLS) that
    /// holds `slot`, is closed at `unauthenticated_deadline` unless a
    /// request on it authenticates first, retired at `max_age`, and closed
    /// in the server's drain as `drain` says.
    pub(crate) fn new(
        io: Io,
        max_age: Option<MaxConnectionAge>,
        slot: Slot,
        unauthenticated_deadline: Option<Instant>,
        drain: ConnDrain,
    ) -> Self {
        let unauthenticated = match unauthenticated_deadline {
            Some(deadline) => Unauthenticated::Until(Box::pin(tokio::time::sleep_until(deadline))),
            None => Unauthenticated::Off,
        };
        Conn {
            io,
            max_age,
            slot,
            unauthenticated,
            drain,
        }
    }

    /// Closes a connection past its time in the server's drain: `Some` is
    /// what a read returns instead of reading (the end of the stream). The
    /// close_notify and FIN are sent if the socket takes them now, never
    /// waited for: a client that reads nothing (the one a drain is there
    /// for) would hold the server's exit up; the kernel sends what the
    /// socket still holds once it is closed.
    fn close_if_drained(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<()>>> {
        if let Unauthenticated::Closed = self.unauthenticated {
            return None;
        }
        if !self.drain.poll_close(cx) {
            return None;
        }
        debug!(
            peer = ?self.socket().peer_addr().ok(),
            "closing a connection the server's drain waited for long enough"
        );
        let _ = Pin::new(&mut self.io).poll_shutdown(cx);
        self.unauthenticated = Unauthenticated::Closed;
        Some(Poll::Ready(Ok(())))
    }

    /// Moves a connection past its deadline without an authenticated
    /// request towards being closed: `Some` is what a read returns
    /// instead of reading, `None` lets it read. Polled with every read,
    /// which hyper always has pending, so the deadline's timer (or the
    /// standing's waker, when the connection is shut out) wakes the
    /// connection's task; after authentication it costs one comparison.
    fn close_if_unauthenticated(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<()>>> {
        loop {
            match &mut self.unauthenticated {
                Unauthenticated::Off => return None,
                Unauthenticated::Until(deadline) => {
                    let standing = self.slot.standing();
                    if standing.is_authenticated() {
                        self.unauthenticated = Unauthenticated::Off;
                        return None;
                    }
                    if standing.poll_shut_out(cx) {
                        self.slot.connections().closed_shut_out();
                        debug!(
                            peer = ?self.socket().peer_addr().ok(),
                            "closing a connection that authenticated nothing: its source failed to authenticate too often"
                        );
                        self.unauthenticated = Unauthenticated::ShuttingDown;
                        continue;
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
    pub(crate) fn socket(&self) -> &TcpStream {
        match &self.io {
            Either::Left(tcp) => tcp,
            Either::Right(tls) => tls.get_ref().0,
        }
    }
}

/// A connection's stream: plain (`Left`) or after a TLS handshake
/// (`Right`). tokio-util's `Either` forwards every read and write,
/// vectored writes included.
pub(crate) type Io = Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// What the gRPC layers learn about a connection (in each request's
/// extensions).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The client's address.
    pub remote_addr: Option<SocketAddr>,
    /// The certificates the client presented (with a client CA), taken
    /// as the API server's handshake takes them and not yet verified:
    /// the authentication layer verifies them per request.
    pub client_certificates: Option<Arc<PeerCertificates>>,
    /// When the connection's watches end, with a maximum connection age
    /// (see [`crate::retire`]).
    pub retire_at: Option<Instant>,
    /// The connection's standing: set authenticated by the
    /// authentication layer once a request on it has been (until then the
    /// connection is closed after
    /// `--unauthenticated-connection-timeout-seconds`), and told of each
    /// failed authentication (its source's failure budget).
    pub standing: Standing,
    /// Its requests in flight, which the server's drain waits for (see
    /// [`crate::drain::CountRequestsLayer`]).
    pub requests: Requests,
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    /// Called once, as tonic starts serving the connection (and starts
    /// counting its age); every request on it gets a copy.
    fn connect_info(&self) -> ConnInfo {
        let retire_at = self.max_age.map(|age| age.retire_at(Instant::now()));
        let standing = self.slot.standing().clone();
        let requests = self.drain.requests();
        match &self.io {
            Either::Left(tcp) => ConnInfo {
                remote_addr: tcp.peer_addr().ok(),
                client_certificates: None,
                retire_at,
                standing,
                requests,
            },
            Either::Right(tls) => {
                let (tcp, session) = tls.get_ref();
                ConnInfo {
                    remote_addr: tcp.peer_addr().ok(),
                    // Parsed again: the handshake's verifier took them
                    // (see crate::tls), and keeps nothing.
                    client_certificates: session
                        .peer_certificates()
                        .and_then(|chain| {
                            kube_fanout_x509::handshake::client_chain(
                                chain.iter().map(|c| c.as_ref()),
                            )
                            .ok()
                        })
                        .and_then(PeerCertificates::new)
                        .map(Arc::new),
                    retire_at,
                    standing,
                    requests,
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
        if let Some(closing) = this.close_if_drained(cx) {
            return closing;
        }
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

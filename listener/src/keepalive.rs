//! Finding subscribers that vanished without closing their connection.
//!
//! A watch is a long-lived stream that may stay quiet for minutes. A client
//! whose node lost power, or that a partition or a dropped conntrack entry
//! cut off, sends no FIN or RST: without help the server keeps its
//! subscription, its history position and its per-caller watch slot for
//! ever (an idle socket sees no error), or for about 15 minutes of
//! retransmissions once something is written to it.
//!
//! The kernel does the looking, at no cost per delivery: TCP keepalive
//! probes an idle connection, and `TCP_USER_TIMEOUT` bounds how long
//! anything sent (data or probe) may stay unacknowledged. Both are counted
//! from the last thing the peer acknowledged, so a peer silent for
//! `idle + timeout` is dropped whether the stream was quiet or busy. A
//! live peer's kernel answers the probes whatever its process does, so a
//! slow reader is not dropped for being slow; only one whose receive
//! window stays shut for that long is (Linux counts unanswered-window
//! probes against the same timeout), which the lag bound would cut off
//! anyway.
//!
//! HTTP/2 PING keepalive would find the same peers, but hyper then locks
//! its ping state, reads the clock and polls a timer on every poll of the
//! connection, which is once per delivery on this server's hot path.

use std::{io, time::Duration};

use socket2::{SockRef, TcpKeepalive};
use tokio::net::TcpStream;

/// How accepted connections look for a vanished peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// How long a connection may be idle before the first probe; `None`
    /// turns keepalive off (and the timeout with it).
    pub idle: Option<Duration>,
    /// How long after `idle` an unanswered peer is dropped: the first
    /// probe and the ones after it, every quarter of this, go unanswered.
    pub timeout: Duration,
}

impl Default for Keepalive {
    /// Probes after 30 s of quiet; a peer silent for 50 s is dropped. The
    /// API server (Go's listener) probes after 15 s and gives up after
    /// nine more, but sets no bound on unacknowledged data.
    fn default() -> Self {
        Keepalive {
            idle: Some(Duration::from_secs(30)),
            timeout: Duration::from_secs(20),
        }
    }
}

impl Keepalive {
    /// Sets these options on an accepted connection's socket.
    pub fn apply(&self, tcp: &TcpStream) -> io::Result<()> {
        let socket = SockRef::from(tcp);
        let Some(idle) = self.idle else {
            return socket.set_keepalive(false);
        };
        let interval = (self.timeout / 4).max(Duration::from_secs(1));
        // Where `TCP_USER_TIMEOUT` is set, Linux ends the connection by it
        // and ignores the count; elsewhere the count gives the same bound.
        let probes = (self.timeout.as_secs() / interval.as_secs()).max(1) as u32;
        socket.set_tcp_keepalive(
            &TcpKeepalive::new()
                .with_time(idle)
                .with_interval(interval)
                .with_retries(probes),
        )?;
        #[cfg(target_os = "linux")]
        socket.set_tcp_user_timeout(Some(idle + self.timeout))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::net::TcpListener;

    /// A connection accepted on loopback with `keepalive` applied, kept
    /// open by its client: (client, accepted).
    async fn accepted(keepalive: Keepalive) -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        // On first, so that turning it off is seen to do something.
        SockRef::from(&accepted).set_keepalive(true).unwrap();
        keepalive.apply(&accepted).unwrap();
        (client, accepted)
    }

    fn seconds(idle: Option<u64>, timeout: u64) -> Keepalive {
        Keepalive {
            idle: idle.map(Duration::from_secs),
            timeout: Duration::from_secs(timeout),
        }
    }

    #[tokio::test]
    async fn a_connection_is_probed_after_idle_and_dropped_after_idle_plus_timeout() {
        let (_client, accepted) = accepted(seconds(Some(7), 12)).await;
        let socket = SockRef::from(&accepted);
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.tcp_keepalive_time().unwrap(), Duration::from_secs(7));
        assert_eq!(
            socket.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(3)
        );
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), 4);
        #[cfg(target_os = "linux")]
        assert_eq!(
            socket.tcp_user_timeout().unwrap(),
            Some(Duration::from_secs(19))
        );
    }

    #[tokio::test]
    async fn probes_are_a_second_apart_at_least() {
        let (_client, accepted) = accepted(seconds(Some(1), 2)).await;
        let socket = SockRef::from(&accepted);
        assert_eq!(
            socket.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(1)
        );
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), 2);
    }

    #[tokio::test]
    async fn off_turns_keepalive_off() {
        let (_client, accepted) = accepted(seconds(None, 20)).await;
        assert!(!SockRef::from(&accepted).keepalive().unwrap());
    }
}

//! Connection-level bounds, so that callers who only connect cannot take
//! the server: how many connections are open in all and from one source,
//! how long a TLS handshake may take, how long a connection may stay open
//! without authenticating anything, and what one HTTP/2 connection may
//! carry (concurrent streams, header list size).
//!
//! The API server (Go's `net/http` and `x/net/http2`, as
//! `k8s.io/apiserver`'s secure serving sets them) allows 1000 concurrent
//! streams per connection (kube-apiserver's
//! `--http2-max-streams-per-connection` default; Go's own is 250), 1 MiB
//! of headers, and a TLS handshake plus first request
//! header within 32 s (`ReadHeaderTimeout`); it closes a connection idle
//! for 90 s. It counts no connections: its bounds are per request
//! (`--max-requests-inflight`), which cost it an authentication each.
//! Here a connection holds buffers (about 32 KiB idle, BENCHMARKS.md) and
//! a watch slot is per caller, so connections are counted too, and one
//! that never proves who it is goes after a while.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use parking_lot::Mutex;
use tokio::time::Instant;
use tracing::warn;

use crate::{
    failures::{AuthFailures, FailureBound, ShutOut},
    source::Source,
    standing::Standing,
};

/// The bounds on connections; 0 for a count means no bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// HTTP/2 streams one connection may have open at once (0: no bound);
    /// more are refused with `RST_STREAM(REFUSED_STREAM)` (clients that honour the
    /// setting queue them instead).
    pub max_concurrent_streams: u32,
    /// Bytes of request headers (HPACK-decoded, as HTTP/2's
    /// `SETTINGS_MAX_HEADER_LIST_SIZE` counts them) one request may carry;
    /// a larger one is answered HTTP 431 without reaching a service.
    pub max_header_list_bytes: u32,
    /// How long a client may take to finish its TLS handshake.
    pub handshake_timeout: Duration,
    /// Connections open at once, all sources together.
    pub max_connections: usize,
    /// Connections open at once from one source: an IPv4 address, or an
    /// IPv6 /64 (what one host is usually given, and what an attacker
    /// with one gets at least).
    pub max_connections_per_ip: usize,
    /// How long a connection may stay open before a request on it has
    /// been authenticated (with authentication on; on the plaintext
    /// health listener, where nothing is, how long any connection stays).
    pub unauthenticated_timeout: Duration,
    /// How many failed authentications a source may have before it is
    /// shut out (see [`crate::failures`]); `None`: no bound.
    pub auth_failures: Option<FailureBound>,
}

impl Default for ConnectionLimits {
    /// kube-apiserver's streams per connection (1000, as many as
    /// `--max-watches-per-caller` allows one caller, so a client with
    /// every watch on one connection never has one queued); 16 KiB of headers
    /// (hyper's default, twice the largest authorization header looked at,
    /// `kube_fanout_auth::bearer::MAX_AUTHORIZATION_BYTES`); a 10 s handshake
    /// (client-go's own TLS handshake timeout); 10,000 connections (about
    /// 320 MiB of idle connection buffers), 100 from one source (a client
    /// needs one: gRPC multiplexes its calls); 30 s to authenticate;
    /// [`FailureBound`]'s default failures per source.
    fn default() -> Self {
        ConnectionLimits {
            max_concurrent_streams: 1000,
            max_header_list_bytes: 16 * 1024,
            handshake_timeout: Duration::from_secs(10),
            max_connections: 10_000,
            max_connections_per_ip: 100,
            unauthenticated_timeout: Duration::from_secs(30),
            auth_failures: Some(FailureBound::default()),
        }
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// `max_connections` are open.
    #[error("{0} connections are open, the most allowed (--max-connections)")]
    Total(usize),
    /// `max_connections_per_ip` are open from its source.
    #[error(
        "{0} connections are open from this source, the most allowed (--max-connections-per-ip)"
    )]
    PerIp(usize),
    /// Its source failed to authenticate too often.
    #[error("{0}")]
    ShutOut(ShutOut),
}

/// What an operator graphs about one listener's connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionStats {
    /// Connections open now (TLS handshakes in progress included).
    pub open: u64,
    /// Connections refused because `max_connections` were open.
    pub refused_total: u64,
    /// Connections refused because their source had
    /// `max_connections_per_ip` open.
    pub refused_per_ip: u64,
    /// Connections refused because their source was shut out for failing
    /// to authenticate too often.
    pub refused_shut_out: u64,
    /// Connections closed for authenticating nothing within
    /// `unauthenticated_timeout`.
    pub closed_unauthenticated: u64,
    /// Connections that authenticated nothing, closed because their
    /// source was shut out.
    pub closed_shut_out: u64,
    /// TLS handshakes that failed or timed out.
    pub handshake_failures: u64,
}

/// How often a refusal is logged at most: a flood of them would
/// otherwise be a flood of log lines.
const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(10);

/// The connections open on one listener, by source, and what happened to
/// those that were refused or closed. The map holds only sources with a
/// connection open, so it is bounded by `max_connections`.
#[derive(Debug)]
pub struct Connections {
    limits: ConnectionLimits,
    open: Mutex<Open>,
    refused_total: AtomicU64,
    refused_per_ip: AtomicU64,
    refused_shut_out: AtomicU64,
    closed_unauthenticated: AtomicU64,
    closed_shut_out: AtomicU64,
    handshake_failures: AtomicU64,
    failures: Option<Arc<AuthFailures>>,
    /// When a refusal was last logged, and how many were not since.
    refusal_log: Mutex<(Option<Instant>, u64)>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_source: HashMap<Source, usize>,
}

impl Connections {
    /// No connections yet, bounded by `limits`.
    pub fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Connections {
            limits,
            open: Mutex::default(),
            refused_total: AtomicU64::new(0),
            refused_per_ip: AtomicU64::new(0),
            refused_shut_out: AtomicU64::new(0),
            closed_unauthenticated: AtomicU64::new(0),
            closed_shut_out: AtomicU64::new(0),
            handshake_failures: AtomicU64::new(0),
            failures: limits
                .auth_failures
                .map(|bound| Arc::new(AuthFailures::new(bound))),
            refusal_log: Mutex::new((None, 0)),
        })
    }

    /// What an accept loop for these connections keeps out in the
    /// kernel, if failures are bounded.
    pub(crate) fn gate(&self) -> Option<crate::gate::Gate> {
        self.failures.clone().map(crate::gate::Gate::new)
    }

    /// The bounds these connections are held to.
    pub fn limits(&self) -> &ConnectionLimits {
        &self.limits
    }

    /// A slot for a new connection from `ip`, held until the slot is
    /// dropped; refused (counted and logged, at most once per
    /// [`REFUSAL_LOG_PERIOD`]) if a bound is reached.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refused> {
        let source = Source::of(ip);
        let refused = {
            let mut open = self.open.lock();
            let from_source = open.by_source.get(&source).copied().unwrap_or(0);
            let (total, per_source) = (
                self.limits.max_connections,
                self.limits.max_connections_per_ip,
            );
            let shut_out = || self.failures.as_ref()?.shut_out(source);
            if total > 0 && open.total >= total {
                Refused::Total(total)
            } else if per_source > 0 && from_source >= per_source {
                Refused::PerIp(per_source)
            } else if let Some(out) = shut_out() {
                Refused::ShutOut(out)
            } else {
                open.total += 1;
                *open.by_source.entry(source).or_default() += 1;
                return Ok(Slot {
                    connections: self.clone(),
                    source,
                    standing: Standing::new(self.failures.clone(), source),
                });
            }
        };
        match refused {
            Refused::Total(_) => &self.refused_total,
            Refused::PerIp(_) => &self.refused_per_ip,
            Refused::ShutOut(_) => &self.refused_shut_out,
        }
        .fetch_add(1, Ordering::Relaxed);
        self.log_refusal(source, refused);
        Err(refused)
    }

    fn log_refusal(&self, source: Source, refused: Refused) {
        let now = Instant::now();
        let mut log = self.refusal_log.lock();
        match log.0 {
            Some(last) if now < last + REFUSAL_LOG_PERIOD => log.1 += 1,
            _ => {
                warn!(%source, reason = %refused, not_logged_since = log.1, "connection refused");
                *log = (Some(now), 0);
            }
        }
    }

    /// Counts a TLS handshake that failed or timed out.
    pub fn handshake_failed(&self) {
        self.handshake_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed for authenticating nothing in time.
    pub fn closed_unauthenticated(&self) {
        self.closed_unauthenticated.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed because its source was shut out.
    pub(crate) fn closed_shut_out(&self) {
        self.closed_shut_out.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn stats(&self) -> ConnectionStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ConnectionStats {
            open: self.open.lock().total as u64,
            refused_total: load(&self.refused_total),
            refused_per_ip: load(&self.refused_per_ip),
            refused_shut_out: load(&self.refused_shut_out),
            closed_unauthenticated: load(&self.closed_unauthenticated),
            closed_shut_out: load(&self.closed_shut_out),
            handshake_failures: load(&self.handshake_failures),
        }
    }
}

/// One open connection's place in [`Connections`], given back when
/// dropped (with the connection).
#[derive(Debug)]
pub struct Slot {
    connections: Arc<Connections>,
    source: Source,
    standing: Standing,
}

impl Slot {
    /// The connection's standing with the authentication layer.
    pub fn standing(&self) -> &Standing {
        &self.standing
    }

    /// The connections this slot is counted in.
    pub fn connections(&self) -> &Arc<Connections> {
        &self.connections
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.connections.open.lock();
        open.total -= 1;
        if let Some(count) = open.by_source.get_mut(&self.source) {
            *count -= 1;
            if *count == 0 {
                open.by_source.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_source: usize) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: total,
            max_connections_per_ip: per_source,
            ..ConnectionLimits::default()
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_source_is_held_to_its_bound_while_others_still_connect() {
        let connections = Connections::new(limits(10, 2));
        let a = [
            connections.admit(ip("127.0.0.2")).unwrap(),
            connections.admit(ip("127.0.0.2")).unwrap(),
        ];
        assert_eq!(
            connections.admit(ip("127.0.0.2")).unwrap_err(),
            Refused::PerIp(2)
        );
        // The same IPv4 address, mapped into IPv6, is the same source.
        assert_eq!(
            connections.admit(ip("::ffff:127.0.0.2")).unwrap_err(),
            Refused::PerIp(2)
        );
        let _b = connections.admit(ip("127.0.0.3")).unwrap();
        drop(a);
        let _a = connections.admit(ip("127.0.0.2")).unwrap();
        let stats = connections.stats();
        assert_eq!((stats.open, stats.refused_per_ip), (2, 2));
        assert_eq!(stats.refused_total, 0);
    }

    #[test]
    fn the_total_bound_holds_over_every_source_and_slots_come_back() {
        let connections = Connections::new(limits(3, 0));
        let slots: Vec<_> = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
            .into_iter()
            .map(|s| connections.admit(ip(s)).unwrap())
            .collect();
        assert_eq!(
            connections.admit(ip("10.0.0.4")).unwrap_err(),
            Refused::Total(3)
        );
        assert_eq!(connections.stats().refused_total, 1);
        drop(slots);
        assert_eq!(connections.stats().open, 0);
        assert!(connections.open.lock().by_source.is_empty());
        connections.admit(ip("10.0.0.4")).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_shut_out_source_is_refused_until_its_shut_out_ends() {
        let one = std::num::NonZeroU32::MIN;
        let connections = Connections::new(ConnectionLimits {
            auth_failures: Some(FailureBound {
                rate: one,
                burst: one,
            }),
            ..ConnectionLimits::default()
        });
        let slot = connections.admit(ip("10.0.0.1")).unwrap();
        slot.standing().failed_authentication().unwrap();
        let out = slot.standing().failed_authentication().unwrap_err();
        assert_eq!(out.retry_after, Duration::from_secs(1));
        assert_eq!(
            connections.admit(ip("10.0.0.1")).unwrap_err(),
            Refused::ShutOut(out)
        );
        connections.admit(ip("10.0.0.2")).unwrap();
        assert_eq!(connections.stats().refused_shut_out, 1);
        tokio::time::advance(out.retry_after).await;
        connections.admit(ip("10.0.0.1")).unwrap();
    }

    #[test]
    fn zero_means_no_bound() {
        let connections = Connections::new(limits(0, 0));
        let slots: Vec<_> = (0..1000)
            .map(|_| connections.admit(ip("127.0.0.1")).unwrap())
            .collect();
        assert_eq!(connections.stats().open, slots.len() as u64);
    }

    #[test]
    fn an_ipv6_source_is_its_slash_64() {
        let connections = Connections::new(limits(0, 1));
        let _one = connections.admit(ip("2001:db8:1:2::1")).unwrap();
        assert_eq!(
            connections.admit(ip("2001:db8:1:2:ffff::9")).unwrap_err(),
            Refused::PerIp(1)
        );
        connections.admit(ip("2001:db8:1:3::1")).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn refusals_are_logged_at_most_once_a_period() {
        let connections = Connections::new(limits(0, 1));
        let _held = connections.admit(ip("127.0.0.1")).unwrap();
        for _ in 0..5 {
            connections.admit(ip("127.0.0.1")).unwrap_err();
        }
        let (first, suppressed) = *connections.refusal_log.lock();
        assert_eq!(suppressed, 4);
        tokio::time::advance(REFUSAL_LOG_PERIOD).await;
        connections.admit(ip("127.0.0.1")).unwrap_err();
        let (second, suppressed) = *connections.refusal_log.lock();
        assert_eq!(suppressed, 0);
        assert_eq!(second.unwrap() - first.unwrap(), REFUSAL_LOG_PERIOD);
    }
}

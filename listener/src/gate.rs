//! Sources shut out for failing to authenticate (see [`crate::failures`])
//! kept out in the kernel: a classic BPF program on the listening socket
//! drops every packet from them, the SYN of a new connection included, so
//! their clients' TCP stacks wait and retry (after 1 s, then 3 s, ...)
//! while the server spends nothing on them. Refusing a connection after
//! accepting it costs the accept, the socket's setup and its close, about
//! as much as refusing a request on an open connection; an attacker that
//! reconnects at once would otherwise cost the server as much shut out as
//! not.
//!
//! A socket filter on a listening TCP socket sees the segments addressed
//! to it, which are SYNs; an accepted connection inherits the filter in
//! place when it was accepted, which never matches its own peer (its
//! source was not shut out then), so it never drops an accepted
//! connection's packets. The program holds at most [`filter::MAX_FILTERED`]
//! sources; the others are still closed as they are accepted.
//!
//! Only Linux has socket filters: elsewhere [`apply`] puts nothing on the
//! listener, and every shut-out source is closed as it is accepted.

use std::sync::Arc;

use tokio::sync::watch;

use crate::{failures::AuthFailures, source::Source};

#[cfg(target_os = "linux")]
mod filter;

#[cfg(target_os = "linux")]
pub(crate) use filter::apply;

/// Where the kernel has no socket filter, nothing is put on the listener:
/// [`crate::connections`] closes a shut-out source's connections as they
/// are accepted, as it does past the filter's bound on Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn apply(
    _listener: &tokio::net::TcpListener,
    _sources: &[Source],
) -> std::io::Result<()> {
    Ok(())
}

/// What one accept loop keeps out: the shut-out sources of its
/// connections, as last put on its listener.
#[derive(Debug)]
pub(crate) struct Gate {
    failures: Arc<AuthFailures>,
    changed: watch::Receiver<()>,
    applied: Vec<Source>,
}

impl Gate {
    pub(crate) fn new(failures: Arc<AuthFailures>) -> Self {
        let changed = failures.subscribe();
        Gate {
            failures,
            changed,
            applied: Vec::new(),
        }
    }

    /// Waits until the sources to keep out differ from those last
    /// returned (a source newly shut out, or one's time passed), and
    /// returns them. Cancel-safe: what was returned last is kept here.
    pub(crate) async fn next(&mut self) -> Vec<Source> {
        loop {
            let (mut sources, first_expiry) = self.failures.shut_sources();
            sources.sort_unstable_by_key(|s| s.ip());
            if sources != self.applied {
                self.applied.clone_from(&sources);
                return sources;
            }
            self.changed.mark_unchanged();
            let expiry = async {
                match first_expiry {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.changed.changed() => {}
                () = expiry => {}
            }
        }
    }
}

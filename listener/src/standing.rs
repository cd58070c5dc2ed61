//! A connection's standing with the authentication layer: whether a
//! request on it has been authenticated (then it is never closed for
//! authenticating nothing, nor for its source's failures), and whether it
//! is shut out for its source's failures (see [`crate::failures`]).
//! Shared by the connection, which closes itself when shut out, and every
//! request's [`crate::conn::ConnInfo`], where the authentication layer
//! records what happened.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use futures::task::AtomicWaker;

use crate::{
    failures::{AuthFailures, ShutOut},
    source::Source,
};

/// One connection's standing (cheap to clone: all clones are the same).
#[derive(Debug, Clone)]
pub struct Standing(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// The failure budgets of the listener's sources, if it has them.
    failures: Option<Arc<AuthFailures>>,
    source: Source,
    authenticated: AtomicBool,
    shut_out: AtomicBool,
    /// The connection's task, woken when the connection is shut out (its
    /// reads then close it).
    waker: AtomicWaker,
}

impl Standing {
    pub(crate) fn new(failures: Option<Arc<AuthFailures>>, source: Source) -> Self {
        Standing(Arc::new(Inner {
            failures,
            source,
            authenticated: AtomicBool::new(false),
            shut_out: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        }))
    }

    /// Records that a request on the connection was authenticated.
    pub fn set_authenticated(&self) {
        self.0.authenticated.store(true, Ordering::Release);
    }

    /// Whether a request on the connection was authenticated.
    pub fn is_authenticated(&self) -> bool {
        self.0.authenticated.load(Ordering::Acquire)
    }

    /// Counts a failed authentication (one the caller caused: credentials
    /// missing, malformed or refused, or too many reviews asked for) on
    /// the connection's source. `Err` if that spent the source's budget:
    /// the connection is then closed unless a request on it was
    /// authenticated.
    pub fn failed_authentication(&self) -> Result<(), ShutOut> {
        let Some(failures) = &self.0.failures else {
            return Ok(());
        };
        failures
            .failed(self.0.source)
            .inspect_err(|_| self.shut_out())
    }

    /// Why a request on this connection is refused before anything is
    /// done for it: its source is shut out and nothing on the connection
    /// was authenticated (the connection is then closed too).
    pub fn refusal(&self) -> Option<ShutOut> {
        if self.is_authenticated() {
            return None;
        }
        let out = self.0.failures.as_ref()?.shut_out(self.0.source)?;
        self.shut_out();
        Some(out)
    }

    /// Closes the connection (through its reads) unless it authenticated.
    fn shut_out(&self) {
        if !self.is_authenticated() && !self.0.shut_out.swap(true, Ordering::AcqRel) {
            self.0.waker.wake();
        }
    }

    /// Whether the connection is to be closed for its source's failures;
    /// until then, the task `cx` belongs to is woken when it is.
    pub(crate) fn poll_shut_out(&self, cx: &std::task::Context<'_>) -> bool {
        self.0.waker.register(cx.waker());
        self.0.shut_out.load(Ordering::Acquire)
    }
}

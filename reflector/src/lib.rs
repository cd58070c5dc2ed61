//! The reflector keeps one [`Store`] equal to the API server's state of one
//! resource type, behaving as client-go's reflector does.
//!
//! It is an explicit state machine: [`Reflector::step`] performs one
//! [`State`] and returns the next, so tests can drive it one request at a
//! time; each phase is a module of functions over what they share
//! ([`context`]). Each state carries what it starts from (a [`SyncPoint`], or the
//! RV a watch follows from), so no phase reads another's leftovers. The
//! states and the rules between them:
//!
//! - **WatchList** (when enabled, the default; [`watch_list`]): a
//!   watch-list stream replaces the store at its end bookmark and the same
//!   watch is followed (**Follow**). Ended early: retried from the same
//!   sync point; RV unavailable: retried at [`SyncPoint::Unavailable`];
//!   refused or very short: **List**.
//! - **List** ([`list`]): a LIST, paged by client-go's pager rules,
//!   replaces the store; then **Watch** from its RV. An unavailable RV is
//!   relisted at once at RV "".
//! - **Watch** and **Follow** ([`watch`]): a watch from the synced RV; it
//!   ends in **Watch** from the RV it got to, or after a failure in a
//!   resync (**WatchList** or **List**) from that RV, behind a **Backoff**
//!   unless the failure is retried at once.
//! - **Backoff**: exponential with jitter, reset after a healthy spell.
//!
//! A LIST or watch-list slower than [`trace::SLOW_SYNC`] is logged with its
//! steps. Routine answers (a 410 that forces a relist, a 429) are logged at
//! debug and info, as client-go logs them, not as warnings.
//!
//! The crate owns the reflector, its requests to the API server
//! ([`upstream`]) and its [`backoff`]; it sits on the core (it writes the
//! store and reports a `ReflectorStatus`) and kube, and only the server
//! wiring sits on it.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info};

use kube_fanout_core::{
    object::ResourceVersion,
    reflector_status::{Phase, ReflectorStatus},
    store::Store,
};

use self::context::Context;
pub use self::{
    backoff::BackoffConfig,
    config::ReflectorConfig,
    open_watch::OpenWatch,
    state::{State, SyncPoint},
};

/// The span of one request phase of the reflector of `gvr`, from the
/// resourceVersion `from`. `otel.kind` marks it as one of the operations
/// the server's trace export sends (a root of its own trace: the task's
/// `reflector` span, which lives as long as the process, is not sent).
macro_rules! phase_span {
    ($name:literal, $gvr:expr, $from:expr) => {
        tracing::info_span!($name, otel.kind = "internal", resource = %$gvr, from = %$from)
    };
}

mod backoff;
mod config;
mod context;
mod decode;
mod error;
mod list;
mod open_watch;
mod paging;
mod retry;
mod state;
#[cfg(test)]
mod tests;
mod trace;
mod upstream;
mod watch;
mod watch_list;

/// Keeps one store in step with the API server.
pub struct Reflector {
    context: Context,
}

impl Reflector {
    /// A reflector filling `store` through `client`.
    pub fn new(client: kube::Client, store: Arc<Store>, config: ReflectorConfig) -> Self {
        Reflector {
            context: Context::new(client, store, config),
        }
    }

    /// A handle on the reflector's status that stays valid while it runs.
    pub fn status(&self) -> Arc<Mutex<ReflectorStatus>> {
        self.context.status.clone()
    }

    /// The state a new reflector starts in.
    pub fn initial_state(&self) -> State {
        self.context.resync(SyncPoint::Start)
    }

    /// The state of a reflector whose store another kube-fanout (`peer`)
    /// has just filled with its snapshot at `rv`: a watch on the API
    /// server from there. The switch-over is exact: the snapshot is the
    /// state at `rv`, and the watch sends every change after it; an API
    /// server that no longer holds `rv` answers 410, and the reflector
    /// relists as after any, publishing the difference as a re-sync unit.
    pub fn bootstrapped(&self, rv: ResourceVersion, peer: String) -> State {
        let mut status = self.context.status.lock();
        status.bootstrapped_from = Some(peer);
        status.last_sync_resource_version = Some(rv);
        status.last_upstream_at = Some(std::time::SystemTime::now());
        State::Watch(rv)
    }

    /// Runs until `cancel` fires; stops promptly, mid-request or mid-wait.
    pub async fn run(self, cancel: CancellationToken) {
        let state = self.initial_state();
        self.run_from(state, cancel).await;
    }

    /// Runs from `state` until `cancel` fires (see [`Reflector::run`]).
    pub async fn run_from(mut self, mut state: State, cancel: CancellationToken) {
        loop {
            state = tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    self.context.set_phase(Phase::Stopped);
                    info!("reflector stopped");
                    return;
                }
                next = self.step(state) => next,
            };
        }
    }

    /// Performs one state and returns the next. Each request phase runs in
    /// a span of its own (what the exported traces show, see the server's
    /// `traces`): `list`, `watch_list`, and `watch` for as long as a watch
    /// is followed, its events applied inside it without a span each.
    pub async fn step(&mut self, state: State) -> State {
        // The store's own handle, so that its resource can be read while
        // the phase holds the context.
        let store = Arc::clone(&self.context.store);
        let gvr = &store.resource().gvr;
        let context = &mut self.context;
        match state {
            State::WatchList(point) => {
                let span = phase_span!("watch_list", gvr, point.rewatch_from());
                watch_list::step(context, point).instrument(span).await
            }
            State::List(point) => {
                let span = phase_span!("list", gvr, point.relist_from());
                list::step(context, point).instrument(span).await
            }
            State::Watch(from) => {
                let span = phase_span!("watch", gvr, from);
                watch::step(context, from).instrument(span).await
            }
            State::Follow { open, at } => {
                let span = phase_span!("watch", gvr, at);
                watch::follow(context, open, at).instrument(span).await
            }
            State::Backoff { delay, then } => {
                context.set_phase(Phase::BackingOff);
                tokio::time::sleep(delay).await;
                *then
            }
        }
    }
}

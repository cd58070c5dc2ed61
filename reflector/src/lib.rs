//! The reflector keeps one [`Store`] equal to the API server's state of one
//! resource type, behaving as client-go's reflector does.
//!
//! It is an explicit state machine: [`Reflector::step`] performs one
//! [`State`] and returns the next, so tests can drive it one request at a
//! time. Each state carries what it starts from (a [`SyncPoint`], or the
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
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Level, debug, info, warn};

use kube_fanout_core::{
    object::{Object, ResourceVersion},
    reflector_status::{Phase, ReflectorStatus},
    store::Store,
};

use self::{
    backoff::Backoff,
    config::MIN_WATCH_TIMEOUT,
    decode::Decoder,
    error::ReflectorError,
    list::Paging,
    retry::InternalErrorRetry,
    trace::SyncTrace,
    upstream::{Upstream, UpstreamError},
};
pub use self::{
    backoff::BackoffConfig,
    config::ReflectorConfig,
    state::{State, SyncPoint},
    watch::OpenWatch,
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
mod decode;
mod error;
mod list;
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
    upstream: Upstream,
    store: Arc<Store>,
    config: ReflectorConfig,
    decoder: Decoder,
    status: Arc<Mutex<ReflectorStatus>>,
    backoff: Backoff,
    /// How LISTs are paged, as learned from the answers so far.
    paging: Paging,
    /// The current run of internal errors, renewed by every sync.
    internal_errors: InternalErrorRetry,
}

impl Reflector {
    /// A reflector filling `store` through `client`.
    pub fn new(client: kube::Client, store: Arc<Store>, mut config: ReflectorConfig) -> Self {
        config.min_watch_timeout = config.min_watch_timeout.max(MIN_WATCH_TIMEOUT);
        let resource = store.resource();
        Reflector {
            upstream: Upstream::new(client, resource.url_path()),
            decoder: Decoder {
                type_meta: resource.type_meta(),
                fields: resource.fields.clone(),
                transform: config.transform,
            },
            store,
            config,
            status: Arc::default(),
            backoff: Backoff::new(config.backoff),
            paging: Paging::new(config.page_size),
            internal_errors: InternalErrorRetry::new(config.max_internal_error_retry),
        }
    }

    /// A handle on the reflector's status that stays valid while it runs.
    pub fn status(&self) -> Arc<Mutex<ReflectorStatus>> {
        self.status.clone()
    }

    /// The state a new reflector starts in.
    pub fn initial_state(&self) -> State {
        self.resync(SyncPoint::Start)
    }

    /// The state that syncs the store again from `point`: a watch-list when
    /// enabled, else a LIST.
    fn resync(&self, point: SyncPoint) -> State {
        if self.config.use_watch_list {
            State::WatchList(point)
        } else {
            State::List(point)
        }
    }

    /// Runs until `cancel` fires; stops promptly, mid-request or mid-wait.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut state = self.initial_state();
        loop {
            state = tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    self.status.lock().phase = Phase::Stopped;
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
        let gvr = &self.store.resource().gvr;
        match state {
            State::WatchList(point) => {
                let span = phase_span!("watch_list", gvr, point.rewatch_from());
                self.watch_list_step(point).instrument(span).await
            }
            State::List(point) => {
                let span = phase_span!("list", gvr, point.relist_from());
                self.list_step(point).instrument(span).await
            }
            State::Watch(from) => {
                let span = phase_span!("watch", gvr, from);
                self.watch_step(from).instrument(span).await
            }
            State::Follow { open, at } => {
                let span = phase_span!("watch", gvr, at);
                self.follow_step(open, at).instrument(span).await
            }
            State::Backoff { delay, then } => {
                self.set_phase(Phase::BackingOff);
                tokio::time::sleep(delay).await;
                *then
            }
        }
    }

    fn set_phase(&self, phase: Phase) {
        self.status.lock().phase = phase;
    }

    /// Backs off, then goes on with `then`.
    fn fail(&mut self, err: &ReflectorError, then: State) -> State {
        let mut delay = self.backoff.next_delay();
        if let Some(asked) = err.upstream().and_then(UpstreamError::retry_after) {
            delay = delay.max(asked);
        }
        match err.log_level() {
            Level::DEBUG => debug!(error = %err, ?delay, next = ?then, "reflector backing off"),
            Level::INFO => info!(error = %err, ?delay, next = ?then, "reflector backing off"),
            _ => warn!(error = %err, ?delay, next = ?then, "reflector backing off"),
        }
        let mut status = self.status.lock();
        status.last_error = Some(err.to_string());
        status.failures += 1;
        status.failing_since.get_or_insert_with(Instant::now);
        State::Backoff {
            delay,
            then: Box::new(then),
        }
    }

    /// Reports the RV of the last list, watch event or bookmark applied.
    fn synced_to(&self, rv: ResourceVersion) {
        self.status.lock().last_sync_resource_version = Some(rv);
    }

    /// A LIST or watch-list replaced the store: the watches that follow
    /// start a new internal-error run.
    async fn replaced(&mut self, objects: Vec<Object>, rv: ResourceVersion, trace: &mut SyncTrace) {
        // O(objects) of comparing: on a blocking thread, so that a relist
        // of a large type does not hold one of the runtime's few workers
        // (and with it other types' reflectors and subscribers). Nothing
        // else writes this store meanwhile: the reflector is its one
        // writer, and it waits here.
        let (store, span) = (self.store.clone(), tracing::Span::current());
        let replaced =
            tokio::task::spawn_blocking(move || span.in_scope(|| store.replace(objects, rv))).await;
        if let Err(err) = replaced
            && err.is_panic()
        {
            std::panic::resume_unwind(err.into_panic());
        }
        trace.step("store replaced");
        self.synced_to(rv);
        self.internal_errors.reset();
        if trace.log_if_slow() {
            self.status.lock().slow_syncs += 1;
        }
    }
}

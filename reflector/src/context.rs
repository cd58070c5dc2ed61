//! What the phases share: the upstream, the store and how objects are
//! decoded into it, the configuration, the status, the backoff, the
//! paging learned so far and the internal-error window, with the steps
//! every phase takes (backing off after a failure, choosing the resync,
//! reporting progress, replacing the store). Below the phases
//! ([`crate::list`], [`crate::watch`], [`crate::watch_list`]), each a set
//! of functions taking it, so that no phase imports the reflector that
//! dispatches to it.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::time::Instant;
use tracing::{Level, debug, info, warn};

use kube_fanout_core::{
    object::{Object, ResourceVersion},
    reflector_status::{Phase, ReflectorStatus},
    store::Store,
};

use crate::{
    backoff::Backoff,
    config::{MIN_WATCH_TIMEOUT, ReflectorConfig},
    decode::Decoder,
    error::ReflectorError,
    paging::Paging,
    retry::InternalErrorRetry,
    state::{State, SyncPoint},
    trace::SyncTrace,
    upstream::{Upstream, UpstreamError},
};

/// What the reflector's phases work on.
pub(crate) struct Context {
    pub(crate) upstream: Upstream,
    pub(crate) store: Arc<Store>,
    pub(crate) config: ReflectorConfig,
    pub(crate) decoder: Decoder,
    pub(crate) status: Arc<Mutex<ReflectorStatus>>,
    pub(crate) backoff: Backoff,
    /// How LISTs are paged, as learned from the answers so far.
    pub(crate) paging: Paging,
    /// The current run of internal errors, renewed by every sync.
    pub(crate) internal_errors: InternalErrorRetry,
}

impl Context {
    /// The context of a reflector filling `store` through `client`.
    pub(crate) fn new(
        client: kube::Client,
        store: Arc<Store>,
        mut config: ReflectorConfig,
    ) -> Self {
        config.min_watch_timeout = config.min_watch_timeout.max(MIN_WATCH_TIMEOUT);
        let resource = store.resource();
        Context {
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

    /// The state that syncs the store again from `point`: a watch-list when
    /// enabled, else a LIST.
    pub(crate) fn resync(&self, point: SyncPoint) -> State {
        if self.config.use_watch_list {
            State::WatchList(point)
        } else {
            State::List(point)
        }
    }

    /// Reports the phase the reflector is in.
    pub(crate) fn set_phase(&self, phase: Phase) {
        self.status.lock().phase = phase;
    }

    /// Backs off, then goes on with `then`.
    pub(crate) fn fail(&mut self, err: &ReflectorError, then: State) -> State {
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
        if err.upstream().is_some_and(UpstreamError::is_not_found) {
            status.not_found_since.get_or_insert_with(Instant::now);
        }
        State::Backoff {
            delay,
            then: Box::new(then),
        }
    }

    /// Reports the RV of the last list, watch event or bookmark applied,
    /// and when it came.
    pub(crate) fn synced_to(&self, rv: ResourceVersion) {
        let mut status = self.status.lock();
        status.not_found_since = None;
        status.last_sync_resource_version = Some(rv);
        status.last_upstream_at = Some(std::time::SystemTime::now());
    }

    /// A LIST or watch-list replaced the store: the watches that follow
    /// start a new internal-error run.
    pub(crate) async fn replaced(
        &mut self,
        objects: Vec<Object>,
        rv: ResourceVersion,
        trace: &mut SyncTrace,
    ) {
        self.store.replace_blocking(objects, rv).await;
        trace.step("store replaced");
        self.synced_to(rv);
        self.internal_errors.reset();
        if trace.log_if_slow() {
            self.status.lock().slow_syncs += 1;
        }
    }
}

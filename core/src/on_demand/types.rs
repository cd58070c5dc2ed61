//! The on-demand types held now, and their lives: a slot per type,
//! discovering (the requests for it wait on the outcome) or held (its
//! store and reflector); a task per held type stops it once idle, or once
//! the API server no longer serves it.
//!
//! Every use of a held type is taken under the slots' lock
//! ([`OnDemand::get`], [`OnDemand::resolve`]), and a type is removed for
//! idleness under the same lock only while nobody uses it: a request can
//! never be handed a type that is being stopped.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use futures::{
    FutureExt,
    future::{BoxFuture, Shared},
};
use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::{Instrument, info, info_span, warn};

use super::{
    counters::{Counters, Stop},
    error::{DiscoveryError, ResolveError},
    options::OnDemandOptions,
    upstream::Upstream,
};
use crate::{
    resource::GroupVersionResource,
    served::{InUse, Origin, Served},
};

/// How long one discovery may take (two GETs of the API server's
/// discovery, and a CRD's): past it the type is refused as not
/// discoverable, and the next request tries again.
pub const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// The state of an on-demand type, for metrics and ListResources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TypeState {
    /// Being discovered.
    Discovering,
    /// Held, its first sync not finished.
    Syncing,
    /// Synced, with subscribers or requests.
    InUse,
    /// Synced, unused: it stops after the idle time.
    Idle,
}

impl TypeState {
    /// Every state, for gauges that show zeros too.
    pub const ALL: [TypeState; 4] = [
        TypeState::Discovering,
        TypeState::Syncing,
        TypeState::InUse,
        TypeState::Idle,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            TypeState::Discovering => "discovering",
            TypeState::Syncing => "syncing",
            TypeState::InUse => "in_use",
            TypeState::Idle => "idle",
        }
    }

    /// The state of a held type.
    pub fn of(served: &Served) -> TypeState {
        if !served.store.head().synced {
            TypeState::Syncing
        } else if served.idle_since().is_some() {
            TypeState::Idle
        } else {
            TypeState::InUse
        }
    }
}

/// The outcome of a discovery, shared by every request waiting on it.
type Pending = Shared<BoxFuture<'static, Result<(), ResolveError>>>;

enum Slot {
    Discovering(Pending),
    Held(Arc<Served>),
}

#[derive(Default)]
struct Slots {
    slots: BTreeMap<GroupVersionResource, Slot>,
    /// Set when the server stops: nothing starts any more.
    closed: bool,
}

struct Inner {
    options: OnDemandOptions,
    upstream: Arc<dyn Upstream>,
    slots: Mutex<Slots>,
    counters: Counters,
    /// The server's cancellation: every reflector's stop is a child.
    stop: CancellationToken,
    tasks: TaskTracker,
}

/// The on-demand types (see the module docs).
#[derive(Clone)]
pub struct OnDemand {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for OnDemand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnDemand")
            .field("options", &self.inner.options)
            .field("held", &self.inner.slots.lock().slots.len())
            .finish_non_exhaustive()
    }
}

/// Why a held type's task ends it.
enum End {
    Stop(Stop),
    /// The server stopped.
    Cancelled,
}

impl OnDemand {
    /// On-demand types as `options` bound them, started through
    /// `upstream`, every one stopped when `stop` fires.
    pub fn new(
        options: OnDemandOptions,
        upstream: Arc<dyn Upstream>,
        stop: CancellationToken,
    ) -> Self {
        OnDemand {
            inner: Arc::new(Inner {
                options,
                upstream,
                slots: Mutex::default(),
                counters: Counters::default(),
                stop,
                tasks: TaskTracker::new(),
            }),
        }
    }

    /// How they are bounded.
    pub fn options(&self) -> &OnDemandOptions {
        &self.inner.options
    }

    /// What they did.
    pub fn counters(&self) -> &Counters {
        &self.inner.counters
    }

    /// A use of `gvr` if it is held, starting nothing.
    pub fn get(&self, gvr: &GroupVersionResource) -> Option<InUse> {
        match self.inner.slots.lock().slots.get(gvr) {
            Some(Slot::Held(served)) => Some(served.in_use()),
            _ => None,
        }
    }

    /// Every held type, ordered by group/version/resource.
    pub fn held(&self) -> Vec<Arc<Served>> {
        self.inner
            .slots
            .lock()
            .slots
            .values()
            .filter_map(|slot| match slot {
                Slot::Held(served) => Some(served.clone()),
                Slot::Discovering(_) => None,
            })
            .collect()
    }

    /// How many types are in each state.
    pub fn states(&self) -> BTreeMap<TypeState, u64> {
        let mut states: BTreeMap<_, _> = TypeState::ALL.iter().map(|s| (*s, 0)).collect();
        for slot in self.inner.slots.lock().slots.values() {
            let state = match slot {
                Slot::Discovering(_) => TypeState::Discovering,
                Slot::Held(served) => TypeState::of(served),
            };
            *states.entry(state).or_default() += 1;
        }
        states
    }

    /// Starts nothing more: the server is stopping.
    pub fn close(&self) {
        self.inner.slots.lock().closed = true;
    }

    /// Waits until every task of every type has ended (after the stop
    /// token fired).
    pub async fn wait(&self) {
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }

    /// A use of `gvr`, discovering and starting it if it is not held yet
    /// (see [`crate::registry::ServedTypes::resolve`]).
    pub async fn resolve(&self, gvr: &GroupVersionResource) -> Result<InUse, ResolveError> {
        let outcome = self.resolve_uncounted(gvr).await;
        if let Err(err) = &outcome {
            self.inner.counters.refused(err.reason());
        }
        outcome
    }

    async fn resolve_uncounted(&self, gvr: &GroupVersionResource) -> Result<InUse, ResolveError> {
        let inner = &self.inner;
        if !inner.options.allow.allows(gvr) {
            return Err(ResolveError::NotAllowed {
                gvr: gvr.clone(),
                allowed: inner.options.allow.to_string(),
            });
        }
        // Each turn waits for a discovery to end; the next finds the type
        // held (or, if it was freed meanwhile, starts it again).
        loop {
            let pending = {
                let mut slots = inner.slots.lock();
                if slots.closed {
                    return Err(ResolveError::ShuttingDown);
                }
                match slots.slots.get(gvr) {
                    Some(Slot::Held(served)) => return Ok(served.in_use()),
                    Some(Slot::Discovering(pending)) => pending.clone(),
                    None if slots.slots.len() >= inner.options.max_types => {
                        return Err(ResolveError::TooManyTypes {
                            gvr: gvr.clone(),
                            max: inner.options.max_types,
                        });
                    }
                    None => {
                        let pending = self.discover(gvr.clone());
                        slots
                            .slots
                            .insert(gvr.clone(), Slot::Discovering(pending.clone()));
                        pending
                    }
                }
            };
            pending.await?;
        }
    }

    /// Discovers `gvr` in a task of its own (it finishes, and the type
    /// is held, even if every request waiting on it gives up).
    fn discover(&self, gvr: GroupVersionResource) -> Pending {
        let this = self.clone();
        let span = info_span!("on_demand_discovery", resource = %gvr);
        let asked = gvr.clone();
        let task = self.inner.tasks.spawn(
            async move {
                let outcome = this.discovered(&gvr).await;
                if let Err(err) = &outcome {
                    info!(error = %err, "on-demand type not started");
                }
                outcome
            }
            .instrument(span),
        );
        let this = self.clone();
        async move {
            task.await.unwrap_or_else(|_| {
                // The task panicked before it left the slot: free it.
                this.inner.slots.lock().slots.remove(&asked);
                Err(ResolveError::Discovery(Arc::new(DiscoveryError::Aborted(
                    asked,
                ))))
            })
        }
        .boxed()
        .shared()
    }

    /// Discovers `gvr` and, if the API server serves it, holds it and
    /// starts its reflector; the slot leaves the discovering state
    /// either way.
    async fn discovered(&self, gvr: &GroupVersionResource) -> Result<(), ResolveError> {
        let inner = &self.inner;
        let store = tokio::select! {
            discovered = tokio::time::timeout(DISCOVERY_TIMEOUT, inner.upstream.discover(gvr)) => {
                discovered.unwrap_or_else(|_| {
                    Err(DiscoveryError::TimedOut {
                        gvr: gvr.clone(),
                        timeout: DISCOVERY_TIMEOUT,
                    })
                })
            }
            // The server stopping does not wait for a discovery.
            () = inner.stop.cancelled() => Err(DiscoveryError::Aborted(gvr.clone())),
        };
        let mut slots = inner.slots.lock();
        if slots.closed || inner.stop.is_cancelled() {
            slots.slots.remove(gvr);
            return Err(ResolveError::ShuttingDown);
        }
        let store = match store {
            Ok(store) => Arc::new(store),
            Err(err) => {
                slots.slots.remove(gvr);
                return Err(ResolveError::Discovery(Arc::new(err)));
            }
        };
        let stop = inner.stop.child_token();
        let reflecting = inner.upstream.reflect(store.clone(), stop.clone());
        let served = Arc::new(Served::with_origin(
            store,
            reflecting.status,
            Origin::OnDemand,
        ));
        slots.slots.insert(gvr.clone(), Slot::Held(served.clone()));
        drop(slots);
        inner.counters.started();
        info!(resource = %gvr, "on-demand type started");
        let reflector = inner.tasks.spawn(
            reflecting
                .run
                .instrument(info_span!("reflector", resource = %gvr, on_demand = true)),
        );
        let this = self.clone();
        let gvr = gvr.clone();
        let span = info_span!("on_demand_type", resource = %gvr);
        inner.tasks.spawn(
            async move { this.supervise(gvr, served, reflector, stop).await }.instrument(span),
        );
        Ok(())
    }

    /// Watches over a held type until it is idle for the idle time, no
    /// longer served upstream, or the server stops; then stops its
    /// reflector and ends its subscribers.
    async fn supervise(
        &self,
        gvr: GroupVersionResource,
        served: Arc<Served>,
        mut reflector: JoinHandle<()>,
        stop: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(self.inner.options.check_period());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let end = loop {
            tokio::select! {
                _ = &mut reflector => break End::Cancelled,
                _ = tick.tick() => {}
            }
            if let Some(why) = self.check(&gvr, &served).await {
                break End::Stop(why);
            }
        };
        let End::Stop(why) = end else {
            return;
        };
        // Stopped before the subscribers are told, so that a subscriber
        // that reconnects at once starts a new type from a fresh list.
        stop.cancel();
        if let Err(err) = reflector.await {
            warn!(error = %err, "the reflector task failed");
        }
        match why {
            Stop::Idle => served.store.close_subscribers(),
            Stop::Removed => served.store.close_removed(),
        }
        self.inner.counters.stopped(why);
        info!(reason = why.as_str(), "on-demand type stopped");
    }

    /// Whether the type is to stop now: idle for the idle time (then it
    /// is no longer held), or no longer served upstream (its reflector's
    /// LIST or WATCH answered 404, and discovery no longer knows it).
    async fn check(&self, gvr: &GroupVersionResource, served: &Arc<Served>) -> Option<Stop> {
        {
            let mut slots = self.inner.slots.lock();
            let idle = served
                .idle_since()
                .is_some_and(|since| since.elapsed() >= self.inner.options.idle);
            if idle {
                slots.slots.remove(gvr);
                return Some(Stop::Idle);
            }
        }
        // Only while every LIST and WATCH is answered 404.
        served.reflector.lock().not_found_since?;
        let discovered = tokio::select! {
            discovered = tokio::time::timeout(DISCOVERY_TIMEOUT, self.inner.upstream.discover(gvr)) => discovered,
            // Stopping: the reflector ends too, and with it this task.
            () = self.inner.stop.cancelled() => return None,
        };
        match discovered {
            Ok(Err(err)) if err.is_unknown() => {
                self.inner.slots.lock().slots.remove(gvr);
                Some(Stop::Removed)
            }
            // Still served (a 404 of a moment), or discovery failing: the
            // reflector goes on retrying.
            _ => None,
        }
    }
}

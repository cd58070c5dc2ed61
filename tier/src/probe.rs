//! How far a leaf's stores are behind its parent: every [`INTERVAL`] one
//! ListResources on the parent, whose heads each type's
//! [`ParentHeads`](kube_fanout_core::reflector_status::ParentHeads)
//! remembers until the store has reached them.
//!
//! One call per leaf covers every type, on a connection of its own, so
//! that the look does not wait behind a watch's backlog on the same
//! connection (the backlog is what it measures). A type whose feed follows
//! another parent than the one looked at (after a failover of one feed
//! alone) is left out until they agree again.

use std::sync::Arc;

use kube_fanout_client::Client;
use kube_fanout_core::{
    object::ResourceVersion, reflector_status::ReflectorStatus, resource::GroupVersionResource,
    store::Store,
};
use parking_lot::Mutex;
use tokio::time::{Duration, Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// How often the parent is looked at: the lag's resolution, and one
/// ListResources per leaf per interval on the parent.
pub const INTERVAL: Duration = Duration::from_secs(5);

/// One served type: where its store is and where its status goes.
pub struct Probed {
    /// The type.
    pub gvr: GroupVersionResource,
    /// Its store.
    pub store: Arc<Store>,
    /// Its feed's status (the parent it follows; the heads seen).
    pub status: Arc<Mutex<ReflectorStatus>>,
}

/// Looks at the parent's heads for every type of a leaf.
pub struct HeadProbe {
    parent: Client,
    types: Vec<Probed>,
}

impl HeadProbe {
    /// A probe of `types` through `parent` (a client of its own).
    pub fn new(parent: Client, types: Vec<Probed>) -> Self {
        HeadProbe { parent, types }
    }

    /// Looks every [`INTERVAL`] until `cancel` fires.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut ticks = tokio::time::interval(INTERVAL);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                _ = ticks.tick() => self.look().await,
            }
        }
    }

    /// One look: the parent's heads into each type's status; on a failure,
    /// the next parent for the next look.
    async fn look(&mut self) {
        let at = Instant::now();
        // A parent that does not answer within an interval is looked for
        // again over a new connection (the old one may hang for as long as
        // its keepalive allows).
        let answer = tokio::time::timeout(INTERVAL, self.parent.list_resources()).await;
        let resources = match answer {
            Ok(Ok(response)) => response.resources,
            failure => {
                let error = match failure {
                    Ok(Err(err)) => err.to_string(),
                    _ => format!("no answer within {INTERVAL:?}"),
                };
                debug!(%error, parent = %self.parent.address(), "cannot look at the parent's heads");
                if let Err(err) = self.parent.reconnect().await {
                    debug!(error = %err, "no parent to look at");
                }
                return;
            }
        };
        let parent = self.parent.address();
        for status in resources {
            let Some(probed) = self.types.iter().find(|t| {
                status.resource.as_ref().is_some_and(|r| {
                    r.group == t.gvr.group
                        && r.version == t.gvr.version
                        && r.resource == t.gvr.resource
                })
            }) else {
                continue;
            };
            let Ok(head) = status.resource_version.parse::<ResourceVersion>() else {
                continue;
            };
            let store = probed.store.head().resource_version;
            let mut reflector = probed.status.lock();
            if reflector.parent.as_deref() == Some(parent.as_str()) {
                reflector.parent_heads.observe(&parent, at, head, store);
            }
        }
    }
}

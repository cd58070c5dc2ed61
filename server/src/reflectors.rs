//! One reflector per served type, each keeping its store equal to the API
//! server, in a task of its own (after taking its first snapshot from a
//! peer, with `--bootstrap-from`); the stores and the reflectors' status
//! make up the served types.

use std::sync::Arc;

use kube_fanout_client::Client;
use kube_fanout_core::{
    dispatch::IndexedField,
    registry::{Served, ServedTypes},
    resource::ResourceType,
    store::{HistoryLimits, Store},
};
use kube_fanout_reflector::{Reflector, ReflectorConfig};
use kube_fanout_tier::Feed;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span};

use crate::error::Tasks;

/// Where the reflectors take their first snapshot from, if not from the
/// API server (`--bootstrap-from`).
pub(crate) struct Bootstrap {
    /// The peers, connected on first use.
    pub(crate) peers: Client,
    /// How many addresses it has.
    pub(crate) addresses: usize,
    /// How long a type's bootstrap may take.
    pub(crate) timeout: Duration,
}

/// A store for each of `types` with the reflector that fills it, running
/// in `tasks` until `cancel` fires: the configured types. With
/// `bootstrap`, each store starts from a peer's snapshot when one comes in
/// time, and its reflector watches from that snapshot's RV.
pub(crate) fn start(
    client: &kube::Client,
    types: Vec<(ResourceType, Vec<IndexedField>)>,
    history: HistoryLimits,
    config: ReflectorConfig,
    bootstrap: Option<&Bootstrap>,
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) -> ServedTypes {
    let mut cache = ServedTypes::default();
    for (resource, indexed) in types {
        let span = info_span!("reflector", resource = %resource.gvr);
        let store = Arc::new(Store::with_index(resource, history, indexed));
        let reflector = Reflector::new(client.clone(), store.clone(), config);
        let mut peer = bootstrap.map(|b| {
            let feed = Feed::new(b.peers.clone(), store.clone(), config.transform);
            (feed, b.addresses, Instant::now() + b.timeout)
        });
        cache.insert(Served::new(store, reflector.status()));
        let cancel = cancel.clone();
        tasks.spawn(
            async move {
                let bootstrapped = match &mut peer {
                    Some((feed, addresses, deadline)) => {
                        feed.first_snapshot(*addresses, *deadline).await
                    }
                    None => None,
                };
                let state = match bootstrapped {
                    Some((rv, peer)) => {
                        info!(%rv, %peer, "started from a peer's snapshot; watching the API server from its resourceVersion");
                        reflector.bootstrapped(rv, peer)
                    }
                    None => reflector.initial_state(),
                };
                reflector.run_from(state, cancel).await;
                Ok(())
            }
            .instrument(span),
        );
    }
    cache
}

//! One reflector per served type, each keeping its store equal to the API
//! server, in a task of its own; the stores and the reflectors' status
//! make up the served types.

use std::sync::Arc;

use kube_fanout_core::{
    dispatch::IndexedField,
    registry::{Served, ServedTypes},
    resource::ResourceType,
    store::{HistoryLimits, Store},
};
use kube_fanout_reflector::{Reflector, ReflectorConfig};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};

use crate::error::Tasks;

/// A store for each of `types` with the reflector that fills it, running
/// in `tasks` until `cancel` fires: the configured types.
pub(crate) fn start(
    client: &kube::Client,
    types: Vec<(ResourceType, Vec<IndexedField>)>,
    history: HistoryLimits,
    config: ReflectorConfig,
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) -> ServedTypes {
    let mut cache = ServedTypes::default();
    for (resource, indexed) in types {
        let span = info_span!("reflector", resource = %resource.gvr);
        let store = Arc::new(Store::with_index(resource, history, indexed));
        let reflector = Reflector::new(client.clone(), store.clone(), config);
        cache.insert(Served::new(store, reflector.status()));
        let cancel = cancel.clone();
        tasks.spawn(
            async move {
                reflector.run(cancel).await;
                Ok(())
            }
            .instrument(span),
        );
    }
    cache
}

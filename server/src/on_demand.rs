//! The on-demand types' upstream: discovery through the API server (as
//! for a configured type, with its `--index-field`s) and a reflector per
//! type. The core decides when they start and stop
//! (`kube_fanout_core::on_demand`); this only wires them.

use std::sync::Arc;

use futures::{FutureExt, future::BoxFuture};
use kube_fanout_core::{
    dispatch::{IndexFieldFlag, IndexedField},
    on_demand::{DiscoveryError, OnDemand, OnDemandOptions, Reflecting, Upstream},
    resource::{GroupVersionResource, ResourceType},
    store::{HistoryLimits, Store},
};
use kube_fanout_reflector::{Reflector, ReflectorConfig};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};

use crate::error::Tasks;

/// Discovery and reflectors against the API server.
struct KubeUpstream {
    client: kube::Client,
    history: HistoryLimits,
    index_fields: Vec<IndexFieldFlag>,
    reflector: ReflectorConfig,
}

impl Upstream for KubeUpstream {
    fn discover(
        &self,
        gvr: &GroupVersionResource,
    ) -> BoxFuture<'static, Result<Store, DiscoveryError>> {
        let (client, gvr, history) = (self.client.clone(), gvr.clone(), self.history);
        let extra: Vec<String> = self
            .index_fields
            .iter()
            .filter(|f| f.gvr == gvr)
            .map(|f| f.field.clone())
            .collect();
        async move {
            let resource = ResourceType::discover(&client, &gvr).await?;
            let indexed = IndexedField::for_type(&resource, &extra)?;
            Ok(Store::with_index(resource, history, indexed))
        }
        .boxed()
    }

    fn reflect(&self, store: Arc<Store>, stop: CancellationToken) -> Reflecting {
        let reflector = Reflector::new(self.client.clone(), store, self.reflector);
        Reflecting {
            status: reflector.status(),
            run: reflector.run(stop).boxed(),
        }
    }
}

/// The on-demand types `options` allow, their tasks stopping when
/// `cancel` fires; a task in `tasks` waits for them.
pub(crate) fn start(
    client: &kube::Client,
    options: OnDemandOptions,
    history: HistoryLimits,
    index_fields: &[IndexFieldFlag],
    reflector: ReflectorConfig,
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) -> OnDemand {
    let upstream = KubeUpstream {
        client: client.clone(),
        history,
        index_fields: index_fields.to_vec(),
        reflector,
    };
    let on_demand = OnDemand::new(options, Arc::new(upstream), cancel.clone());
    let (waiting, cancel) = (on_demand.clone(), cancel.clone());
    tasks.spawn(
        async move {
            cancel.cancelled().await;
            waiting.wait().await;
            Ok(())
        }
        .instrument(info_span!("on_demand")),
    );
    on_demand
}

//! The set of served resource types ([`Served`]), looked up by
//! group/version/resource. The configured types are fixed at start; with
//! on-demand types on ([`crate::on_demand`]), the others come and go, and
//! a request finds its type through [`ServedTypes::resolve`].

use std::{collections::BTreeMap, sync::Arc};

pub use crate::served::{Deliveries, InUse, Origin, Served, SubscriberGuard};
use crate::{
    on_demand::{OnDemand, ResolveError},
    resource::GroupVersionResource,
};

/// Every served resource type: the configured ones, and the on-demand
/// ones held now.
#[derive(Debug, Default)]
pub struct ServedTypes {
    served: BTreeMap<GroupVersionResource, Arc<Served>>,
    on_demand: Option<OnDemand>,
}

impl ServedTypes {
    /// Adds a configured resource type.
    pub fn insert(&mut self, served: Served) {
        self.served
            .insert(served.resource().gvr.clone(), Arc::new(served));
    }

    /// Serves the types `on_demand` allows besides the configured ones.
    pub fn with_on_demand(self, on_demand: OnDemand) -> Self {
        ServedTypes {
            on_demand: Some(on_demand),
            ..self
        }
    }

    /// The on-demand types, if on.
    pub fn on_demand(&self) -> Option<&OnDemand> {
        self.on_demand.as_ref()
    }

    /// A use of `gvr` if it is served now (configured, or an on-demand
    /// type held), without starting anything.
    pub fn get(&self, gvr: &GroupVersionResource) -> Option<InUse> {
        match self.served.get(gvr) {
            Some(served) => Some(served.in_use()),
            None => self.on_demand.as_ref()?.get(gvr),
        }
    }

    /// A use of `gvr`: a configured type, or an on-demand one, started
    /// (discovered, its reflector begun) if it is not held yet. Call it
    /// only for an authorized request: starting a type costs the API
    /// server a discovery and a list. It returns once the type is held,
    /// not once it has synced.
    pub async fn resolve(&self, gvr: &GroupVersionResource) -> Result<InUse, ResolveError> {
        if let Some(served) = self.served.get(gvr) {
            return Ok(served.in_use());
        }
        match &self.on_demand {
            Some(on_demand) => on_demand.resolve(gvr).await,
            None => Err(ResolveError::NotServed(gvr.clone())),
        }
    }

    /// The configured types, ordered by group/version/resource: the ones
    /// readiness follows.
    pub fn configured(&self) -> impl Iterator<Item = &Arc<Served>> {
        self.served.values()
    }

    /// Every served type now: the configured ones, then the on-demand
    /// ones held, each ordered by group/version/resource.
    pub fn iter(&self) -> Vec<Arc<Served>> {
        let mut all: Vec<_> = self.served.values().cloned().collect();
        if let Some(on_demand) = &self.on_demand {
            all.extend(on_demand.held());
        }
        all
    }

    /// Ends every open and future watch of every served type with
    /// `ShuttingDown` (see [`Store::close_subscribers`]); no on-demand
    /// type starts any more.
    pub fn close_subscribers(&self) {
        if let Some(on_demand) = &self.on_demand {
            on_demand.close();
        }
        self.iter()
            .iter()
            .for_each(|served| served.store.close_subscribers());
    }

    /// Whether every configured store has finished its first list.
    pub fn all_synced(&self) -> bool {
        self.served.values().all(|s| s.store.head().synced)
    }
}

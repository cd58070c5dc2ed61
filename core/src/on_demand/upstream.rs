//! What the wiring gives the on-demand types: discovery of a type on the
//! API server, and a reflector filling a store. The server implements it
//! with kube discovery and the reflector crate; the tests with fakes.

use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::error::DiscoveryError;
use crate::{reflector_status::ReflectorStatus, resource::GroupVersionResource, store::Store};

/// A reflector about to run.
pub struct Reflecting {
    /// Its status, valid while it runs.
    pub status: Arc<Mutex<ReflectorStatus>>,
    /// It, running until the token given to [`Upstream::reflect`] fires.
    pub run: BoxFuture<'static, ()>,
}

/// Discovery and reflectors for on-demand types.
pub trait Upstream: Send + Sync + 'static {
    /// Asks the API server's discovery about `gvr` (kind, scope,
    /// selectable fields, as a configured type gets): an empty store for
    /// it, indexed like a configured type.
    fn discover(
        &self,
        gvr: &GroupVersionResource,
    ) -> BoxFuture<'static, Result<Store, DiscoveryError>>;

    /// A reflector filling `store` until `stop` fires.
    fn reflect(&self, store: Arc<Store>, stop: CancellationToken) -> Reflecting;
}

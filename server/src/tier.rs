//! A tier's leaf: every served type fed by a parent kube-fanout
//! (`--upstream-fanout`) instead of a reflector on the API server, each in
//! a task of its own (which also learns from the parent's bookmarks how
//! far behind it the type is).

use std::sync::Arc;

use kube_fanout_client::{Certificate, Client, ClientConfig, ClientTlsConfig};
use kube_fanout_core::{
    dispatch::IndexFieldFlag,
    object::Transform,
    registry::{Served, ServedTypes},
    resource::{GroupVersionResource, ResourceType},
    store::{HistoryLimits, Store},
};
use kube_fanout_tier::{DiscoveryError, Feed};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span, warn};

use crate::{
    discovery,
    error::{ServeError, Tasks},
    options::Peers,
};

/// Asks the parent (the first of `parents` that answers) which of
/// `resources` it serves, then starts a store and its feed for each, in
/// `tasks` until `cancel` fires.
pub(crate) async fn start(
    parents: &Peers,
    resources: &[GroupVersionResource],
    index_fields: &[IndexFieldFlag],
    history: HistoryLimits,
    transform: Transform,
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) -> Result<ServedTypes, ServeError> {
    if let Some(flag) = index_fields.iter().find(|f| !resources.contains(&f.gvr)) {
        return Err(ServeError::IndexFieldNotServed(flag.gvr.clone()));
    }
    let mut parent = client_config(parents)?.connect().await?;
    let types = discover(&mut parent, parents.addresses.len(), resources).await?;
    let mut cache = ServedTypes::default();
    for (resource, indexed) in discovery::indexed(types, index_fields)? {
        let span = info_span!("feed", resource = %resource.gvr);
        let store = Arc::new(Store::with_index(resource, history, indexed));
        let feed = Feed::new(parent.clone(), store.clone(), transform);
        cache.insert(Served::new(store, feed.status()));
        let cancel = cancel.clone();
        tasks.spawn(
            async move {
                feed.run(cancel).await;
                Ok(())
            }
            .instrument(span),
        );
    }
    Ok(cache)
}

/// The parent's descriptions of `resources`, from the first of the
/// `addresses` parents (starting at the one `parent` is connected to) that
/// answers: one that cannot be asked is passed over, one that answers
/// decides (a type it does not serve stops the start).
async fn discover(
    parent: &mut Client,
    addresses: usize,
    resources: &[GroupVersionResource],
) -> Result<Vec<ResourceType>, ServeError> {
    let mut tried = 1;
    loop {
        match kube_fanout_tier::discover(parent, resources).await {
            Err(DiscoveryError::Parent(err)) if tried < addresses => {
                warn!(error = %err, parent = %parent.address(), "cannot ask this parent which types it serves; trying the next");
                parent.reconnect().await?;
                tried += 1;
            }
            outcome => return Ok(outcome?),
        }
    }
}

/// The client settings for `peers` (a leaf's parents, or a starting
/// replica's peers): TLS with their CA when one is given, the token file
/// when one is.
pub(crate) fn client_config(peers: &Peers) -> Result<ClientConfig, ServeError> {
    let mut config = ClientConfig::new(peers.addresses.iter().cloned());
    if let Some(ca) = &peers.ca_file {
        let pem = std::fs::read(ca).map_err(|source| ServeError::ParentCa {
            path: ca.clone(),
            source,
        })?;
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem));
        if let Some(name) = &peers.tls_server_name {
            tls = tls.domain_name(name.clone());
        }
        config = config.tls(tls);
    }
    if let Some(token) = &peers.token_file {
        config = config.bearer_token_file(token.clone());
    }
    Ok(config)
}

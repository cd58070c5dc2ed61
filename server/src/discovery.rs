//! Discovery: each requested resource type resolved against the API
//! server (or, for a tier's leaf, its parent), with the fields its
//! subscribers are indexed by.

use kube_fanout_core::{
    dispatch::{IndexFieldFlag, IndexedField},
    on_demand::AllowList,
    resource::{GroupVersionResource, ResourceType},
};

use crate::error::ServeError;

/// Resolves every type of `resources` (failing on the first unknown one)
/// and the fields each is indexed by (its defaults and its
/// `index_fields`); an index field of a type neither configured nor
/// allowed by `on_demand` is refused (an on-demand type's are checked
/// when it is discovered).
pub(crate) async fn discover(
    client: &kube::Client,
    resources: &[GroupVersionResource],
    index_fields: &[IndexFieldFlag],
    on_demand: Option<&AllowList>,
) -> Result<Vec<(ResourceType, Vec<IndexedField>)>, ServeError> {
    let served = |gvr: &GroupVersionResource| {
        resources.contains(gvr) || on_demand.is_some_and(|allow| allow.allows(gvr))
    };
    if let Some(flag) = index_fields.iter().find(|f| !served(&f.gvr)) {
        return Err(ServeError::IndexFieldNotServed(flag.gvr.clone()));
    }
    let mut types = Vec::new();
    for gvr in resources {
        types.push(ResourceType::discover(client, gvr).await?);
    }
    indexed(types, index_fields)
}

/// Each of `types` with the fields its subscribers are indexed by: its
/// defaults and the `index_fields` naming it.
pub(crate) fn indexed(
    types: Vec<ResourceType>,
    index_fields: &[IndexFieldFlag],
) -> Result<Vec<(ResourceType, Vec<IndexedField>)>, ServeError> {
    types
        .into_iter()
        .map(|resource| {
            let extra: Vec<String> = index_fields
                .iter()
                .filter(|f| f.gvr == resource.gvr)
                .map(|f| f.field.clone())
                .collect();
            let indexed = IndexedField::for_type(&resource, &extra)?;
            Ok((resource, indexed))
        })
        .collect()
}

//! Discovery: each requested resource type resolved against the API
//! server, with the fields its subscribers are indexed by.

use kube_fanout_core::{
    dispatch::{IndexFieldFlag, IndexedField},
    resource::{GroupVersionResource, ResourceType},
};

use crate::error::ServeError;

/// Resolves every type of `resources` (failing on the first unknown one)
/// and the fields each is indexed by (its defaults and its
/// `index_fields`); an index field of a type not served is refused.
pub(crate) async fn discover(
    client: &kube::Client,
    resources: &[GroupVersionResource],
    index_fields: &[IndexFieldFlag],
) -> Result<Vec<(ResourceType, Vec<IndexedField>)>, ServeError> {
    if let Some(flag) = index_fields.iter().find(|f| !resources.contains(&f.gvr)) {
        return Err(ServeError::IndexFieldNotServed(flag.gvr.clone()));
    }
    let mut types = Vec::new();
    for gvr in resources {
        let resource = ResourceType::discover(client, gvr).await?;
        let extra: Vec<String> = index_fields
            .iter()
            .filter(|f| f.gvr == *gvr)
            .map(|f| f.field.clone())
            .collect();
        let indexed = IndexedField::for_type(&resource, &extra)?;
        types.push((resource, indexed));
    }
    Ok(types)
}

//! The served types' descriptions, from the parent's ListResources.

use kube_fanout_client::{Client, ClientError, proto::ResourceStatus};
use kube_fanout_core::{
    fields::{JsonPathError, SelectableFields},
    resource::{GroupVersionResource, ResourceType},
};

/// Why a leaf cannot serve a type its parent was asked for.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The parent could not be asked.
    #[error("cannot ask the parent kube-fanout which types it serves: {0}")]
    Parent(#[from] ClientError),
    /// The parent does not serve it (or does not let this leaf list it).
    #[error("the parent kube-fanout does not serve {0} (or does not let this server list it)")]
    NotServed(GroupVersionResource),
    /// The parent described a selectable field this build cannot read.
    #[error("the parent kube-fanout's type {gvr}: {source}")]
    SelectableField {
        /// The custom resource type.
        gvr: GroupVersionResource,
        /// The field it declares.
        #[source]
        source: JsonPathError,
    },
}

/// Describes each of `wanted` as the parent serves it: kind, scope, and
/// the field selectors it accepts (a built-in type's by its kind, a
/// custom resource's from the jsonPaths the parent hands on).
pub async fn discover(
    parent: &mut Client,
    wanted: &[GroupVersionResource],
) -> Result<Vec<ResourceType>, DiscoveryError> {
    let served = parent.list_resources().await?.resources;
    wanted
        .iter()
        .map(|gvr| {
            let status = served
                .iter()
                .find(|s| s.resource.clone().map(GroupVersionResource::from).as_ref() == Some(gvr))
                .ok_or_else(|| DiscoveryError::NotServed(gvr.clone()))?;
            resource_type(gvr, status)
        })
        .collect()
}

/// What `status` says of `gvr`.
fn resource_type(
    gvr: &GroupVersionResource,
    status: &ResourceStatus,
) -> Result<ResourceType, DiscoveryError> {
    let fields = if status.custom_resource {
        SelectableFields::custom(status.namespaced, &status.selectable_fields).map_err(
            |source| DiscoveryError::SelectableField {
                gvr: gvr.clone(),
                source,
            },
        )?
    } else {
        SelectableFields::builtin(&gvr.api_version(), &status.kind).unwrap_or_default()
    };
    Ok(ResourceType {
        gvr: gvr.clone(),
        kind: status.kind.clone(),
        namespaced: status.namespaced,
        fields,
    })
}

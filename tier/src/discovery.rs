//! The served types' descriptions, from the parent's ListResources.

use kube_fanout_client::{
    Client, ClientError,
    proto::{ListRequest, ResourceRef, ResourceStatus},
};
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
///
/// A parent serving types on demand lists only those started: a type it
/// does not list is asked for once (a one-object List, which starts it if
/// its allow-list has it, whatever the answer while it syncs), and the
/// parent asked again.
pub async fn discover(
    parent: &mut Client,
    wanted: &[GroupVersionResource],
) -> Result<Vec<ResourceType>, DiscoveryError> {
    let mut served = parent.list_resources().await?.resources;
    let unlisted: Vec<&GroupVersionResource> = wanted
        .iter()
        .filter(|gvr| find(&served, gvr).is_none())
        .collect();
    if !unlisted.is_empty() {
        for gvr in unlisted {
            let request = ListRequest {
                resource: Some(ResourceRef::from(gvr.clone())),
                limit: 1,
                ..ListRequest::default()
            };
            // Not served (NotFound), or not synced yet: either way
            // ListResources tells next.
            let _ = parent.list(request).await;
        }
        served = parent.list_resources().await?.resources;
    }
    wanted
        .iter()
        .map(|gvr| {
            let status =
                find(&served, gvr).ok_or_else(|| DiscoveryError::NotServed(gvr.clone()))?;
            resource_type(gvr, status)
        })
        .collect()
}

/// The status of `gvr` among `served`.
fn find<'a>(
    served: &'a [ResourceStatus],
    gvr: &GroupVersionResource,
) -> Option<&'a ResourceStatus> {
    served
        .iter()
        .find(|s| s.resource.clone().map(GroupVersionResource::from).as_ref() == Some(gvr))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn status(kind: &str, namespaced: bool, custom: bool, fields: &[&str]) -> ResourceStatus {
        ResourceStatus {
            kind: kind.into(),
            namespaced,
            custom_resource: custom,
            selectable_fields: fields.iter().map(|f| (*f).to_owned()).collect(),
            ..ResourceStatus::default()
        }
    }

    /// A leaf accepts the field selectors its parent does: a built-in
    /// kind's own (a pod's spec.nodeName), a custom resource's declared
    /// ones, and refuses a field the parent's type does not have.
    #[test]
    fn a_leaf_takes_its_parents_fields() {
        let pods: GroupVersionResource = "v1/pods".parse().unwrap();
        let pod = resource_type(&pods, &status("Pod", true, false, &[])).unwrap();
        assert_eq!(pod.fields, SelectableFields::builtin("v1", "Pod").unwrap());
        assert!(pod.fields.labels().contains(&"spec.nodeName"));
        let widgets: GroupVersionResource = "example.com/v1/widgets".parse().unwrap();
        let widget =
            resource_type(&widgets, &status("Widget", false, true, &[".spec.color"])).unwrap();
        assert_eq!(widget.fields.labels(), ["metadata.name", "spec.color"]);
        assert!(!widget.namespaced);
        let plain = resource_type(&widgets, &status("Widget", true, false, &[])).unwrap();
        assert_eq!(plain.fields, SelectableFields::default());
        assert!(matches!(
            resource_type(&widgets, &status("Widget", true, true, &["spec[0]"])),
            Err(DiscoveryError::SelectableField { .. })
        ));
    }
}

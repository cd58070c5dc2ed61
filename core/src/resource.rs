//! Resource types: what discovery says about one. How a user names one
//! (`v1/configmaps`, `apps/v1/deployments`) is shared with the client, in
//! the proto crate, and re-exported here.

pub use kube_fanout_proto::GroupVersionResource;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tracing::warn;

use crate::fields::{JsonPathError, SelectableFields};

/// Why a resource type cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    /// Discovery does not know it.
    #[error("the API server does not serve resource {0}")]
    Unknown(GroupVersionResource),
    /// It exists but cannot be listed and watched.
    #[error("resource {0} does not support list and watch")]
    NotWatchable(GroupVersionResource),
    /// Discovery itself failed.
    #[error("discovery of {gvr} failed: {source}")]
    Discovery {
        /// What was being resolved.
        gvr: GroupVersionResource,
        /// The client error.
        #[source]
        source: Box<kube::Error>,
    },
    /// Its CRD declares a selectable field kube-fanout cannot read.
    #[error("resource {gvr}: {source}")]
    SelectableField {
        /// The custom resource type.
        gvr: GroupVersionResource,
        /// The field it declares.
        #[source]
        source: JsonPathError,
    },
}

/// A resource type resolved through discovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// Its group/version/resource.
    pub gvr: GroupVersionResource,
    /// The kind of its objects, for example `ConfigMap`.
    pub kind: String,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
    /// What its field selectors may name.
    pub fields: SelectableFields,
}

impl ResourceType {
    /// The API server path that lists all objects of this type.
    pub fn url_path(&self) -> String {
        let gvr = &self.gvr;
        if gvr.group.is_empty() {
            format!("/api/{}/{}", gvr.version, gvr.resource)
        } else {
            format!("/apis/{}/{}/{}", gvr.group, gvr.version, gvr.resource)
        }
    }

    /// The apiVersion and kind of its objects.
    pub fn type_meta(&self) -> crate::object::TypeMeta {
        crate::object::TypeMeta {
            api_version: self.gvr.api_version(),
            kind: self.kind.clone(),
        }
    }

    /// Asks the API server's discovery about `gvr`.
    pub async fn discover(
        client: &kube::Client,
        gvr: &GroupVersionResource,
    ) -> Result<Self, ResourceError> {
        let list = if gvr.group.is_empty() {
            client.list_core_api_resources(&gvr.version).await
        } else {
            client.list_api_group_resources(&gvr.api_version()).await
        };
        let list = match list {
            Ok(list) => list,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Err(ResourceError::Unknown(gvr.clone()));
            }
            Err(source) => {
                return Err(ResourceError::Discovery {
                    gvr: gvr.clone(),
                    source: Box::new(source),
                });
            }
        };
        let found = list
            .resources
            .into_iter()
            .find(|r| r.name == gvr.resource)
            .ok_or_else(|| ResourceError::Unknown(gvr.clone()))?;
        if !["list", "watch"]
            .iter()
            .all(|verb| found.verbs.iter().any(|v| v == verb))
        {
            return Err(ResourceError::NotWatchable(gvr.clone()));
        }
        let fields = match SelectableFields::builtin(&gvr.api_version(), &found.kind) {
            Some(fields) => fields,
            None if gvr.group.is_empty() => SelectableFields::default(),
            None => custom_fields(client, gvr, found.namespaced).await?,
        };
        Ok(ResourceType {
            gvr: gvr.clone(),
            kind: found.kind,
            namespaced: found.namespaced,
            fields,
        })
    }
}

/// The field selectors of a type in a named group: its CRD's
/// `selectableFields` for the served version if a CRD defines it, else
/// only the metadata fields (a built-in or aggregated type).
///
/// Read once at start: a CRD whose selectable fields change later needs
/// kube-fanout restarted to follow. Without permission to read CRDs the
/// type keeps the metadata fields, so a declared field is refused (never
/// matched wrongly), and a warning says why.
async fn custom_fields(
    client: &kube::Client,
    gvr: &GroupVersionResource,
    namespaced: bool,
) -> Result<SelectableFields, ResourceError> {
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    let name = format!("{}.{}", gvr.resource, gvr.group);
    let paths: Vec<String> = match crds.get_opt(&name).await {
        Ok(Some(crd)) => crd
            .spec
            .versions
            .into_iter()
            .find(|v| v.name == gvr.version)
            .and_then(|v| v.selectable_fields)
            .unwrap_or_default()
            .into_iter()
            .map(|f| f.json_path)
            .collect(),
        Ok(None) => return Ok(SelectableFields::default()),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            warn!(
                resource = %gvr,
                crd = %name,
                "cannot read the CustomResourceDefinition: field selectors on its selectableFields will be refused"
            );
            // Whether it is a custom resource at all is unknown: the
            // metadata fields, as for a built-in type.
            return Ok(SelectableFields::default());
        }
        Err(source) => {
            return Err(ResourceError::Discovery {
                gvr: gvr.clone(),
                source: Box::new(source),
            });
        }
    };
    SelectableFields::custom(namespaced, &paths).map_err(|source| ResourceError::SelectableField {
        gvr: gvr.clone(),
        source,
    })
}

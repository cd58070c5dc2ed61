//! Resource types: what discovery says about one. How a user names one
//! (`v1/configmaps`, `apps/v1/deployments`) is shared with the client, in
//! the proto crate, and re-exported here.

pub use kube_fanout_proto::GroupVersionResource;

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
        Ok(ResourceType {
            gvr: gvr.clone(),
            kind: found.kind,
            namespaced: found.namespaced,
        })
    }
}

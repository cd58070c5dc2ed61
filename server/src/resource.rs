//! Resource types: how a user names one (`v1/configmaps`,
//! `apps/v1/deployments`) and what discovery says about it.

use std::{fmt, str::FromStr};

/// A group/version/resource as a user or a gRPC request names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupVersionResource {
    /// API group; empty for the core group.
    pub group: String,
    /// API version, for example `v1`.
    pub version: String,
    /// Plural resource name, for example `configmaps`.
    pub resource: String,
}

/// Why a resource name could not be understood or served.
#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    /// Not of the form `VERSION/RESOURCE` or `GROUP/VERSION/RESOURCE`.
    #[error(
        "resource {0:?} is not of the form VERSION/RESOURCE (core group, e.g. v1/configmaps) or GROUP/VERSION/RESOURCE (e.g. apps/v1/deployments)"
    )]
    Syntax(String),
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

impl FromStr for GroupVersionResource {
    type Err = ResourceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('/').collect();
        let (group, version, resource) = match parts.as_slice() {
            [version, resource] => ("", *version, *resource),
            [group, version, resource] => (*group, *version, *resource),
            _ => return Err(ResourceError::Syntax(s.to_owned())),
        };
        if version.is_empty() || resource.is_empty() || (parts.len() == 3 && group.is_empty()) {
            return Err(ResourceError::Syntax(s.to_owned()));
        }
        Ok(GroupVersionResource {
            group: group.to_owned(),
            version: version.to_owned(),
            resource: resource.to_owned(),
        })
    }
}

impl fmt::Display for GroupVersionResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}/{}", self.version, self.resource)
        } else {
            write!(f, "{}/{}/{}", self.group, self.version, self.resource)
        }
    }
}

impl GroupVersionResource {
    /// `group/version`, or `version` for the core group: the apiVersion
    /// of its objects.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_core_and_grouped_resources() {
        let core: GroupVersionResource = "v1/configmaps".parse().unwrap();
        assert_eq!((core.group.as_str(), core.api_version()), ("", "v1".into()));
        let apps: GroupVersionResource = "apps/v1/deployments".parse().unwrap();
        assert_eq!(apps.api_version(), "apps/v1");
        assert_eq!(apps.to_string(), "apps/v1/deployments");
    }

    #[test]
    fn rejects_malformed_resources_naming_them() {
        for bad in ["configmaps", "a/b/c/d", "/v1/x", "v1/", ""] {
            let err = bad.parse::<GroupVersionResource>().unwrap_err();
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }
}

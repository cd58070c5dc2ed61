//! How a user or a request names a resource type: `v1/configmaps` (core
//! group) or `apps/v1/deployments`. The server parses its `--resource`
//! flags with it and the client its `resource()` arguments, so both accept
//! exactly the same names.

use std::{fmt, str::FromStr};

use crate::v1::ResourceRef;

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

/// A resource name not of the form `VERSION/RESOURCE` or
/// `GROUP/VERSION/RESOURCE`. It quotes at most 100 characters
/// of the name: the name may come from anyone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "resource {0} is not of the form VERSION/RESOURCE (core group, e.g. v1/configmaps) or GROUP/VERSION/RESOURCE (e.g. apps/v1/deployments)"
)]
pub struct ResourceSyntaxError(String);

/// How many characters of a bad name an error quotes.
const QUOTED_CHARS: usize = 100;

impl ResourceSyntaxError {
    fn new(name: &str) -> Self {
        let quoted = match name.char_indices().nth(QUOTED_CHARS) {
            None => format!("{name:?}"),
            Some((cut, _)) => format!("{:?}... ({} bytes)", &name[..cut], name.len()),
        };
        ResourceSyntaxError(quoted)
    }
}

impl FromStr for GroupVersionResource {
    type Err = ResourceSyntaxError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('/').collect();
        let (group, version, resource) = match parts.as_slice() {
            [version, resource] => ("", *version, *resource),
            [group, version, resource] if !group.is_empty() => (*group, *version, *resource),
            _ => return Err(ResourceSyntaxError::new(s)),
        };
        if version.is_empty() || resource.is_empty() {
            return Err(ResourceSyntaxError::new(s));
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

impl From<ResourceRef> for GroupVersionResource {
    fn from(r: ResourceRef) -> Self {
        GroupVersionResource {
            group: r.group,
            version: r.version,
            resource: r.resource,
        }
    }
}

impl From<GroupVersionResource> for ResourceRef {
    fn from(gvr: GroupVersionResource) -> Self {
        ResourceRef {
            group: gvr.group,
            version: gvr.version,
            resource: gvr.resource,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_core_and_grouped_resources() {
        let core: GroupVersionResource = "v1/configmaps".parse().unwrap();
        assert_eq!((core.group.as_str(), core.api_version()), ("", "v1".into()));
        assert_eq!(core.to_string(), "v1/configmaps");
        let apps: GroupVersionResource = "apps/v1/deployments".parse().unwrap();
        assert_eq!(apps.api_version(), "apps/v1");
        assert_eq!(apps.to_string(), "apps/v1/deployments");
        let r = ResourceRef::from(apps.clone());
        assert_eq!((r.group.as_str(), r.version.as_str()), ("apps", "v1"));
        assert_eq!(GroupVersionResource::from(r), apps);
    }

    #[test]
    fn rejects_malformed_resources_naming_them() {
        for bad in ["configmaps", "a/b/c/d", "/v1/x", "v1/", "apps//x", ""] {
            let err = bad.parse::<GroupVersionResource>().unwrap_err();
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn a_long_bad_name_is_quoted_bounded() {
        let long = format!("{}/", "é".repeat(1 << 20));
        let err = long
            .parse::<GroupVersionResource>()
            .unwrap_err()
            .to_string();
        assert!(err.len() < 400, "{} bytes", err.len());
        assert!(
            err.contains(&format!("{:?}...", "é".repeat(QUOTED_CHARS))),
            "{err}"
        );
        assert!(err.contains(&format!("({} bytes)", long.len())), "{err}");
    }
}

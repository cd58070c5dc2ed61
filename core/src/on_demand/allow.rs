//! The allow-list of on-demand types (`--on-demand-resources`): which
//! group/resources a request may start. A pattern names a group and a
//! resource (`apps/deployments`), every resource of a group
//! (`example.com/*`), or everything (`*`); the core group is spelt
//! `core` (`core/configmaps`), as the API reference names it. Versions
//! are not named: every version the API server serves of an allowed
//! resource is allowed, each a type of its own.

use std::{fmt, str::FromStr};

use crate::{quote::quote, resource::GroupVersionResource};

/// How the core group ("") is spelt in a pattern.
pub const CORE_GROUP: &str = "core";

/// One allow-list entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pattern {
    /// `*`: every group and resource.
    Everything,
    /// `GROUP/*`: every resource of the group ("" for the core group).
    Group(String),
    /// `GROUP/RESOURCE`: one resource of one group.
    Resource {
        /// The API group, "" for the core group.
        group: String,
        /// The plural resource name.
        resource: String,
    },
}

/// A pattern that is not `*`, `GROUP/*` or `GROUP/RESOURCE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "on-demand resource pattern {0} is not *, GROUP/* or GROUP/RESOURCE (the core group spelt core: core/configmaps, apps/deployments, example.com/*)"
)]
pub struct PatternError(String);

impl FromStr for Pattern {
    type Err = PatternError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || PatternError(quote(s).to_string());
        if s == "*" {
            return Ok(Pattern::Everything);
        }
        let (group, resource) = s.split_once('/').ok_or_else(bad)?;
        let valid = |part: &str| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        };
        if !valid(group) || (resource != "*" && (!valid(resource) || resource.contains('.'))) {
            return Err(bad());
        }
        let group = if group == CORE_GROUP { "" } else { group }.to_owned();
        Ok(if resource == "*" {
            Pattern::Group(group)
        } else {
            Pattern::Resource {
                group,
                resource: resource.to_owned(),
            }
        })
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = |g: &str| if g.is_empty() { CORE_GROUP } else { g }.to_owned();
        match self {
            Pattern::Everything => f.write_str("*"),
            Pattern::Group(g) => write!(f, "{}/*", group(g)),
            Pattern::Resource { group: g, resource } => write!(f, "{}/{resource}", group(g)),
        }
    }
}

impl Pattern {
    /// Whether the pattern allows `gvr` (any version).
    pub fn allows(&self, gvr: &GroupVersionResource) -> bool {
        match self {
            Pattern::Everything => true,
            Pattern::Group(group) => *group == gvr.group,
            Pattern::Resource { group, resource } => {
                *group == gvr.group && *resource == gvr.resource
            }
        }
    }
}

/// The patterns a request for a type not configured must match one of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList(pub Vec<Pattern>);

impl AllowList {
    /// Whether any pattern allows `gvr`.
    pub fn allows(&self, gvr: &GroupVersionResource) -> bool {
        self.0.iter().any(|p| p.allows(gvr))
    }
}

impl fmt::Display for AllowList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pattern) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{pattern}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gvr(s: &str) -> GroupVersionResource {
        s.parse().unwrap()
    }

    #[test]
    fn patterns_allow_their_group_and_resource_in_every_version() {
        let list = AllowList(
            ["apps/deployments", "example.com/*", "core/configmaps"]
                .iter()
                .map(|p| p.parse().unwrap())
                .collect(),
        );
        for allowed in [
            "apps/v1/deployments",
            "apps/v1beta1/deployments",
            "example.com/v1/widgets",
            "example.com/v2/gadgets",
            "v1/configmaps",
        ] {
            assert!(list.allows(&gvr(allowed)), "{allowed}");
        }
        for refused in [
            "apps/v1/statefulsets",
            "v1/secrets",
            "sub.example.com/v1/widgets",
            "example.org/v1/widgets",
            "core/v1/configmaps",
        ] {
            assert!(!list.allows(&gvr(refused)), "{refused}");
        }
        assert_eq!(
            list.to_string(),
            "apps/deployments,example.com/*,core/configmaps"
        );
        let everything: Pattern = "*".parse().unwrap();
        assert!(everything.allows(&gvr("v1/secrets")));
        assert!(!AllowList::default().allows(&gvr("v1/secrets")));
    }

    #[test]
    fn malformed_patterns_are_refused() {
        for bad in [
            "",
            "deployments",
            "apps/",
            "/deployments",
            "apps/v1/deployments",
            "*/deployments",
            "Apps/deployments",
            "apps/deployments.apps",
            "apps/*x",
        ] {
            let err = bad.parse::<Pattern>().unwrap_err().to_string();
            assert!(err.contains("GROUP/RESOURCE"), "{bad:?}: {err}");
        }
    }
}

//! A refusal in the API server's words, so that a client sees the same
//! message from kube-fanout as from the API server: k8s.io/apiserver's
//! `responsewriters.forbiddenMessage` inside `apierrors.NewForbidden`:
//! `configmaps is forbidden: User "alice" cannot list resource
//! "configmaps" in API group "" in the namespace "a"`, with the object's
//! name after the resource for a Get, `at the cluster scope` without a
//! namespace, `cannot get path "/metrics"` for a URL, and the authorizer's
//! reason after a colon when it gave one. Names are quoted with a bound
//! (`kube_fanout_core::quote`), which writes what the API server writes
//! for names of printable characters.

use std::fmt;

use kube_fanout_core::quote::quote;

use crate::{attributes::Attributes, quote::quote as cut};

/// The API server's message for `user` refused `attributes`.
pub(crate) fn resource(user: &str, attributes: &Attributes, reason: &str) -> String {
    let resource = &attributes.resource;
    let qualified = if attributes.group.is_empty() {
        resource.clone()
    } else {
        format!("{resource}.{}", attributes.group)
    };
    let subject = if attributes.name.is_empty() {
        qualified
    } else {
        format!("{qualified} {}", quote(&attributes.name))
    };
    let scope = if attributes.namespace.is_empty() {
        "at the cluster scope".to_owned()
    } else {
        format!("in the namespace {}", quote(&attributes.namespace))
    };
    format!(
        "{subject} is forbidden: User {} cannot {} resource {} in API group {} {scope}{}",
        quote(user),
        attributes.verb.as_str(),
        quote(resource),
        quote(&attributes.group),
        Reason(reason),
    )
}

/// The API server's message for `user` refused `verb` on the URL `path`.
pub(crate) fn path(user: &str, verb: &str, path: &str, reason: &str) -> String {
    format!(
        "forbidden: User {} cannot {verb} path {}{}",
        quote(user),
        quote(path),
        Reason(reason)
    )
}

/// `: reason`, cut, if there is one.
struct Reason<'a>(&'a str);

impl fmt::Display for Reason<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, ": {}", cut(self.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attributes::Verb;

    fn attributes(
        verb: Verb,
        group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            verb,
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The API server's own messages (kube-apiserver v1.36), for a List in
    /// a namespace, a Get of a named object, a cluster-wide Watch of a
    /// grouped resource, and a URL.
    #[test]
    fn refusals_read_as_the_api_servers() {
        assert_eq!(
            resource(
                "system:serviceaccount:ops:go-operator",
                &attributes(Verb::List, "", "configmaps", "team-c", ""),
                ""
            ),
            r#"configmaps is forbidden: User "system:serviceaccount:ops:go-operator" cannot list resource "configmaps" in API group "" in the namespace "team-c""#
        );
        assert_eq!(
            resource(
                "alice",
                &attributes(Verb::Get, "", "secrets", "a", "s-1"),
                ""
            ),
            r#"secrets "s-1" is forbidden: User "alice" cannot get resource "secrets" in API group "" in the namespace "a""#
        );
        assert_eq!(
            resource(
                "alice",
                &attributes(Verb::Watch, "apps", "deployments", "", ""),
                "RBAC: role.rbac.authorization.k8s.io \"x\" not found"
            ),
            r#"deployments.apps is forbidden: User "alice" cannot watch resource "deployments" in API group "apps" at the cluster scope: RBAC: role.rbac.authorization.k8s.io "x" not found"#
        );
        assert_eq!(
            path("mallory", "get", "/metrics", ""),
            r#"forbidden: User "mallory" cannot get path "/metrics""#
        );
    }
}

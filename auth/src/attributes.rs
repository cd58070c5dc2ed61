//! What a request asks to do: its verb and resource attributes, as the API
//! server would derive them (what SubjectAccessReview is asked about).

use std::fmt;

/// What a request asks to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// Get one object.
    Get,
    /// List objects.
    List,
    /// Watch objects.
    Watch,
}

impl Verb {
    /// The Kubernetes verb.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
        }
    }
}

/// A request's resource attributes, as the API server would derive them
/// from the same request made to it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// The verb.
    pub verb: Verb,
    /// API group; empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name.
    pub resource: String,
    /// Namespace; empty for all namespaces (the cluster scope).
    pub namespace: String,
    /// Object name (Get), empty otherwise.
    pub name: String,
}

impl fmt::Display for Attributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb.as_str(), self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        // Quoted with a bound: the values are validated before they get
        // here, but a message never echoes a caller's input unbounded.
        if !self.name.is_empty() {
            write!(f, " {}", kube_fanout_core::quote::quote(&self.name))?;
        }
        if self.namespace.is_empty() {
            write!(f, " at the cluster scope (all namespaces)")
        } else {
            write!(
                f,
                " in namespace {}",
                kube_fanout_core::quote::quote(&self.namespace)
            )
        }
    }
}

//! Who is calling, and may they see this: the API server's own answers.
//!
//! kube-fanout must never show a caller what the API server would not, so
//! it asks the API server, like kube-rbac-proxy and the kubelet do:
//! [`authn`] checks a bearer token with the TokenReview API, and [`x509`]
//! maps a verified client certificate to a user exactly as the API server
//! does;
//! [`authz`] asks SubjectAccessReview whether that user may get, list or
//! watch the resource in the namespace. Both cache their answers for
//! configurable times ([`cache`]). [`layer`] is the tower layer that puts
//! the caller's [`Identity`] into each request; the gRPC service calls
//! [`Access::authorize`] once per request, and [`Grant::guard`] re-asks for
//! an open watch each time its answer expires, so a revoked watch ends.
//! [`limits`] bounds what one caller may hold open. [`http_access`] does the same
//! checks for the metrics endpoint (a non-resource URL).
//!
//! Fail closed: when a review cannot be made, the request fails; only an
//! answer the API server gave (and that has not expired) lets one through.
//!
//! This crate sits on the core (for quoting input in errors) and on the
//! listener (each connection's [`kube_fanout_listener::conn::ConnInfo`]);
//! the gRPC service and the server wiring sit on it.

mod access;
mod attributes;
pub mod audit;
pub mod authn;
pub mod authz;
pub mod bearer;
pub mod budget;
mod cache;
mod counters;
mod credential;
mod error;
#[cfg(test)]
mod fakes;
mod forbidden;
pub mod http_access;
mod identity;
pub mod layer;
pub mod limits;
mod quote;
pub mod reviews;
mod status;
pub mod x509;

// What the other crates use, at the paths they have always used.
pub use access::{Access, Grant, Guarded};
pub use attributes::{Attributes, Verb};
pub use authn::Authenticator;
pub use authz::Authorizer;
pub use credential::{Credential, Presented};
pub use error::AuthError;
pub use identity::{AUTHENTICATED_GROUP, Identity, with_authenticated_group};

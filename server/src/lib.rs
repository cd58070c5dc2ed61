//! kube-fanout: a gRPC cache-fanout for Kubernetes.
//!
//! One [`reflector`] per resource type keeps a [`store`] in step with the
//! API server; every gRPC subscriber gets a [`subscription`] over that
//! store: a consistent snapshot, like the API server's watch-list, then
//! every later change in order. [`service`] is the thin gRPC layer and
//! [`server`] wires it all together.

pub use kube_fanout_core::{
    codec, dispatch, event, fields, filter, names, object, paging, projection, quote,
    reflector_status, registry, resource, store, subscription,
};

pub mod auth;
pub mod backoff;
pub mod config;
pub mod connections;
pub mod error;
pub mod keepalive;
pub mod list_budget;
pub mod metrics;
pub mod reflector;
pub mod retire;
pub mod server;
pub mod service;
pub mod tls;
pub mod upstream;
pub mod validation;

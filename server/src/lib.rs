//! kube-fanout: a gRPC cache-fanout for Kubernetes.
//!
//! One [`reflector`] per resource type keeps a [`store`] in step with the
//! API server; every gRPC subscriber gets a [`subscription`] over that
//! store: a consistent snapshot, like the API server's watch-list, then
//! every later change in order. [`service`] is the thin gRPC layer and
//! [`server`] wires it all together.

pub mod auth;
pub mod backoff;
pub mod cache;
pub mod codec;
pub mod config;
pub mod connections;
pub mod dispatch;
pub mod error;
pub mod event;
pub mod fields;
pub mod filter;
pub mod keepalive;
pub mod list_budget;
pub mod metrics;
pub mod names;
pub mod object;
pub mod paging;
pub mod projection;
pub mod quote;
pub mod reflector;
pub mod reflector_status;
pub mod resource;
pub mod retire;
pub mod server;
pub mod service;
pub mod store;
pub mod subscription;
pub mod tls;
pub mod upstream;
pub mod validation;

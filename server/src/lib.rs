//! kube-fanout: a gRPC cache-fanout for Kubernetes.
//!
//! One [`reflector`] per resource type keeps a [`store`] in step with the
//! API server; every gRPC subscriber gets a [`subscription`] over that
//! store: a consistent snapshot, like the API server's watch-list, then
//! every later change in order. [`service`] is the thin gRPC layer and
//! [`server`] wires it all together.
//!
//! This crate only wires: its [`config`] (flags), [`metrics`] and
//! [`server`] start the crates below it. Those crates' modules are
//! re-exported here under the paths the binary, the end-to-end tests and
//! the benchmark use (see the README's Architecture section for the
//! layers).

pub use kube_fanout_auth as auth;
pub use kube_fanout_core::{event, fields, object, registry, resource, store, subscription};
pub use kube_fanout_listener::{connections, keepalive, retire, tls};
pub use kube_fanout_reflector as reflector;
pub use kube_fanout_service::{list_budget, service};

pub mod config;
pub mod metrics;
pub mod server;

//! kube-fanout: a gRPC cache-fanout for Kubernetes.
//!
//! One reflector (`kube_fanout_reflector`) per resource type keeps a store
//! (`kube_fanout_core::store`) in step with the API server; every gRPC
//! subscriber gets a subscription over that store: a consistent snapshot,
//! like the API server's watch-list, then every later change in order.
//! `kube_fanout_service` is the thin gRPC layer.
//!
//! This crate only wires (see docs/development/architecture.md for the
//! layers): [`config`] turns flags into [`options`], and
//! [`server::start`] puts the concerns together, each in a module of its
//! own: discovery of the served types, their reflectors (or a tier's
//! feeds from its parent), the on-demand
//! types' upstream, [`security`],
//! the audit log's destination, health, [`metrics`] and the gRPC
//! listener. Inside, imports run down: `server` sits on the others;
//! `config` on `options`, which sits on `security`, as `audit` does;
//! `health` on `grpc` (its HTTP/2 bounds) and `options`, as `grpc` does;
//! `grpc` on `request_spans`; `metrics` on `security`; `tier` on
//! `discovery`; `on_demand` and
//! each of them on
//! `error`, which sits on the lower crates alone. [`traces`], the OTLP
//! export the binary installs, stands beside them.

mod audit;
pub mod config;
mod discovery;
pub mod error;
mod grpc;
mod health;
pub mod metrics;
mod on_demand;
pub mod options;
mod reflectors;
mod request_spans;
pub mod security;
pub mod server;
mod tier;
pub mod traces;

//! kube-fanout's gRPC service: the thin layer between tonic and the core.
//! It owns the `kubefanout.v1.KubeFanout` implementation ([`service`]),
//! the bounds on what a caller sends ([`validation`]), the byte budget of
//! unpaged Lists ([`list_budget`]), snapshots handed to HTTP/2 as their
//! shared chunks past tonic ([`snapshot_handoff`]), what the audit log is told of each
//! request and watch (`audited`), and the one place that maps every
//! error to a gRPC status ([`error`]).
//!
//! It sits on the core, auth and the listener (for each request's
//! connection); only the server wiring sits on it.

mod audited;
mod error;
mod input;
pub mod list_budget;
pub mod service;
pub mod snapshot_handoff;
mod validation;

pub use validation::MAX_REQUEST_BYTES;

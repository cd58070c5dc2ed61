//! kube-fanout's core, with no gRPC in it (no tonic, not even through a
//! dependency): what the server holds and how it answers, whoever asks.
//!
//! It owns the [`object`]s as the cache holds them (with their selectable
//! [`fields`] and [`projection`]s), label and field [`filter`]s, the
//! served [`resource`] types, each one [`served`], and their [`registry`]
//! (configured, and started [`on_demand`]), the event vocabulary
//! ([`event`]), the per-type [`store`] (ring, history, relist, snapshots),
//! the [`dispatch`] of events to subscribers, [`subscription`]s, List
//! [`paging`], the encode-once [`codec`] of Watch events, snapshots whose
//! encoding subscribers share ([`shared_snapshot`]), and the bounded
//! [`quote`] of a caller's input in errors. Every error is typed
//! (thiserror); the gRPC layer above maps them to statuses.
//!
//! It sits on `kube-fanout-proto`'s messages (without its `grpc`
//! feature) and on kube for resource discovery; the reflector, the
//! listener, auth and the gRPC service sit on it.

pub mod codec;
pub mod dispatch;
pub mod event;
pub mod fields;
pub mod filter;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod names;
pub mod object;
pub mod on_demand;
pub mod paging;
pub mod projection;
pub mod quote;
pub mod reflector_status;
pub mod registry;
pub mod resource;
pub mod served;
pub mod shared_snapshot;
mod sparse;
pub mod store;
pub mod subscription;

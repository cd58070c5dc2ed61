//! kube-fanout-client: watch Kubernetes objects through kube-fanout instead
//! of the API server.
//!
//! [`watcher()`] is a drop-in for `kube_runtime::watcher()`: it yields the
//! same [`Event`](kube_runtime::watcher::Event)s, so a reflector store, a
//! `Controller` and every `WatchStreamExt` combinator work unchanged, and
//! it resumes by itself across server restarts (see [`watcher`](mod@watcher)).
//! [`metadata_watcher()`] is the drop-in for `kube_runtime::metadata_watcher()`
//! (the server then sends only each object's metadata).
//! [`Api`] names the resource type as `kube::Api` does, [`reflect`] keeps a
//! [`LocalStore`], and [`Client`] is the connection: one or several server
//! addresses, plaintext or TLS, with an optional bearer token.
//!
//! ```no_run
//! # async fn f() -> Result<(), kube_fanout_client::ClientError> {
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube_fanout_client::{Api, ClientConfig, watcher};
//! use kube_runtime::{WatchStreamExt, reflector, watcher::Config};
//!
//! let fanout = ClientConfig::new(["fanout-0:50051", "fanout-1:50051"]).build()?;
//! let (reader, writer) = reflector::store();
//! // was: watcher(kube::Api::<ConfigMap>::all(kube_client), Config::default())
//! let objects = watcher(Api::<ConfigMap>::all(fanout), Config::default())
//!     .reflect(writer)
//!     .applied_objects();
//! # Ok(()) }
//! ```

mod api;
mod client;
mod config;
mod error;
mod store;
mod token;
pub mod watcher;

pub use api::{Api, resource};
pub use client::{Client, GrpcClient};
pub use config::ClientConfig;
pub use error::ClientError;
pub use kube_fanout_proto::GroupVersionResource;
pub use kube_fanout_proto::v1 as proto;
pub use store::{LocalStore, reflect};
pub use token::BearerToken;
pub use tonic::{
    codec::CompressionEncoding,
    transport::{Certificate, ClientTlsConfig},
};
pub use watcher::{WatchError, metadata_watcher, watch, watcher};

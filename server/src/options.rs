//! What the server is started with besides an API client and a listener
//! (the binary fills it from its flags, [`crate::config`]).

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use kube_fanout_core::{
    dispatch::IndexFieldFlag, on_demand::OnDemandOptions, resource::GroupVersionResource,
    store::HistoryLimits, subscription::Limits,
};
use kube_fanout_listener::{
    connections::ConnectionLimits, drain::DrainGrace, keepalive::Keepalive,
    retire::MaxConnectionAge,
};
use kube_fanout_reflector::ReflectorConfig;

use crate::security::Security;

pub use kube_fanout_service::service::DEFAULT_SHARED_SNAPSHOT_BYTES;

/// What the server needs besides an API client and a listener.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The resource types to serve.
    pub resources: Vec<GroupVersionResource>,
    /// The parents the types are fed from, for a tier's leaf (`None`: the
    /// API server, through one reflector each).
    pub upstream_fanout: Option<Peers>,
    /// The peers a reflector takes its first snapshot from before it
    /// watches the API server from that snapshot's RV (`None`: it lists),
    /// and for how long it tries.
    pub bootstrap_from: Option<(Peers, Duration)>,
    /// The types served on demand besides them (`None`: none).
    pub on_demand: Option<OnDemandOptions>,
    /// Fields to index subscribers by besides every type's defaults.
    pub index_fields: Vec<IndexFieldFlag>,
    /// How the reflectors list and watch.
    pub reflector: ReflectorConfig,
    /// Events kept per type.
    pub history: HistoryLimits,
    /// Watch limits.
    pub limits: Limits,
    /// Where to serve Prometheus metrics (`GET /metrics`), if anywhere.
    pub metrics_addr: Option<SocketAddr>,
    /// Where to serve `grpc.health.v1` alone, in plaintext, if anywhere:
    /// the kubelet's gRPC probe cannot speak TLS, so with TLS on the main
    /// listener the probes ask here. It tells only whether the server is
    /// up and synced, as the API server's `/readyz` does to anyone.
    pub health_addr: Option<SocketAddr>,
    /// How long a reflector may fail without opening a watch before
    /// readiness turns NOT_SERVING (`None`: never).
    pub unready_after: Option<Duration>,
    /// TLS, authentication and authorization.
    pub security: Security,
    /// How accepted connections look for a peer that vanished.
    pub keepalive: Keepalive,
    /// Connections older than this are retired (`None`: never; see
    /// [`kube_fanout_listener::retire`]).
    pub max_connection_age: Option<MaxConnectionAge>,
    /// How long a stopping server waits for streams and for requests in
    /// flight before it closes their connections (see
    /// [`kube_fanout_listener::drain`]).
    pub drain: DrainGrace,
    /// Bounds on connections and what each may carry, on the gRPC and
    /// the health listener alike (each counted apart).
    pub connections: ConnectionLimits,
    /// The most bytes of snapshot encodings kept at once to be shared
    /// (see `kube_fanout_core::shared_snapshot`).
    pub shared_snapshot_bytes: u64,
    /// Whether each gRPC call gets a span, a child of the caller's W3C
    /// trace context (set when traces are exported, see
    /// [`crate::traces`]; off, nothing is added per call).
    pub request_spans: bool,
}

/// Other kube-fanouts this one reads from: a leaf's parents
/// (`--upstream-fanout`), a starting replica's peers (`--bootstrap-from`).
#[derive(Debug, Clone)]
pub struct Peers {
    /// Their addresses, in order of preference.
    pub addresses: Vec<String>,
    /// The CA their serving certificates chain to (TLS on when given).
    pub ca_file: Option<PathBuf>,
    /// The name their certificates are verified as, if not their
    /// addresses' hosts.
    pub tls_server_name: Option<String>,
    /// The bearer token presented to them, re-read as it rotates.
    pub token_file: Option<PathBuf>,
}

//! Command-line and environment configuration, like every kube tool.

use std::{net::SocketAddr, num::NonZeroU32, path::PathBuf, time::Duration};

use clap::Parser;

use kube_fanout_auth::{
    audit::AuditLevel,
    authn::TokenCacheTtl,
    authz::DecisionCacheTtl,
    budget::{Bound, ReviewLimits},
    limits::CallerLimits,
};
use kube_fanout_core::{
    dispatch::IndexFieldFlag,
    object::Transform,
    on_demand::{AllowList, OnDemandOptions, Pattern},
    resource::GroupVersionResource,
    store::HistoryLimits,
    subscription::Limits,
};
use kube_fanout_listener::{
    connections::ConnectionLimits, drain::DrainGrace, failures::FailureBound, keepalive::Keepalive,
    retire::MaxConnectionAge, tls::TlsFiles,
};
use kube_fanout_reflector::ReflectorConfig;
use kube_fanout_service::list_budget::ListBytesLimits;

use crate::{
    options::{Peers, ServerOptions},
    security::{AuditOptions, AuthOptions, Security},
};

/// kube-fanout: one LIST+WATCH per resource type against the API server,
/// re-served to many gRPC subscribers.
#[derive(Debug, Clone, Parser)]
#[command(name = "kube-fanout", version, about, long_about = None)]
pub struct Config {
    /// A resource type to serve, as VERSION/RESOURCE (core group) or
    /// GROUP/VERSION/RESOURCE; repeat for several. CRDs included. Needed
    /// unless --on-demand-resources is given.
    #[arg(
        long = "resource",
        required_unless_present = "on_demand_resources",
        value_name = "GVR",
        env = "KUBE_FANOUT_RESOURCE",
        value_delimiter = ','
    )]
    pub resources: Vec<GroupVersionResource>,

    /// Feed the served types from these kube-fanout servers instead of
    /// the API server (a tier's leaf): one gRPC Watch per type on the
    /// first that answers, the next one when it fails, resuming where the
    /// cache got to. Addresses as host:port (plaintext), http:// or
    /// https:// URLs. The API server is still asked to authenticate and
    /// authorize this server's own callers; this server's identity must
    /// be allowed to list and watch the types at the parent.
    #[arg(
        long = "upstream-fanout",
        value_name = "ADDRESS",
        env = "KUBE_FANOUT_UPSTREAM_FANOUT",
        value_delimiter = ',',
        conflicts_with = "on_demand_resources"
    )]
    pub upstream_fanout: Vec<String>,

    /// Take each type's first snapshot from one of these kube-fanout
    /// replicas (or parents) and then watch the API server from its
    /// resourceVersion, so that a restart costs the API server a watch, not
    /// a LIST; the reflector lists as usual if none answers within
    /// --bootstrap-timeout-seconds, and relists if the API server no
    /// longer holds that resourceVersion. Addresses as for
    /// --upstream-fanout; a Service in front of the replicas routes to the
    /// ready ones, never to the starting replica itself.
    #[arg(
        long = "bootstrap-from",
        value_name = "ADDRESS",
        env = "KUBE_FANOUT_BOOTSTRAP_FROM",
        value_delimiter = ','
    )]
    pub bootstrap_from: Vec<String>,

    /// How long a type's bootstrap from --bootstrap-from may take before
    /// its reflector lists the API server instead.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..), env = "KUBE_FANOUT_BOOTSTRAP_TIMEOUT_SECONDS")]
    pub bootstrap_timeout_seconds: u64,

    /// The CA bundle (PEM) that other kube-fanouts' serving certificates
    /// (--upstream-fanout, --bootstrap-from) chain to; they are then
    /// reached over TLS.
    #[arg(long, value_name = "FILE", env = "KUBE_FANOUT_PEER_CA_FILE")]
    pub peer_ca_file: Option<PathBuf>,

    /// The name to verify other kube-fanouts' certificates as
    /// (--upstream-fanout, --bootstrap-from), when they are addressed by
    /// IP (say, a Service's cluster IP where pods have no cluster DNS);
    /// by default each address's own host.
    #[arg(long, value_name = "NAME", env = "KUBE_FANOUT_PEER_TLS_SERVER_NAME")]
    pub peer_tls_server_name: Option<String>,

    /// A file holding the bearer token presented to other kube-fanouts
    /// (--upstream-fanout, --bootstrap-from), read again as it rotates: a
    /// projected service account token with their audience (their
    /// --auth-token-audiences). This server's identity must be allowed to
    /// list and watch the types there.
    #[arg(long, value_name = "FILE", env = "KUBE_FANOUT_PEER_TOKEN_FILE")]
    pub peer_token_file: Option<PathBuf>,

    /// Serve types not given with --resource on demand: a Watch, List or
    /// Get for one, once its caller is authorized, discovers it and starts
    /// its reflector, if it matches one of these patterns: GROUP/RESOURCE
    /// (apps/deployments; the core group spelt core: core/configmaps),
    /// GROUP/* (example.com/*) or * (everything kube-fanout may list and
    /// watch). Every version of a matching resource is allowed. Off unless
    /// set.
    #[arg(
        long = "on-demand-resources",
        value_name = "PATTERN",
        env = "KUBE_FANOUT_ON_DEMAND_RESOURCES",
        value_delimiter = ','
    )]
    pub on_demand_resources: Vec<Pattern>,

    /// Most on-demand types held at once (being discovered included); a
    /// request for one more is refused RESOURCE_EXHAUSTED until one is
    /// freed.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..), env = "KUBE_FANOUT_ON_DEMAND_MAX_TYPES")]
    pub on_demand_max_types: u64,

    /// Seconds an on-demand type may go without subscribers or requests
    /// before its reflector stops and its store is freed.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..), env = "KUBE_FANOUT_ON_DEMAND_IDLE_SECONDS")]
    pub on_demand_idle_seconds: u64,

    /// Also index the subscribers of a served type by one of its
    /// selectable fields, as GVR=FIELD (for example
    /// v1/events=involvedObject.name); repeat for several. A subscriber
    /// whose field selector pins an exact value of it is then woken only
    /// by events of that value. metadata.name, metadata.namespace and a
    /// pod's spec.nodeName are always indexed.
    #[arg(
        long = "index-field",
        value_name = "GVR=FIELD",
        env = "KUBE_FANOUT_INDEX_FIELD",
        value_delimiter = ','
    )]
    pub index_fields: Vec<IndexFieldFlag>,

    /// Address of the gRPC listener.
    #[arg(long, default_value = "127.0.0.1:50051", env = "KUBE_FANOUT_LISTEN")]
    pub listen: SocketAddr,

    /// Seconds a gRPC connection may be idle before TCP keepalive probes
    /// its peer; 0 turns keepalive off.
    #[arg(long, default_value_t = 30, env = "KUBE_FANOUT_KEEPALIVE_SECONDS")]
    pub keepalive_seconds: u64,

    /// Seconds after --keepalive-seconds that a peer acknowledging nothing
    /// (no probe, no data) is dropped with its watches: one that vanished
    /// without closing, as a lost node or a partition leaves it.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..), env = "KUBE_FANOUT_KEEPALIVE_TIMEOUT_SECONDS")]
    pub keepalive_timeout_seconds: u64,

    /// Seconds after which a gRPC connection is retired, so that clients
    /// spread over replicas added since they connected: GOAWAY, then its
    /// watches end (UNAVAILABLE, ConnectionRetired, with the
    /// resourceVersion to resume from) within a tenth of this more, and
    /// their clients resume on a new connection. 0: never.
    #[arg(
        long,
        default_value_t = 0,
        env = "KUBE_FANOUT_MAX_CONNECTION_AGE_SECONDS"
    )]
    pub max_connection_age_seconds: u64,

    /// Seconds a stopping server (SIGTERM) waits for the calls in flight
    /// on a connection (List, Get, ListResources, a history handed to a
    /// starting replica) before it closes the connection. Watches are not
    /// waited for: each ends at once (UNAVAILABLE, ShuttingDown, with the
    /// resourceVersion to resume from), and a connection with no call in
    /// flight is closed half a second after the signal, whatever its
    /// watches' clients still have to read (they resume elsewhere from
    /// the last event they read).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..), env = "KUBE_FANOUT_SHUTDOWN_GRACE_SECONDS")]
    pub shutdown_grace_seconds: u64,

    /// Most HTTP/2 streams (calls) one gRPC connection may have open at
    /// once, kube-apiserver's --http2-max-streams-per-connection default;
    /// more are refused (RST_STREAM REFUSED_STREAM). 0: no bound.
    #[arg(
        long,
        default_value_t = 1000,
        env = "KUBE_FANOUT_MAX_CONCURRENT_STREAMS"
    )]
    pub max_concurrent_streams: u32,

    /// Most bytes of request headers one call may carry (HTTP/2
    /// SETTINGS_MAX_HEADER_LIST_SIZE, decoded); larger are answered HTTP
    /// 431.
    #[arg(long, default_value_t = 16 * 1024, value_parser = clap::value_parser!(u32).range(1..), env = "KUBE_FANOUT_MAX_HEADER_LIST_BYTES")]
    pub max_header_list_bytes: u32,

    /// Seconds a client may take to complete its TLS handshake.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..), env = "KUBE_FANOUT_TLS_HANDSHAKE_TIMEOUT_SECONDS")]
    pub tls_handshake_timeout_seconds: u64,

    /// Most client connections open at once on the gRPC listener (and,
    /// counted apart, on the health and metrics listeners); more are closed at once.
    /// 0: no bound.
    #[arg(long, default_value_t = 10_000, env = "KUBE_FANOUT_MAX_CONNECTIONS")]
    pub max_connections: usize,

    /// Most client connections open at once from one IP address (IPv6:
    /// one /64); more are closed at once. 0: no bound.
    #[arg(
        long,
        default_value_t = 100,
        env = "KUBE_FANOUT_MAX_CONNECTIONS_PER_IP"
    )]
    pub max_connections_per_ip: usize,

    /// Seconds a connection may stay open (TLS handshake included) before
    /// a request on it has been authenticated; then it is closed. On the
    /// health listener, which authenticates nothing, the most any
    /// connection stays.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..), env = "KUBE_FANOUT_UNAUTHENTICATED_CONNECTION_TIMEOUT_SECONDS")]
    pub unauthenticated_connection_timeout_seconds: u64,

    /// Failed authentications per second one client address (IPv6: one
    /// /64) may have, sustained (missing, malformed or refused
    /// credentials, requests over a TokenReview bound). A source that
    /// spends its budget is shut out until it has earned one back: its
    /// connections on which nothing was authenticated are closed, and new
    /// ones refused as they are accepted; connections that authenticated
    /// keep serving. 0: no bound.
    #[arg(
        long,
        default_value_t = FailureBound::default().rate.get(),
        env = "KUBE_FANOUT_AUTH_FAILURE_RATE_PER_SOURCE"
    )]
    pub auth_failure_rate_per_source: u32,

    /// Failed authentications allowed at once above
    /// --auth-failure-rate-per-source, per client address.
    #[arg(
        long,
        default_value_t = FailureBound::default().burst,
        env = "KUBE_FANOUT_AUTH_FAILURE_BURST_PER_SOURCE"
    )]
    pub auth_failure_burst_per_source: NonZeroU32,

    /// Address of the Prometheus metrics listener (`GET /metrics`).
    #[arg(
        long,
        default_value = "127.0.0.1:9090",
        env = "KUBE_FANOUT_METRICS_LISTEN"
    )]
    pub metrics_listen: SocketAddr,

    /// Address of a plaintext listener serving only grpc.health.v1, for the
    /// kubelet's gRPC probes when --tls-cert-file is set (they cannot speak
    /// TLS). Off unless set.
    #[arg(long, env = "KUBE_FANOUT_HEALTH_LISTEN")]
    pub health_listen: Option<SocketAddr>,

    /// Kubeconfig file; defaults to $KUBECONFIG, ~/.kube/config, then the
    /// in-cluster service account.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use instead of the current one.
    #[arg(long, env = "KUBE_FANOUT_CONTEXT")]
    pub context: Option<String>,

    /// LIST page size (0: one page). Unset follows client-go: pages of 500,
    /// except no paging for a list at a specific resourceVersion, which the
    /// watch cache then serves.
    #[arg(long, env = "KUBE_FANOUT_PAGE_SIZE")]
    pub page_size: Option<u32>,

    /// Minimum watch timeout in seconds (at least 300, as in client-go);
    /// each watch draws its timeout from [min, 2×min).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(300..), env = "KUBE_FANOUT_MIN_WATCH_TIMEOUT_SECONDS")]
    pub min_watch_timeout_seconds: u64,

    /// Sync with LIST instead of a watch-list stream (sendInitialEvents).
    #[arg(long, env = "KUBE_FANOUT_NO_WATCH_LIST")]
    pub no_watch_list: bool,

    /// How long to retry a watch failing with 500 before relisting, in seconds.
    #[arg(
        long,
        default_value_t = 0,
        env = "KUBE_FANOUT_MAX_INTERNAL_ERROR_RETRY_SECONDS"
    )]
    pub max_internal_error_retry_seconds: u64,

    /// Debug: after each watch-list sync, LIST at the same resourceVersion
    /// and log every difference.
    #[arg(long, env = "KUBE_FANOUT_CHECK_WATCH_LIST_CONSISTENCY")]
    pub check_watch_list_consistency: bool,

    /// Keep metadata.managedFields instead of dropping them before storing.
    #[arg(long, env = "KUBE_FANOUT_KEEP_MANAGED_FIELDS")]
    pub keep_managed_fields: bool,

    /// Events retained per resource type for resuming watches and for
    /// subscribers that read slowly.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..), env = "KUBE_FANOUT_HISTORY_EVENTS")]
    pub history_events: u64,

    /// Seconds a reflector may fail without opening a watch before
    /// readiness (kubefanout.v1.KubeFanout) turns NOT_SERVING, so that new
    /// subscribers go to a replica that is following; 0: never.
    #[arg(long, default_value_t = 30, env = "KUBE_FANOUT_UNREADY_AFTER_SECONDS")]
    pub unready_after_seconds: u64,

    /// Seconds an event is retained for resuming (the API server keeps about 75).
    #[arg(long, default_value_t = 75, env = "KUBE_FANOUT_HISTORY_SECONDS")]
    pub history_seconds: u64,

    /// Bytes of objects the retained events may hold per resource type
    /// (the newest event always stays).
    #[arg(long, default_value_t = 256 << 20, env = "KUBE_FANOUT_HISTORY_BYTES")]
    pub history_bytes: u64,

    /// Seconds of silence after which a subscriber with bookmarks on gets a
    /// progress bookmark.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..), env = "KUBE_FANOUT_PROGRESS_BOOKMARK_SECONDS")]
    pub progress_bookmark_seconds: u64,

    /// Coalescing: a subscriber whose events have been coming faster than
    /// one per this many milliseconds, woken sooner than this after
    /// its last delivery, waits out the rest before reading, so that fast
    /// events share frames and writes (less CPU per delivery for at most
    /// this much latency, only at such rates); 0 reads at once always.
    #[arg(long, default_value_t = 3, env = "KUBE_FANOUT_MIN_SEND_INTERVAL_MS")]
    pub min_send_interval_ms: u64,

    /// A subscriber with more than this many events left to receive (only
    /// events its filter lets through, only since its stream started) is
    /// cut off (RESOURCE_EXHAUSTED, with the RV to resume from).
    #[arg(long, default_value_t = 10_000, env = "KUBE_FANOUT_MAX_LAG_EVENTS")]
    pub max_lag_events: u64,

    /// A subscriber with more than this many bytes of objects left to
    /// receive (counted like --max-lag-events) is cut off.
    #[arg(long, default_value_t = 64 << 20, env = "KUBE_FANOUT_MAX_LAG_BYTES")]
    pub max_lag_bytes: u64,

    /// How long a watch asking for a resourceVersion newer than the cache
    /// waits for the cache to catch up, and a Watch, List or Get on a type
    /// not synced yet for its first sync, in milliseconds.
    #[arg(
        long,
        default_value_t = 3_000,
        env = "KUBE_FANOUT_FRESHNESS_TIMEOUT_MS"
    )]
    pub freshness_timeout_ms: u64,

    /// Log as JSON lines instead of text.
    #[arg(long, env = "KUBE_FANOUT_LOG_JSON")]
    pub log_json: bool,

    /// Serve TLS with this PEM certificate (chain, leaf first); read again
    /// whenever the file changes, so rotation needs no restart.
    #[arg(
        long,
        env = "KUBE_FANOUT_TLS_CERT_FILE",
        requires = "tls_private_key_file"
    )]
    pub tls_cert_file: Option<PathBuf>,

    /// The PEM private key of --tls-cert-file; read again when it changes.
    #[arg(
        long,
        env = "KUBE_FANOUT_TLS_PRIVATE_KEY_FILE",
        requires = "tls_cert_file"
    )]
    pub tls_private_key_file: Option<PathBuf>,

    /// PEM CA bundle for client certificates (mTLS): a verified
    /// certificate's CN is the user and its O entries the groups, as the API
    /// server maps them. Callers without one use a bearer token.
    #[arg(long, env = "KUBE_FANOUT_CLIENT_CA_FILE", requires = "tls_cert_file")]
    pub client_ca_file: Option<PathBuf>,

    /// `kubernetes`: every caller authenticated (TokenReview or client
    /// certificate) and every request authorized (SubjectAccessReview).
    /// `none`: no checks at all, only on loopback unless
    /// --insecure-allow-unauthenticated.
    #[arg(long, value_enum, default_value_t = AuthMode::Kubernetes, env = "KUBE_FANOUT_AUTH")]
    pub auth: AuthMode,

    /// With --auth=none, listen on a non-loopback address anyway: every
    /// caller who reaches the port reads every served object. Likewise for
    /// unauthenticated metrics (--auth=none or --metrics-auth=none) on a
    /// non-loopback --metrics-listen.
    #[arg(long, env = "KUBE_FANOUT_INSECURE_ALLOW_UNAUTHENTICATED")]
    pub insecure_allow_unauthenticated: bool,

    /// `kubernetes` (with --auth=kubernetes): a scrape of /metrics needs a
    /// bearer token that --auth-token-audiences accepts, whose user may
    /// `get` the non-resource URL /metrics (SubjectAccessReview), as
    /// controller-runtime's secure metrics. `none`: anyone who reaches
    /// --metrics-listen reads the metrics (only on loopback unless
    /// --insecure-allow-unauthenticated). Metrics are served over TLS
    /// whenever --tls-cert-file is set.
    #[arg(long, value_enum, default_value_t = AuthMode::Kubernetes, env = "KUBE_FANOUT_METRICS_AUTH")]
    pub metrics_auth: AuthMode,

    /// Audiences a bearer token must be for (comma-separated), e.g. the one
    /// a projected ServiceAccount token is minted for. Unset: the API
    /// server's own audiences.
    #[arg(long, value_delimiter = ',', env = "KUBE_FANOUT_AUTH_TOKEN_AUDIENCES")]
    pub auth_token_audiences: Vec<String>,

    /// Seconds an accepted token's TokenReview answer is cached (never past
    /// the token's own expiry); also how often an open watch's token is
    /// reviewed again, so the most a watch outlives its token.
    #[arg(
        long,
        default_value_t = 120,
        value_parser = ttl_seconds,
        env = "KUBE_FANOUT_AUTH_TOKEN_CACHE_TTL_SECONDS"
    )]
    pub auth_token_cache_ttl_seconds: u64,

    /// Seconds a rejected token's TokenReview answer is cached.
    #[arg(
        long,
        default_value_t = 10,
        value_parser = ttl_seconds,
        env = "KUBE_FANOUT_AUTH_TOKEN_FAILURE_CACHE_TTL_SECONDS"
    )]
    pub auth_token_failure_cache_ttl_seconds: u64,

    /// TokenReviews per second for tokens not known to be good (a client's
    /// first, a garbage one), all sources together; more are refused
    /// UNAVAILABLE with a RetryInfo. Bounds what authenticating costs the
    /// API server.
    #[arg(
        long,
        default_value_t = ReviewLimits::default().total.rate,
        env = "KUBE_FANOUT_AUTH_TOKEN_REVIEW_RATE"
    )]
    pub auth_token_review_rate: NonZeroU32,

    /// TokenReviews allowed at once above --auth-token-review-rate.
    #[arg(
        long,
        default_value_t = ReviewLimits::default().total.burst,
        env = "KUBE_FANOUT_AUTH_TOKEN_REVIEW_BURST"
    )]
    pub auth_token_review_burst: NonZeroU32,

    /// TokenReviews in flight at once for tokens not known to be good, all
    /// sources together.
    #[arg(
        long,
        default_value_t = ReviewLimits::default().total.concurrency,
        env = "KUBE_FANOUT_AUTH_TOKEN_REVIEW_CONCURRENCY"
    )]
    pub auth_token_review_concurrency: NonZeroU32,

    /// TokenReviews per second for tokens not known to be good from one
    /// client address (IPv6: one /64); more are refused RESOURCE_EXHAUSTED
    /// with a RetryInfo.
    #[arg(
        long,
        default_value_t = ReviewLimits::default().per_source.rate,
        env = "KUBE_FANOUT_AUTH_TOKEN_REVIEW_RATE_PER_SOURCE"
    )]
    pub auth_token_review_rate_per_source: NonZeroU32,

    /// TokenReviews allowed at once above
    /// --auth-token-review-rate-per-source, per client address.
    #[arg(
        long,
        default_value_t = ReviewLimits::default().per_source.burst,
        env = "KUBE_FANOUT_AUTH_TOKEN_REVIEW_BURST_PER_SOURCE"
    )]
    pub auth_token_review_burst_per_source: NonZeroU32,

    /// TokenReviews in flight at once per client address.
    #[arg(
        long,
        default_value_t = ReviewLimits::default().per_source.concurrency,
        env = "KUBE_FANOUT_AUTH_TOKEN_REVIEW_CONCURRENCY_PER_SOURCE"
    )]
    pub auth_token_review_concurrency_per_source: NonZeroU32,

    /// Seconds an allowed SubjectAccessReview answer is cached; also the
    /// most an open watch outlives the revocation of its permission.
    #[arg(
        long,
        default_value_t = 60,
        value_parser = ttl_seconds,
        env = "KUBE_FANOUT_AUTHZ_ALLOWED_CACHE_TTL_SECONDS"
    )]
    pub authz_allowed_cache_ttl_seconds: u64,

    /// Seconds a denied SubjectAccessReview answer is cached.
    #[arg(
        long,
        default_value_t = 30,
        value_parser = ttl_seconds,
        env = "KUBE_FANOUT_AUTHZ_DENIED_CACHE_TTL_SECONDS"
    )]
    pub authz_denied_cache_ttl_seconds: u64,

    /// Most watches one caller (user; without --auth, client address) may
    /// hold open; more get RESOURCE_EXHAUSTED. 0: no bound.
    #[arg(
        long,
        default_value_t = 1000,
        env = "KUBE_FANOUT_MAX_WATCHES_PER_CALLER"
    )]
    pub max_watches_per_caller: usize,

    /// Most initial snapshots (watches still sending their initial events,
    /// or their synthetic ADDEDs from "" or "0", and Lists) one caller may
    /// have in flight; more get
    /// RESOURCE_EXHAUSTED. 0: no bound.
    #[arg(
        long,
        default_value_t = 100,
        env = "KUBE_FANOUT_MAX_SNAPSHOTS_PER_CALLER"
    )]
    pub max_snapshots_per_caller: usize,

    /// Most bytes of objects one List response may hold: a paged List gets
    /// a shorter page (with a continue token), an unpaged one over it is
    /// refused (RESOURCE_EXHAUSTED). At most --max-list-bytes-in-flight.
    #[arg(long, default_value_t = 64 << 20, value_parser = clap::value_parser!(u64).range(1..), env = "KUBE_FANOUT_MAX_LIST_BYTES")]
    pub max_list_bytes: u64,

    /// Most bytes of objects all List responses of all callers may hold at
    /// once, until each is handed to HTTP/2; a List waits for room.
    #[arg(long, default_value_t = 256 << 20, value_parser = clap::value_parser!(u64).range(1..), env = "KUBE_FANOUT_MAX_LIST_BYTES_IN_FLIGHT")]
    pub max_list_bytes_in_flight: u64,

    /// Most bytes of snapshot encodings kept at once to be shared: the
    /// subscribers that take the same snapshot with the same filter
    /// together (a restart herd) send the same chunks, encoded once, kept
    /// while some of them still send it. Past the bound a chunk is encoded
    /// again for each subscriber that needs it. 0: nothing is shared.
    #[arg(
        long,
        default_value_t = crate::options::DEFAULT_SHARED_SNAPSHOT_BYTES,
        env = "KUBE_FANOUT_MAX_SHARED_SNAPSHOT_BYTES"
    )]
    pub max_shared_snapshot_bytes: u64,

    /// The audit log of access decisions (each SubjectAccessReview made,
    /// not cached answers) and of watch ends, one JSON line each, as the
    /// API server's audit levels: `none` (off), `metadata` (user, verb,
    /// object, decision, reason, source, times), `request` (and the
    /// request's selectors, resourceVersion and options). Never a token.
    /// Needs --auth=kubernetes.
    #[arg(long, default_value_t = AuditLevel::None, env = "KUBE_FANOUT_AUDIT_LEVEL")]
    pub audit_level: AuditLevel,

    /// Where audit lines go: a file, opened to append (created readable by
    /// its owner only), or `-` for standard output.
    #[arg(long, default_value = "-", env = "KUBE_FANOUT_AUDIT_LOG_PATH")]
    pub audit_log_path: PathBuf,

    /// Most audit lines written a second (bursts of as many); more are
    /// dropped, counted (kube_fanout_audit_lines_total{outcome="dropped"})
    /// and reported by one summary line once lines are written again.
    #[arg(
        long,
        default_value_t = AuditOptions::default().max_lines_per_second,
        env = "KUBE_FANOUT_AUDIT_MAX_LINES_PER_SECOND"
    )]
    pub audit_max_lines_per_second: NonZeroU32,
}

/// A cache TTL flag: at least a second, or every request would ask the
/// API server again (0 made an open watch re-ask in a tight loop).
fn ttl_seconds(value: &str) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(0) => Err("0 would ask the API server again on every request; at least 1 second".into()),
        Ok(secs) => Ok(secs),
        Err(err) => Err(format!("not a number of seconds: {err}")),
    }
}

/// How callers are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthMode {
    /// TokenReview / client certificates, and SubjectAccessReview.
    Kubernetes,
    /// No authentication or authorization.
    None,
}

impl Config {
    /// The reflector settings these flags describe.
    pub fn reflector(&self) -> ReflectorConfig {
        ReflectorConfig {
            page_size: self.page_size,
            min_watch_timeout: Duration::from_secs(self.min_watch_timeout_seconds),
            use_watch_list: !self.no_watch_list,
            max_internal_error_retry: Duration::from_secs(self.max_internal_error_retry_seconds),
            check_watch_list_consistency: self.check_watch_list_consistency,
            transform: Transform {
                strip_managed_fields: !self.keep_managed_fields,
            },
            ..ReflectorConfig::default()
        }
    }

    /// The watch limits these flags describe.
    pub fn limits(&self) -> Limits {
        Limits {
            freshness_timeout: Duration::from_millis(self.freshness_timeout_ms),
            progress_interval: Duration::from_secs(self.progress_bookmark_seconds),
            max_lag_events: self.max_lag_events,
            max_lag_bytes: self.max_lag_bytes,
            min_send_interval: Duration::from_millis(self.min_send_interval_ms),
        }
    }

    /// The TLS, authentication and authorization these flags describe.
    pub fn security(&self) -> Security {
        let secs = Duration::from_secs;
        Security {
            tls: self
                .tls_cert_file
                .clone()
                .zip(self.tls_private_key_file.clone())
                .map(|(cert, key)| TlsFiles {
                    cert,
                    key,
                    client_ca: self.client_ca_file.clone(),
                }),
            auth: (self.auth == AuthMode::Kubernetes).then(|| AuthOptions {
                audiences: self.auth_token_audiences.clone(),
                token_ttl: TokenCacheTtl {
                    success: secs(self.auth_token_cache_ttl_seconds),
                    failure: secs(self.auth_token_failure_cache_ttl_seconds),
                },
                decision_ttl: DecisionCacheTtl {
                    allowed: secs(self.authz_allowed_cache_ttl_seconds),
                    denied: secs(self.authz_denied_cache_ttl_seconds),
                },
                metrics: self.metrics_auth == AuthMode::Kubernetes,
                review_limits: ReviewLimits {
                    per_source: Bound {
                        rate: self.auth_token_review_rate_per_source,
                        burst: self.auth_token_review_burst_per_source,
                        concurrency: self.auth_token_review_concurrency_per_source,
                    },
                    total: Bound {
                        rate: self.auth_token_review_rate,
                        burst: self.auth_token_review_burst,
                        concurrency: self.auth_token_review_concurrency,
                    },
                },
                ..AuthOptions::default()
            }),
            allow_unauthenticated_remote: self.insecure_allow_unauthenticated,
            caller_limits: CallerLimits {
                watches: self.max_watches_per_caller,
                snapshots: self.max_snapshots_per_caller,
            },
            list_bytes: ListBytesLimits {
                per_list: self.max_list_bytes.min(self.max_list_bytes_in_flight),
                total: self.max_list_bytes_in_flight,
            },
            audit: AuditOptions {
                level: self.audit_level,
                path: self.audit_log_path.clone(),
                max_lines_per_second: self.audit_max_lines_per_second,
            },
        }
    }

    /// How accepted connections look for a vanished peer.
    pub fn keepalive(&self) -> Keepalive {
        Keepalive {
            idle: (self.keepalive_seconds > 0).then(|| Duration::from_secs(self.keepalive_seconds)),
            timeout: Duration::from_secs(self.keepalive_timeout_seconds),
        }
    }

    /// The bounds on connections these flags describe.
    pub fn connections(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_concurrent_streams: self.max_concurrent_streams,
            max_header_list_bytes: self.max_header_list_bytes,
            handshake_timeout: Duration::from_secs(self.tls_handshake_timeout_seconds),
            max_connections: self.max_connections,
            max_connections_per_ip: self.max_connections_per_ip,
            unauthenticated_timeout: Duration::from_secs(
                self.unauthenticated_connection_timeout_seconds,
            ),
            auth_failures: NonZeroU32::new(self.auth_failure_rate_per_source).map(|rate| {
                FailureBound {
                    rate,
                    burst: self.auth_failure_burst_per_source,
                }
            }),
        }
    }

    /// How old connections may get (`None`: no bound).
    pub fn max_connection_age(&self) -> Option<MaxConnectionAge> {
        (self.max_connection_age_seconds > 0)
            .then(|| MaxConnectionAge(Duration::from_secs(self.max_connection_age_seconds)))
    }

    /// How long a stopping server waits before it closes connections.
    pub fn drain(&self) -> DrainGrace {
        DrainGrace {
            requests: Duration::from_secs(self.shutdown_grace_seconds),
            ..DrainGrace::default()
        }
    }

    /// How long a failing reflector keeps the server ready (`None`: for
    /// ever).
    pub fn unready_after(&self) -> Option<Duration> {
        (self.unready_after_seconds > 0).then(|| Duration::from_secs(self.unready_after_seconds))
    }

    /// The event history these flags describe.
    pub fn history(&self) -> HistoryLimits {
        HistoryLimits {
            events: usize::try_from(self.history_events).unwrap_or(usize::MAX),
            age: Duration::from_secs(self.history_seconds),
            bytes: self.history_bytes,
        }
    }

    /// The parents a tier's leaf is fed by (`None`: the API server).
    pub fn upstream_fanout(&self) -> Option<Peers> {
        self.peers(&self.upstream_fanout)
    }

    /// The peers the reflectors bootstrap from, and for how long they may
    /// try (`None`: they list).
    pub fn bootstrap_from(&self) -> Option<(Peers, Duration)> {
        let peers = self.peers(&self.bootstrap_from)?;
        Some((peers, Duration::from_secs(self.bootstrap_timeout_seconds)))
    }

    /// `addresses` with the CA and token other kube-fanouts are reached
    /// with (`None` when there are none).
    fn peers(&self, addresses: &[String]) -> Option<Peers> {
        (!addresses.is_empty()).then(|| Peers {
            addresses: addresses.to_vec(),
            ca_file: self.peer_ca_file.clone(),
            tls_server_name: self.peer_tls_server_name.clone(),
            token_file: self.peer_token_file.clone(),
        })
    }

    /// The on-demand types these flags allow (`None`: off).
    pub fn on_demand(&self) -> Option<OnDemandOptions> {
        (!self.on_demand_resources.is_empty()).then(|| OnDemandOptions {
            allow: AllowList(self.on_demand_resources.clone()),
            max_types: usize::try_from(self.on_demand_max_types).unwrap_or(usize::MAX),
            idle: Duration::from_secs(self.on_demand_idle_seconds),
        })
    }

    /// What the server is started with: every conversion above, and the
    /// listeners' addresses.
    pub fn options(&self) -> ServerOptions {
        ServerOptions {
            resources: self.resources.clone(),
            upstream_fanout: self.upstream_fanout(),
            bootstrap_from: self.bootstrap_from(),
            on_demand: self.on_demand(),
            index_fields: self.index_fields.clone(),
            reflector: self.reflector(),
            history: self.history(),
            limits: self.limits(),
            metrics_addr: Some(self.metrics_listen),
            health_addr: self.health_listen,
            unready_after: self.unready_after(),
            security: self.security(),
            keepalive: self.keepalive(),
            max_connection_age: self.max_connection_age(),
            drain: self.drain(),
            connections: self.connections(),
            shared_snapshot_bytes: self.max_shared_snapshot_bytes,
            // The binary's to set: it installs the trace export.
            request_spans: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Config {
        let mut argv = vec!["kube-fanout", "--resource", "v1/configmaps"];
        argv.extend_from_slice(args);
        Config::try_parse_from(argv).unwrap()
    }

    /// A leaf's parents, in order, with their CA and token; none unless
    /// given, and not with on-demand types (a leaf serves its --resource);
    /// the bootstrap peers with the same CA and token.
    #[test]
    fn upstream_fanout_names_the_parents_in_order() {
        assert!(parse(&[]).upstream_fanout().is_none());
        let leaf = parse(&[
            "--upstream-fanout",
            "https://a:50051,https://b:50051",
            "--peer-ca-file",
            "ca.crt",
            "--peer-token-file",
            "token",
        ])
        .upstream_fanout()
        .unwrap();
        assert_eq!(leaf.addresses, ["https://a:50051", "https://b:50051"]);
        assert_eq!(leaf.ca_file, Some(PathBuf::from("ca.crt")));
        assert_eq!(leaf.token_file, Some(PathBuf::from("token")));
        assert!(parse(&[]).bootstrap_from().is_none());
        let (peers, timeout) = parse(&[
            "--bootstrap-from",
            "https://10.0.0.9:50051",
            "--peer-tls-server-name",
            "svc.ns.svc",
        ])
        .bootstrap_from()
        .unwrap();
        assert_eq!(peers.addresses, ["https://10.0.0.9:50051"]);
        assert_eq!(peers.tls_server_name.as_deref(), Some("svc.ns.svc"));
        assert_eq!(timeout, Duration::from_secs(30));
        let both = Config::try_parse_from([
            "kube-fanout",
            "--upstream-fanout",
            "a:1",
            "--on-demand-resources",
            "*",
        ]);
        assert!(both.is_err());
    }

    #[test]
    fn authentication_and_authorization_are_on_unless_turned_off() {
        let security = parse(&[]).security();
        assert!(security.auth.is_some());
        assert!(security.tls.is_none());
        assert!(parse(&["--auth", "none"]).security().auth.is_none());
        assert!(security.auth.as_ref().unwrap().metrics);
        let open_metrics = parse(&["--metrics-auth", "none"]).security();
        assert!(!open_metrics.auth.expect("gRPC auth stays on").metrics);
        let tls = parse(&["--tls-cert-file", "c", "--tls-private-key-file", "k"]).security();
        assert_eq!(tls.tls.unwrap().key, PathBuf::from("k"));
        let err = Config::try_parse_from([
            "kube-fanout",
            "--resource",
            "v1/configmaps",
            "--tls-cert-file",
            "c",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("--tls-private-key-file"), "{err}");
    }

    /// Each reflector and authentication flag reaches its setting (a field
    /// left to `..Default::default()` would keep the default silently).
    #[test]
    fn reflector_and_auth_flags_reach_their_settings() {
        let config = parse(&[
            "--page-size",
            "7",
            "--min-watch-timeout-seconds",
            "400",
            "--no-watch-list",
            "--max-internal-error-retry-seconds",
            "9",
            "--check-watch-list-consistency",
            "--keep-managed-fields",
            "--auth-token-audiences",
            "a,b",
            "--auth-token-cache-ttl-seconds",
            "11",
            "--auth-token-failure-cache-ttl-seconds",
            "12",
            "--authz-allowed-cache-ttl-seconds",
            "13",
            "--authz-denied-cache-ttl-seconds",
            "14",
            "--auth-token-review-rate",
            "15",
            "--auth-token-review-burst",
            "16",
            "--auth-token-review-concurrency",
            "17",
            "--auth-token-review-rate-per-source",
            "18",
            "--auth-token-review-burst-per-source",
            "19",
            "--auth-token-review-concurrency-per-source",
            "20",
        ]);
        let reflector = config.reflector();
        assert_eq!(reflector.page_size, Some(7));
        assert_eq!(reflector.min_watch_timeout, Duration::from_secs(400));
        assert!(!reflector.use_watch_list);
        assert_eq!(reflector.max_internal_error_retry, Duration::from_secs(9));
        assert!(reflector.check_watch_list_consistency);
        assert!(!reflector.transform.strip_managed_fields);
        let defaults = parse(&[]).reflector();
        assert!(defaults.use_watch_list && !defaults.check_watch_list_consistency);
        assert!(defaults.transform.strip_managed_fields);

        let auth = config.security().auth.expect("authentication is on");
        assert_eq!(auth.audiences, ["a", "b"]);
        assert_eq!(auth.token_ttl.success, Duration::from_secs(11));
        assert_eq!(auth.token_ttl.failure, Duration::from_secs(12));
        assert_eq!(auth.decision_ttl.allowed, Duration::from_secs(13));
        assert_eq!(auth.decision_ttl.denied, Duration::from_secs(14));
        let n = |n| NonZeroU32::new(n).unwrap();
        assert_eq!(
            auth.review_limits,
            ReviewLimits {
                per_source: Bound {
                    rate: n(18),
                    burst: n(19),
                    concurrency: n(20),
                },
                total: Bound {
                    rate: n(15),
                    burst: n(16),
                    concurrency: n(17),
                },
            }
        );
        let defaults = parse(&[]).security().auth.expect("on by default");
        assert_eq!(defaults.review_limits, ReviewLimits::default());
        assert!(
            Config::try_parse_from([
                "kube-fanout",
                "--resource",
                "v1/configmaps",
                "--auth-token-review-rate",
                "0"
            ])
            .is_err(),
            "no rate means no reviews at all: refused"
        );
    }

    #[test]
    fn limit_and_history_flags_reach_their_settings() {
        let config = parse(&[
            "--freshness-timeout-ms",
            "1500",
            "--progress-bookmark-seconds",
            "7",
            "--max-lag-events",
            "8",
            "--max-lag-bytes",
            "9",
            "--min-send-interval-ms",
            "3",
            "--history-events",
            "10",
            "--history-seconds",
            "11",
            "--history-bytes",
            "12",
            "--unready-after-seconds",
            "1",
        ]);
        let limits = config.limits();
        assert_eq!(limits.freshness_timeout, Duration::from_millis(1500));
        assert_eq!(limits.progress_interval, Duration::from_secs(7));
        assert_eq!((limits.max_lag_events, limits.max_lag_bytes), (8, 9));
        assert_eq!(limits.min_send_interval, Duration::from_millis(3));
        let history = config.history();
        assert_eq!(history.events, 10);
        assert_eq!(history.age, Duration::from_secs(11));
        assert_eq!(history.bytes, 12);
        assert_eq!(config.unready_after(), Some(Duration::from_secs(1)));
        assert_eq!(parse(&[]).unready_after(), Some(Duration::from_secs(30)));
        assert_eq!(
            parse(&["--unready-after-seconds", "0"]).unready_after(),
            None
        );
    }

    #[test]
    fn on_demand_types_are_off_unless_asked_and_then_need_no_resource() {
        assert_eq!(parse(&[]).on_demand(), None);
        let set = Config::try_parse_from([
            "kube-fanout",
            "--on-demand-resources",
            "apps/deployments,example.com/*",
            "--on-demand-max-types",
            "7",
            "--on-demand-idle-seconds",
            "9",
        ])
        .unwrap();
        assert!(set.resources.is_empty());
        let options = set.on_demand().expect("on");
        assert_eq!(options.allow.to_string(), "apps/deployments,example.com/*");
        assert_eq!(options.max_types, 7);
        assert_eq!(options.idle, Duration::from_secs(9));
        let defaults = Config::try_parse_from(["kube-fanout", "--on-demand-resources", "*"])
            .unwrap()
            .on_demand()
            .unwrap();
        assert_eq!((defaults.max_types, defaults.idle.as_secs()), (50, 300));
        let none = Config::try_parse_from(["kube-fanout"])
            .unwrap_err()
            .to_string();
        assert!(none.contains("--resource"), "{none}");
        for bad in [
            ["--on-demand-resources", "apps/v1/deployments"],
            ["--on-demand-max-types", "0"],
            ["--on-demand-idle-seconds", "0"],
        ] {
            let mut argv = vec!["kube-fanout", "--resource", "v1/configmaps"];
            argv.extend(bad);
            assert!(Config::try_parse_from(argv).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn cache_ttls_are_at_least_a_second() {
        for flag in [
            "--auth-token-cache-ttl-seconds",
            "--auth-token-failure-cache-ttl-seconds",
            "--authz-allowed-cache-ttl-seconds",
            "--authz-denied-cache-ttl-seconds",
        ] {
            let err =
                Config::try_parse_from(["kube-fanout", "--resource", "v1/configmaps", flag, "0"])
                    .unwrap_err()
                    .to_string();
            assert!(
                err.contains("0 would ask the API server again on every request"),
                "{flag}: {err}"
            );
            parse(&[flag, "1"]);
        }
    }

    #[test]
    fn list_byte_flags_reach_their_bounds() {
        assert_eq!(
            parse(&[]).security().list_bytes,
            ListBytesLimits {
                per_list: 64 << 20,
                total: 256 << 20
            }
        );
        let set = parse(&["--max-list-bytes", "7", "--max-list-bytes-in-flight", "9"]);
        assert_eq!(
            set.security().list_bytes,
            ListBytesLimits {
                per_list: 7,
                total: 9
            }
        );
        // One List never gets more than all of them.
        let capped = parse(&["--max-list-bytes", "10", "--max-list-bytes-in-flight", "9"]);
        assert_eq!(capped.security().list_bytes.per_list, 9);
    }

    #[test]
    fn audit_flags_reach_their_options_and_the_log_is_off_by_default() {
        assert_eq!(parse(&[]).security().audit, AuditOptions::default());
        assert_eq!(AuditOptions::default().level, AuditLevel::None);
        let set = parse(&[
            "--audit-level",
            "Request",
            "--audit-log-path",
            "/var/log/audit.jsonl",
            "--audit-max-lines-per-second",
            "7",
        ]);
        assert_eq!(
            set.security().audit,
            AuditOptions {
                level: AuditLevel::Request,
                path: PathBuf::from("/var/log/audit.jsonl"),
                max_lines_per_second: NonZeroU32::new(7).unwrap(),
            }
        );
        let metadata = parse(&["--audit-level", "metadata"]).security().audit;
        assert_eq!(metadata.level, AuditLevel::Metadata);
        for bad in [
            ["--audit-level", "verbose"],
            ["--audit-max-lines-per-second", "0"],
        ] {
            let mut argv = vec!["kube-fanout", "--resource", "v1/configmaps"];
            argv.extend(bad);
            let err = Config::try_parse_from(argv).unwrap_err().to_string();
            assert!(err.contains(bad[1]), "{bad:?}: {err}");
        }
    }

    #[test]
    fn connections_are_retired_only_when_asked() {
        assert_eq!(parse(&[]).max_connection_age(), None);
        assert_eq!(
            parse(&["--max-connection-age-seconds", "0"]).max_connection_age(),
            None
        );
        assert_eq!(
            parse(&["--max-connection-age-seconds", "1800"]).max_connection_age(),
            Some(MaxConnectionAge(Duration::from_secs(1800)))
        );
    }

    #[test]
    fn keepalive_is_on_by_default_and_zero_turns_it_off() {
        assert_eq!(parse(&[]).keepalive(), Keepalive::default());
        let set = parse(&[
            "--keepalive-seconds",
            "5",
            "--keepalive-timeout-seconds",
            "7",
        ]);
        assert_eq!(
            set.keepalive(),
            Keepalive {
                idle: Some(Duration::from_secs(5)),
                timeout: Duration::from_secs(7),
            }
        );
        assert_eq!(parse(&["--keepalive-seconds", "0"]).keepalive().idle, None);
        assert!(
            Config::try_parse_from([
                "kube-fanout",
                "--resource",
                "v1/configmaps",
                "--keepalive-timeout-seconds",
                "0"
            ])
            .is_err()
        );
    }

    #[test]
    fn connection_flags_reach_their_bounds_with_safe_defaults() {
        assert_eq!(parse(&[]).connections(), ConnectionLimits::default());
        let set = parse(&[
            "--max-concurrent-streams",
            "3",
            "--max-header-list-bytes",
            "4096",
            "--tls-handshake-timeout-seconds",
            "5",
            "--max-connections",
            "6",
            "--max-connections-per-ip",
            "0",
            "--unauthenticated-connection-timeout-seconds",
            "7",
            "--auth-failure-rate-per-source",
            "8",
            "--auth-failure-burst-per-source",
            "9",
        ]);
        assert_eq!(
            set.connections(),
            ConnectionLimits {
                max_concurrent_streams: 3,
                max_header_list_bytes: 4096,
                handshake_timeout: Duration::from_secs(5),
                max_connections: 6,
                max_connections_per_ip: 0,
                unauthenticated_timeout: Duration::from_secs(7),
                auth_failures: Some(FailureBound {
                    rate: NonZeroU32::new(8).unwrap(),
                    burst: NonZeroU32::new(9).unwrap(),
                }),
            }
        );
        let off = parse(&["--auth-failure-rate-per-source", "0"]);
        assert_eq!(off.connections().auth_failures, None);
        for zero in [
            "--max-header-list-bytes",
            "--tls-handshake-timeout-seconds",
            "--unauthenticated-connection-timeout-seconds",
        ] {
            let argv = ["kube-fanout", "--resource", "v1/configmaps", zero, "0"];
            assert!(Config::try_parse_from(argv).is_err(), "{zero}=0 accepted");
        }
    }
}

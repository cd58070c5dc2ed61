//! Command-line and environment configuration, like every kube tool.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Parser;

use crate::{
    object::Transform, reflector::ReflectorConfig, resource::GroupVersionResource,
    store::HistoryLimits, subscription::Limits,
};

/// kube-fanout: one LIST+WATCH per resource type against the API server,
/// re-served to many gRPC subscribers.
#[derive(Debug, Clone, Parser)]
#[command(name = "kube-fanout", version, about, long_about = None)]
pub struct Config {
    /// A resource type to serve, as VERSION/RESOURCE (core group) or
    /// GROUP/VERSION/RESOURCE; repeat for several. CRDs included.
    #[arg(
        long = "resource",
        required = true,
        value_name = "GVR",
        env = "KUBE_FANOUT_RESOURCE",
        value_delimiter = ','
    )]
    pub resources: Vec<GroupVersionResource>,

    /// Address of the gRPC listener.
    #[arg(long, default_value = "127.0.0.1:50051", env = "KUBE_FANOUT_LISTEN")]
    pub listen: SocketAddr,

    /// Address of the Prometheus metrics listener (`GET /metrics`).
    #[arg(
        long,
        default_value = "127.0.0.1:9090",
        env = "KUBE_FANOUT_METRICS_LISTEN"
    )]
    pub metrics_listen: SocketAddr,

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
    /// waits for the cache to catch up, in milliseconds.
    #[arg(
        long,
        default_value_t = 3_000,
        env = "KUBE_FANOUT_FRESHNESS_TIMEOUT_MS"
    )]
    pub freshness_timeout_ms: u64,

    /// Log as JSON lines instead of text.
    #[arg(long, env = "KUBE_FANOUT_LOG_JSON")]
    pub log_json: bool,
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
        }
    }

    /// The event history these flags describe.
    pub fn history(&self) -> HistoryLimits {
        HistoryLimits {
            events: usize::try_from(self.history_events).unwrap_or(usize::MAX),
            age: Duration::from_secs(self.history_seconds),
            bytes: self.history_bytes,
        }
    }
}

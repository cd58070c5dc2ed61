//! Prometheus metrics, read from the cache at scrape time: what an operator
//! graphs per resource type (objects, subscribers, sync, events and bytes
//! published, events and bytes delivered to subscribers, watches ended by
//! error, the reflector's lists, watches and failures). Nothing is
//! counted twice: the store's ring position is the events counter.
//!
//! Served over TLS when the gRPC port is (the same certificate), and with
//! authentication on only to bearer tokens whose user may `get` the
//! non-resource URL `/metrics` ([`HttpAccess`]), as controller-runtime's
//! secure metrics: the counts say which types are served and how busy
//! they are.

use std::{fmt, io, net::SocketAddr, pin::Pin, sync::Arc};

use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt, TryFutureExt};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{
        MetricType,
        counter::ConstCounter,
        gauge::{ConstGauge, Gauge},
    },
    registry::Registry,
};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Connected;

use kube_fanout_auth::{
    AuthError,
    http_access::{HttpAccess, http_status},
    reviews::NonResourceAttributes,
};
use kube_fanout_core::{
    dispatch::DispatchStatus,
    on_demand::{OnDemand, counters::Stop},
    reflector_status::ReflectorStatus,
    registry::{Deliveries, ServedTypes},
    shared_snapshot::{SharedSnapshotStats, SharedSnapshots},
    store::{Behind, StoreStatus},
    subscription::Limits,
};
use kube_fanout_listener::{
    accept::{self, Accept},
    conn::Conn,
    connections::{self, ConnectionStats},
    drain::Drain,
    keepalive::Keepalive,
    tls,
};
use tracing::{Instrument, info_span};

use crate::{
    error::{ServeError, Tasks},
    security::{Security, refuse_unauthenticated_metrics},
};

/// Reads every served type's state when scraped.
#[derive(Debug)]
pub struct CacheCollector(pub Arc<ServedTypes>);

/// One metric family: its name, help, type, and how to read its value.
struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    value: fn(&Scraped) -> u64,
}

/// One served type as read once per scrape, so that families reading the
/// same status (the dispatch's three, the lag's two) share one read.
struct Scraped {
    subscribers: u64,
    store: StoreStatus,
    reflector: ReflectorStatus,
    dispatch: DispatchStatus,
    deliveries: Deliveries,
    behind: Behind,
}

const FAMILIES: &[Family] = &[
    Family {
        name: "kube_fanout_objects",
        help: "Objects in the cache.",
        kind: MetricType::Gauge,
        value: |t| t.store.objects,
    },
    Family {
        name: "kube_fanout_subscribers",
        help: "Open Watch streams.",
        kind: MetricType::Gauge,
        value: |t| t.subscribers,
    },
    Family {
        name: "kube_fanout_indexed_subscribers",
        help: "Live Watch streams registered under an indexed field value, label values or a label's presence: woken only by events of objects that have them.",
        kind: MetricType::Gauge,
        value: |t| t.dispatch.indexed,
    },
    Family {
        name: "kube_fanout_unindexed_subscribers",
        help: "Live Watch streams offered every event (their filter pins no indexed field and requires no label).",
        kind: MetricType::Gauge,
        value: |t| t.dispatch.unindexed,
    },
    Family {
        name: "kube_fanout_subscriber_wakeups",
        help: "Times a live Watch stream was woken to look for events; over kube_fanout_events, wake-ups per event.",
        kind: MetricType::Counter,
        value: |t| t.dispatch.wakeups,
    },
    Family {
        name: "kube_fanout_synced",
        help: "1 once the first list or watch-list has been applied.",
        kind: MetricType::Gauge,
        value: |t| u64::from(t.store.head.synced),
    },
    Family {
        name: "kube_fanout_resource_version",
        help: "The resourceVersion the cache is at: the last one the upstream sent (list, event or bookmark).",
        kind: MetricType::Gauge,
        value: |t| t.store.head.resource_version.0,
    },
    Family {
        name: "kube_fanout_upstream_last_event_timestamp_seconds",
        help: "When the upstream last sent a list, watch event or bookmark of the type (Unix seconds; 0 before the first). time() minus it: how long the type has heard nothing; the API server sends a watch a bookmark about every minute.",
        kind: MetricType::Gauge,
        value: |t| {
            t.reflector
                .last_upstream_at
                .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |since| since.as_secs())
        },
    },
    Family {
        name: "kube_fanout_events",
        help: "Events published to subscribers (changes, relist differences, bookmarks).",
        kind: MetricType::Counter,
        value: |t| t.store.head.seq,
    },
    Family {
        name: "kube_fanout_event_bytes",
        help: "Bytes of object JSON published to subscribers.",
        kind: MetricType::Counter,
        value: |t| t.store.head.bytes,
    },
    Family {
        name: "kube_fanout_deliveries",
        help: "Events handed to Watch streams to send, one per subscriber an event reaches (changes, snapshot objects, bookmarks); over kube_fanout_events, deliveries per event.",
        kind: MetricType::Counter,
        value: |t| t.deliveries.events,
    },
    Family {
        name: "kube_fanout_delivered_bytes",
        help: "Bytes of the encoded WatchEvents handed to Watch streams to send, per subscriber (before gRPC framing and compression).",
        kind: MetricType::Counter,
        value: |t| t.deliveries.bytes,
    },
    Family {
        name: "kube_fanout_subscriber_lag_events",
        help: "The most ring events one live Watch stream has yet to read, counted from its start (0 while every stream has read what it was offered). Its cut-off at kube_fanout_max_lag_events counts only what its filter lets through, at most this; whatever it owes, a stream more than half the event history (--history-events, --history-bytes or --history-seconds) behind is cut off too.",
        kind: MetricType::Gauge,
        value: |t| t.behind.events,
    },
    Family {
        name: "kube_fanout_subscriber_lag_bytes",
        help: "The most bytes of object JSON one live Watch stream has yet to read, counted from its start; its cut-off is at kube_fanout_max_lag_bytes, or at half of --history-bytes.",
        kind: MetricType::Gauge,
        value: |t| t.behind.bytes,
    },
    Family {
        name: "kube_fanout_relists",
        help: "Relists that replaced the cache after its first sync.",
        kind: MetricType::Counter,
        value: |t| t.store.relists,
    },
    Family {
        name: "kube_fanout_resync_gaps",
        help: "Re-sync gaps inside the event history: resumes from RVs inside them are Expired.",
        kind: MetricType::Gauge,
        value: |t| t.store.gaps.len() as u64,
    },
    Family {
        name: "kube_fanout_history_bytes",
        help: "Bytes of object JSON the event history holds (bounded by --history-bytes).",
        kind: MetricType::Gauge,
        value: |t| t.store.history_bytes,
    },
    Family {
        name: "kube_fanout_reflector_lists",
        help: "LISTs the reflector completed.",
        kind: MetricType::Counter,
        value: |t| t.reflector.lists,
    },
    Family {
        name: "kube_fanout_reflector_watch_lists",
        help: "Watch-list syncs the reflector completed.",
        kind: MetricType::Counter,
        value: |t| t.reflector.watch_lists,
    },
    Family {
        name: "kube_fanout_reflector_watches",
        help: "WATCH requests the reflector opened.",
        kind: MetricType::Counter,
        value: |t| t.reflector.watches,
    },
    Family {
        name: "kube_fanout_reflector_failures",
        help: "Reflector failures that led to a backoff.",
        kind: MetricType::Counter,
        value: |t| t.reflector.failures,
    },
];

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let served = self.0.iter();
        let states: Vec<_> = served
            .iter()
            .map(|served| {
                let labels = vec![("resource", served.resource().gvr.to_string())];
                let scraped = Scraped {
                    subscribers: served.subscribers(""),
                    store: served.store.status(),
                    reflector: served.reflector.lock().clone(),
                    dispatch: served.store.dispatch().status(),
                    deliveries: served.deliveries(),
                    behind: served.store.behind(),
                };
                (labels, scraped)
            })
            .collect();
        let mut errors = encoder.encode_descriptor(
            "kube_fanout_watch_errors",
            "Watches that ended with an error, by its reason (SubscriberLagged, Expired, ...).",
            None,
            MetricType::Counter,
        )?;
        for served in &served {
            let resource = served.resource().gvr.to_string();
            for (reason, count) in served.watch_errors() {
                let labels = vec![
                    ("resource", resource.clone()),
                    ("reason", reason.to_owned()),
                ];
                ConstCounter::new(count).encode(errors.encode_family(&labels)?)?;
            }
        }
        let mut upstream = encoder.encode_descriptor(
            "kube_fanout_upstream_info",
            "Where the type is fed from: upstream \"api-server\" (its own reflector) or \"kube-fanout\" (a tier's leaf, address its parent now); bootstrapped_from, the peer its first snapshot came from (--bootstrap-from), if any. Always 1.",
            None,
            MetricType::Gauge,
        )?;
        for (labels, scraped) in &states {
            let reflector = &scraped.reflector;
            let mut labels = labels.clone();
            labels.extend([
                (
                    "upstream",
                    if reflector.parent.is_some() {
                        "kube-fanout"
                    } else {
                        "api-server"
                    }
                    .to_owned(),
                ),
                ("address", reflector.parent.clone().unwrap_or_default()),
                (
                    "bootstrapped_from",
                    reflector.bootstrapped_from.clone().unwrap_or_default(),
                ),
            ]);
            ConstGauge::new(1i64).encode(upstream.encode_family(&labels)?)?;
        }
        let mut lag = encoder.encode_descriptor(
            "kube_fanout_upstream_lag_seconds",
            "For a tier's leaf: how long the type's cache has been behind its parent, the age of the oldest of the parent's heads (carried by its bookmarks, one at least every second) it has not reached; a lower bound, exact to the second between them. Absent for a type fed by the API server and before the parent's first bookmark.",
            None,
            MetricType::Gauge,
        )?;
        let now = tokio::time::Instant::now();
        for (labels, scraped) in &states {
            if let Some(behind) = scraped
                .reflector
                .parent_heads
                .behind(now, scraped.store.head.resource_version)
            {
                ConstGauge::new(behind.as_secs_f64()).encode(lag.encode_family(labels)?)?;
            }
        }
        for family in FAMILIES {
            let mut metric =
                encoder.encode_descriptor(family.name, family.help, None, family.kind)?;
            for (labels, scraped) in &states {
                let value = (family.value)(scraped);
                encode_value(family.kind, value, metric.encode_family(labels)?)?;
            }
        }
        if let Some(on_demand) = self.0.on_demand() {
            encode_on_demand(on_demand, &mut encoder)?;
        }
        Ok(())
    }
}

/// The refusal reasons always exposed (zero until one happens), so that
/// a rate over them needs no series to appear first.
const REFUSALS: [&str; 4] = ["not_allowed", "not_found", "max_types", "discovery_failed"];

/// The on-demand types: how many are in each state, the bound, and how
/// many were started, stopped and refused.
fn encode_on_demand(
    on_demand: &OnDemand,
    encoder: &mut DescriptorEncoder,
) -> Result<(), fmt::Error> {
    let mut types = encoder.encode_descriptor(
        "kube_fanout_on_demand_types",
        "On-demand types held, by state: discovering, syncing, in_use (subscribers or requests), idle (stopped after --on-demand-idle-seconds).",
        None,
        MetricType::Gauge,
    )?;
    for (state, count) in on_demand.states() {
        let labels = vec![("state", state.as_str())];
        encode_value(MetricType::Gauge, count, types.encode_family(&labels)?)?;
    }
    let max = encoder.encode_descriptor(
        "kube_fanout_on_demand_max_types",
        "The most on-demand types held at once (--on-demand-max-types).",
        None,
        MetricType::Gauge,
    )?;
    encode_value(MetricType::Gauge, on_demand.options().max_types as u64, max)?;
    let counters = on_demand.counters();
    let starts = encoder.encode_descriptor(
        "kube_fanout_on_demand_starts",
        "On-demand types started (discovered, their reflector begun), each start again after a stop included.",
        None,
        MetricType::Counter,
    )?;
    encode_value(MetricType::Counter, counters.starts(), starts)?;
    let mut stops = encoder.encode_descriptor(
        "kube_fanout_on_demand_stops",
        "On-demand types stopped, by reason: idle, or removed (no longer served by the API server).",
        None,
        MetricType::Counter,
    )?;
    for why in [Stop::Idle, Stop::Removed] {
        let labels = vec![("reason", why.as_str())];
        encode_value(
            MetricType::Counter,
            counters.stops(why),
            stops.encode_family(&labels)?,
        )?;
    }
    let mut refused = encoder.encode_descriptor(
        "kube_fanout_on_demand_refusals",
        "Authorized requests for a type not served that did not start it, by reason: not_allowed (outside --on-demand-resources), not_found (not served by the API server), max_types, discovery_failed.",
        None,
        MetricType::Counter,
    )?;
    let mut refusals = counters.refusals();
    for reason in REFUSALS {
        refusals.entry(reason).or_default();
    }
    for (reason, count) in refusals {
        let labels = vec![("reason", reason)];
        encode_value(MetricType::Counter, count, refused.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Encodes `value` as a counter or else a gauge.
fn encode_value(
    kind: MetricType,
    value: u64,
    encoder: prometheus_client::encoding::MetricEncoder<'_>,
) -> Result<(), fmt::Error> {
    match kind {
        MetricType::Counter => ConstCounter::new(value).encode(encoder),
        _ => ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(encoder),
    }
}

/// Reads each listener's connection counts when scraped, labelled by the
/// listener's name.
#[derive(Debug)]
pub struct ConnectionCollector(pub Vec<(&'static str, Arc<connections::Connections>)>);

/// One connection metric family: name, help, type, and its value.
type ConnectionFamily = (
    &'static str,
    &'static str,
    MetricType,
    fn(&ConnectionStats) -> u64,
);

const CONNECTION_FAMILIES: &[ConnectionFamily] = &[
    (
        "kube_fanout_connections",
        "Open client connections (TLS handshakes in progress included).",
        MetricType::Gauge,
        |s| s.open,
    ),
    (
        "kube_fanout_connections_closed_unauthenticated",
        "Connections closed because no request on them was authenticated within --unauthenticated-connection-timeout-seconds.",
        MetricType::Counter,
        |s| s.closed_unauthenticated,
    ),
    (
        "kube_fanout_connections_closed_shut_out",
        "Connections on which nothing was authenticated, closed because their source had failed to authenticate too often (--auth-failure-rate-per-source).",
        MetricType::Counter,
        |s| s.closed_shut_out,
    ),
    (
        "kube_fanout_tls_handshake_failures",
        "TLS handshakes that failed or took longer than --tls-handshake-timeout-seconds.",
        MetricType::Counter,
        |s| s.handshake_failures,
    ),
];

impl Collector for ConnectionCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let stats: Vec<_> = self
            .0
            .iter()
            .map(|(listener, c)| (vec![("listener", *listener)], c.stats()))
            .collect();
        let mut refused = encoder.encode_descriptor(
            "kube_fanout_connections_refused",
            "Connections closed at once, by the bound reached: total (--max-connections), per_ip (--max-connections-per-ip; IPv6: per /64) or shut_out (the source failed to authenticate too often, --auth-failure-rate-per-source).",
            None,
            MetricType::Counter,
        )?;
        for (labels, stats) in &stats {
            for (bound, value) in [
                ("total", stats.refused_total),
                ("per_ip", stats.refused_per_ip),
                ("shut_out", stats.refused_shut_out),
            ] {
                let mut labels = labels.clone();
                labels.push(("bound", bound));
                ConstCounter::new(value).encode(refused.encode_family(&labels)?)?;
            }
        }
        for (name, help, kind, value) in CONNECTION_FAMILIES {
            let mut metric = encoder.encode_descriptor(name, help, None, *kind)?;
            for (labels, stats) in &stats {
                encode_value(*kind, value(stats), metric.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}

/// Reads what the shared snapshot encodings keep and have saved when
/// scraped.
#[derive(Debug)]
pub struct SharedSnapshotCollector(pub Arc<SharedSnapshots>);

/// One shared snapshot metric family: name, help, type, and its value.
type SharedSnapshotFamily = (
    &'static str,
    &'static str,
    MetricType,
    fn(&SharedSnapshotStats) -> u64,
);

const SHARED_SNAPSHOT_FAMILIES: &[SharedSnapshotFamily] = &[
    (
        "kube_fanout_shared_snapshot_bytes",
        "Bytes of snapshot encodings kept now to be shared by the subscribers sending the same snapshot (--max-shared-snapshot-bytes bounds them).",
        MetricType::Gauge,
        |s| s.retained_bytes,
    ),
    (
        "kube_fanout_shared_snapshot_bytes_limit",
        "--max-shared-snapshot-bytes.",
        MetricType::Gauge,
        |s| s.limit_bytes,
    ),
    (
        "kube_fanout_shared_snapshot_chunks_built",
        "Chunks of snapshot events (about 64 KiB each) encoded for the first time.",
        MetricType::Counter,
        |s| s.chunks_built,
    ),
    (
        "kube_fanout_shared_snapshot_chunks_shared",
        "Chunks of snapshot events sent from a kept encoding: encodes saved.",
        MetricType::Counter,
        |s| s.chunks_shared,
    ),
    (
        "kube_fanout_shared_snapshot_chunks_rebuilt",
        "Chunks of snapshot events encoded again for one subscriber because they were not kept (--max-shared-snapshot-bytes was reached).",
        MetricType::Counter,
        |s| s.chunks_rebuilt,
    ),
];

impl Collector for SharedSnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let stats = self.0.stats();
        for (name, help, kind, value) in SHARED_SNAPSHOT_FAMILIES {
            let metric = encoder.encode_descriptor(name, help, None, *kind)?;
            encode_value(*kind, value(&stats), metric)?;
        }
        Ok(())
    }
}

/// The registry holding the cache's metrics and those of the listeners'
/// `connections`.
pub fn registry(
    cache: Arc<ServedTypes>,
    connections: Vec<(&'static str, Arc<connections::Connections>)>,
) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(CacheCollector(cache)));
    registry.register_collector(Box::new(ConnectionCollector(connections)));
    registry
}

/// Registers the lag bounds (`--max-lag-events`, `--max-lag-bytes`) as
/// gauges, for the subscribers' lag to be graphed against.
pub fn register_lag_limits(registry: &mut Registry, limits: &Limits) {
    for (name, help, value) in [
        (
            "kube_fanout_max_lag_events",
            "The events a live Watch stream may have left to receive before it is cut off (--max-lag-events).",
            limits.max_lag_events,
        ),
        (
            "kube_fanout_max_lag_bytes",
            "The bytes a live Watch stream may have left to receive before it is cut off (--max-lag-bytes).",
            limits.max_lag_bytes,
        ),
    ] {
        let gauge = Gauge::<i64>::default();
        gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        registry.register(name, help, gauge);
    }
}

/// The text exposition of `registry`.
pub fn render(registry: &Registry) -> Result<String, fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

/// The content type of the OpenMetrics text format `render` writes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What a scraper must be allowed: RBAC's `nonResourceURLs: ["/metrics"]`,
/// `verbs: ["get"]`.
pub const SCRAPE: NonResourceAttributes = NonResourceAttributes {
    verb: "get",
    path: "/metrics",
};

/// Serves `GET /metrics` on `listener` until `cancel` fires: over TLS with
/// `tls`, only to callers `access` lets through if given, and with its
/// connections held to the bounds of `connections` and closed by its
/// drain as the server stops.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    connections: Arc<connections::Connections>,
    drain: Drain,
    access: Option<HttpAccess>,
    registry: Registry,
    cancel: CancellationToken,
) -> io::Result<()> {
    let registry = Arc::new(registry);
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move |headers: http::HeaderMap| {
            let (registry, access) = (registry.clone(), access.clone());
            async move {
                if let Some(access) = access
                    && let Err(err) = access.check(&headers, SCRAPE).await
                {
                    tracing::debug!(error = %err, "scrape refused");
                    return refusal(&err);
                }
                match render(&registry) {
                    Ok(text) => ([(http::header::CONTENT_TYPE, OPENMETRICS)], text).into_response(),
                    Err(_) => http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                }
            }
        }),
    );
    // The gRPC listener's accept loop: TLS handshakes in their own tasks,
    // bounded in time, so a slow client holds up no scrape; connections
    // counted against the same bounds. None is closed for authenticating
    // nothing: a scrape's authentication does not mark its connection,
    // and Prometheus keeps its connection between scrapes.
    let accept = Accept {
        tls,
        keepalive: Keepalive::default(),
        max_age: None,
        connections,
        close_unauthenticated: false,
        drain,
    };
    let (conns, drained) = accept::incoming(listener, accept, cancel.clone());
    axum::serve(Connections(Box::pin(conns)), app)
        .with_graceful_shutdown(async move { cancel.cancelled().await })
        .await?;
    drained.await;
    Ok(())
}

/// Serves `registry` on `addr` (over TLS when `security` has it, to the
/// scrapes `access` lets through if given), its connections counted in
/// `connections` and closed by `drain` as the server stops, in `tasks`
/// until `cancel` fires; the address bound. Refuses unauthenticated
/// scrapes beyond loopback unless told to.
pub(crate) async fn listen(
    addr: SocketAddr,
    security: &Security,
    access: Option<HttpAccess>,
    registry: Registry,
    (connections, drain): (Arc<connections::Connections>, Drain),
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) -> Result<SocketAddr, ServeError> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    refuse_unauthenticated_metrics(security, access.is_some(), bound)?;
    let tls = security
        .tls
        .as_ref()
        .map(tls::metrics_acceptor)
        .transpose()?;
    tasks.spawn(
        serve(
            listener,
            tls,
            connections,
            drain,
            access,
            registry,
            cancel.clone(),
        )
        .map_err(ServeError::Io)
        .instrument(info_span!("metrics", %bound)),
    );
    Ok(bound)
}

/// The answer to a refused scrape: 401 (with the challenge RFC 6750 asks
/// for), 403, or 503, and the reason.
fn refusal(err: &AuthError) -> Response {
    let status = http_status(err);
    let mut response = (status, format!("{err}\n")).into_response();
    if status == http::StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer"),
        );
    }
    response
}

/// Accepted connections, plain or TLS, as axum takes them.
struct Connections(Pin<Box<dyn Stream<Item = io::Result<Conn>> + Send>>);

impl axum::serve::Listener for Connections {
    type Io = Conn;
    type Addr = Option<SocketAddr>;

    async fn accept(&mut self) -> (Conn, Option<SocketAddr>) {
        loop {
            match self.0.next().await {
                Some(Ok(conn)) => {
                    let peer = conn.connect_info().remote_addr;
                    return (conn, peer);
                }
                Some(Err(err)) => tracing::debug!(error = %err, "metrics connection failed"),
                // Cancelled: the graceful shutdown, on the same token, ends
                // the server.
                None => std::future::pending().await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Option<SocketAddr>> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use kube_fanout_core::{
        event::EventKind,
        fields::SelectableFields,
        filter::Filter,
        fixtures::{configmaps, object},
        object::ResourceVersion,
        registry::Served,
        store::Store,
        subscription::WatchError,
    };
    use kube_fanout_listener::{connections::ConnectionLimits, failures::FailureBound};
    use parking_lot::Mutex;

    use super::*;

    #[test]
    fn the_lag_bounds_are_gauges_of_the_configured_limits() {
        let mut registry = Registry::default();
        let limits = Limits {
            max_lag_events: 7,
            max_lag_bytes: 4096,
            ..Limits::default()
        };
        register_lag_limits(&mut registry, &limits);
        let text = render(&registry).unwrap();
        for line in [
            "# TYPE kube_fanout_max_lag_events gauge",
            "kube_fanout_max_lag_events 7",
            "kube_fanout_max_lag_bytes 4096",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
    }

    /// A leaf's types say how long they have been behind their parent; a
    /// type fed by the API server, or not looked at yet, has no line.
    #[tokio::test(start_paused = true)]
    async fn a_leafs_lag_behind_its_parent_is_exposed_and_no_other() {
        let leaf = Arc::new(Store::new(configmaps(), 10));
        leaf.replace(vec![object("a", 3, "{}")], ResourceVersion(3));
        let mut heads = kube_fanout_core::reflector_status::ParentHeads::default();
        let looked = tokio::time::Instant::now();
        heads.observe(
            "http://parent:50051/",
            looked,
            ResourceVersion(9),
            ResourceVersion(3),
        );
        let status = |parent: Option<&str>, parent_heads| {
            Arc::new(Mutex::new(ReflectorStatus {
                parent: parent.map(str::to_owned),
                parent_heads,
                ..ReflectorStatus::default()
            }))
        };
        let mut cache = ServedTypes::default();
        cache.insert(Served::new(
            leaf,
            status(Some("http://parent:50051/"), heads),
        ));
        let mut secrets = configmaps();
        secrets.gvr = "v1/secrets".parse().unwrap();
        let fed = Arc::new(Store::new(secrets, 10));
        fed.replace(Vec::new(), ResourceVersion(3));
        cache.insert(Served::new(fed, status(None, Default::default())));
        tokio::time::advance(std::time::Duration::from_millis(7500)).await;
        let text = render(&registry(Arc::new(cache), Vec::new())).unwrap();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("kube_fanout_upstream_lag_seconds"))
            .collect();
        assert_eq!(
            lines,
            [r#"kube_fanout_upstream_lag_seconds{resource="v1/configmaps"} 7.5"#],
            "{text}"
        );
    }

    #[test]
    fn every_family_is_exposed_per_resource_type_with_its_value() {
        let store = Arc::new(Store::new(configmaps(), 10));
        store.replace(vec![object("a", 3, "{}")], ResourceVersion(3));
        store.apply(EventKind::Added, object("b", 4, "{}"));
        store.replace(
            vec![
                object("a", 3, "{}"),
                object("b", 4, "{}"),
                object("c", 5, "{}"),
            ],
            ResourceVersion(6),
        );
        let history = object("b", 4, "{}").json.len() + object("c", 5, "{}").json.len();
        let reflector = Arc::new(Mutex::new(ReflectorStatus {
            watches: 2,
            failures: 1,
            bootstrapped_from: Some("http://peer:50051/".into()),
            last_upstream_at: Some(
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000),
            ),
            ..ReflectorStatus::default()
        }));
        let mut cache = ServedTypes::default();
        cache.insert(Served::new(store, reflector));
        let served = cache.iter()[0].clone();
        let subscriber = served.subscriber("");
        subscriber.delivered(1, 100);
        served.subscriber("").delivered(1, 23);
        subscriber.ended(&WatchError::Lagged {
            resume_from: ResourceVersion(4),
        });
        let dispatch = served.store.dispatch();
        let _indexed = dispatch.register(
            Filter::new("ns", "", "", &SelectableFields::default())
                .unwrap()
                .pinned(),
            std::iter::empty(),
        );
        let _unindexed = dispatch.register(Filter::default().pinned(), std::iter::empty());
        dispatch.woken();
        let text = render(&registry(Arc::new(cache), Vec::new())).unwrap();
        let history_line =
            format!(r#"kube_fanout_history_bytes{{resource="v1/configmaps"}} {history}"#);
        for line in [
            r#"kube_fanout_objects{resource="v1/configmaps"} 3"#,
            r#"kube_fanout_subscribers{resource="v1/configmaps"} 1"#,
            r#"kube_fanout_synced{resource="v1/configmaps"} 1"#,
            r#"kube_fanout_indexed_subscribers{resource="v1/configmaps"} 1"#,
            r#"kube_fanout_unindexed_subscribers{resource="v1/configmaps"} 1"#,
            r#"kube_fanout_subscriber_wakeups_total{resource="v1/configmaps"} 1"#,
            r#"kube_fanout_resource_version{resource="v1/configmaps"} 6"#,
            r#"kube_fanout_upstream_last_event_timestamp_seconds{resource="v1/configmaps"} 1700000000"#,
            r#"kube_fanout_events_total{resource="v1/configmaps"} 3"#,
            r#"kube_fanout_relists_total{resource="v1/configmaps"} 1"#,
            r#"kube_fanout_resync_gaps{resource="v1/configmaps"} 1"#,
            r#"kube_fanout_reflector_watches_total{resource="v1/configmaps"} 2"#,
            r#"kube_fanout_reflector_failures_total{resource="v1/configmaps"} 1"#,
            "# TYPE kube_fanout_event_bytes counter",
            r#"kube_fanout_deliveries_total{resource="v1/configmaps"} 2"#,
            r#"kube_fanout_delivered_bytes_total{resource="v1/configmaps"} 123"#,
            r#"kube_fanout_watch_errors_total{resource="v1/configmaps",reason="SubscriberLagged"} 1"#,
            // No live subscriber reads the store (the guards above are
            // counts, not readers): none is behind.
            r#"kube_fanout_subscriber_lag_events{resource="v1/configmaps"} 0"#,
            r#"kube_fanout_subscriber_lag_bytes{resource="v1/configmaps"} 0"#,
            r#"kube_fanout_upstream_info{resource="v1/configmaps",upstream="api-server",address="",bootstrapped_from="http://peer:50051/"} 1"#,
            history_line.as_str(),
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
    }

    #[test]
    fn connection_counts_are_exposed_per_listener() {
        let one = std::num::NonZeroU32::MIN;
        let connections = connections::Connections::new(ConnectionLimits {
            max_connections_per_ip: 1,
            auth_failures: Some(FailureBound {
                rate: one,
                burst: one,
            }),
            ..ConnectionLimits::default()
        });
        let ip = "127.0.0.1".parse().unwrap();
        let _open = connections.admit(ip).unwrap();
        connections.admit(ip).unwrap_err();
        let failing = "127.0.0.2".parse().unwrap();
        let slot = connections.admit(failing).unwrap();
        slot.standing().failed_authentication().unwrap();
        slot.standing().failed_authentication().unwrap_err();
        drop(slot);
        connections.admit(failing).unwrap_err();
        connections.closed_unauthenticated();
        connections.handshake_failed();
        let health = connections::Connections::new(ConnectionLimits::default());
        let text = render(&registry(
            Arc::new(ServedTypes::default()),
            vec![("grpc", connections), ("health", health)],
        ))
        .unwrap();
        for line in [
            r#"kube_fanout_connections{listener="grpc"} 1"#,
            r#"kube_fanout_connections{listener="health"} 0"#,
            r#"kube_fanout_connections_refused_total{listener="grpc",bound="per_ip"} 1"#,
            r#"kube_fanout_connections_refused_total{listener="grpc",bound="total"} 0"#,
            r#"kube_fanout_connections_refused_total{listener="grpc",bound="shut_out"} 1"#,
            r#"kube_fanout_connections_closed_shut_out_total{listener="grpc"} 0"#,
            r#"kube_fanout_connections_closed_unauthenticated_total{listener="grpc"} 1"#,
            r#"kube_fanout_tls_handshake_failures_total{listener="grpc"} 1"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
    }
}

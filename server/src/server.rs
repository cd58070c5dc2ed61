//! Wiring: discover the resource types, start one reflector each, and
//! serve the gRPC API with health and reflection until cancelled.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use futures::TryFutureExt;
use kube_fanout_proto::v1::{FILE_DESCRIPTOR_SET, kube_fanout_server::KubeFanoutServer};
use tokio::{net::TcpListener, task::JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use kube_fanout_core::dispatch::{IndexFieldFlag, IndexedField, UnindexableField};

use crate::{
    auth::{
        Access, Authenticator, Authorizer,
        authn::TokenCacheTtl,
        authz::{DecisionCacheTtl, NonResourceAuthorizer},
        budget::{ReviewBudget, ReviewLimits},
        http_access::HttpAccess,
        layer::AuthenticateLayer,
        limits::{CallerLimits, Limiter},
        reviews::{KubeReviews, ReviewClient},
    },
    connections::{ConnectionLimits, Connections},
    keepalive::Keepalive,
    list_budget::{HoldListBytes, ListBudget, ListBytesLimits},
    metrics,
    reflector::{Reflector, ReflectorConfig},
    registry::{Served, ServedTypes},
    resource::{GroupVersionResource, ResourceError, ResourceType},
    retire::MaxConnectionAge,
    service::FanoutService,
    store::{HistoryLimits, Store},
    subscription::Limits,
    tls::{self, TlsError, TlsFiles},
};
use kube_fanout_service::MAX_REQUEST_BYTES;

/// What the server needs besides an API client and a listener.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The resource types to serve.
    pub resources: Vec<GroupVersionResource>,
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
    /// [`crate::retire`]).
    pub max_connection_age: Option<MaxConnectionAge>,
    /// Bounds on connections and what each may carry, on the gRPC and
    /// the health listener alike (each counted apart).
    pub connections: ConnectionLimits,
}

/// How callers are secured. The default is what `--auth=none` on loopback
/// gives: plaintext, everyone allowed (for tests; the binary defaults to
/// authentication and authorization on).
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// Serve TLS from these files.
    pub tls: Option<TlsFiles>,
    /// Authenticate and authorize every request; `None` is `--auth=none`.
    pub auth: Option<AuthOptions>,
    /// Without authentication (`auth: None`, or metrics not
    /// authenticated), listen on a non-loopback address all the same
    /// (`--insecure-allow-unauthenticated`).
    pub allow_unauthenticated_remote: bool,
    /// What each caller may hold open (default: no bound).
    pub caller_limits: CallerLimits,
    /// Bytes List responses may hold, each and all together (default: no
    /// bound worth the name).
    pub list_bytes: ListBytesLimits,
}

/// How callers are authenticated and authorized.
#[derive(Debug, Clone)]
pub struct AuthOptions {
    /// The audiences a bearer token must be for (empty: the API server's).
    pub audiences: Vec<String>,
    /// How long TokenReview answers are cached.
    pub token_ttl: TokenCacheTtl,
    /// How long SubjectAccessReview answers are cached.
    pub decision_ttl: DecisionCacheTtl,
    /// How long one review may take before the request fails UNAVAILABLE.
    pub review_timeout: Duration,
    /// Scrapes of `/metrics` authenticated (the same tokens as gRPC
    /// callers) and authorized (`get` on the non-resource URL); false is
    /// `--metrics-auth=none`.
    pub metrics: bool,
    /// The bounds on TokenReviews for tokens not known to be good.
    pub review_limits: ReviewLimits,
    /// The API client for reviews, apart from the reflectors' (`None`: the
    /// reflectors' client is shared, as tests that do not care do).
    pub review_client: Option<ReviewClient>,
}

impl Default for AuthOptions {
    /// The API server's own webhook defaults for tokens (2 min, failures
    /// 10 s; the success TTL also bounds how long a watch outlives its
    /// token); a minute for allowed decisions, which bounds how long a
    /// watch outlives a revocation of its permission, and 30 s for denied
    /// ones.
    fn default() -> Self {
        AuthOptions {
            audiences: Vec::new(),
            token_ttl: TokenCacheTtl {
                success: Duration::from_secs(120),
                failure: Duration::from_secs(10),
            },
            decision_ttl: DecisionCacheTtl {
                allowed: Duration::from_secs(60),
                denied: Duration::from_secs(30),
            },
            review_timeout: Duration::from_secs(10),
            metrics: true,
            review_limits: ReviewLimits::default(),
            review_client: None,
        }
    }
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A requested resource type could not be resolved.
    #[error(transparent)]
    Resource(#[from] ResourceError),
    /// `--index-field` names a field the type's subscribers cannot be
    /// indexed by.
    #[error(transparent)]
    Unindexable(#[from] UnindexableField),
    /// `--index-field` names a type that is not served.
    #[error("--index-field {0}: not a served resource type (add it with --resource)")]
    IndexFieldNotServed(GroupVersionResource),
    /// The gRPC transport failed.
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// Building the reflection service failed.
    #[error("gRPC reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The listener could not be read.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
    /// TLS could not be set up.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// Unauthenticated serving on a non-loopback address, not allowed.
    #[error(
        "refusing to serve without authentication on {0}, which is not a loopback address: remove --auth=none, or add --insecure-allow-unauthenticated"
    )]
    Unauthenticated(SocketAddr),
    /// Unauthenticated metrics on a non-loopback address, not allowed.
    #[error(
        "refusing to serve metrics without authentication on {0}, which is not a loopback address: remove --auth=none and --metrics-auth=none, listen on loopback (--metrics-listen), or add --insecure-allow-unauthenticated"
    )]
    UnauthenticatedMetrics(SocketAddr),
}

/// The gRPC service name that health reports on besides "".
const SERVICE_NAME: &str = "kubefanout.v1.KubeFanout";

/// A server that is discovering, syncing and serving.
pub struct Running {
    /// The address the gRPC listener is bound to.
    pub local_addr: SocketAddr,
    /// The address the metrics listener is bound to, if one was asked for.
    pub metrics_addr: Option<SocketAddr>,
    /// The address the plaintext health listener is bound to, if one was
    /// asked for.
    pub health_addr: Option<SocketAddr>,
    /// The served types.
    pub cache: Arc<ServedTypes>,
    tasks: JoinSet<Result<(), ServeError>>,
    cancel: CancellationToken,
}

impl Running {
    /// Stops every reflector and the listener, and waits for all of them.
    pub async fn shutdown(mut self) -> Result<(), ServeError> {
        self.cancel.cancel();
        self.wait().await
    }

    /// Waits until every task ends (after cancellation or a failure); the
    /// first failure is returned and stops the rest.
    pub async fn wait(&mut self) -> Result<(), ServeError> {
        let mut outcome = Ok(());
        while let Some(joined) = self.tasks.join_next().await {
            if let Ok(Err(err)) = joined {
                self.cancel.cancel();
                outcome = outcome.and(Err(err));
            }
        }
        outcome
    }
}

/// Resolves every resource type (failing on the first unknown one), then
/// starts the reflectors and the gRPC server on `listener`. Everything
/// stops when `cancel` fires.
pub async fn start(
    client: kube::Client,
    listener: TcpListener,
    options: ServerOptions,
    cancel: CancellationToken,
) -> Result<Running, ServeError> {
    if let Some(flag) = options
        .index_fields
        .iter()
        .find(|f| !options.resources.contains(&f.gvr))
    {
        return Err(ServeError::IndexFieldNotServed(flag.gvr.clone()));
    }
    let mut types = Vec::new();
    for gvr in &options.resources {
        let resource = ResourceType::discover(&client, gvr).await?;
        let extra: Vec<String> = options
            .index_fields
            .iter()
            .filter(|f| f.gvr == *gvr)
            .map(|f| f.field.clone())
            .collect();
        let indexed = IndexedField::for_type(&resource, &extra)?;
        types.push((resource, indexed));
    }
    let mut tasks = JoinSet::new();
    let mut cache = ServedTypes::default();
    for (resource, indexed) in types {
        let span = info_span!("reflector", resource = %resource.gvr);
        let store = Arc::new(Store::with_index(resource, options.history, indexed));
        let reflector = Reflector::new(client.clone(), store.clone(), options.reflector);
        cache.insert(Served::new(store, reflector.status()));
        let cancel = cancel.clone();
        tasks.spawn(
            async move {
                reflector.run(cancel).await;
                Ok(())
            }
            .instrument(span),
        );
    }
    let cache = Arc::new(cache);

    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_not_serving::<KubeFanoutServer<FanoutService>>()
        .await;
    tasks.spawn(
        report_health(cache.clone(), health, options.unready_after, cancel.clone())
            .instrument(info_span!("health")),
    );

    // Counted apart (the metrics listener's too, below), so that a flood
    // of one listener's connections leaves the others' free.
    let grpc_connections = Connections::new(options.connections);
    let health_connections = Connections::new(options.connections);
    let health_addr = match options.health_addr {
        Some(addr) => {
            let listener = TcpListener::bind(addr).await?;
            let bound = listener.local_addr()?;
            let probes = bounded(&options.connections).add_service(health_service.clone());
            // Nothing authenticates here: each connection lasts the
            // unauthenticated timeout at most, which also ends its health
            // Watch streams.
            let accept = tls::Accept {
                tls: None,
                keepalive: options.keepalive,
                max_age: None,
                connections: health_connections.clone(),
                close_unauthenticated: true,
            };
            let shutdown = cancel.clone();
            tasks.spawn(
                async move {
                    probes
                        .serve_with_incoming_shutdown(
                            tls::incoming(listener, accept, shutdown.clone()),
                            shutdown.cancelled(),
                        )
                        .await?;
                    Ok(())
                }
                .instrument(info_span!("health-listener", %bound)),
            );
            Some(bound)
        }
        None => None,
    };

    let local_addr = listener.local_addr()?;
    let (access, authenticate, scrapes) = secure(&client, &options.security, local_addr)?;
    let list_budget = ListBudget::new(options.security.list_bytes);
    let metrics_addr = match options.metrics_addr {
        Some(addr) => {
            let listener = TcpListener::bind(addr).await?;
            let bound = listener.local_addr()?;
            refuse_unauthenticated_metrics(&options.security, scrapes.is_some(), bound)?;
            let tls = options
                .security
                .tls
                .as_ref()
                .map(tls::metrics_acceptor)
                .transpose()?;
            let metrics_connections = Connections::new(options.connections);
            let mut registry = metrics::registry(
                cache.clone(),
                vec![
                    ("grpc", grpc_connections.clone()),
                    ("health", health_connections.clone()),
                    ("metrics", metrics_connections.clone()),
                ],
            );
            registry.register_collector(Box::new(list_budget.clone()));
            if let Some(layer) = &authenticate {
                layer.counters().register(&mut registry);
            }
            tasks.spawn(
                metrics::serve(
                    listener,
                    tls,
                    metrics_connections,
                    scrapes,
                    registry,
                    cancel.clone(),
                )
                .map_err(ServeError::Io)
                .instrument(info_span!("metrics", %bound)),
            );
            Some(bound)
        }
        None => None,
    };

    // The google.rpc error details (ErrorInfo) are served too, so grpcurl
    // can print the reason and resourceVersion of an Expired or lagging
    // status instead of "google.rpc.ErrorInfo is not recognized".
    let descriptors = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection = descriptors().build_v1()?;
    let reflection_alpha = descriptors().build_v1alpha()?;
    let tls = options
        .security
        .tls
        .as_ref()
        .map(tls::acceptor)
        .transpose()?;
    let service = FanoutService::new(cache.clone(), options.limits)
        .with_access(access)
        .with_limiter(Limiter::new(options.security.caller_limits))
        .with_list_budget(list_budget);
    let mut builder = bounded(&options.connections);
    if let Some(age) = options.max_connection_age {
        // GOAWAY at the age; the watches end a little later (see
        // `crate::retire`), and with them the connection.
        builder = builder.max_connection_age(age.0);
    }
    let router = builder
        .layer(tower::util::option_layer(authenticate))
        .add_service(health_service)
        .add_service(reflection)
        .add_service(reflection_alpha)
        .add_service(HoldListBytes(compressed(KubeFanoutServer::new(service))));
    // Open watches end at once (with ShuttingDown) so that the graceful
    // shutdown is not held up by them. A task of its own: tonic does not
    // wait on its shutdown signal once the listener's stream has ended,
    // which the same cancellation ends.
    let (shutdown, closing) = (cancel.clone(), cache.clone());
    tasks.spawn(
        async move {
            shutdown.cancelled().await;
            closing.close_subscribers();
            Ok(())
        }
        .instrument(info_span!("close-watches")),
    );
    let accept = tls::Accept {
        tls,
        keepalive: options.keepalive,
        max_age: options.max_connection_age,
        connections: grpc_connections,
        // Without authentication nothing ever is authenticated.
        close_unauthenticated: options.security.auth.is_some(),
    };
    let shutdown = cancel.clone();
    tasks.spawn(
        async move {
            router
                .serve_with_incoming_shutdown(
                    tls::incoming(listener, accept, shutdown.clone()),
                    shutdown.cancelled(),
                )
                .await?;
            Ok(())
        }
        .instrument(info_span!("grpc", %local_addr)),
    );
    info!(%local_addr, "serving");
    Ok(Running {
        local_addr,
        metrics_addr,
        health_addr,
        cache,
        tasks,
        cancel,
    })
}

/// A gRPC server builder with the HTTP/2 bounds of `limits`. tonic would
/// otherwise pass no stream bound at all to hyper (overriding hyper's own
/// 200), so one connection could open streams without end.
fn bounded(limits: &ConnectionLimits) -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .max_concurrent_streams(
            (limits.max_concurrent_streams > 0).then_some(limits.max_concurrent_streams),
        )
        .http2_max_header_list_size(limits.max_header_list_bytes)
}

/// gRPC message compression, negotiated per call and off unless the
/// client asks: a request compressed with gzip or zstd is accepted, and
/// responses are compressed with the first of them the client lists in
/// `grpc-accept-encoding`. tonic then compresses every response message of
/// the call, however small (it has no size threshold), and per call: a
/// live event shared by many subscribers is compressed once for each of
/// them that asked (what that costs is in BENCHMARKS.md). A request is
/// decoded only up to [`MAX_REQUEST_BYTES`] after decompression, so a few
/// KB of gzip cannot make kube-fanout hold megabytes (tonic answers
/// RESOURCE_EXHAUSTED, or OUT_OF_RANGE for an uncompressed one, naming the
/// limit).
fn compressed(server: KubeFanoutServer<FanoutService>) -> KubeFanoutServer<FanoutService> {
    use tonic::codec::CompressionEncoding::{Gzip, Zstd};
    server
        .max_decoding_message_size(MAX_REQUEST_BYTES)
        .accept_compressed(Gzip)
        .accept_compressed(Zstd)
        .send_compressed(Gzip)
        .send_compressed(Zstd)
}

/// The access checks, the authentication layer and the metrics' checks
/// `security` asks for; refuses to serve unauthenticated beyond loopback
/// unless told to.
fn secure(
    client: &kube::Client,
    security: &Security,
    addr: SocketAddr,
) -> Result<(Access, Option<AuthenticateLayer>, Option<HttpAccess>), ServeError> {
    let Some(auth) = &security.auth else {
        refuse_unauthenticated_remote(security, addr)?;
        warn!(
            %addr,
            "authentication and authorization are off (--auth=none): every caller sees every served object"
        );
        return Ok((Access::open(), None, None));
    };
    let review_client = match &auth.review_client {
        Some(ReviewClient(own)) => own.clone(),
        None => {
            warn!("reviews share the reflectors' API client");
            client.clone()
        }
    };
    let reviews = Arc::new(KubeReviews::new(review_client, auth.review_timeout));
    let authenticator = Arc::new(Authenticator::new(
        reviews.clone(),
        auth.audiences.clone(),
        auth.token_ttl,
        ReviewBudget::new(auth.review_limits),
    ));
    let scrapes = auth.metrics.then(|| {
        HttpAccess::new(
            authenticator.clone(),
            Arc::new(NonResourceAuthorizer::new(
                reviews.clone(),
                auth.decision_ttl,
            )),
        )
    });
    let authorizer = Authorizer::new(reviews, auth.decision_ttl);
    if security.tls.is_none() {
        warn!(%addr, "bearer tokens are accepted over plaintext: serve TLS (--tls-cert-file) beyond loopback");
    }
    Ok((
        Access::checked(Arc::new(authorizer), authenticator.clone()),
        Some(AuthenticateLayer::new(authenticator)),
        scrapes,
    ))
}

/// Serving without authentication is for loopback, unless explicitly
/// allowed.
fn refuse_unauthenticated_remote(security: &Security, addr: SocketAddr) -> Result<(), ServeError> {
    if security.auth.is_none() && !addr.ip().is_loopback() && !security.allow_unauthenticated_remote
    {
        return Err(ServeError::Unauthenticated(addr));
    }
    Ok(())
}

/// The same for metrics: unauthenticated scrapes only on loopback unless
/// explicitly allowed (the counts show which types are served and how
/// busy each is).
fn refuse_unauthenticated_metrics(
    security: &Security,
    authenticated: bool,
    addr: SocketAddr,
) -> Result<(), ServeError> {
    if !authenticated && !addr.ip().is_loopback() && !security.allow_unauthenticated_remote {
        return Err(ServeError::UnauthenticatedMetrics(addr));
    }
    Ok(())
}

/// Readiness (`kubefanout.v1.KubeFanout`): SERVING once every store has
/// synced (the API server's own readiness waits for its watch cache the
/// same way), and NOT_SERVING again while any reflector has failed for
/// longer than `unready_after` without opening a watch, since its data is
/// going stale and new subscribers are better off on a replica that is
/// following. Open watches are not touched. Liveness (`""`) stays SERVING
/// once synced: a restart would not bring the API server back.
async fn report_health(
    cache: Arc<ServedTypes>,
    health: tonic_health::server::HealthReporter,
    unready_after: Option<Duration>,
    cancel: CancellationToken,
) -> Result<(), ServeError> {
    let mut heads: Vec<_> = cache.iter().map(|s| s.store.subscribe()).collect();
    for head in &mut heads {
        tokio::select! {
            _ = head.wait_for(|h| h.synced) => {}
            () = cancel.cancelled() => return Ok(()),
        }
    }
    health
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let mut ready = None;
    let mut tick = tokio::time::interval(READINESS_PERIOD);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = cancel.cancelled() => return Ok(()),
        }
        let now = tokio::time::Instant::now();
        let stale: Vec<String> = cache
            .iter()
            .filter(|s| failing_too_long(s.reflector.lock().failing_since, unready_after, now))
            .map(|s| s.store.resource().gvr.to_string())
            .collect();
        if ready == Some(stale.is_empty()) {
            continue;
        }
        ready = Some(stale.is_empty());
        if stale.is_empty() {
            health
                .set_serving::<KubeFanoutServer<FanoutService>>()
                .await;
            info!(
                service = SERVICE_NAME,
                "every resource type synced and followed; ready"
            );
        } else {
            health
                .set_not_serving::<KubeFanoutServer<FanoutService>>()
                .await;
            warn!(
                service = SERVICE_NAME,
                ?stale,
                ?unready_after,
                "reflectors failing without a watch; not ready"
            );
        }
    }
}

/// How often readiness is re-evaluated (the chart probes every 5 s).
const READINESS_PERIOD: Duration = Duration::from_secs(1);

/// Whether a reflector failing since `since` has failed for longer than
/// the server stays ready for.
fn failing_too_long(
    since: Option<tokio::time::Instant>,
    unready_after: Option<Duration>,
    now: tokio::time::Instant,
) -> bool {
    match (since, unready_after) {
        (Some(since), Some(grace)) => now.duration_since(since) >= grace,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn readiness_turns_off_only_after_the_grace_and_never_without_one() {
        let since = tokio::time::Instant::now();
        let grace = Some(Duration::from_secs(30));
        tokio::time::advance(Duration::from_secs(29)).await;
        let now = tokio::time::Instant::now();
        assert!(!failing_too_long(Some(since), grace, now));
        assert!(!failing_too_long(None, grace, now));
        tokio::time::advance(Duration::from_secs(1)).await;
        let now = tokio::time::Instant::now();
        assert!(failing_too_long(Some(since), grace, now));
        assert!(!failing_too_long(Some(since), None, now));
    }

    #[test]
    fn unauthenticated_serving_is_for_loopback_unless_explicitly_allowed() {
        let open = Security::default();
        // Parsed only, never bound: tests use loopback alone.
        let remote: SocketAddr = "10.1.2.3:50051".parse().unwrap();
        for loopback in ["127.0.0.1:50051", "[::1]:50051"] {
            refuse_unauthenticated_remote(&open, loopback.parse().unwrap()).unwrap();
        }
        let err = refuse_unauthenticated_remote(&open, remote).unwrap_err();
        assert!(
            err.to_string().contains("--insecure-allow-unauthenticated"),
            "{err}"
        );
        let allowed = Security {
            allow_unauthenticated_remote: true,
            ..Security::default()
        };
        refuse_unauthenticated_remote(&allowed, remote).unwrap();
        let secured = Security {
            auth: Some(AuthOptions::default()),
            ..Security::default()
        };
        refuse_unauthenticated_remote(&secured, remote).unwrap();
    }

    #[test]
    fn unauthenticated_metrics_are_for_loopback_unless_explicitly_allowed() {
        let metrics: SocketAddr = "10.1.2.3:9090".parse().unwrap();
        let secured = Security {
            auth: Some(AuthOptions::default()),
            ..Security::default()
        };
        refuse_unauthenticated_metrics(&secured, true, metrics).unwrap();
        refuse_unauthenticated_metrics(&secured, false, "127.0.0.1:9090".parse().unwrap()).unwrap();
        let err = refuse_unauthenticated_metrics(&secured, false, metrics).unwrap_err();
        assert!(
            err.to_string()
                .contains("refusing to serve metrics without authentication on 10.1.2.3:9090"),
            "{err}"
        );
        let allowed = Security {
            allow_unauthenticated_remote: true,
            ..secured
        };
        refuse_unauthenticated_metrics(&allowed, false, metrics).unwrap();
        assert!(AuthOptions::default().metrics, "on unless turned off");
    }
}

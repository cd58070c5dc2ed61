//! Health (`grpc.health.v1`): liveness once every store has synced, and
//! readiness that follows the reflectors; served on the gRPC listener and,
//! for the kubelet's probes, alone on a plaintext listener of its own.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use kube_fanout_core::registry::ServedTypes;
use kube_fanout_listener::{
    accept::{self, Accept},
    connections::Connections,
    drain::Drain,
    requests::CountRequestsLayer,
};
use kube_fanout_proto::v1::kube_fanout_server::KubeFanoutServer;
use kube_fanout_service::service::FanoutService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic_health::{
    pb::health_server::HealthServer,
    server::{HealthReporter, HealthService},
};
use tracing::{Instrument, info, info_span, warn};

use crate::{
    error::{ServeError, Tasks},
    grpc::{bounded, is_stream},
    options::ServerOptions,
};

/// The gRPC service name that health reports on besides "".
const SERVICE_NAME: &str = "kubefanout.v1.KubeFanout";

/// The health service, NOT_SERVING until [`report_health`] (started here,
/// in `tasks`) finds every store synced.
pub(crate) async fn start(
    cache: Arc<ServedTypes>,
    unready_after: Option<Duration>,
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) -> HealthServer<HealthService> {
    // `health_reporter()` would do the same, but under a type that cannot
    // be named.
    let health = HealthReporter::new();
    let health_service = HealthServer::new(HealthService::from_health_reporter(health.clone()));
    health
        .set_not_serving::<KubeFanoutServer<FanoutService>>()
        .await;
    tasks.spawn(
        report_health(cache, health, unready_after, cancel.clone())
            .instrument(info_span!("health")),
    );
    health_service
}

/// Serves `service` alone, in plaintext, on `addr` (the kubelet's gRPC
/// probe cannot speak TLS), its connections counted in `connections` and
/// closed by `drain` as the server stops; the address bound.
pub(crate) async fn listen(
    addr: SocketAddr,
    service: HealthServer<HealthService>,
    options: &ServerOptions,
    connections: Arc<Connections>,
    drain: Drain,
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) -> Result<SocketAddr, ServeError> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let probes = bounded(&options.connections)
        .layer(CountRequestsLayer::new(is_stream))
        .add_service(service);
    // Nothing authenticates here: each connection lasts the
    // unauthenticated timeout at most, which also ends its health
    // Watch streams.
    let accept = Accept {
        tls: None,
        keepalive: options.keepalive,
        max_age: None,
        connections,
        close_unauthenticated: true,
        drain,
    };
    let shutdown = cancel.clone();
    tasks.spawn(
        async move {
            let (conns, drained) = accept::incoming(listener, accept, shutdown.clone());
            probes
                .serve_with_incoming_shutdown(conns, shutdown.cancelled())
                .await?;
            drained.await;
            Ok(())
        }
        .instrument(info_span!("health-listener", %bound)),
    );
    Ok(bound)
}

/// Readiness (`kubefanout.v1.KubeFanout`): SERVING once every store has
/// synced (the API server's own readiness waits for its watch cache the
/// same way), and NOT_SERVING again while any reflector has failed for
/// longer than `unready_after` without opening a watch, since its data is
/// going stale and new subscribers are better off on a replica that is
/// following. Open watches are not touched. Liveness (`""`) stays SERVING
/// once synced: a restart would not bring the API server back. On-demand
/// types count for neither: ListResources and the metrics show their
/// state.
async fn report_health(
    cache: Arc<ServedTypes>,
    health: HealthReporter,
    unready_after: Option<Duration>,
    cancel: CancellationToken,
) -> Result<(), ServeError> {
    // The configured types only: on-demand ones come and go with their
    // callers, and a replica serves the others whatever they do.
    let mut heads: Vec<_> = cache.configured().map(|s| s.store.subscribe()).collect();
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
            .configured()
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
}

//! The gRPC listener: the kube-fanout service behind authentication, with
//! health and reflection beside it, HTTP/2 bounds, compression, TLS, and
//! retirement of old connections.

use std::sync::Arc;

use kube_fanout_auth::{Access, layer::AuthenticateLayer, limits::Limiter};
use kube_fanout_core::{registry::ServedTypes, shared_snapshot::SharedSnapshots};
use kube_fanout_listener::{
    accept::{self, Accept},
    connections::{ConnectionLimits, Connections},
    drain::Drain,
    requests::CountRequestsLayer,
    tls,
};
use kube_fanout_proto::v1::{FILE_DESCRIPTOR_SET, kube_fanout_server::KubeFanoutServer};
use kube_fanout_service::{
    MAX_REQUEST_BYTES,
    list_budget::{HoldListBytes, ListBudget},
    service::FanoutService,
    snapshot_handoff::SendSnapshots,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic_health::{pb::health_server::HealthServer, server::HealthService};
use tracing::{Instrument, info_span};

use crate::{
    error::{ServeError, Tasks},
    options::ServerOptions,
    request_spans::RequestSpansLayer,
};

/// What the gRPC listener serves, besides the options.
pub(crate) struct Grpc {
    /// The served types.
    pub(crate) cache: Arc<ServedTypes>,
    /// The access checks of every request.
    pub(crate) access: Access,
    /// The authentication layer, with authentication on.
    pub(crate) authenticate: Option<AuthenticateLayer>,
    /// Bytes List responses may hold.
    pub(crate) list_budget: ListBudget,
    /// The snapshot encodings being shared.
    pub(crate) shared_snapshots: Arc<SharedSnapshots>,
    /// Health, served here too.
    pub(crate) health: HealthServer<HealthService>,
    /// This listener's connections, counted apart from the others'.
    pub(crate) connections: Arc<Connections>,
    /// The server's drain.
    pub(crate) drain: Drain,
}

impl Grpc {
    /// Serves on `listener` until `cancel` fires, in `tasks`; open
    /// watches end at once then (with ShuttingDown), and the drain closes
    /// the connections.
    pub(crate) fn serve(
        self,
        listener: TcpListener,
        options: &ServerOptions,
        tasks: &mut Tasks,
        cancel: &CancellationToken,
    ) -> Result<(), ServeError> {
        let local_addr = listener.local_addr()?;
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
        let service = FanoutService::new(self.cache.clone(), options.limits)
            .with_access(self.access)
            .with_limiter(Limiter::new(options.security.caller_limits))
            .with_list_budget(self.list_budget)
            .with_shared_snapshots(self.shared_snapshots);
        let mut builder = bounded(&options.connections);
        if let Some(age) = options.max_connection_age {
            // GOAWAY at the age; the watches end a little later (see
            // `kube_fanout_listener::retire`), and with them the connection.
            builder = builder.max_connection_age(age.0);
        }
        // Outermost, so that the call's span covers its authentication.
        let spans = options.request_spans.then(RequestSpansLayer::default);
        let router = builder
            .layer(CountRequestsLayer::new(is_stream))
            .layer(tower::util::option_layer(spans))
            .layer(tower::util::option_layer(self.authenticate))
            .add_service(self.health)
            .add_service(reflection)
            .add_service(reflection_alpha)
            .add_service(HoldListBytes(SendSnapshots(compressed(
                KubeFanoutServer::new(service),
            ))));
        // Open watches end at once (with ShuttingDown) so that the graceful
        // shutdown is not held up by them; those whose clients do not read
        // what is ahead of that status go with their connections, which
        // the drain closes. A task of its own: tonic does not wait on its
        // shutdown signal once the listener's stream has ended, which the
        // same cancellation ends.
        let (shutdown, closing) = (cancel.clone(), self.cache);
        tasks.spawn(
            async move {
                shutdown.cancelled().await;
                closing.close_subscribers();
                Ok(())
            }
            .instrument(info_span!("close-watches")),
        );
        let accept = Accept {
            tls,
            keepalive: options.keepalive,
            max_age: options.max_connection_age,
            connections: self.connections,
            // Without authentication nothing ever is authenticated.
            close_unauthenticated: options.security.auth.is_some(),
            drain: self.drain,
        };
        let shutdown = cancel.clone();
        tasks.spawn(
            async move {
                let (conns, drained) = accept::incoming(listener, accept, shutdown.clone());
                router
                    .serve_with_incoming_shutdown(conns, shutdown.cancelled())
                    .await?;
                drained.await;
                Ok(())
            }
            .instrument(info_span!("grpc", %local_addr)),
        );
        Ok(())
    }
}

/// Whether a gRPC call is a stream that never ends by itself (a Watch,
/// kube-fanout's or health's), which a stopping server does not wait for.
pub(crate) fn is_stream(_: &http::Method, uri: &http::Uri) -> bool {
    matches!(
        uri.path(),
        "/kubefanout.v1.KubeFanout/Watch" | "/grpc.health.v1.Health/Watch"
    )
}

/// A gRPC server builder with the HTTP/2 bounds of `limits`. tonic would
/// otherwise pass no stream bound at all to hyper (overriding hyper's own
/// 200), so one connection could open streams without end.
pub(crate) fn bounded(limits: &ConnectionLimits) -> tonic::transport::Server {
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

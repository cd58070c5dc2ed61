//! A span per gRPC call, for the exported traces ([`crate::traces`]): a
//! child of the caller's W3C trace context (`traceparent`, `tracestate`),
//! named for the method as OpenTelemetry's RPC conventions name it, and
//! open until the response body ends, so a Watch's span lasts as long as
//! the watch; health checks get none. The span is held by the body, not
//! entered per message: nothing is added to the event path. Installed
//! only when traces are exported; without it there is no span per call.

use std::{
    pin::Pin,
    task::{Context, Poll, ready},
};

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body::{Body, Frame};
use kube_fanout_core::quote::QUOTE_LIMIT;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tower::{Layer, Service};
use tracing::{Instrument, Span, field::Empty};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The path prefix of `grpc.health.v1` calls, which get no span.
const HEALTH: &str = "/grpc.health.v1.Health/";

/// Gives every call (but health checks) a span whose parent is the caller's trace context.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestSpansLayer {
    propagator: TraceContextPropagator,
}

impl<S> Layer<S> for RequestSpansLayer {
    type Service = RequestSpans<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestSpans {
            inner,
            propagator: self.propagator.clone(),
        }
    }
}

/// The service of [`RequestSpansLayer`].
#[derive(Debug, Clone)]
pub(crate) struct RequestSpans<S> {
    inner: S,
    propagator: TraceContextPropagator,
}

impl<S, B> Service<http::Request<B>> for RequestSpans<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The kubelet's probes, every few seconds, would be most traces.
        if request.uri().path().starts_with(HEALTH) {
            return Box::pin(self.inner.call(request));
        }
        let span = request_span(request.uri().path());
        let parent = self.propagator.extract(&Headers(request.headers()));
        // Before the span is first entered: its parent is fixed then. It
        // fails only without the OpenTelemetry layer, which installs this.
        let _ = span.set_parent(parent);
        let response = span.in_scope(|| self.inner.call(request));
        let held = span.clone();
        Box::pin(
            async move {
                let response = response.await?;
                // A trailers-only answer (most errors) has its status here.
                record_status(&held, response.headers());
                Ok(response.map(|body| tonic::body::Body::new(InSpan { body, span: held })))
            }
            .instrument(span),
        )
    }
}

/// Records the gRPC status among `headers` (or trailers), if there is one.
fn record_status(span: &Span, headers: &http::HeaderMap) {
    if let Some(code) = headers
        .get("grpc-status")
        .and_then(|code| code.to_str().ok()?.parse::<i64>().ok())
    {
        span.record("rpc.grpc.status_code", code);
    }
}

/// The span of a call to `path` (`/package.Service/Method`), the path cut
/// to [`QUOTE_LIMIT`] characters: it is the caller's to choose.
fn request_span(path: &str) -> Span {
    let path = match path.char_indices().nth(QUOTE_LIMIT) {
        Some((cut, _)) => &path[..cut],
        None => path,
    };
    let name = path.strip_prefix('/').unwrap_or(path);
    let (service, method) = name.split_once('/').unwrap_or((name, ""));
    tracing::info_span!(
        "request",
        otel.name = name,
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = service,
        rpc.method = method,
        rpc.grpc.status_code = Empty,
    )
}

/// The request headers, as the propagator reads them.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// A response body that holds its call's span until it ends (or is
/// dropped, when the caller goes away), recording the status its
/// trailers carry.
struct InSpan {
    body: tonic::body::Body,
    span: Span,
}

impl Body for InSpan {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        if let Some(Ok(frame)) = &frame
            && let Some(trailers) = frame.trailers_ref()
        {
            record_status(&self.span, trailers);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

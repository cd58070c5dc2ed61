//! Traces exported over OTLP/gRPC, when the standard OpenTelemetry
//! variables name an endpoint (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT`); docs/operations/deploy.md ("Traces") lists
//! them. Without one nothing is installed: no OpenTelemetry layer, no span
//! per call, nothing on the event path.
//!
//! What is sent: the spans that declare an OpenTelemetry kind (`otel.kind`:
//! a gRPC call's `request`, see [`crate::request_spans`], and a
//! reflector's `list`, `watch_list` and `watch` phases), and every span
//! opened inside one (a relist and its unit, the API client's requests at
//! `RUST_LOG=debug`), with the log events inside them. The spans of the
//! long-lived tasks (`reflector`, `grpc`, `accept`, ...) are not: each
//! would last as long as the process, and hold every event logged in it
//! until then. So each call and each reflector phase is the root of a
//! trace of its own, or a child of the caller's trace context.
//!
//! An `https://` endpoint is reached over TLS, verified against the CA
//! in `OTEL_EXPORTER_OTLP_(TRACES_)CERTIFICATE` (that CA alone) or else
//! the system's roots, with the client certificate and key of
//! `OTEL_EXPORTER_OTLP_(TRACES_)CLIENT_CERTIFICATE` and `_CLIENT_KEY` when
//! both are set: the standard variables, which the exporter crate does
//! not read itself ([`tls_config`]).
//!
//! Spans go through the SDK's batch processor: a bounded queue
//! (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048 by default; spans past it are
//! dropped, never waited for), exported from a thread of its own, and
//! flushed by [`Traces::shutdown`] once the server has drained.

use std::path::PathBuf;

use opentelemetry::{KeyValue, trace::TracerProvider as _};
use opentelemetry_otlp::{ExporterBuildError, SpanExporter, WithTonicConfig as _};
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};
use tracing::{Metadata, Subscriber};
use tracing_subscriber::{
    Layer,
    filter::{self, FilterExt as _},
    layer::Context,
    registry::LookupSpan,
};

/// The variables that turn the export on: an endpoint for traces, or for
/// every signal.
pub const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// `service.name` unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES`
/// says otherwise (the SDK's own default is `unknown_service:` and the
/// executable's name).
pub const SERVICE_NAME: &str = "kube-fanout";

/// The trace export could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    /// The exporter refused its configuration.
    #[error("cannot export traces over OTLP: {0}")]
    Exporter(#[from] ExporterBuildError),
    /// A certificate or key a variable names could not be read.
    #[error("cannot export traces over OTLP: reading {variable} ({}): {source}", path.display())]
    Read {
        /// The variable that names the file.
        variable: String,
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// A client certificate without its key, or a key without its
    /// certificate.
    #[error(
        "cannot export traces over OTLP: {set} is set but {unset} is not; a client certificate needs both"
    )]
    HalfAnIdentity {
        /// The variable that is set.
        set: String,
        /// The one missing.
        unset: &'static str,
    },
}

/// The value of the traces-specific variable `OTEL_EXPORTER_OTLP_TRACES_<name>`,
/// else of the general `OTEL_EXPORTER_OTLP_<name>` (the precedence the
/// specification gives them), with the variable's name; empty counts as
/// unset.
fn variable(name: &str) -> Option<(String, String)> {
    [
        format!("OTEL_EXPORTER_OTLP_TRACES_{name}"),
        format!("OTEL_EXPORTER_OTLP_{name}"),
    ]
    .into_iter()
    .find_map(|variable| {
        let value = std::env::var(&variable).ok().filter(|v| !v.is_empty())?;
        Some((variable, value))
    })
}

/// The contents of the file variable `name` names, if it is set.
fn read_variable(name: &str) -> Result<Option<(String, Vec<u8>)>, TracesError> {
    let Some((variable, path)) = variable(name) else {
        return Ok(None);
    };
    let path = PathBuf::from(path);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some((variable, bytes))),
        Err(source) => Err(TracesError::Read {
            variable,
            path,
            source,
        }),
    }
}

/// The TLS an `https://` endpoint is reached with (`None` for `http://`,
/// whose scheme says plaintext whatever else is set): the CA of
/// `CERTIFICATE` alone when it is set, as the other SDKs do (a collector
/// with a private CA is not also trusted as any public name), else the
/// system's roots (the image carries Debian's bundle); and the client
/// certificate and key, which go together.
fn tls_config() -> Result<Option<ClientTlsConfig>, TracesError> {
    let https = ENDPOINT_VARIABLES
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
        .is_some_and(|endpoint| endpoint.starts_with("https://"));
    if !https {
        return Ok(None);
    }
    let mut tls = match read_variable("CERTIFICATE")? {
        Some((_, ca)) => ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)),
        None => ClientTlsConfig::new().with_native_roots(),
    };
    match (
        read_variable("CLIENT_CERTIFICATE")?,
        read_variable("CLIENT_KEY")?,
    ) {
        (Some((_, cert)), Some((_, key))) => tls = tls.identity(Identity::from_pem(cert, key)),
        (Some((set, _)), None) => {
            return Err(TracesError::HalfAnIdentity {
                set,
                unset: "OTEL_EXPORTER_OTLP_CLIENT_KEY",
            });
        }
        (None, Some((set, _))) => {
            return Err(TracesError::HalfAnIdentity {
                set,
                unset: "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            });
        }
        (None, None) => {}
    }
    Ok(Some(tls))
}

/// The trace export, when configured.
#[derive(Debug)]
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// The export the environment asks for, if any: the exporter reads the
    /// endpoint, headers, timeout and compression variables, the SDK the
    /// sampler, resource and batch ones, [`tls_config`] the certificate
    /// ones. Must run inside the Tokio runtime
    /// (the exporter's gRPC channel is driven by it).
    pub fn from_env() -> Result<Option<Self>, TracesError> {
        let configured = ENDPOINT_VARIABLES
            .iter()
            .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()));
        if !configured {
            return Ok(None);
        }
        let mut exporter = SpanExporter::builder().with_tonic();
        if let Some(tls) = tls_config()? {
            exporter = exporter.with_tls_config(tls);
        }
        let exporter = exporter.build()?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build();
        Ok(Some(Traces { provider }))
    }

    /// The layer that turns the exported spans (see the module docs) into
    /// OpenTelemetry spans. It does not time each entry into a span (busy
    /// and idle time): a watch's span is entered for each batch of events.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer(SERVICE_NAME))
            .with_tracked_inactivity(false)
            .with_filter(
                filter::filter_fn(|meta| !meta.is_span()).or(filter::dynamic_filter_fn(
                    |meta: &Metadata<'_>, cx: &Context<'_, S>| {
                        meta.fields().field("otel.kind").is_some() || cx.lookup_current().is_some()
                    },
                )),
            )
    }

    /// Exports what is still queued and stops the export; called once the
    /// server has drained, so the last calls' spans are sent too.
    pub async fn shutdown(self) {
        // The processor's thread exports on the runtime's gRPC channel while
        // this waits for it, so the wait is off the runtime's workers.
        let provider = self.provider;
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(error = %err, "flushing the traces failed"),
            Err(err) => tracing::warn!(error = %err, "flushing the traces failed"),
        }
    }
}

/// The SDK's resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`),
/// named [`SERVICE_NAME`] when neither names the service.
fn resource() -> Resource {
    let resource = Resource::builder().build();
    let named = resource
        .get(&opentelemetry::Key::new("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    if named {
        return resource;
    }
    Resource::builder()
        .with_attribute(KeyValue::new("service.name", SERVICE_NAME))
        .build()
}

//! Traces exported over OTLP: the kube-fanout binary, given
//! `OTEL_EXPORTER_OTLP_ENDPOINT`, sends its spans to a minimal OTLP/gRPC
//! trace receiver run here, each call's span a child of the caller's W3C
//! trace context, beside the reflector's phase and relist spans; without
//! the variable it sends nothing, and installs nothing. To an `https://`
//! endpoint it sends over TLS, trusting the CA the standard variable
//! names and presenting the client certificate the standard variables
//! name; with another CA, or without the client certificate the receiver
//! asks for, nothing arrives.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context, Result, ensure};
use kube_fanout_proto::v1::{ListRequest, kube_fanout_client::KubeFanoutClient};
use kube_fanout_tests::{
    controlplane::ControlPlane,
    pki::{Ca, Pair},
    process::FanoutProcess,
    support::{configmaps, read_snapshot, watch_list},
};
use opentelemetry_proto::tonic::{
    collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
        trace_service_server::{TraceService, TraceServiceServer},
    },
    common::v1::{AnyValue, KeyValue, any_value},
    trace::v1::{Span, span::SpanKind},
};
use tokio_util::sync::CancellationToken;
use tonic::{
    Request, Response, Status,
    transport::{Certificate, Identity, ServerTlsConfig, server::TcpIncoming},
};

const BINARY: &str = env!("CARGO_BIN_EXE_kube-fanout-under-test");

/// The exporter's default endpoint (127.0.0.1:4317, the OTLP/gRPC port):
/// where a process would send its spans if it exported without being
/// told where, so the receiver listens there and sees that too.
const RECEIVER: &str = "127.0.0.1:4317";

/// How long SIGTERM may take, the last spans' flush included.
const SHUTDOWN: Duration = Duration::from_secs(10);

/// A span as received, with the `service.name` of its resource.
#[derive(Debug, Clone)]
struct Received {
    service: String,
    span: Span,
}

/// A minimal OTLP/gRPC trace receiver: keeps every span exported to it.
#[derive(Debug, Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Received>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let mut spans = self.spans.lock().expect("not poisoned");
        for resource_spans in request.into_inner().resource_spans {
            let attributes = resource_spans.resource.map(|r| r.attributes);
            let service = string(attributes.as_deref().unwrap_or_default(), "service.name")
                .unwrap_or_default()
                .to_owned();
            for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
                spans.push(Received {
                    service: service.clone(),
                    span,
                });
            }
        }
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Receiver {
    /// Serves on [`RECEIVER`] until `stop` fires.
    async fn start(stop: CancellationToken) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind(RECEIVER)
            .await
            .with_context(|| format!("the test's OTLP receiver cannot listen on {RECEIVER}"))?;
        Ok(Self::serve(
            listener,
            tonic::transport::Server::builder(),
            stop,
        ))
    }

    /// Serves over TLS with `serving`, asking for a client certificate
    /// issued by `clients`, on a port of its own until `stop` fires: its
    /// address.
    async fn start_tls(
        serving: &Pair,
        clients: &Ca,
        stop: CancellationToken,
    ) -> Result<(Self, SocketAddr)> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let tls = ServerTlsConfig::new()
            .identity(Identity::from_pem(&serving.cert, &serving.key))
            .client_ca_root(Certificate::from_pem(clients.pem()));
        let builder = tonic::transport::Server::builder().tls_config(tls)?;
        Ok((Self::serve(listener, builder, stop), addr))
    }

    fn serve(
        listener: tokio::net::TcpListener,
        mut builder: tonic::transport::Server,
        stop: CancellationToken,
    ) -> Self {
        let receiver = Receiver::default();
        let server = builder
            .add_service(TraceServiceServer::new(receiver.clone()))
            .serve_with_incoming_shutdown(TcpIncoming::from(listener), stop.cancelled_owned());
        tokio::spawn(server);
        receiver
    }

    fn spans(&self) -> Vec<Received> {
        self.spans.lock().expect("not poisoned").clone()
    }
}

/// The string attribute `key` among `attributes`.
fn string<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match &kv.value {
            Some(AnyValue {
                value: Some(any_value::Value::StringValue(s)),
            }) => Some(s.as_str()),
            _ => None,
        })
}

/// The W3C trace context of one client call.
struct Caller {
    trace_id: [u8; 16],
    span_id: [u8; 8],
}

impl Caller {
    fn new() -> Self {
        Caller {
            trace_id: rand::random(),
            span_id: rand::random(),
        }
    }

    fn traceparent(&self) -> String {
        format!("00-{}-{}-01", hex(&self.trace_id), hex(&self.span_id))
    }

    /// `message` as a request carrying this context.
    fn request<T>(&self, message: T) -> Result<Request<T>> {
        let mut request = Request::new(message);
        let metadata = request.metadata_mut();
        metadata.insert("traceparent", self.traceparent().parse()?);
        metadata.insert("tracestate", TRACESTATE.parse()?);
        Ok(request)
    }

    /// The received server span of `method` called in this context.
    fn span_of<'a>(&self, spans: &'a [Received], method: &str) -> Option<&'a Received> {
        spans.iter().find(|r| {
            r.span.trace_id == self.trace_id
                && string(&r.span.attributes, "rpc.method") == Some(method)
        })
    }
}

/// The `tracestate` each call carries; the server's spans keep it.
const TRACESTATE: &str = "kube-fanout-test=1";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A List and a Watch (read to its snapshot's end, then closed) on
/// `addr`, each in a context of its own.
async fn call(addr: SocketAddr) -> Result<(Caller, Caller)> {
    let mut client = KubeFanoutClient::connect(format!("http://{addr}")).await?;
    let list = Caller::new();
    client
        .list(list.request(ListRequest {
            resource: Some(configmaps()),
            namespace: "default".into(),
            ..ListRequest::default()
        })?)
        .await?;
    let watch = Caller::new();
    let mut stream = client
        .watch(watch.request(watch_list("default"))?)
        .await?
        .into_inner();
    read_snapshot(&mut stream).await?;
    drop(stream);
    Ok((list, watch))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_and_reflector_phases_are_exported_in_the_callers_trace_and_nothing_without_an_endpoint()
-> Result<()> {
    kube_fanout_tests::init_logging();
    let cp = ControlPlane::start().await?;
    let stop = CancellationToken::new();
    let receiver = Receiver::start(stop.clone()).await?;
    let args = ["--resource", "v1/configmaps", "--auth=none"];

    // Without an endpoint: nothing, though its service is named. Its spans
    // would go to the default endpoint, where the receiver listens.
    let untraced = FanoutProcess::serving_with_env(
        BINARY.as_ref(),
        &cp,
        &args,
        &[("OTEL_SERVICE_NAME", "kube-fanout-untraced")],
    )
    .await?;
    let (untraced_list, untraced_watch) = call(untraced.addr).await?;
    untraced.terminate(SHUTDOWN).await?;

    // With one, and a schedule delay longer than the test: every span
    // arrives with the flush at shutdown, none before.
    let traced = FanoutProcess::serving_with_env(
        BINARY.as_ref(),
        &cp,
        &args,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &format!("http://{RECEIVER}")),
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
        ],
    )
    .await?;
    let (list, watch) = call(traced.addr).await?;
    ensure!(
        receiver.spans().is_empty(),
        "spans arrived before the flush at shutdown"
    );
    traced.terminate(SHUTDOWN).await?;
    stop.cancel();
    let spans = receiver.spans();
    println!("received {} spans:", spans.len());
    for r in &spans {
        println!(
            "  {} {:?} trace {} parent {}",
            r.service,
            r.span.name,
            hex(&r.span.trace_id),
            hex(&r.span.parent_span_id)
        );
    }

    ensure!(
        spans.iter().all(|r| r.service == "kube-fanout"),
        "a span of another service (the untraced process's?) arrived"
    );
    for caller in [&untraced_list, &untraced_watch] {
        ensure!(
            spans.iter().all(|r| r.span.trace_id != caller.trace_id),
            "a span of the untraced process's calls arrived"
        );
    }
    for (caller, method) in [(&list, "List"), (&watch, "Watch")] {
        let call = caller
            .span_of(&spans, method)
            .with_context(|| format!("no span of the {method} call in its caller's trace"))?;
        ensure!(
            call.span.parent_span_id == caller.span_id,
            "the {method} span's parent is {}, not the caller's span {}",
            hex(&call.span.parent_span_id),
            hex(&caller.span_id)
        );
        ensure!(call.span.name == format!("kubefanout.v1.KubeFanout/{method}"));
        ensure!(call.span.kind == SpanKind::Server as i32);
        ensure!(
            call.span.trace_state == TRACESTATE,
            "{:?}",
            call.span.trace_state
        );
    }

    // The reflector's sync: its watch-list phase, a root, with the first
    // relist inside it.
    let phase = spans
        .iter()
        .find(|r| r.span.name == "watch_list")
        .context("no watch_list span of the reflector")?;
    ensure!(phase.span.parent_span_id.is_empty(), "a phase is a root");
    ensure!(string(&phase.span.attributes, "resource") == Some("v1/configmaps"));
    ensure!(
        spans.iter().any(|r| r.span.name == "relist"
            && r.span.trace_id == phase.span.trace_id
            && r.span.parent_span_id == phase.span.span_id),
        "no relist span inside the watch_list phase"
    );
    // The watch that followed it lasted until the shutdown, which ended
    // it and then flushed it.
    ensure!(
        spans.iter().any(|r| r.span.name == "watch"
            && string(&r.span.attributes, "resource") == Some("v1/configmaps")),
        "no watch span of the reflector"
    );
    // The long-lived tasks' spans are not sent.
    ensure!(!spans.iter().any(|r| r.span.name == "reflector"));
    Ok(())
}

/// Over TLS: with `OTEL_EXPORTER_OTLP_CERTIFICATE` naming the receiver's
/// CA and the client certificate and key it asks for, the List's span
/// arrives in its caller's trace; with another CA, or without the client
/// certificate, the process runs and serves as ever, and nothing of it
/// arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_go_to_an_https_endpoint_over_tls_verified_with_the_ca_the_variables_name()
-> Result<()> {
    kube_fanout_tests::init_logging();
    let cp = ControlPlane::start().await?;
    let dir = tempfile::tempdir()?;
    let (collector_ca, other_ca, clients) = (
        Ca::new("otlp-collector")?,
        Ca::new("not-the-collector")?,
        Ca::new("otlp-clients")?,
    );
    let file = |name: &str, pem: &str| -> Result<String> {
        let path = dir.path().join(name);
        std::fs::write(&path, pem)?;
        Ok(path.display().to_string())
    };
    let ca = file("ca.crt", &collector_ca.pem())?;
    let wrong_ca = file("other-ca.crt", &other_ca.pem())?;
    let client = clients.client("kube-fanout", "exporters")?;
    let (client_cert, client_key) = (
        file("client.crt", &client.cert)?,
        file("client.key", &client.key)?,
    );
    let stop = CancellationToken::new();
    let (receiver, addr) =
        Receiver::start_tls(&collector_ca.serving()?, &clients, stop.clone()).await?;
    let endpoint = format!("https://localhost:{}", addr.port());
    let args = ["--resource", "v1/configmaps", "--auth=none"];

    /// Runs kube-fanout as `service`, exporting to the receiver with
    /// `tls` (the TLS variables), makes its calls and stops it: the List's
    /// caller.
    async fn run(
        cp: &ControlPlane,
        service: &str,
        endpoint: &str,
        args: &[&str],
        tls: &[(&str, &str)],
    ) -> Result<Caller> {
        let mut env = vec![
            ("OTEL_SERVICE_NAME", service),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            // Exported at the shutdown's flush, bounded when it fails.
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000"),
        ];
        env.extend_from_slice(tls);
        let process = FanoutProcess::serving_with_env(BINARY.as_ref(), cp, args, &env).await?;
        let (list, _watch) = call(process.addr).await?;
        process.terminate(SHUTDOWN).await?;
        Ok(list)
    }
    let identity = [
        (
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            client_cert.as_str(),
        ),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", client_key.as_str()),
    ];
    let mut wrong = vec![("OTEL_EXPORTER_OTLP_CERTIFICATE", wrong_ca.as_str())];
    wrong.extend_from_slice(&identity);
    run(&cp, "trusting-another-ca", &endpoint, &args, &wrong).await?;
    let without_identity = [("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", ca.as_str())];
    run(
        &cp,
        "without-a-client-certificate",
        &endpoint,
        &args,
        &without_identity,
    )
    .await?;
    let mut right = vec![("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", ca.as_str())];
    right.extend_from_slice(&identity);
    let trusted = run(&cp, "trusted", &endpoint, &args, &right).await?;
    stop.cancel();
    let spans = receiver.spans();
    println!("received {} spans over TLS", spans.len());
    let list = trusted
        .span_of(&spans, "List")
        .context("no span of the List call arrived over TLS with the collector's CA and a client certificate")?;
    ensure!(list.span.parent_span_id == trusted.span_id);
    let services: std::collections::BTreeSet<&str> =
        spans.iter().map(|r| r.service.as_str()).collect();
    ensure!(
        services == ["trusted"].into(),
        "spans arrived from the services {services:?}: only the one trusting the collector's CA and presenting a client certificate should get through"
    );
    Ok(())
}

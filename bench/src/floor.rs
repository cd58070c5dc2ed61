//! `fanout-floor`: the least a lone watch event costs on kube-fanout's own
//! stack, for the nodes case of `fanout-bench vs-apiserver` (issue 29).
//!
//! The same work as kube-fanout does for a pod event that one node agent
//! watches, written plainly with the same libraries and nothing else: one
//! JSON WATCH of pods on the API server through kube's client (hyper,
//! rustls), its body split into lines; each line's envelope and object
//! read with serde_json for what is needed (the object's key, RV and
//! `spec.nodeName`), the object kept in a map; the event, prost-encoded,
//! handed through a channel to the one gRPC Watch (tonic, over kube-fanout's
//! own TLS accept path) whose field selector names that node. No ring, no
//! index beyond the map of nodes, no projections, no bounds, no metrics,
//! no snapshot (an agent's watch starts empty), managedFields left in
//! (3 KB more to encrypt than kube-fanout sends: well under a microsecond).
//!
//! With `FANOUT_FLOOR_RAW_UPSTREAM=true` it reads the WATCH without kube's
//! client and hyper: its own TLS connection (rustls, as below them), an
//! HTTP/1.1 request written by hand, the chunked body decoded and split by
//! hand into one buffer. What is left is the reading itself: the floor
//! under the libraries.
//!
//! It takes the flags the bench gives kube-fanout (those it has no use for
//! are accepted and ignored) and logs the line the bench waits for, so
//! `--fanout-bin target/release/fanout-floor` runs it in kube-fanout's
//! place, measured, pinned and placed the same way.

use std::{
    borrow::Cow,
    collections::HashMap,
    convert::Infallible,
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use anyhow::Context;
use clap::Parser;
use futures::{StreamExt, TryStreamExt, future::BoxFuture, stream::BoxStream};
use http_body_util::BodyExt;
use kube_fanout_listener::{
    accept::{self, Accept},
    connections::{ConnectionLimits, Connections},
    drain::Drain,
    keepalive::Keepalive,
    tls::{self, TlsFiles},
};
use kube_fanout_proto::v1::{EventType, WatchEvent, WatchRequest};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::{io::AsyncBufReadExt, net::TcpListener, sync::mpsc};
use tokio_stream::wrappers::{LinesStream, ReceiverStream};
use tokio_util::{io::StreamReader, sync::CancellationToken};
use tonic::{
    Request, Response, Status,
    body::Body,
    server::{Grpc, NamedService, ServerStreamingService},
};
use tonic_prost::ProstCodec;
use tracing::Instrument;

/// The global allocator kube-fanout's binary uses.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The flags the bench passes to kube-fanout.
#[derive(Parser)]
struct Args {
    /// A core type, `v1/RESOURCE` (the nodes case serves `v1/pods`; the
    /// bench starts with `v1/configmaps`).
    #[arg(long)]
    resource: String,
    #[arg(long)]
    listen: SocketAddr,
    #[arg(long)]
    kubeconfig: PathBuf,
    #[arg(long)]
    tls_cert_file: PathBuf,
    #[arg(long)]
    tls_private_key_file: PathBuf,
    /// Accepted and ignored (the floor has no metrics, auth or bounds).
    #[arg(long)]
    auth: Option<String>,
    #[arg(long)]
    metrics_listen: Option<String>,
    #[arg(long)]
    max_watches_per_caller: Option<String>,
    #[arg(long)]
    max_snapshots_per_caller: Option<String>,
    #[arg(long)]
    max_connections: Option<String>,
    #[arg(long)]
    max_connections_per_ip: Option<String>,
    /// Read the WATCH over a TLS connection of its own, not kube's client.
    #[arg(long, env = "FANOUT_FLOOR_RAW_UPSTREAM")]
    raw_upstream: bool,
}

/// Each watched node's agent: where its events go.
type Agents = Arc<Mutex<HashMap<String, mpsc::Sender<Result<WatchEvent, Status>>>>>;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let path = match args.resource.split_once('/') {
        Some(("v1", resource)) if !resource.contains('/') => format!("/api/v1/{resource}"),
        _ => anyhow::bail!(
            "the floor serves core types only (v1/RESOURCE), not {}",
            args.resource
        ),
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let client = kube::Client::try_from(config.clone())?;
    let agents = Agents::default();

    let acceptor = tls::acceptor(&TlsFiles {
        cert: args.tls_cert_file,
        key: args.tls_private_key_file,
        client_ca: None,
    })?;
    let accept = Accept {
        tls: Some(acceptor),
        keepalive: Keepalive::default(),
        max_age: None,
        connections: Connections::new(ConnectionLimits {
            max_connections: 1_000_000,
            max_connections_per_ip: 1_000_000,
            auth_failures: None,
            ..ConnectionLimits::default()
        }),
        close_unauthenticated: false,
        // The floor runs until it is killed: nothing to drain.
        drain: Drain::default(),
    };
    let listener = TcpListener::bind(args.listen).await?;
    let (conns, _drained) = accept::incoming(listener, accept, CancellationToken::new());
    let service = Floor(agents.clone());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(conns)
            .instrument(tracing::info_span!("floor grpc")),
    );

    let rv = list_rv(&client, &path).await?;
    let mut lines = if args.raw_upstream {
        raw::watch(&config, &path, &rv).await?
    } else {
        watch(&client, &path, &rv).await?
    };
    // The line the bench waits for.
    println!("every resource type synced");
    let mut store: HashMap<String, Box<str>> = HashMap::new();
    while let Some(line) = lines.next().await {
        let line = line?;
        let envelope: Envelope<'_> = serde_json::from_str(&line)?;
        if envelope.kind == "BOOKMARK" {
            continue;
        }
        let pod: Pod<'_> = serde_json::from_str(envelope.object.get())?;
        let object: Box<str> = envelope.object.get().into();
        let event = WatchEvent {
            r#type: match envelope.kind {
                "ADDED" => EventType::Added,
                "DELETED" => EventType::Deleted,
                _ => EventType::Modified,
            }
            .into(),
            resource_version: pod.metadata.resource_version.into_owned(),
            object: object.to_string(),
            resync: false,
            head_resource_version: String::new(),
        };
        store.insert(
            format!("{}/{}", pod.metadata.namespace, pod.metadata.name),
            object,
        );
        let node = pod.spec.and_then(|s| s.node_name);
        if let Some(node) = node {
            let agent = agents.lock().expect("agents").get(node.as_ref()).cloned();
            if let Some(agent) = agent {
                let _ = agent.try_send(Ok(event));
            }
        }
    }
    anyhow::bail!("the API server ended the watch")
}

/// The resourceVersion of the collection at `path` now.
async fn list_rv(client: &kube::Client, path: &str) -> anyhow::Result<String> {
    let list: serde_json::Value = client
        .request(http::Request::get(format!("{path}?limit=1")).body(Vec::new())?)
        .await?;
    Ok(list["metadata"]["resourceVersion"]
        .as_str()
        .context("a list without its resourceVersion")?
        .to_owned())
}

/// The WATCH of every object at `path` after `rv`, as lines, through
/// kube's client.
async fn watch(
    client: &kube::Client,
    path: &str,
    rv: &str,
) -> anyhow::Result<BoxStream<'static, std::io::Result<String>>> {
    let request = http::Request::get(format!(
        "{path}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}"
    ))
    .header(http::header::ACCEPT, "application/json")
    .body(kube::client::Body::from(Vec::new()))?;
    let response = client.send(request).await?;
    let bytes = response
        .into_body()
        .into_data_stream()
        .map_err(std::io::Error::other);
    Ok(LinesStream::new(StreamReader::new(bytes).lines()).boxed())
}

/// A watch event as the API server writes it.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    object: &'a RawValue,
}

/// What the floor reads of an object (a pod's node, if it is one).
#[derive(Deserialize)]
struct Pod<'a> {
    #[serde(borrow)]
    metadata: Metadata<'a>,
    #[serde(borrow)]
    spec: Option<Spec<'a>>,
}

#[derive(Deserialize)]
struct Metadata<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    namespace: Cow<'a, str>,
    #[serde(rename = "resourceVersion", borrow)]
    resource_version: Cow<'a, str>,
}

#[derive(Deserialize)]
struct Spec<'a> {
    #[serde(rename = "nodeName", borrow)]
    node_name: Option<Cow<'a, str>>,
}

/// The gRPC service: every call is a Watch (the agents make no other).
#[derive(Clone)]
struct Floor(Agents);

impl NamedService for Floor {
    const NAME: &'static str = "kubefanout.v1.KubeFanout";
}

impl tonic::codegen::Service<http::Request<Body>> for Floor {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let watch = FloorWatch(self.0.clone());
        Box::pin(async move {
            let mut grpc = Grpc::new(ProstCodec::<WatchEvent, WatchRequest>::default());
            Ok(grpc.server_streaming(watch, request).await)
        })
    }
}

struct FloorWatch(Agents);

impl ServerStreamingService<WatchRequest> for FloorWatch {
    type Response = WatchEvent;
    type ResponseStream = ReceiverStream<Result<WatchEvent, Status>>;
    type Future = std::future::Ready<Result<Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, request: Request<WatchRequest>) -> Self::Future {
        let selector = request.into_inner().field_selector;
        let Some(node) = selector.strip_prefix("spec.nodeName=") else {
            return std::future::ready(Err(Status::invalid_argument(
                "the floor serves spec.nodeName=NODE watches only",
            )));
        };
        let (tx, rx) = mpsc::channel(1024);
        self.0.lock().expect("agents").insert(node.to_owned(), tx);
        std::future::ready(Ok(Response::new(ReceiverStream::new(rx))))
    }
}

/// The WATCH read without kube's client and hyper.
mod raw {
    use std::{io, sync::Arc};

    use anyhow::{Context, bail};
    use bytes::BytesMut;
    use futures::{StreamExt, stream::BoxStream};
    use rustls_pki_types::{CertificateDer, ServerName};
    use secrecy::ExposeSecret;
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpStream,
    };
    use tokio_rustls::{TlsConnector, client::TlsStream};

    /// The WATCH of every object at `path` after `rv`: a TLS connection
    /// to the API server of `config` (its CA, its bearer token), a request
    /// written by hand, and the chunked body's lines.
    pub(super) async fn watch(
        config: &kube::Config,
        path: &str,
        rv: &str,
    ) -> anyhow::Result<BoxStream<'static, io::Result<String>>> {
        let url = &config.cluster_url;
        let host = url.host().context("no host in the cluster URL")?.to_owned();
        let port = url.port_u16().unwrap_or(443);
        let mut roots = rustls::RootCertStore::empty();
        for der in config.root_cert.iter().flatten() {
            roots.add(CertificateDer::from(der.clone()))?;
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let tcp = TcpStream::connect((host.as_str(), port)).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from(host.clone())?;
        let mut stream = TlsConnector::from(Arc::new(tls)).connect(name, tcp).await?;
        let token = config
            .auth_info
            .token
            .as_ref()
            .context("the floor's raw reader needs a bearer token in the kubeconfig")?;
        let request = format!(
            "GET {path}?watch=true&allowWatchBookmarks=true&resourceVersion={rv} HTTP/1.1\r\n\
             Host: {host}:{port}\r\nAuthorization: Bearer {}\r\nAccept: application/json\r\n\r\n",
            token.expose_secret()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut body = Body {
            stream,
            buf: BytesMut::with_capacity(64 * 1024),
            chunk_left: 0,
            data: BytesMut::new(),
        };
        let head = body.until(b"\r\n\r\n").await?;
        let head = String::from_utf8_lossy(&head);
        if !head.starts_with("HTTP/1.1 200")
            || !head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked")
        {
            bail!("the API server answered {head}");
        }
        Ok(futures::stream::unfold(body, |mut body| async move {
            let line = body.line().await;
            Some((line, body))
        })
        .boxed())
    }

    /// The response as it is read: what came off the connection, where the
    /// current chunk ends, and the decoded body not yet cut into lines.
    struct Body {
        stream: TlsStream<TcpStream>,
        buf: BytesMut,
        chunk_left: usize,
        data: BytesMut,
    }

    impl Body {
        /// More bytes off the connection.
        async fn fill(&mut self) -> io::Result<()> {
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            Ok(())
        }

        /// The bytes up to and with `end`, off the connection.
        async fn until(&mut self, end: &[u8]) -> io::Result<BytesMut> {
            loop {
                if let Some(at) = self.buf.windows(end.len()).position(|w| w == end) {
                    return Ok(self.buf.split_to(at + end.len()));
                }
                self.fill().await?;
            }
        }

        /// The next line of the decoded body.
        async fn line(&mut self) -> io::Result<String> {
            loop {
                if let Some(at) = self.data.iter().position(|&b| b == b'\n') {
                    let line = self.data.split_to(at + 1);
                    return String::from_utf8(line[..at].to_vec())
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e));
                }
                self.chunk().await?;
            }
        }

        /// Decodes what has come of the chunked body into `data`, reading
        /// more first if nothing of it has.
        async fn chunk(&mut self) -> io::Result<()> {
            if self.chunk_left == 0 {
                let size = self.until(b"\r\n").await?;
                let size = std::str::from_utf8(&size[..size.len() - 2])
                    .ok()
                    .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
                    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a chunk size"))?;
                if size == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                // The chunk and the CRLF after it.
                self.chunk_left = size + 2;
            }
            if self.buf.is_empty() {
                self.fill().await?;
            }
            let take = self.chunk_left.min(self.buf.len());
            let part = self.buf.split_to(take);
            self.chunk_left -= take;
            // The CRLF that ends a chunk is not data.
            let data_end = part.len() - 2usize.saturating_sub(self.chunk_left).min(part.len());
            self.data.extend_from_slice(&part[..data_end]);
            Ok(())
        }
    }
}

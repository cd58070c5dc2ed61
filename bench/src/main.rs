//! Benchmark of kube-fanout's Watch fanout against a naive tonic broadcast.
//!
//! Each measurement starts a fresh server as a child process of this
//! binary (`fanout-bench serve fanout|naive`), so the server's CPU time
//! (summed over its threads from `/proc/self/task/*/schedstat`) and its
//! resident memory (`VmRSS`) are its own; the subscribers run here, over
//! loopback. Both servers are fed the same events in the same way, from
//! their main thread, at a fixed rate:
//!
//! - `fanout`: kube-fanout's own `FanoutService` over a `Store`, fed with
//!   `Store::apply` (no API server).
//! - `naive`: a `tokio::sync::broadcast` of prost `WatchEvent`s; every
//!   subscriber's stream clones the message and tonic's `ProstCodec`
//!   encodes it, once per subscriber.
//!
//! Each object carries the wall-clock time it was fed at, so subscribers
//! measure the feed-to-receipt latency.
//!
//! A first, in-process run measures the fanout path alone, without tonic's
//! HTTP/2 transport: the same subscribers' streams drained on one thread,
//! each event written into a per-subscriber buffer as the codec would.
//!
//! `fanout-bench relist` is a case of its own (issue 8): the live-event
//! latency of attached subscribers while the store relists a large list,
//! against the same feed without the relist.

mod dispatch;
mod vs_apiserver;

/// The allocator the kube-fanout binary uses, so the server measured here
/// allocates as the deployed one does.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::{
    io::{BufRead, Write},
    net::SocketAddr,
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use futures::{StreamExt, future::BoxFuture, stream::BoxStream};
use kube_fanout_core::{
    event::EventKind,
    fields::SelectableFields,
    object::{Object, ResourceVersion, Transform, TypeMeta, object_key},
    registry::{Served, ServedTypes},
    resource::ResourceType,
    store::Store,
    subscription::Limits,
};
use kube_fanout_proto::{
    v1::{
        EventType, ListResourcesRequest, ResourceRef, WatchEvent, WatchRequest,
        kube_fanout_client::KubeFanoutClient,
        kube_fanout_server::{KubeFanout, KubeFanoutServer},
    },
    wire::EncodedWatchEvent,
};
use kube_fanout_service::service::FanoutService;
use prost::{Message, bytes::BytesMut};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    net::TcpListener,
    process::{ChildStdin, ChildStdout},
    sync::broadcast,
    task::JoinHandle,
};
use tokio_stream::wrappers::{BroadcastStream, errors::BroadcastStreamRecvError};
use tonic::{
    Request, Response, Status,
    body::Body,
    server::{Grpc, NamedService, ServerStreamingService},
    transport::{Channel, Endpoint, Server, server::TcpIncoming},
};
use tonic_prost::ProstCodec;
use tracing_subscriber::EnvFilter;

/// Events each server keeps (ring or broadcast capacity): more than one
/// run feeds, so no subscriber is cut off for lagging.
const HISTORY: usize = 100_000;

/// Distinct objects the feed cycles through.
const KEYS: u64 = 100;

#[derive(Parser)]
#[command(about = "kube-fanout fanout vs a naive per-subscriber-encoding tonic broadcast")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Serve one side of the comparison (started by the benchmark itself).
    #[command(hide = true)]
    Serve {
        /// Which server.
        mode: Mode,
    },
    /// Live-event latency of attached subscribers while kube-fanout's store
    /// relists (`Store::replace`) a large list, against the same feed
    /// without a relist.
    Relist(RelistArgs),
    /// CPU per event with N namespace-scoped subscribers, indexed or not.
    Dispatch(dispatch::DispatchArgs),
    /// kube-fanout against the real kube-apiserver, every watcher on its
    /// own connection (issue 11; see `vs_apiserver`).
    VsApiserver(Box<vs_apiserver::Args>),
}

#[derive(clap::Args, Clone)]
struct RelistArgs {
    /// Objects in the store and in the relisted list.
    #[arg(long, default_value_t = 100_000)]
    objects: u64,
    /// Percent of the listed objects that changed since the store's
    /// contents (the rest are byte-identical).
    #[arg(long, default_value_t = 3.0)]
    changed_percent: f64,
    /// Attached subscribers, all watching every object from the latest RV.
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// HTTP/2 connections the subscribers share.
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Live events per second, before, during and after the relist.
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Length of each window, in seconds: one to settle, one without a
    /// relist, then one with the relist a quarter of the way in.
    #[arg(long, default_value_t = 5.0)]
    window_seconds: f64,
    /// Size of each object's JSON, in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// kube-fanout's Store and FanoutService.
    Fanout,
    /// A broadcast of prost messages, encoded per subscriber.
    Naive,
}

#[derive(clap::Args, Clone)]
struct RunArgs {
    /// Live subscribers in the delivery run.
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// HTTP/2 connections the subscribers share.
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Events fed in the delivery run.
    #[arg(long, default_value_t = 1000)]
    events: u64,
    /// Events per second fed in the delivery run.
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Size of each object's JSON, in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Idle subscribers opened to measure memory per subscriber.
    #[arg(long, default_value_t = 10_000)]
    idle: usize,
    /// Objects in the snapshot run (kube-fanout only: the naive server has
    /// no cache); 0 skips it.
    #[arg(long, default_value_t = 100_000)]
    snapshot_objects: usize,
    /// Runs of each comparison, alternating the two servers; the median
    /// run is reported, as the machine is shared and noisy.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Serve { mode }) => serve(mode),
        Some(Command::Relist(args)) => tokio::runtime::Runtime::new()?.block_on(relist(args)),
        Some(Command::Dispatch(args)) => {
            tokio::runtime::Runtime::new()?.block_on(dispatch::dispatch(args))
        }
        Some(Command::VsApiserver(args)) => {
            tokio::runtime::Runtime::new()?.block_on(vs_apiserver::run(*args))
        }
        None => {
            let (mut naive, mut fanout) = (Vec::new(), Vec::new());
            for _ in 0..cli.run.repeat.max(1) {
                naive.push(core(Mode::Naive, &cli.run)?);
                fanout.push(core(Mode::Fanout, &cli.run)?);
            }
            let core = [median(naive, |d| *d), median(fanout, |d| *d)];
            tokio::runtime::Runtime::new()?.block_on(run(cli.run, core))
        }
    }
}

/// The run in the middle by `key`.
fn median<T, K: Ord>(mut runs: Vec<T>, key: impl Fn(&T) -> K) -> T {
    runs.sort_by_key(key);
    runs.swap_remove(runs.len() / 2)
}

/// kube-fanout's store and service, the store synced and empty.
fn fanout_service() -> (Arc<Store>, FanoutService) {
    let store = Arc::new(Store::new(configmaps(), HISTORY));
    store.replace(Vec::new(), ResourceVersion(1));
    let mut cache = ServedTypes::default();
    cache.insert(Served::new(store.clone(), Arc::default()));
    let service = FanoutService::new(Arc::new(cache), Limits::default());
    (store, service)
}

/// The fanout path without the network: CPU time per delivery of
/// `subscribers` streams over the same `events`, drained on this thread,
/// each event copied into the subscriber's write buffer (kube-fanout) or
/// prost-encoded into it (naive), as the two servers' codecs do.
fn core(mode: Mode, args: &RunArgs) -> anyhow::Result<Duration> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (mut feeder, streams): (Feeder, Vec<BoxStream<'static, Outgoing>>) = match mode {
            Mode::Fanout => {
                let (store, service) = fanout_service();
                let mut streams = Vec::new();
                for _ in 0..args.subscribers {
                    let request = Request::new(WatchRequest {
                        resource: Some(configmaps_ref()),
                        resource_version: "1".into(),
                        ..Default::default()
                    });
                    let stream = service.watch(request).await?.into_inner();
                    streams.push(stream.map(Outgoing::Encoded).boxed());
                }
                (Feeder::Store(store), streams)
            }
            Mode::Naive => {
                let (events, _) = broadcast::channel(HISTORY);
                let streams = (0..args.subscribers)
                    .map(|_| {
                        BroadcastStream::new(events.subscribe())
                            .map(Outgoing::Message)
                            .boxed()
                    })
                    .collect();
                (Feeder::Broadcast { events, rv: 1 }, streams)
            }
        };
        for _ in 0..args.events {
            feeder.feed_one(args.size)?;
        }
        let start = thread_cpu_ns()?;
        let events = args.events as usize;
        let drains = streams.into_iter().map(|stream| async move {
            let mut buf = BytesMut::new();
            let mut stream = stream.take(events);
            while let Some(write) = stream.next().await {
                write.into(&mut buf)?;
                buf.clear();
            }
            anyhow::Ok(())
        });
        futures::future::try_join_all(drains).await?;
        let cpu = Duration::from_nanos(thread_cpu_ns()? - start);
        Ok(cpu / (args.events * args.subscribers as u64) as u32)
    })
}

/// What a subscriber's stream hands its codec.
enum Outgoing {
    Encoded(Result<EncodedWatchEvent, Status>),
    Message(Result<WatchEvent, BroadcastStreamRecvError>),
}

impl Outgoing {
    fn into(self, buf: &mut BytesMut) -> anyhow::Result<()> {
        match self {
            Outgoing::Encoded(event) => match event? {
                EncodedWatchEvent::Shared(bytes) => buf.extend_from_slice(&bytes),
                EncodedWatchEvent::Own(own) => own.put(buf),
            },
            Outgoing::Message(event) => event?.encode(buf)?,
        }
        Ok(())
    }
}

/// This thread's CPU time, in nanoseconds.
fn thread_cpu_ns() -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat")?;
    let ns = stat.split_whitespace().next().context("empty schedstat")?;
    Ok(ns.parse()?)
}

// ---------------------------------------------------------------- server

/// Runs a server and obeys commands on stdin, one per line, answering
/// each on stdout: `feed COUNT RATE SIZE`, `load COUNT SIZE`, `cpu`,
/// `steady COUNT RATE SIZE [CHANGED_PERCENT]`.
fn serve(mode: Mode) -> anyhow::Result<()> {
    // As the binary logs: without a subscriber, tracing falls back to the
    // `log` crate for every span of hyper, h2 and tonic (spans the
    // binary's `info` filter turns off), about 2 % of a delivery's CPU.
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new("info"))
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Runtime::new()?;
    let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    // As the kube-fanout binary serves: without TCP_NODELAY a small write
    // waits for the previous one's ACK (tonic's `serve_with_incoming` does
    // not set it).
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let mut feeder = match mode {
        Mode::Fanout => {
            let (store, service) = fanout_service();
            let server = Server::builder().add_service(KubeFanoutServer::new(service));
            runtime.spawn(server.serve_with_incoming(incoming));
            Feeder::Store(store)
        }
        Mode::Naive => {
            let (events, _) = broadcast::channel(HISTORY);
            let server = Server::builder().add_service(NaiveServer(events.clone()));
            runtime.spawn(server.serve_with_incoming(incoming));
            Feeder::Broadcast { events, rv: 1 }
        }
    };
    println!("addr {addr}");
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["feed", count, rate, size] => {
                feeder.feed(count.parse()?, rate.parse()?, size.parse()?)?
            }
            ["load", count, size] => feeder.load(count.parse()?, size.parse()?)?,
            ["steady", count, rate, size, changed @ ..] => {
                let relist = match changed {
                    [] => None,
                    [percent] => Some(percent.parse()?),
                    _ => bail!("unknown command {line:?}"),
                };
                feeder.steady(count.parse()?, rate.parse()?, size.parse()?, relist)?
            }
            ["cpu"] => println!("{}", cpu_ns()?),
            _ => bail!("unknown command {line:?}"),
        }
        std::io::stdout().flush()?;
    }
    Ok(())
}

/// Where a server's events come from.
enum Feeder {
    Store(Arc<Store>),
    Broadcast {
        events: broadcast::Sender<WatchEvent>,
        rv: u64,
    },
}

impl Feeder {
    /// Feeds `count` events of `size`-byte objects at `rate` per second.
    fn feed(&mut self, count: u64, rate: f64, size: usize) -> anyhow::Result<()> {
        let start = Instant::now();
        let mut fed = 0;
        while fed < count {
            let due = ((start.elapsed().as_secs_f64() * rate) as u64 + 1).min(count);
            while fed < due {
                self.feed_one(size)?;
                fed += 1;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        println!("fed");
        Ok(())
    }

    fn feed_one(&mut self, size: usize) -> anyhow::Result<()> {
        match self {
            Feeder::Store(store) => {
                let rv = store.head().resource_version.0 + 1;
                let object = parse(&object_json(rv % KEYS, rv, size, Some(now_nanos())))?;
                // A new key is ADDED, as the API server would say, so that
                // every subscriber receives the event unchanged.
                let kind = match store.get(&object.key) {
                    Some(_) => EventKind::Modified,
                    None => EventKind::Added,
                };
                store.apply(kind, object);
            }
            Feeder::Broadcast { events, rv } => {
                *rv += 1;
                // No subscriber yet is not an error: the event is dropped.
                let _ = events.send(WatchEvent {
                    r#type: EventType::Modified.into(),
                    resource_version: rv.to_string(),
                    object: object_json(*rv % KEYS, *rv, size, Some(now_nanos())),
                    ..Default::default()
                });
            }
        }
        Ok(())
    }

    /// Feeds `count` events at `rate` per second, each stamped with the
    /// time it was due (not the time it was made), so time the single
    /// writer spends in a relist counts against the events queued behind
    /// it, as a reflector's watch events queue behind its relist. With
    /// `relist`, a quarter of the way in, replaces the store's contents
    /// with the list a LIST would return now, `relist` percent of it
    /// changed (built beforehand: the reflector has it before it replaces).
    /// Answers `fed RELIST_START_NS REPLACE_NS REPLACE_CPU_NS` (zeros
    /// without a relist).
    fn steady(
        &mut self,
        count: u64,
        rate: f64,
        size: usize,
        relist: Option<f64>,
    ) -> anyhow::Result<()> {
        let Feeder::Store(store) = self else {
            bail!("only kube-fanout has a store to relist");
        };
        let store = store.clone();
        // The objects the feed does not touch (`cm-KEYS` and up), listed
        // now; the fed ones join the list when it replaces the store, as
        // they are then, so they do not change.
        let all = store.len() as u64;
        let list = relist
            .map(|percent| listed(&store, KEYS..all, percent, size))
            .transpose()?;
        let mut list = list.map(|l| (count / 4, l));
        let (start, start_ns) = (Instant::now(), now_nanos());
        let (mut relist_start, mut replace, mut replace_cpu) = (0, Duration::ZERO, 0);
        for i in 0..count {
            let due = Duration::from_secs_f64(i as f64 / rate);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
            let sent = start_ns + due.as_nanos() as u64;
            if list.as_ref().is_some_and(|(at, _)| *at == i)
                && let Some((_, mut objects)) = list.take()
            {
                // On the stamps' clock: every event stamped from here on
                // was applied after the relist, even when the writer woke
                // late (an event due before the writer's wall-clock start
                // but queued behind `replace` counted as "before" it).
                relist_start = sent;
                objects.extend(listed(&store, 0..KEYS.min(all), 0.0, size)?);
                let rv = store.head().resource_version.0 + 1;
                let (began, cpu) = (Instant::now(), thread_cpu_ns()?);
                store.replace(objects, ResourceVersion(rv));
                replace = began.elapsed();
                replace_cpu = thread_cpu_ns()? - cpu;
            }
            let rv = store.head().resource_version.0 + 1;
            let object = parse(&object_json(rv % KEYS, rv, size, Some(sent)))?;
            store.apply(EventKind::Modified, object);
        }
        println!("fed {relist_start} {} {replace_cpu}", replace.as_nanos());
        Ok(())
    }

    /// Replaces a kube-fanout store's contents with `count` objects.
    fn load(&mut self, count: u64, size: usize) -> anyhow::Result<()> {
        let Feeder::Store(store) = self else {
            bail!("only kube-fanout has a cache to load");
        };
        let rv = store.head().resource_version.0 + 1;
        let objects = (0..count)
            .map(|i| parse(&object_json(i, rv, size, None)))
            .collect::<Result<Vec<_>, _>>()?;
        store.replace(objects, ResourceVersion(rv));
        println!("loaded");
        Ok(())
    }
}

/// The objects of `range` as a LIST would return them now: as the store
/// has them, except about `percent` of them changed at a new RV.
fn listed(
    store: &Store,
    range: std::ops::Range<u64>,
    percent: f64,
    size: usize,
) -> anyhow::Result<Vec<Object>> {
    let rv = store.head().resource_version.0 + 1;
    let changed = ((range.end - range.start) as f64 * percent / 100.0) as u64;
    let stride = ((range.end - range.start) / changed.max(1)).max(1);
    range
        .clone()
        .map(|i| {
            let n = i - range.start;
            if n.is_multiple_of(stride) && n / stride < changed {
                // A different size: the data really changed.
                return parse(&object_json(i, rv, size + 1, None));
            }
            let key = object_key("bench", &format!("cm-{i}"));
            let object = store.get(&key).context("a loaded object is missing")?;
            // Its own copy of the text, as a LIST decoded afresh gives: a
            // shared `Arc` would compare equal by pointer, for free.
            Ok(Object {
                json: Arc::from(&*object.json),
                ..Object::clone(&object)
            })
        })
        .collect()
}

fn configmaps() -> ResourceType {
    ResourceType {
        gvr: "v1/configmaps".parse().expect("a valid resource"),
        kind: "ConfigMap".into(),
        namespaced: true,
        fields: SelectableFields::default(),
    }
}

fn configmaps_ref() -> ResourceRef {
    ResourceRef {
        group: String::new(),
        version: "v1".into(),
        resource: "configmaps".into(),
    }
}

fn parse(json: &str) -> anyhow::Result<Object> {
    parse_as(json, &configmaps())
}

/// An object of `resource`, a core (`v1`) type, from its JSON.
fn parse_as(json: &str, resource: &ResourceType) -> anyhow::Result<Object> {
    let meta = TypeMeta {
        api_version: "v1".into(),
        kind: resource.kind.clone(),
    };
    Ok(Object::from_json(
        json,
        &meta,
        &resource.fields,
        Transform::default(),
    )?)
}

/// A ConfigMap of about `size` bytes of JSON that says when it was sent
/// (a live event, whose latency subscribers measure) or not (a listed
/// object).
fn object_json(name: u64, rv: u64, size: usize, sent: Option<u64>) -> String {
    let sent = sent
        .map(|ns| format!(r#""sent":"{ns}","#))
        .unwrap_or_default();
    let mut json = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{name}","namespace":"bench","resourceVersion":"{rv}"}},"data":{{{sent}"pad":""#
    );
    let pad = size.saturating_sub(json.len() + 3);
    json.extend(std::iter::repeat_n('x', pad));
    json.push_str(r#""}}"#);
    json
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// This process's CPU time over all its threads, in nanoseconds. Every
/// thread lives as long as the process, so none is missed.
fn cpu_ns() -> anyhow::Result<u64> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task")? {
        let stat = std::fs::read_to_string(task?.path().join("schedstat"))?;
        let ns = stat.split_whitespace().next().context("empty schedstat")?;
        total += ns.parse::<u64>()?;
    }
    Ok(total)
}

/// The naive server: answers Watch on the same path as kube-fanout, with
/// the broadcast's messages encoded by tonic's `ProstCodec` for each
/// subscriber.
#[derive(Clone)]
struct NaiveServer(broadcast::Sender<WatchEvent>);

impl NamedService for NaiveServer {
    const NAME: &'static str = "kubefanout.v1.KubeFanout";
}

impl tonic::codegen::Service<http::Request<Body>> for NaiveServer {
    type Response = http::Response<Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let watch = NaiveWatch(self.0.clone());
        Box::pin(async move {
            let mut grpc = Grpc::new(ProstCodec::<WatchEvent, WatchRequest>::default());
            Ok(grpc.server_streaming(watch, request).await)
        })
    }
}

struct NaiveWatch(broadcast::Sender<WatchEvent>);

impl ServerStreamingService<WatchRequest> for NaiveWatch {
    type Response = WatchEvent;
    type ResponseStream = BoxStream<'static, Result<WatchEvent, Status>>;
    type Future = std::future::Ready<Result<Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, _: Request<WatchRequest>) -> Self::Future {
        let events = BroadcastStream::new(self.0.subscribe())
            .map(|event| event.map_err(|e| Status::resource_exhausted(e.to_string())));
        std::future::ready(Ok(Response::new(events.boxed())))
    }
}

// ----------------------------------------------------------- subscribers

/// A server child process.
struct ServerProcess {
    child: tokio::process::Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    addr: SocketAddr,
}

impl ServerProcess {
    async fn start(mode: Mode) -> anyhow::Result<Self> {
        let mode = mode.to_possible_value().context("mode name")?;
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .args(["serve", mode.get_name()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().context("stdin")?;
        let mut stdout = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let line = stdout.next_line().await?.context("server exited")?;
        let addr = line.strip_prefix("addr ").context("no address")?.parse()?;
        Ok(ServerProcess {
            child,
            stdin,
            stdout,
            addr,
        })
    }

    async fn command(&mut self, line: &str) -> anyhow::Result<String> {
        self.stdin.write_all(format!("{line}\n").as_bytes()).await?;
        self.stdout.next_line().await?.context("server exited")
    }

    async fn cpu(&mut self) -> anyhow::Result<Duration> {
        Ok(Duration::from_nanos(self.command("cpu").await?.parse()?))
    }

    fn rss_bytes(&self) -> anyhow::Result<u64> {
        let pid = self.child.id().context("server exited")?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .context("no VmRSS")?;
        Ok(kib.trim().parse::<u64>()? * 1024)
    }

    async fn connect(&self, connections: usize) -> anyhow::Result<Vec<Channel>> {
        let endpoint = Endpoint::from_shared(format!("http://{}", self.addr))?;
        let mut channels = Vec::new();
        for _ in 0..connections {
            channels.push(endpoint.connect().await?);
        }
        Ok(channels)
    }
}

/// What the subscribers of a run have seen so far.
#[derive(Default)]
struct Seen {
    events: AtomicU64,
    /// Events carrying the time they were sent: live events.
    live: AtomicU64,
    object_bytes: AtomicU64,
    /// Subscribers that received at least one event.
    ready: AtomicU64,
    /// Whether to record latencies (not during warm-up).
    recording: AtomicBool,
    /// Re-sync units' closing bookmarks received, and when the latest one
    /// arrived (ns since the epoch): when a relist reached everyone.
    units_closed: AtomicU64,
    unit_closed_at: AtomicU64,
}

impl Seen {
    async fn wait(&self, what: &str, until: impl Fn(&Self) -> bool) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !until(self) {
            if Instant::now() > deadline {
                bail!("timed out waiting for {what}");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    }
}

/// One live event received: when it was sent (ns since the epoch) and
/// how long it took to arrive (µs).
type Receipt = (u64, u32);

/// Opens `count` watches spread over `channels`; each task returns the
/// receipts it recorded once its stream ends.
fn subscribe(
    channels: &[Channel],
    count: usize,
    initial_events: bool,
    resource_version: &str,
    seen: &Arc<Seen>,
) -> Vec<JoinHandle<Vec<Receipt>>> {
    (0..count)
        .map(|i| {
            let mut client = KubeFanoutClient::new(channels[i % channels.len()].clone());
            let seen = seen.clone();
            let resource_version = resource_version.to_owned();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let request = WatchRequest {
                    resource: Some(configmaps_ref()),
                    send_initial_events: initial_events,
                    resource_version,
                    ..Default::default()
                };
                let Ok(response) = client.watch(request).await else {
                    return latencies;
                };
                let mut stream = response.into_inner();
                let mut first = true;
                while let Ok(Some(event)) = stream.message().await {
                    if std::mem::take(&mut first) {
                        seen.ready.fetch_add(1, Ordering::Relaxed);
                    }
                    seen.events.fetch_add(1, Ordering::Relaxed);
                    seen.object_bytes
                        .fetch_add(event.object.len() as u64, Ordering::Relaxed);
                    if event.resync && event.r#type() == EventType::Bookmark {
                        seen.units_closed.fetch_add(1, Ordering::Relaxed);
                        seen.unit_closed_at
                            .fetch_max(now_nanos(), Ordering::Relaxed);
                    }
                    if let Some(sent) = sent_at(&event.object) {
                        seen.live.fetch_add(1, Ordering::Relaxed);
                        if seen.recording.load(Ordering::Relaxed) {
                            let latency = now_nanos().saturating_sub(sent) / 1000;
                            latencies.push((sent, latency as u32));
                        }
                    }
                }
                latencies
            })
        })
        .collect()
}

/// The send time `object_json` wrote into a live event's object. It is
/// read where `object_json` puts it, first in `data`: searching the whole
/// text for it scanned every kilobyte of every object without one (a
/// relist's unit), CPU the subscribers here take from the server's two
/// cores and real subscribers, elsewhere, would not.
fn sent_at(object: &str) -> Option<u64> {
    const DATA: &str = r#""data":{"#;
    let data = &object[object.find(DATA)? + DATA.len()..];
    let rest = data.strip_prefix(r#""sent":""#)?;
    rest[..rest.find('"')?].parse().ok()
}

/// Feeds single events until every subscriber has received one, so all
/// of them are established.
async fn warm_up(
    server: &mut ServerProcess,
    seen: &Seen,
    subscribers: usize,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.ready.load(Ordering::Relaxed) < subscribers as u64 {
        if Instant::now() > deadline {
            bail!("subscribers did not all start");
        }
        server.command("feed 1 1 64").await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The delivery run's results for one server.
struct Deliveries {
    deliveries: u64,
    cpu: Duration,
    wall: Duration,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

impl Deliveries {
    fn cpu_per_delivery(&self) -> Duration {
        self.cpu / self.deliveries.max(1) as u32
    }
}

async fn deliveries(mode: Mode, args: &RunArgs) -> anyhow::Result<Deliveries> {
    let mut server = ServerProcess::start(mode).await?;
    let channels = server.connect(args.connections).await?;
    let seen = Arc::new(Seen::default());
    let tasks = subscribe(&channels, args.subscribers, false, "", &seen);
    warm_up(&mut server, &seen, args.subscribers).await?;
    let before = seen.events.load(Ordering::Relaxed);
    let expected = args.events * args.subscribers as u64;
    seen.recording.store(true, Ordering::Relaxed);
    let cpu = server.cpu().await?;
    let start = Instant::now();
    server
        .command(&format!("feed {} {} {}", args.events, args.rate, args.size))
        .await?;
    seen.wait("deliveries", |s| {
        s.events.load(Ordering::Relaxed) - before >= expected
    })
    .await?;
    let wall = start.elapsed();
    let cpu = server.cpu().await? - cpu;
    drop(server);
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await?.into_iter().map(|(_, latency)| latency));
    }
    let [p50, p99, max] = percentiles(latencies, [0.5, 0.99, 1.0]);
    Ok(Deliveries {
        deliveries: expected,
        cpu,
        wall,
        p50,
        p99,
        max,
    })
}

/// The `qs` quantiles of latencies in µs (zero when there are none).
fn percentiles<const N: usize>(mut latencies: Vec<u32>, qs: [f64; N]) -> [Duration; N] {
    latencies.sort_unstable();
    qs.map(|q| {
        let i = ((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1));
        Duration::from_micros(latencies.get(i).copied().unwrap_or(0).into())
    })
}

/// Server memory per idle subscriber: RSS with `idle` more established
/// watches, minus RSS with one, over `idle`.
async fn idle_memory(mode: Mode, args: &RunArgs) -> anyhow::Result<u64> {
    let mut server = ServerProcess::start(mode).await?;
    let channels = server.connect(args.connections).await?;
    let seen = Arc::new(Seen::default());
    let _first = subscribe(&channels, 1, false, "", &seen);
    warm_up(&mut server, &seen, 1).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = server.rss_bytes()?;
    let _idle = subscribe(&channels, args.idle, false, "", &seen);
    warm_up(&mut server, &seen, args.idle + 1).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = server.rss_bytes()?;
    Ok(after.saturating_sub(before) / args.idle.max(1) as u64)
}

/// The snapshot run: object bytes per second of one watch's initial
/// events, and the server CPU it took.
async fn snapshot(args: &RunArgs) -> anyhow::Result<(f64, Duration, Duration)> {
    let mut server = ServerProcess::start(Mode::Fanout).await?;
    server
        .command(&format!("load {} {}", args.snapshot_objects, args.size))
        .await?;
    let channels = server.connect(1).await?;
    let seen = Arc::new(Seen::default());
    let cpu = server.cpu().await?;
    let start = Instant::now();
    let _watch = subscribe(&channels, 1, true, "", &seen);
    // Every object, then the initial-events-end bookmark.
    let events = args.snapshot_objects as u64 + 1;
    seen.wait("the snapshot", |s| {
        s.events.load(Ordering::Relaxed) >= events
    })
    .await?;
    let wall = start.elapsed();
    let cpu = server.cpu().await? - cpu;
    let bytes = seen.object_bytes.load(Ordering::Relaxed) as f64;
    Ok((bytes / wall.as_secs_f64() / 1e6, wall, cpu))
}

async fn run(args: RunArgs, [core_naive, core_fanout]: [Duration; 2]) -> anyhow::Result<()> {
    println!(
        "delivery run: {} subscribers over {} connections, {} events of {} B at {}/s",
        args.subscribers, args.connections, args.events, args.size, args.rate
    );
    let (mut naive, mut fanout) = (Vec::new(), Vec::new());
    for _ in 0..args.repeat.max(1) {
        naive.push(deliveries(Mode::Naive, &args).await?);
        fanout.push(deliveries(Mode::Fanout, &args).await?);
    }
    let range = |runs: &[Deliveries]| {
        let cpu = runs.iter().map(Deliveries::cpu_per_delivery);
        format!(
            "{:.2?}–{:.2?}",
            cpu.clone().min().unwrap_or_default(),
            cpu.max().unwrap_or_default()
        )
    };
    println!(
        "server CPU per delivery over {} runs: naive {}, kube-fanout {}",
        naive.len(),
        range(&naive),
        range(&fanout)
    );
    let naive = median(naive, Deliveries::cpu_per_delivery);
    let fanout = median(fanout, Deliveries::cpu_per_delivery);
    println!("| | naive | kube-fanout | naive / kube-fanout |");
    println!("|---|---|---|---|");
    let row = |name: &str, n: Duration, f: Duration| {
        println!(
            "| {name} | {n:.2?} | {f:.2?} | {:.2} |",
            n.as_secs_f64() / f.as_secs_f64().max(1e-12)
        );
    };
    row(
        "fanout path CPU per delivery, in-process",
        core_naive,
        core_fanout,
    );
    row(
        "server CPU per delivery",
        naive.cpu_per_delivery(),
        fanout.cpu_per_delivery(),
    );
    row("server CPU, whole run", naive.cpu, fanout.cpu);
    row("wall time to deliver all", naive.wall, fanout.wall);
    row("latency p50", naive.p50, fanout.p50);
    row("latency p99", naive.p99, fanout.p99);
    row("latency max", naive.max, fanout.max);
    println!(
        "| deliveries/s | {:.0} | {:.0} | |",
        naive.deliveries as f64 / naive.wall.as_secs_f64(),
        fanout.deliveries as f64 / fanout.wall.as_secs_f64()
    );
    if args.idle > 0 {
        let naive = idle_memory(Mode::Naive, &args).await?;
        let fanout = idle_memory(Mode::Fanout, &args).await?;
        println!(
            "| server memory per idle subscriber ({} open) | {:.1} KiB | {:.1} KiB | {:.2} |",
            args.idle,
            naive as f64 / 1024.0,
            fanout as f64 / 1024.0,
            naive as f64 / fanout.max(1) as f64
        );
    }
    if args.snapshot_objects > 0 {
        let (rate, wall, cpu) = snapshot(&args).await?;
        println!(
            "snapshot: {} objects of {} B to one subscriber in {wall:.2?}: {rate:.0} MB/s of objects, server CPU {cpu:.2?}",
            args.snapshot_objects, args.size
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- relist

/// Issue 8's case: `subscribers` watches on a store of `objects` objects
/// get live events at a steady rate for three windows of equal length.
/// The first only settles the server and is not reported: right after the
/// subscribers attach, latency is far above its steady state (a debug
/// build showed p50 0.7 s there and 26 ms in the next window). In the
/// third, a quarter of the way in, the store relists (`Store::replace`
/// with a full list, `changed_percent` of it changed). Reports the live
/// events' latency (from when each was due) in the second window, and in
/// the third before and from the relist on.
async fn relist(args: RelistArgs) -> anyhow::Result<()> {
    if args.objects < KEYS {
        bail!(
            "--objects must be at least {KEYS}: the live feed changes cm-0 to cm-{}",
            KEYS - 1
        );
    }
    let mut server = ServerProcess::start(Mode::Fanout).await?;
    let loaded = server
        .command(&format!("load {} {}", args.objects, args.size))
        .await?;
    if loaded != "loaded" {
        bail!("loading the store: {loaded}");
    }
    let channels = server.connect(args.connections).await?;
    // Watch from the store's RV: a watch from "" without initial events
    // first gets every object as a synthetic ADDED (as from the API
    // server), which at 100,000 objects is the load, not the relist.
    let resource_version = KubeFanoutClient::new(channels[0].clone())
        .list_resources(ListResourcesRequest::default())
        .await?
        .into_inner()
        .resources
        .first()
        .map(|r| r.resource_version.clone())
        .context("the server serves no resource")?;
    let seen = Arc::new(Seen::default());
    let tasks = subscribe(&channels, args.subscribers, false, &resource_version, &seen);
    warm_up(&mut server, &seen, args.subscribers).await?;
    seen.recording.store(true, Ordering::Relaxed);
    let count = (args.rate * args.window_seconds).ceil() as u64;
    let mut windows = Vec::new();
    for relist in [None, None, Some(args.changed_percent)] {
        let before = seen.live.load(Ordering::Relaxed);
        let others_before = seen.events.load(Ordering::Relaxed) - before;
        let start = now_nanos();
        let cpu = server.cpu().await?;
        let command = format!("steady {count} {} {}", args.rate, args.size);
        let answer = match relist {
            None => server.command(&command).await?,
            Some(percent) => server.command(&format!("{command} {percent}")).await?,
        };
        let words: Vec<&str> = answer.split_whitespace().collect();
        let ["fed", relist_start, replace, replace_cpu] = words.as_slice() else {
            bail!("feeding: {answer}");
        };
        let expected = count * args.subscribers as u64;
        seen.wait("live events", |s| {
            s.live.load(Ordering::Relaxed) - before >= expected
        })
        .await?;
        // What else arrived, before the window's last live event: the
        // relist's changes (and bookmarks).
        let others =
            seen.events.load(Ordering::Relaxed) - seen.live.load(Ordering::Relaxed) - others_before;
        if relist.is_some() {
            seen.wait("the relist's unit", |s| {
                s.units_closed.load(Ordering::Relaxed) >= args.subscribers as u64
            })
            .await?;
        }
        windows.push((
            start,
            relist_start.parse::<u64>()?,
            Duration::from_nanos(replace.parse()?),
            Duration::from_nanos(replace_cpu.parse()?),
            others,
            server.cpu().await? - cpu,
        ));
    }
    drop(server);
    let mut receipts = Vec::new();
    for task in tasks {
        receipts.extend(task.await?);
    }
    let [
        _settling,
        (quiet, .., quiet_cpu),
        (relisting, relist_start, replace, replace_cpu, others, relist_cpu),
    ] = windows[..]
    else {
        bail!("three windows were fed");
    };
    let latencies = |from: u64, to: u64| -> Vec<u32> {
        receipts
            .iter()
            .filter(|(sent, _)| (from..to).contains(sent))
            .map(|(_, latency)| *latency)
            .collect()
    };
    println!(
        "relist: {} objects of {} B, {}% changed; {} subscribers over {} connections; live events at {}/s, windows of {} s",
        args.objects,
        args.size,
        args.changed_percent,
        args.subscribers,
        args.connections,
        args.rate,
        args.window_seconds
    );
    println!(
        "Store::replace took {replace:.2?} on the writer ({replace_cpu:.2?} of the writer thread's CPU); each subscriber received {:.1} other events (the relist's changes, bookmarks) in its window",
        others as f64 / args.subscribers as f64
    );
    let unit_deliveries = others.saturating_sub(args.subscribers as u64);
    let reached = seen.unit_closed_at.load(Ordering::Relaxed);
    println!(
        "the unit's {unit_deliveries} deliveries (bookmarks aside) had reached every subscriber {:.2?} after the relist began; server CPU {quiet_cpu:.2?} in the window without a relist, {relist_cpu:.2?} in the relist window: {:.2?} more (`replace` included), {:.2?} per unit delivery",
        Duration::from_nanos(reached.saturating_sub(relist_start)),
        relist_cpu.saturating_sub(quiet_cpu),
        relist_cpu.saturating_sub(quiet_cpu) / unit_deliveries.max(1) as u32,
    );
    println!("| live events | deliveries | p50 | p99 | max |");
    println!("|---|---|---|---|---|");
    for (name, from, to) in [
        ("without a relist", quiet, relisting),
        ("relist window, before the relist", relisting, relist_start),
        ("relist window, from the relist on", relist_start, u64::MAX),
    ] {
        let window = latencies(from, to);
        let n = window.len();
        let [p50, p99, max] = percentiles(window, [0.5, 0.99, 1.0]);
        println!("| {name} | {n} | {p50:.2?} | {p99:.2?} | {max:.2?} |");
    }
    Ok(())
}

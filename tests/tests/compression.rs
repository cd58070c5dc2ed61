//! gRPC message compression on the real stream: a snapshot of 10,000
//! ConfigMaps with compressible data, read through a byte-counting
//! loopback proxy from the kube-fanout binary (its own process, so its CPU
//! time is its own), without compression, with gzip and with zstd; and one
//! small live event each way, which compression must not inflate
//! pathologically (tonic compresses every message of a call that asked,
//! with no size threshold).
//!
//! The figures are printed (`-- --nocapture`) and kept in BENCHMARKS.md.
//! `COMPRESSION_BENCH_SERVER` runs another kube-fanout binary (a release
//! build, for CPU figures worth quoting).

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context, Result, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube_fanout_client::{ClientConfig, CompressionEncoding, proto::EventType};
use kube_fanout_tests::{
    controlplane::ControlPlane, process::FanoutProcess, proxy::CountingProxy, support::*,
};

const CLI: &str = env!("CARGO_BIN_EXE_kubectl-fanout-under-test");
const OBJECTS: usize = 10_000;
const NAMESPACE: &str = "compress";

/// A properties file as ConfigMaps carry them: repetitive, compressible,
/// a little different in each object.
fn properties(i: usize) -> String {
    (0..24)
        .map(|k| {
            format!(
                "feature.{k}.enabled=true\nfeature.{k}.owner=team-{}\nfeature.{k}.endpoint=https://svc-{k}.example.internal:8443/v1\n",
                (i + k) % 5
            )
        })
        .collect()
}

/// user+system CPU time of process `pid` so far, in clock ticks (1/100 s).
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .context("no command in /proc/pid/stat")?
        .1
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15, the 12th and 13th after it.
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

fn config(addr: std::net::SocketAddr, compression: Option<CompressionEncoding>) -> ClientConfig {
    let config = ClientConfig::new([format!("http://{addr}")]);
    match compression {
        Some(encoding) => config.accept_compressed(encoding),
        None => config,
    }
}

/// One snapshot read: bytes from the server, its CPU ticks, wall time.
struct Read {
    bytes: u64,
    cpu_ticks: u64,
    seconds: f64,
}

async fn read_snapshot_through_proxy(
    server: &FanoutProcess,
    pid: u32,
    compression: Option<CompressionEncoding>,
) -> Result<Read> {
    let proxy = CountingProxy::start(server.addr).await?;
    let mut client = config(proxy.addr, compression).connect().await?;
    let (cpu, started) = (cpu_ticks(pid)?, Instant::now());
    let mut stream = client.watch(watch_list(NAMESPACE)).await?;
    let (objects, _) = read_snapshot(&mut stream).await?;
    let read = Read {
        bytes: proxy.bytes_from_server(),
        cpu_ticks: cpu_ticks(pid)? - cpu,
        seconds: started.elapsed().as_secs_f64(),
    };
    ensure!(objects.len() == OBJECTS, "{} objects", objects.len());
    Ok(read)
}

fn name(compression: Option<CompressionEncoding>) -> &'static str {
    match compression {
        None => "none",
        Some(CompressionEncoding::Gzip) => "gzip",
        Some(CompressionEncoding::Zstd) => "zstd",
        Some(_) => "other",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zstd_snapshot_of_10000_configmaps_moves_at_least_3x_fewer_bytes() -> Result<()> {
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, NAMESPACE).await?;
    let api: Api<ConfigMap> = Api::namespaced(cp.client.clone(), NAMESPACE);
    futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let api = api.clone();
            async move {
                let mut cm = ConfigMap::default();
                cm.metadata.name = Some(format!("cm-{i:05}"));
                cm.data = Some([("app.properties".to_owned(), properties(i))].into());
                api.create(&PostParams::default(), &cm).await
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;

    let binary = std::env::var_os("COMPRESSION_BENCH_SERVER").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_kube-fanout-under-test")),
        PathBuf::from,
    );
    let server = FanoutProcess::serving(
        &binary,
        &cp,
        &["--resource", "v1/configmaps", "--auth=none"],
    )
    .await?;
    let pid = server.pid().context("kube-fanout exited")?;

    println!(
        "snapshot of {OBJECTS} ConfigMaps ({} bytes of data each), server {}:",
        properties(0).len(),
        binary.display()
    );
    let encodings = [
        None,
        Some(CompressionEncoding::Zstd),
        Some(CompressionEncoding::Gzip),
    ];
    let mut plain_bytes = Vec::new();
    let mut zstd_bytes = Vec::new();
    // Side by side, twice, on this noisy machine.
    for round in 1..=2 {
        for compression in encodings {
            let read = read_snapshot_through_proxy(&server, pid, compression).await?;
            println!(
                "  round {round} {:>4}: {:>9} bytes from the server, server CPU {:>4} ms, {:.2} s",
                name(compression),
                read.bytes,
                read.cpu_ticks * 10,
                read.seconds
            );
            match compression {
                None => plain_bytes.push(read.bytes),
                Some(CompressionEncoding::Zstd) => zstd_bytes.push(read.bytes),
                Some(_) => {}
            }
        }
    }
    for (plain, zstd) in plain_bytes.iter().zip(&zstd_bytes) {
        println!("  ratio none/zstd: {:.2}", *plain as f64 / *zstd as f64);
        ensure!(
            zstd * 3 <= *plain,
            "zstd moved {zstd} bytes, not 3x fewer than {plain}"
        );
    }

    // The CLI asks for it too.
    let mut cli_bytes = Vec::new();
    for compression in ["none", "zstd"] {
        let proxy = CountingProxy::start(server.addr).await?;
        let server_flag = format!("--server={}", proxy.addr);
        let args = [
            server_flag.as_str(),
            "--compression",
            compression,
            "list",
            "configmaps",
            "-n",
            NAMESPACE,
        ];
        let out = run(Path::new(CLI), &args).await?;
        ensure!(out.success, "{}", out.stderr);
        ensure!(
            out.stdout.lines().count() > OBJECTS,
            "{} lines",
            out.stdout.lines().count()
        );
        println!(
            "  kubectl-fanout list --compression {compression}: {} bytes from the server",
            proxy.bytes_from_server()
        );
        cli_bytes.push(proxy.bytes_from_server());
    }
    ensure!(cli_bytes[1] * 3 <= cli_bytes[0], "{cli_bytes:?}");

    // One small live event on each kind of stream.
    let mut streams = Vec::new();
    for compression in encodings {
        let proxy = CountingProxy::start(server.addr).await?;
        let mut client = config(proxy.addr, compression).connect().await?;
        let mut stream = client.watch(watch_list(NAMESPACE)).await?;
        read_snapshot(&mut stream).await?;
        streams.push((compression, proxy, stream));
    }
    let before: Vec<u64> = streams
        .iter()
        .map(|(_, p, _)| p.bytes_from_server())
        .collect();
    create_configmap(&cp.client, NAMESPACE, "small", "x").await?;
    let mut small = Vec::new();
    for ((compression, proxy, stream), before) in streams.iter_mut().zip(before) {
        let event = next_change(stream).await?;
        ensure!(event.r#type() == EventType::Added);
        let bytes = proxy.bytes_from_server() - before;
        println!(
            "  one small ADDED ({} bytes of JSON), {:>4}: {bytes} bytes from the server",
            event.object.len(),
            name(*compression)
        );
        small.push(bytes);
    }
    // gzip's header and trailer are 18 bytes, zstd's frame header a few;
    // a small JSON object still shrinks a little or grows by that much.
    for &bytes in &small[1..] {
        ensure!(
            bytes <= small[0] + 32,
            "a small event grew from {} to {bytes} bytes",
            small[0]
        );
    }
    Ok(())
}

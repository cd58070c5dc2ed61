//! The kube-fanout binary: parses flags, connects to the API server and
//! runs the server until SIGINT or SIGTERM.

use anyhow::Context;
use clap::Parser;
use kube_fanout::{config::Config, server, traces::Traces};
use kube_fanout_auth::reviews::ReviewClient;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing_subscriber::{EnvFilter, layer::SubscriberExt as _, util::SubscriberInitExt as _};

/// jemalloc rather than the system allocator, for memory per idle
/// subscriber: each connection holds buffers that stay mostly unwritten
/// while it is idle (h2's 16 KiB write buffer and 8 KiB read buffer, its
/// 4 KiB HPACK scratch; heaptrack counted about 47 KiB allocated per idle
/// TLS subscriber), and only their touched pages count. With 10,000 idle
/// subscribers, each on its own TLS connection (BENCHMARKS.md, idle
/// section), jemalloc held 31.76 KiB each where glibc's malloc held 33.16
/// and mimalloc 49.19. Chosen at build time, as a global allocator must
/// be; jemalloc's own tuning is read from `_RJEM_MALLOC_CONF`.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    let traces = Traces::from_env()?;
    init_logging(config.log_json, traces.as_ref());
    let kube_config = kube_config(&config).await?;
    let client = kube::Client::try_from(kube_config.clone())?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let cancel = CancellationToken::new();
    let mut options = config.options();
    options.request_spans = traces.is_some();
    if let Some(auth) = &mut options.security.auth {
        // The same config, a connection pool of its own.
        auth.review_client = Some(ReviewClient(kube::Client::try_from(kube_config)?));
    }
    let mut running = server::start(client, listener, options, cancel.clone()).await?;
    tokio::spawn(
        async move {
            shutdown_signal().await;
            tracing::info!("shutting down");
            cancel.cancel();
        }
        .instrument(tracing::info_span!("signals")),
    );
    let outcome = running.wait().await;
    if let Some(traces) = traces {
        traces.shutdown().await;
    }
    Ok(outcome?)
}

/// Logs to stderr, as `RUST_LOG` filters them; with `traces`, the spans
/// it exports go through the same filter.
fn init_logging(json: bool, traces: Option<&Traces>) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(traces.map(Traces::layer));
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    if json {
        registry.with(logs.json()).init();
    } else {
        registry.with(logs).init();
    }
}

async fn kube_config(config: &Config) -> anyhow::Result<kube::Config> {
    let options = kube::config::KubeConfigOptions {
        context: config.context.clone(),
        ..Default::default()
    };
    let kube_config = match &config.kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options).await?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig and not in a cluster")?,
    };
    Ok(kube_config)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler cannot fail on unix");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

//! Wiring: discover the resource types, start one reflector each (or, for
//! a tier's leaf, one feed each from its parent; and the on-demand types,
//! if on), and
//! serve the gRPC API with health and reflection (and metrics, and a
//! plaintext health listener, if asked) until cancelled. Each concern is
//! a module of its own; this one only puts them together.

use std::{net::SocketAddr, sync::Arc};

use kube_fanout_core::{registry::ServedTypes, shared_snapshot::SharedSnapshots};
use kube_fanout_listener::{
    connections::Connections,
    drain::{Drain, DrainStats},
};
use kube_fanout_service::list_budget::ListBudget;
use tokio::{net::TcpListener, task::JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span};

use crate::{
    audit, discovery,
    error::{ServeError, Tasks},
    grpc::Grpc,
    health, metrics, on_demand,
    options::ServerOptions,
    reflectors, security, tier,
};

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
    /// What closes the listeners' connections as the server stops.
    pub drain: Drain,
    tasks: Tasks,
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
        if let Some(began) = self.drain.began() {
            let DrainStats {
                open_at_start,
                closed_with_streams,
                closed_with_requests,
            } = self.drain.stats();
            info!(
                took = ?began.elapsed(),
                open_at_start,
                closed_with_streams,
                closed_with_requests,
                "stopped: of the connections open as the shutdown began, closed_with_streams were closed with watches still streaming (their clients had not read what was sent), closed_with_requests with calls in flight past the grace"
            );
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
    let mut tasks = JoinSet::new();
    let drain = Drain::new(options.drain);
    let begin = (drain.clone(), cancel.clone());
    tasks.spawn(
        async move {
            begin.1.cancelled().await;
            begin.0.begin();
            Ok(())
        }
        .instrument(info_span!("drain")),
    );
    let mut cache = match &options.upstream_fanout {
        Some(parents) => {
            tier::start(
                parents,
                &options.resources,
                &options.index_fields,
                options.history,
                options.reflector.transform,
                &mut tasks,
                &cancel,
            )
            .await?
        }
        None => {
            let types = discovery::discover(
                &client,
                &options.resources,
                &options.index_fields,
                options.on_demand.as_ref().map(|o| &o.allow),
            )
            .await?;
            let bootstrap = match &options.bootstrap_from {
                Some((peers, timeout)) => Some(reflectors::Bootstrap {
                    peers: tier::client_config(peers)?.build()?,
                    addresses: peers.addresses.len(),
                    timeout: *timeout,
                }),
                None => None,
            };
            reflectors::start(
                &client,
                types,
                options.history,
                options.reflector,
                bootstrap.as_ref(),
                &mut tasks,
                &cancel,
            )
        }
    };
    if let Some(allowed) = &options.on_demand {
        cache = cache.with_on_demand(on_demand::start(
            &client,
            allowed.clone(),
            options.history,
            &options.index_fields,
            options.reflector,
            &mut tasks,
            &cancel,
        ));
    }
    let cache = Arc::new(cache);
    let health = health::start(cache.clone(), options.unready_after, &mut tasks, &cancel).await;

    // Counted apart (the metrics listener's too), so that a flood of one
    // listener's connections leaves the others' free.
    let grpc_connections = Connections::new(options.connections);
    let health_connections = Connections::new(options.connections);
    let health_addr = match options.health_addr {
        Some(addr) => Some(
            health::listen(
                addr,
                health.clone(),
                &options,
                health_connections.clone(),
                drain.clone(),
                &mut tasks,
                &cancel,
            )
            .await?,
        ),
        None => None,
    };

    let local_addr = listener.local_addr()?;
    let audit = audit::start(&options.security, &mut tasks, &cancel).await?;
    let guards = security::secure(&client, &options.security, &audit, local_addr)?;
    let list_budget = ListBudget::new(options.security.list_bytes);
    let shared_snapshots = Arc::new(SharedSnapshots::new(options.shared_snapshot_bytes));
    let metrics_addr = match options.metrics_addr {
        Some(addr) => {
            let metrics_connections = Connections::new(options.connections);
            let mut registry = metrics::registry(
                cache.clone(),
                vec![
                    ("grpc", grpc_connections.clone()),
                    ("health", health_connections),
                    ("metrics", metrics_connections.clone()),
                ],
            );
            registry.register_collector(Box::new(list_budget.clone()));
            registry.register_collector(Box::new(metrics::SharedSnapshotCollector(
                shared_snapshots.clone(),
            )));
            metrics::register_lag_limits(&mut registry, &options.limits);
            if let Some(layer) = &guards.authenticate {
                layer.counters().register(&mut registry);
            }
            if let Some(counters) = audit.counters() {
                counters.register(&mut registry);
            }
            let bound = metrics::listen(
                addr,
                &options.security,
                guards.scrapes,
                registry,
                (metrics_connections, drain.clone()),
                &mut tasks,
                &cancel,
            );
            Some(bound.await?)
        }
        None => None,
    };

    let grpc = Grpc {
        cache: cache.clone(),
        access: guards.access,
        authenticate: guards.authenticate,
        list_budget,
        shared_snapshots,
        health,
        connections: grpc_connections,
        drain: drain.clone(),
    };
    grpc.serve(listener, &options, &mut tasks, &cancel)?;
    info!(%local_addr, "serving");
    Ok(Running {
        local_addr,
        metrics_addr,
        health_addr,
        cache,
        drain,
        tasks,
        cancel,
    })
}

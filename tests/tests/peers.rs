//! Replicas that start from a peer's snapshot (`--bootstrap-from`) on a
//! real kube-apiserver and etcd: a rolling restart of three replicas with
//! writes going on costs the API server no LIST, and subscribers moving
//! between replicas resume exactly; with the peers gone a replica lists as
//! before, and is exact too.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube_fanout::options::ServerOptions;
use kube_fanout_client::{
    Client, ClientError,
    proto::{EventType, WatchEvent, WatchRequest},
};
use kube_fanout_reflector::ReflectorConfig;
use kube_fanout_tests::{
    controlplane::ControlPlane,
    fanout::{Fanout, plaintext_peers},
    support::*,
};
use tonic::{Code, Streaming};

const NS: &str = "peers";

/// Options of a replica that lists (not watch-lists) the API server, so
/// that each snapshot it takes there is a LIST the API server counts.
fn listing(o: &mut ServerOptions) {
    o.reflector = ReflectorConfig {
        use_watch_list: false,
        ..ReflectorConfig::default()
    };
}

/// `base` bootstrapping from the replicas at `peers`.
fn from_peers(base: &ServerOptions, peers: &[SocketAddr]) -> ServerOptions {
    let mut options = base.clone();
    options.bootstrap_from = Some((plaintext_peers(peers), Duration::from_secs(20)));
    options
}

/// The API server's LISTs of configmaps, by its own metrics.
async fn lists(cp: &ControlPlane) -> Result<f64> {
    cp.metric_sum("apiserver_request_total", "configmaps", r#"verb="LIST""#)
        .await
}

/// A subscriber of the namespace that moves to the next replica when its
/// stream breaks, resuming from its last RV, and keeps the state its
/// events add up to. A resume answered Expired fails it: with replicas
/// holding history, every resume must be exact.
struct Subscriber {
    replicas: Vec<SocketAddr>,
    at: usize,
    stream: Streaming<WatchEvent>,
    rv: String,
    state: BTreeMap<String, ConfigMap>,
    resumes: usize,
}

impl Subscriber {
    async fn start(replicas: Vec<SocketAddr>, at: usize) -> Result<Self> {
        let mut stream = connect(replicas[at]).await?.watch(watch_list(NS)).await?;
        let (state, rv) = read_snapshot(&mut stream).await?;
        Ok(Subscriber {
            replicas,
            at,
            stream,
            rv,
            state,
            resumes: 0,
        })
    }

    /// Reads until `name` has been seen, resuming on the next replica
    /// (round the list) whenever the stream breaks.
    async fn until(&mut self, name: &str) -> Result<()> {
        loop {
            let event = match tokio::time::timeout(EVENT_TIMEOUT, self.stream.message()).await {
                Ok(Ok(Some(event))) => event,
                Ok(Err(status)) if status.code() == Code::OutOfRange => {
                    bail!("a resume from {} was Expired: {status:?}", self.rv)
                }
                Ok(Ok(None) | Err(_)) => {
                    self.resume().await?;
                    continue;
                }
                Err(_) => bail!("no event within {EVENT_TIMEOUT:?} at {}", self.rv),
            };
            let rv: u64 = event.resource_version.parse()?;
            let last: u64 = self.rv.parse()?;
            if rv < last || (rv == last && !event.resync) {
                bail!("RV {rv} after {last}: {event:?}");
            }
            self.rv = event.resource_version.clone();
            if event.r#type() == EventType::Bookmark {
                continue;
            }
            let cm = decode(&event)?;
            let key = cm.metadata.name.clone().context("a name")?;
            if event.r#type() == EventType::Deleted {
                self.state.remove(&key);
            } else {
                self.state.insert(key.clone(), cm);
            }
            if key == name {
                return Ok(());
            }
        }
    }

    /// Resumes from the last RV on the next replica that answers.
    async fn resume(&mut self) -> Result<()> {
        for _ in 0..20 {
            self.at = (self.at + 1) % self.replicas.len();
            let Ok(mut client) = connect(self.replicas[self.at]).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let request = WatchRequest {
                resource_version: self.rv.clone(),
                send_initial_events: false,
                ..watch_list(NS)
            };
            match client.watch(request).await {
                Ok(stream) => {
                    self.stream = stream;
                    self.resumes += 1;
                    return Ok(());
                }
                Err(ClientError::Status(status)) if status.code() == Code::OutOfRange => {
                    bail!("a resume from {} was Expired: {status:?}", self.rv)
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        bail!("no replica took the resume from {}", self.rv)
    }
}

async fn connect(addr: SocketAddr) -> Result<Client> {
    Ok(Client::connect(&format!("http://{addr}")).await?)
}

/// Writes until told to stop: patches `hot` and creates `w-N` in turn,
/// so that a change a replica missed stays missing from its state.
fn keep_writing(client: kube::Client) -> (Arc<AtomicBool>, tokio::task::JoinHandle<Result<u64>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let writer = tokio::spawn(async move {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
        let mut n = 0u64;
        while !flag.load(Ordering::Relaxed) {
            if n.is_multiple_of(2) {
                let patch = serde_json::json!({ "data": { "value": format!("w{n}") } });
                api.patch("hot", &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            } else {
                create_configmap(&client, NS, &format!("w-{n}"), "x").await?;
            }
            n += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(n)
    });
    (stop, writer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_from_peers_costs_the_api_server_no_list_and_every_subscriber_resumes_exactly()
-> Result<()> {
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, NS).await?;
    for i in 0..20 {
        create_configmap(&cp.client, NS, &format!("cm-{i}"), "x").await?;
    }
    create_configmap(&cp.client, NS, "hot", "x").await?;
    let mut replicas = Vec::new();
    for _ in 0..3 {
        let replica = Fanout::start_with(cp.client.clone(), &["v1/configmaps"], listing).await?;
        replica.wait_synced().await?;
        replicas.push(Some(replica));
    }
    let addrs: Vec<SocketAddr> = replicas.iter().flatten().map(|r| r.addr).collect();
    let mut subscribers = Vec::new();
    for i in 0..6 {
        subscribers.push(Subscriber::start(addrs.clone(), i % 3).await?);
    }
    let before = lists(&cp).await?;
    // They read all along, as live subscribers do, so that each resumes
    // from where it was when its replica went.
    let readers: Vec<_> = subscribers
        .into_iter()
        .map(|mut s| {
            tokio::spawn(async move {
                s.until("sentinel").await?;
                anyhow::Ok(s)
            })
        })
        .collect();

    let (stop, writer) = keep_writing(cp.client.clone());
    for i in 0..3 {
        let old = replicas[i].take().context("running")?;
        let peers: Vec<SocketAddr> = addrs.iter().copied().filter(|a| *a != old.addr).collect();
        let options = from_peers(&old.options, &peers);
        old.stop().await?;
        let new = Fanout::start_on(cp.client.clone(), addrs[i], options).await?;
        new.wait_synced().await?;
        let status = new.client().await?.list_resources().await?.resources;
        assert!(
            peers
                .iter()
                .any(|p| status[0].bootstrapped_from == format!("http://{p}/")),
            "replica {i} started from a peer: {:?}",
            status[0].bootstrapped_from
        );
        assert_eq!(
            (status[0].lists, status[0].watch_lists),
            (0, 0),
            "replica {i}"
        );
        replicas[i] = Some(new);
        // Writes go on while the next one restarts.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.await??;
    assert!(
        written > 10,
        "writes went on during the restarts: {written}"
    );
    assert_eq!(
        lists(&cp).await?,
        before,
        "LISTs of configmaps during the rolling restart"
    );

    let sentinel = create_configmap(&cp.client, NS, "sentinel", "x").await?;
    let at = sentinel.metadata.resource_version.context("an RV")?;
    let truth = contents(&list_at(&cp.client, NS, &at).await?);
    for (i, reader) in readers.into_iter().enumerate() {
        let subscriber = reader.await??;
        assert_eq!(subscriber.rv, at, "subscriber {i}");
        assert_eq!(contents(&subscriber.state), truth, "subscriber {i}");
        assert!(
            subscriber.resumes >= 1,
            "subscriber {i} moved with its replica"
        );
    }
    // And each replica's own state is the API server's at its RV.
    for replica in replicas.into_iter().flatten() {
        let mut stream = replica.client().await?.watch(watch_list(NS)).await?;
        let (snapshot, rv) = read_snapshot(&mut stream).await?;
        let truth = contents(&list_at(&cp.client, NS, &rv).await?);
        assert_eq!(contents(&snapshot), truth, "replica at {}", replica.addr);
        replica.stop().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_peers_are_gone_lists_as_before_and_is_exact() -> Result<()> {
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, NS).await?;
    for i in 0..5 {
        create_configmap(&cp.client, NS, &format!("cm-{i}"), "x").await?;
    }
    let gone = Fanout::start_with(cp.client.clone(), &["v1/configmaps"], listing).await?;
    gone.wait_synced().await?;
    let gone_addr = gone.addr;
    let options = from_peers(&gone.options, &[gone_addr]);
    gone.stop().await?;
    let before = lists(&cp).await?;
    let replica = Fanout::start_on(cp.client.clone(), "127.0.0.1:0".parse()?, options).await?;
    replica.wait_synced().await?;
    assert!(lists(&cp).await? > before, "it listed the API server");
    let status = replica.client().await?.list_resources().await?.resources;
    assert_eq!(status[0].bootstrapped_from, "");
    assert_eq!(status[0].lists, 1);
    let mut stream = replica.client().await?.watch(watch_list(NS)).await?;
    let (snapshot, rv) = read_snapshot(&mut stream).await?;
    assert_eq!(
        contents(&snapshot),
        contents(&list_at(&cp.client, NS, &rv).await?)
    );
    let later = create_configmap(&cp.client, NS, "later", "x").await?;
    let event = next_change(&mut stream).await?;
    assert_eq!(
        (event.r#type(), event.resource_version),
        (
            EventType::Added,
            later.metadata.resource_version.context("an RV")?
        )
    );
    // A resume from before its first snapshot is Expired, as on any new
    // replica: it holds no history from before it started.
    let request = WatchRequest {
        resource_version: "1".into(),
        send_initial_events: false,
        ..watch_list(NS)
    };
    match replica.client().await?.watch(request).await {
        Err(ClientError::Status(status)) => assert_eq!(status.code(), Code::OutOfRange),
        Err(err) => bail!("{err}"),
        Ok(mut stream) => match stream.message().await {
            Err(status) => assert_eq!(status.code(), Code::OutOfRange),
            Ok(event) => bail!("a resume from RV 1 was answered {event:?}"),
        },
    }
    replica.stop().await?;
    Ok(())
}

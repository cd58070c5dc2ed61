//! A subscriber on the raw gRPC `Watch` (the generated client, not the
//! convenience watcher, so that the wire itself is recorded). It hangs up
//! and resumes from its last resume point, on any server of the run (a
//! replica, or a leaf of a tier); some read
//! slowly through small HTTP/2 windows; on Expired it takes a new
//! snapshot; on RESOURCE_EXHAUSTED or UNAVAILABLE it resumes from the RV
//! the status names. Everything it sends and receives goes into its
//! [`Life`] for the checker.

use std::{
    net::SocketAddr,
    sync::{Arc, RwLock},
    time::Duration,
};

use anyhow::{Result, bail};
use kube_fanout_proto::{
    ends_initial_events,
    v1::{EventType, ResourceRef, WatchEvent, WatchRequest, kube_fanout_client::KubeFanoutClient},
};
use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio::{sync::watch, time::Instant};
use tonic::{Code, codec::CompressionEncoding, transport::Endpoint};
use tonic_types::StatusExt;

use super::model::Filter;

/// One thing that happened to a subscriber.
#[derive(Debug, Clone)]
pub enum Entry {
    /// A Watch was opened on a replica.
    Connect {
        /// When.
        at: Instant,
        /// Which replica (index into the replica list).
        replica: usize,
        /// The request's resourceVersion.
        resource_version: String,
        /// Whether it asked for a snapshot.
        snapshot: bool,
    },
    /// An event arrived.
    Event(WatchEvent),
    /// The stream ended.
    End(Ending),
}

/// How a stream ended.
#[derive(Debug, Clone)]
pub enum Ending {
    /// The subscriber hung up.
    HungUp,
    /// The server closed the stream without a status.
    Closed,
    /// A status (from the server, or a broken connection).
    Failed {
        /// Its code.
        code: Code,
        /// Its ErrorInfo reason, if any.
        reason: String,
        /// Its ErrorInfo `resourceVersion`, if any.
        resource_version: Option<u64>,
        /// Its message, bounded.
        message: String,
    },
}

/// What one subscriber did and saw, in order.
#[derive(Debug, Clone)]
pub struct Life {
    /// Its number.
    pub id: usize,
    /// Its filter.
    pub filter: Filter,
    /// Whether it read slowly through small windows.
    pub slow: bool,
    /// Whether it asked for bookmarks.
    pub bookmarks: bool,
    /// Whether it asked for compressed messages.
    pub compressed: bool,
    /// Everything, in order.
    pub entries: Vec<Entry>,
    /// Why it stopped early, if it did.
    pub gave_up: Option<String>,
}

/// How a subscriber behaves.
#[derive(Debug, Clone)]
pub struct Behaviour {
    /// Its number, also its random seed.
    pub id: usize,
    /// Its filter.
    pub filter: Filter,
    /// Read slowly through small HTTP/2 windows, on longer connections
    /// (so that the lag bound, counted per stream, can be reached).
    pub slow: bool,
    /// The server it starts on (index into the addresses).
    pub first: usize,
    /// Stay on one server unless it fails (so that it is there when that
    /// server re-syncs, or passes a parent's re-sync on); others move at
    /// random.
    pub sticky: bool,
    /// Ask for bookmarks (without them, only the snapshot's end and
    /// re-sync units' closing bookmarks may come).
    pub bookmarks: bool,
    /// Asks the server to compress its messages so (gzip or zstd).
    pub compression: Option<CompressionEncoding>,
    /// At most this many Watch calls in its life.
    pub max_connections: usize,
    /// Hang up after a random time in this range (ms).
    pub hang_up_ms: (u64, u64),
    /// A slow reader's pause after each event, drawn in this range (ms).
    pub slow_read_ms: (u64, u64),
}

/// Where the subscriber goes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// A snapshot at least as fresh as this RV (0: any).
    Snapshot(u64),
    /// A resume after this RV.
    Resume(u64),
}

/// The end of the run: the RV every subscriber must reach, and by when.
#[derive(Debug, Clone, Copy)]
pub struct Final {
    /// The RV.
    pub rv: u64,
    /// The time it has.
    pub until: Instant,
}

/// The servers' current addresses, updated when one restarts.
pub type Addresses = Arc<RwLock<Vec<SocketAddr>>>;

/// Runs one subscriber until `done` names the final RV and its resume
/// point has reached it, or the time for that, or `deadline`, passes.
pub async fn run(
    behaviour: Behaviour,
    addresses: Addresses,
    done: watch::Receiver<Option<Final>>,
    deadline: Instant,
) -> Life {
    let mut life = Life {
        id: behaviour.id,
        filter: behaviour.filter.clone(),
        slow: behaviour.slow,
        bookmarks: behaviour.bookmarks,
        compressed: behaviour.compression.is_some(),
        entries: Vec::new(),
        gave_up: None,
    };
    if let Err(e) = live(&behaviour, &addresses, &done, deadline, &mut life).await {
        life.gave_up = Some(e.to_string());
    }
    life
}

async fn live(
    b: &Behaviour,
    addresses: &Addresses,
    done: &watch::Receiver<Option<Final>>,
    mut deadline: Instant,
    life: &mut Life,
) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(b.id as u64);
    let replicas = addresses.read().expect("addresses").len();
    let mut replica = b.first % replicas;
    let mut next = Next::Snapshot(0);
    // Connection attempts that failed in a row, and resumes that got
    // nowhere in a row: both back off, so that a replica being down or a
    // server that cuts the subscriber off at once does not spin.
    let (mut refused, mut fruitless) = (0u32, 0u32);
    let mut connections = 0;
    loop {
        let finished = match next {
            Next::Resume(rv) => Some(rv),
            Next::Snapshot(_) => None,
        };
        let target = *done.borrow();
        if let Some(target) = target {
            if finished.is_some_and(|at| at >= target.rv) {
                return Ok(());
            }
            deadline = deadline.min(target.until);
        }
        if Instant::now() > deadline {
            bail!("deadline passed before reaching the final RV (at {next:?})");
        }
        if connections >= b.max_connections {
            bail!("{connections} connections used up (at {next:?})");
        }
        if refused > 0 || fruitless > 0 {
            let n = refused.max(fruitless).min(6);
            tokio::time::sleep(Duration::from_millis(25 << n)).await;
        }
        if !b.sticky && rng.random_bool(0.3) {
            // Any other server: with tiers, a move within a tier or across.
            replica = (replica + rng.random_range(1..replicas.max(2))) % replicas;
        }
        let addr = addresses.read().expect("addresses")[replica];
        let mut endpoint = Endpoint::from_shared(format!("http://{addr}"))?
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(600));
        if b.slow {
            endpoint = endpoint
                .initial_stream_window_size(Some(4096))
                .initial_connection_window_size(Some(8192));
        }
        let Ok(Ok(channel)) =
            tokio::time::timeout(Duration::from_secs(3), endpoint.connect()).await
        else {
            refused += 1;
            replica = (replica + 1) % replicas;
            continue;
        };
        refused = 0;
        connections += 1;
        let (snapshot, resource_version) = match next {
            Next::Snapshot(0) => (true, String::new()),
            Next::Snapshot(rv) => (true, rv.to_string()),
            Next::Resume(rv) => (false, rv.to_string()),
        };
        let request = WatchRequest {
            resource: Some(ResourceRef {
                group: String::new(),
                version: "v1".into(),
                resource: "configmaps".into(),
            }),
            namespace: b.filter.namespace.clone(),
            label_selector: b.filter.label_selector(),
            field_selector: b.filter.field_selector(),
            resource_version: resource_version.clone(),
            send_initial_events: snapshot,
            allow_bookmarks: b.bookmarks,
            metadata_only: b.filter.metadata_only,
            head_bookmarks: false,
        };
        life.entries.push(Entry::Connect {
            at: Instant::now(),
            replica,
            resource_version,
            snapshot,
        });
        let (min, max) = b.hang_up_ms;
        let lasting = if b.slow { 4 } else { 1 };
        let hang_up = deadline
            .min(Instant::now() + Duration::from_millis(rng.random_range(min..max) * lasting));
        let mut client = KubeFanoutClient::new(channel);
        if let Some(encoding) = b.compression {
            client = client.accept_compressed(encoding);
        }
        let before = next;
        let ending = match tokio::time::timeout(Duration::from_secs(10), client.watch(request))
            .await
        {
            Err(_) => failed(&tonic::Status::deadline_exceeded(
                "no response to Watch in 10s",
            )),
            Ok(Err(status)) => failed(&status),
            Ok(Ok(response)) => {
                let mut stream = response.into_inner();
                let mut in_snapshot = snapshot;
                let mut previous_rv = None;
                // Inside a unit: how many of its events to read before
                // hanging up (decided at its first event; None: read it all).
                let mut unit_cut: Option<Option<u32>> = None;
                loop {
                    let message = tokio::time::timeout_at(hang_up, stream.message()).await;
                    let event = match message {
                        Err(_) => break Ending::HungUp,
                        Ok(Ok(None)) => break Ending::Closed,
                        Ok(Err(status)) => break failed(&status),
                        Ok(Ok(Some(event))) => event,
                    };
                    let rv: u64 = event.resource_version.parse().unwrap_or_default();
                    if in_snapshot {
                        if ends_initial_events(&event) {
                            in_snapshot = false;
                            next = Next::Resume(rv);
                        }
                    } else if !event.resync || event.r#type() == EventType::Bookmark {
                        // A live event, a bookmark, or the end of a re-sync
                        // unit: a resume point.
                        next = Next::Resume(rv);
                    }
                    // Inside a unit (a re-sync event, or one of several
                    // events at one RV), a quarter of the time hang up
                    // after a few of its events: the resume must then
                    // deliver the rest exactly.
                    let inside_unit = !in_snapshot
                        && event.r#type() != EventType::Bookmark
                        && (event.resync || previous_rv == Some(rv));
                    previous_rv = Some(rv);
                    let hang_up_now = if inside_unit {
                        let cut = unit_cut.get_or_insert_with(|| {
                            rng.random_bool(0.25).then(|| rng.random_range(0..4))
                        });
                        match cut {
                            Some(0) => true,
                            Some(n) => {
                                *n -= 1;
                                false
                            }
                            None => false,
                        }
                    } else {
                        unit_cut = None;
                        false
                    };
                    life.entries.push(Entry::Event(event));
                    if let (Some(target), Next::Resume(at)) = (*done.borrow(), next)
                        && at >= target.rv
                    {
                        break Ending::HungUp;
                    }
                    if hang_up_now {
                        break Ending::HungUp;
                    }
                    // Slow until the end is called: then a slow reader
                    // catches up at full speed, so that one that still
                    // does not reach the final RV shows a stall, not its
                    // own reading rate.
                    if b.slow && done.borrow().is_none() {
                        let (min, max) = b.slow_read_ms;
                        tokio::time::sleep(Duration::from_millis(rng.random_range(min..max))).await;
                    }
                }
            }
        };
        if let Ending::Failed {
            code,
            reason,
            resource_version,
            ..
        } = &ending
        {
            match (code, next) {
                (Code::OutOfRange, Next::Resume(rv)) if reason == "Expired" => {
                    next = Next::Snapshot(rv);
                }
                (Code::ResourceExhausted | Code::Unavailable, Next::Resume(at)) => {
                    // An RV behind the resume point would repeat changes
                    // (the checker reports such a status).
                    if let Some(rv) = resource_version.filter(|rv| *rv > at) {
                        next = Next::Resume(rv);
                    }
                }
                _ => {}
            }
            replica = (replica + 1) % replicas;
        }
        fruitless = if next == before { fruitless + 1 } else { 0 };
        life.entries.push(Entry::End(ending));
    }
}

/// The ending a status makes, with its ErrorInfo.
fn failed(status: &tonic::Status) -> Ending {
    let info = status.get_details_error_info();
    Ending::Failed {
        code: status.code(),
        reason: info.as_ref().map(|i| i.reason.clone()).unwrap_or_default(),
        resource_version: info
            .as_ref()
            .and_then(|i| i.metadata.get("resourceVersion"))
            .and_then(|rv| rv.parse().ok()),
        message: super::model::bounded(status.message(), 200),
    }
}

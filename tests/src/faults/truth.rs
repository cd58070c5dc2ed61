//! The truth: a LIST+WATCH of every ConfigMap straight from the API server,
//! recording each change (RV, key, new state or deletion) in order, so that
//! the checker can compute the API server's exact state at any RV. It must
//! never miss anything itself: a 410 or an RV out of order ends it with an
//! error instead of a guess.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::model::{Filter, Key, Obj};

/// One change the API server made.
#[derive(Debug, Clone)]
pub struct Change {
    /// Its resourceVersion.
    pub rv: u64,
    /// The object changed.
    pub key: Key,
    /// Its new state; `None` when deleted.
    pub object: Option<Arc<Obj>>,
}

/// Everything recorded: the state at `start_rv`, then every change after it.
#[derive(Debug, Clone, Default)]
pub struct TruthLog {
    /// The RV of the initial LIST.
    pub start_rv: u64,
    /// The objects at `start_rv`.
    pub initial: HashMap<Key, Arc<Obj>>,
    /// Every change after `start_rv`, RVs strictly increasing.
    pub changes: Vec<Change>,
}

impl TruthLog {
    /// The index of the first change with an RV above `rv`.
    pub fn first_after(&self, rv: u64) -> usize {
        self.changes.partition_point(|c| c.rv <= rv)
    }

    /// The change at exactly `rv`, if there is one.
    pub fn at(&self, rv: u64) -> Option<&Change> {
        let i = self.changes.partition_point(|c| c.rv < rv);
        self.changes.get(i).filter(|c| c.rv == rv)
    }

    /// The objects passing `filter` at `rv` (which must be ≥ `start_rv`).
    pub fn state_at(&self, rv: u64, filter: &Filter) -> HashMap<Key, Arc<Obj>> {
        let mut state: HashMap<Key, Arc<Obj>> = self
            .initial
            .iter()
            .filter_map(|(k, o)| Some((k.clone(), filter.view(k, o)?)))
            .collect();
        for change in &self.changes[..self.first_after(rv)] {
            match change
                .object
                .as_ref()
                .and_then(|o| filter.view(&change.key, o))
            {
                Some(o) => {
                    state.insert(change.key.clone(), o);
                }
                None => {
                    state.remove(&change.key);
                }
            }
        }
        state
    }
}

/// The running recorder.
pub struct Truth {
    log: Arc<Mutex<TruthLog>>,
    /// The RV the recorder has seen everything up to, or its fatal error.
    progress: watch::Receiver<Result<u64, String>>,
    cancel: CancellationToken,
}

/// How long one watch request lasts before it is renewed (the API server's
/// own bound is 30 minutes; shorter exercises the renewal).
const WATCH_SECONDS: u32 = 240;

impl Truth {
    /// Lists every ConfigMap through `client` and follows its watch.
    pub async fn start(client: kube::Client) -> Result<Truth> {
        let api: Api<ConfigMap> = Api::all(client);
        let list = api.list(&ListParams::default()).await?;
        let start_rv: u64 = list
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
            .parse()
            .context("the LIST's resourceVersion")?;
        let initial = list
            .items
            .iter()
            .map(|cm| Obj::from_configmap(cm).map(|(k, o)| (k, Arc::new(o))))
            .collect::<Result<_>>()?;
        let log = Arc::new(Mutex::new(TruthLog {
            start_rv,
            initial,
            changes: Vec::new(),
        }));
        let (tx, progress) = watch::channel(Ok(start_rv));
        let cancel = CancellationToken::new();
        tokio::spawn(
            follow(api, log.clone(), tx, cancel.clone(), start_rv)
                .instrument(tracing::info_span!("truth")),
        );
        Ok(Truth {
            log,
            progress,
            cancel,
        })
    }

    /// Waits until the recorder has seen everything up to `rv`.
    pub async fn wait_for(&self, rv: u64, within: Duration) -> Result<()> {
        let mut progress = self.progress.clone();
        let reached = tokio::time::timeout(
            within,
            progress.wait_for(|p| p.as_ref().map_or(true, |seen| *seen >= rv)),
        )
        .await;
        match reached {
            Err(_) => bail!(
                "the truth recorder did not reach RV {rv} within {within:?} (at {:?})",
                *self.progress.borrow()
            ),
            Ok(Err(_)) => bail!("the truth recorder stopped"),
            Ok(Ok(p)) => match &*p {
                Ok(_) => Ok(()),
                Err(e) => bail!("the truth recorder failed: {e}"),
            },
        }
    }

    /// Waits until the recorder holds at least `n` changes, or `deadline`.
    pub async fn wait_changes(&self, n: usize, deadline: tokio::time::Instant) -> Result<()> {
        let mut progress = self.progress.clone();
        let reached = tokio::time::timeout_at(
            deadline,
            progress.wait_for(|p| p.is_err() || self.changes() >= n),
        )
        .await;
        match reached {
            Err(_) => bail!("only {} of {n} changes before the deadline", self.changes()),
            Ok(Err(_)) => bail!("the truth recorder stopped"),
            Ok(Ok(p)) => match &*p {
                Ok(_) => Ok(()),
                Err(e) => bail!("the truth recorder failed: {e}"),
            },
        }
    }

    /// A copy of everything recorded so far.
    pub fn log(&self) -> TruthLog {
        self.log.lock().expect("truth lock").clone()
    }

    /// How many changes were recorded.
    pub fn changes(&self) -> usize {
        self.log.lock().expect("truth lock").changes.len()
    }
}

impl Drop for Truth {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Watches from `rv` until cancelled, renewing the watch when it times
/// out; publishes progress, or the reason it cannot go on.
async fn follow(
    api: Api<ConfigMap>,
    log: Arc<Mutex<TruthLog>>,
    progress: watch::Sender<Result<u64, String>>,
    cancel: CancellationToken,
    mut rv: u64,
) {
    // Renewals that fail in a row before the recorder gives up: the API
    // server it talks to stays up for the whole run.
    const MAX_FAILURES: u32 = 20;
    let mut failures = 0;
    while !cancel.is_cancelled() {
        // Bookmarks are on by default.
        let params = WatchParams::default().timeout(WATCH_SECONDS);
        let outcome = tokio::select! {
            () = cancel.cancelled() => return,
            outcome = watch_once(&api, &params, &log, &progress, &mut rv) => outcome,
        };
        match outcome {
            Ok(()) => failures = 0,
            Err(Fatal(e)) => {
                progress.send_modify(|p| *p = Err(e));
                return;
            }
            Err(Retry(e)) => {
                failures += 1;
                tracing::warn!(error = %e, failures, "truth watch failed; renewing");
                if failures >= MAX_FAILURES {
                    progress
                        .send_modify(|p| *p = Err(format!("{failures} failed watches, last: {e}")));
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Why one watch ended badly.
enum WatchEnd {
    /// The recorder can no longer be exact.
    Fatal(String),
    /// A transient failure: renew the watch from the last RV.
    Retry(String),
}
use WatchEnd::{Fatal, Retry};

async fn watch_once(
    api: &Api<ConfigMap>,
    params: &WatchParams,
    log: &Mutex<TruthLog>,
    progress: &watch::Sender<Result<u64, String>>,
    rv: &mut u64,
) -> Result<(), WatchEnd> {
    let stream = api
        .watch(params, &rv.to_string())
        .await
        .map_err(|e| Retry(e.to_string()))?;
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let event = event.map_err(|e| Retry(e.to_string()))?;
        let (cm, deleted) = match event {
            WatchEvent::Added(cm) | WatchEvent::Modified(cm) => (cm, false),
            WatchEvent::Deleted(cm) => (cm, true),
            WatchEvent::Bookmark(b) => {
                let at: u64 =
                    b.metadata.resource_version.parse().map_err(|_| {
                        Fatal(format!("bookmark RV {:?}", b.metadata.resource_version))
                    })?;
                if at > *rv {
                    *rv = at;
                    progress.send_modify(|p| *p = Ok(at));
                }
                continue;
            }
            WatchEvent::Error(status) => {
                return Err(Fatal(format!(
                    "the API server ended the truth's watch: {status}"
                )));
            }
        };
        let (key, obj) = Obj::from_configmap(&cm).map_err(|e| Fatal(e.to_string()))?;
        if obj.rv <= *rv {
            return Err(Fatal(format!(
                "the truth's watch went back: {key} at RV {} after {}",
                obj.rv, rv
            )));
        }
        *rv = obj.rv;
        log.lock().expect("truth lock").changes.push(Change {
            rv: obj.rv,
            key,
            object: (!deleted).then(|| Arc::new(obj)),
        });
        progress.send_modify(|p| *p = Ok(*rv));
    }
    Ok(())
}

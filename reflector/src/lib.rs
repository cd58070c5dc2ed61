//! The reflector keeps one [`Store`] equal to the API server's state of one
//! resource type, behaving as client-go's reflector does.
//!
//! It is an explicit state machine: [`Reflector::step`] performs one
//! [`State`] and returns the next, so tests can drive it one request at a
//! time. The states and the rules between them:
//!
//! - **WatchList** (when enabled, the default): a WATCH with
//!   `sendInitialEvents=true` and `resourceVersionMatch=NotOlderThan`
//!   streams the current objects into a temporary map until the bookmark
//!   annotated `k8s.io/initial-events-end`; then the store is replaced and
//!   the same watch stays open. A stream that ends before that bookmark is
//!   retried from the same RV; one the server refuses (or a very short or
//!   undecodable one) makes the reflector fall back to List: progress
//!   beats deadlock.
//! - **List**: a LIST replaces the store. The first asks for RV "0" (served
//!   from the watch cache), later ones for the last synced RV; after an
//!   Expired (410) or too-large-RV answer the list is retried at once at RV
//!   "", a consistent read. Pages follow client-go's pager rules: only a
//!   continue token that expires mid-list falls back to one full list.
//! - **Watch**: a WATCH from the last synced RV with bookmarks and a
//!   timeout drawn from [min, 2×min). A watch that ends normally is reopened
//!   from where it got to; connection refused and 429 back off and reopen
//!   it without relisting; internal errors (a 500, or a line that is not a
//!   watch event) end the watch and are retried at once from the last RV
//!   within a window ([`retry`]); other failures (an expired RV, a very
//!   short watch) back off and relist.
//! - **Backoff**: exponential with jitter, reset after a healthy spell.
//!
//! A LIST or watch-list slower than [`trace::SLOW_SYNC`] is logged with its
//! steps. Routine answers (a 410 that forces a relist, a 429) are logged at
//! debug and info, as client-go logs them, not as warnings.
//!
//! The crate owns the reflector, its requests to the API server
//! ([`upstream`]) and its [`backoff`]; it sits on the core (it writes the
//! store and reports a `ReflectorStatus`) and kube, and only the server
//! wiring sits on it.

use std::{collections::HashMap, fmt, sync::Arc, time::Duration};

use futures::StreamExt;
use kube_fanout_proto::INITIAL_EVENTS_END;
use parking_lot::Mutex;
use rand::Rng;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Level, debug, info, warn};

use self::{retry::InternalErrorRetry, trace::SyncTrace};
use kube_fanout_core::{
    event::EventKind,
    fields::SelectableFields,
    object::{Object, ObjectError, ResourceVersion, Transform, TypeMeta},
    reflector_status::{Phase, ReflectorStatus},
    store::Store,
};

use crate::{
    backoff::{Backoff, BackoffConfig},
    upstream::{Lines, Upstream, UpstreamError},
};

/// The smallest minimum watch timeout, as client-go enforces.
pub const MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);

/// The page size when paging is on and none was configured (client-go's pager).
const DEFAULT_PAGE_SIZE: u32 = 500;

/// How long a watch-list may go without its end bookmark after the last
/// event before the reflector warns.
const END_BOOKMARK_WARNING: Duration = Duration::from_secs(10);

/// A watch shorter than this that delivered nothing is an error.
const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);

/// How a reflector talks to the API server.
#[derive(Debug, Clone, Copy)]
pub struct ReflectorConfig {
    /// LIST page size. `None` follows client-go: pages of 500 for RV "" and
    /// "0", and no paging for a specific RV (so the watch cache serves it)
    /// unless a list at RV "0" came back paginated.
    pub page_size: Option<u32>,
    /// Watch timeouts are drawn from [min, 2×min); never below 5 minutes.
    pub min_watch_timeout: Duration,
    /// Sync with a watch-list stream instead of LIST when the server allows.
    pub use_watch_list: bool,
    /// How long to keep retrying a watch that fails with 500 before relisting.
    pub max_internal_error_retry: Duration,
    /// After a watch-list sync, LIST at the same RV and log every difference.
    pub check_watch_list_consistency: bool,
    /// Applied to every object before it is stored.
    pub transform: Transform,
    /// Retry pacing.
    pub backoff: BackoffConfig,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        ReflectorConfig {
            page_size: None,
            min_watch_timeout: MIN_WATCH_TIMEOUT,
            use_watch_list: true,
            max_internal_error_retry: Duration::ZERO,
            check_watch_list_consistency: false,
            transform: Transform::default(),
            backoff: BackoffConfig::default(),
        }
    }
}

/// Why one step failed.
#[derive(Debug, thiserror::Error)]
pub enum ReflectorError {
    /// A request failed.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// A LIST answer that is not a list.
    #[error("could not decode the list: {0}")]
    DecodeList(#[source] serde_json::Error),
    /// A list or bookmark with an RV that is not a number.
    #[error(transparent)]
    ResourceVersion(#[from] ObjectError),
    /// A watch that ended within a second without any event: the server is
    /// in trouble, and reopening at once would spin.
    #[error("very short watch: the watch closed within 1s without delivering an event")]
    VeryShortWatch,
    /// A watch line that is not a watch event (not JSON, or of an unknown
    /// type). Like client-go's decoder, the watch ends with an internal
    /// error rather than skip it: skipping would lose the change until the
    /// next relist.
    #[error("cannot decode a watch event: {0}")]
    DecodeEvent(String),
}

impl ReflectorError {
    fn upstream(&self) -> Option<&UpstreamError> {
        match self {
            ReflectorError::Upstream(e) => Some(e),
            _ => None,
        }
    }

    /// Expired or too large: the RV asked for cannot be served.
    fn rv_unavailable(&self) -> bool {
        self.upstream()
            .is_some_and(|e| e.is_expired() || e.is_too_large_resource_version())
    }

    /// Connection refused or 429: worth reopening the watch after a backoff,
    /// without relisting.
    fn can_rewatch(&self) -> bool {
        self.upstream()
            .is_some_and(|e| e.is_connection_refused() || e.is_too_many_requests())
    }

    /// A 500, or an undecodable line (client-go reports those as a 500
    /// `ClientWatchDecoding`): retried within the internal-error window.
    fn is_internal(&self) -> bool {
        matches!(self, ReflectorError::DecodeEvent(_))
            || self.upstream().is_some_and(UpstreamError::is_internal)
    }

    /// How loudly a failure is logged: the answers a healthy cluster gives
    /// routinely (410 after a compaction or restart, 429 under load) at the
    /// levels client-go uses (V(4) and V(2)); anything else as a warning.
    fn log_level(&self) -> Level {
        match self.upstream() {
            Some(e) if e.is_expired() => Level::DEBUG,
            Some(e) if e.is_too_many_requests() => Level::INFO,
            _ => Level::WARN,
        }
    }
}

/// An open WATCH response.
pub struct OpenWatch {
    lines: Lines,
    started: Instant,
}

impl OpenWatch {
    /// The watch ended after `events` lines: a very short watch (within a
    /// second, with none) is an error.
    fn ended(&self, events: u64) -> Result<(), ReflectorError> {
        if events == 0 && self.started.elapsed() < VERY_SHORT_WATCH {
            return Err(ReflectorError::VeryShortWatch);
        }
        Ok(())
    }
}

impl fmt::Debug for OpenWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenWatch")
            .field("started", &self.started)
            .finish()
    }
}

/// The reflector's states (see the module docs).
#[derive(Debug)]
pub enum State {
    /// Sync with a watch-list stream.
    WatchList,
    /// Sync with a LIST.
    List,
    /// Follow a watch: the one given, or a new one from the last synced RV.
    Watch(Option<OpenWatch>),
    /// Wait, then go on with `then`.
    Backoff {
        /// How long.
        delay: Duration,
        /// What comes after.
        then: Box<State>,
    },
}

/// Keeps one store in step with the API server.
pub struct Reflector {
    upstream: Upstream,
    store: Arc<Store>,
    config: ReflectorConfig,
    type_meta: TypeMeta,
    fields: SelectableFields,
    status: Arc<Mutex<ReflectorStatus>>,
    backoff: Backoff,
    /// The RV of the last list, watch event or bookmark applied.
    last_sync: Option<ResourceVersion>,
    /// The last list or watch said `last_sync` is expired or too large.
    last_sync_unavailable: bool,
    /// A list at RV "0" came back in pages: the watch cache is off for this
    /// type, so keep paging.
    paginated_result: bool,
    /// The current run of internal errors, renewed by every sync.
    internal_errors: InternalErrorRetry,
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
    #[serde(default, rename = "continue")]
    continue_token: String,
}

#[derive(Deserialize)]
struct RawList<'a> {
    metadata: ListMeta,
    #[serde(borrow, default)]
    items: Vec<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(borrow)]
    object: &'a RawValue,
}

#[derive(Deserialize, Default)]
struct BookmarkMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
    #[serde(default)]
    annotations: HashMap<String, String>,
}

#[derive(Deserialize)]
struct Bookmark {
    #[serde(default)]
    metadata: BookmarkMeta,
}

/// What one watch event did.
enum Applied {
    /// Moved the RV; `end` if it was the initial-events-end bookmark.
    Moved { rv: ResourceVersion, end: bool },
    /// Logged and skipped.
    Skipped,
}

/// Where a watch event goes: the live store, or the temporary map a
/// watch-list fills before it replaces the store.
enum Sink<'a> {
    Store(&'a Store),
    Initial(&'a mut HashMap<String, Object>),
}

impl Reflector {
    /// A reflector filling `store` through `client`.
    pub fn new(client: kube::Client, store: Arc<Store>, mut config: ReflectorConfig) -> Self {
        config.min_watch_timeout = config.min_watch_timeout.max(MIN_WATCH_TIMEOUT);
        let resource = store.resource();
        Reflector {
            upstream: Upstream::new(client, resource.url_path()),
            type_meta: resource.type_meta(),
            fields: resource.fields.clone(),
            store,
            config,
            status: Arc::default(),
            backoff: Backoff::new(config.backoff),
            last_sync: None,
            last_sync_unavailable: false,
            paginated_result: false,
            internal_errors: InternalErrorRetry::new(config.max_internal_error_retry),
        }
    }

    /// A handle on the reflector's status that stays valid while it runs.
    pub fn status(&self) -> Arc<Mutex<ReflectorStatus>> {
        self.status.clone()
    }

    /// The state a new reflector, or one that must resync, starts in.
    pub fn initial_state(&self) -> State {
        if self.config.use_watch_list {
            State::WatchList
        } else {
            State::List
        }
    }

    /// Runs until `cancel` fires; stops promptly, mid-request or mid-wait.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut state = self.initial_state();
        loop {
            state = tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    self.status.lock().phase = Phase::Stopped;
                    info!("reflector stopped");
                    return;
                }
                next = self.step(state) => next,
            };
        }
    }

    /// Performs one state and returns the next.
    pub async fn step(&mut self, state: State) -> State {
        match state {
            State::WatchList => self.watch_list_step().await,
            State::List => self.list_step().await,
            State::Watch(open) => self.watch_step(open).await,
            State::Backoff { delay, then } => {
                self.set_phase(Phase::BackingOff);
                tokio::time::sleep(delay).await;
                *then
            }
        }
    }

    fn set_phase(&self, phase: Phase) {
        self.status.lock().phase = phase;
    }

    /// Backs off, then goes on with `then`.
    fn fail(&mut self, err: &ReflectorError, then: State) -> State {
        let mut delay = self.backoff.next_delay();
        if let Some(asked) = err.upstream().and_then(UpstreamError::retry_after) {
            delay = delay.max(asked);
        }
        match err.log_level() {
            Level::DEBUG => debug!(error = %err, ?delay, next = ?then, "reflector backing off"),
            Level::INFO => info!(error = %err, ?delay, next = ?then, "reflector backing off"),
            _ => warn!(error = %err, ?delay, next = ?then, "reflector backing off"),
        }
        let mut status = self.status.lock();
        status.last_error = Some(err.to_string());
        status.failures += 1;
        status.failing_since.get_or_insert_with(Instant::now);
        State::Backoff {
            delay,
            then: Box::new(then),
        }
    }

    fn synced_to(&mut self, rv: ResourceVersion) {
        self.last_sync = Some(rv);
        self.status.lock().last_sync_resource_version = Some(rv);
    }

    /// A LIST or watch-list replaced the store: the RV it asked for was
    /// served, and the watches that follow start a new internal-error run.
    async fn replaced(&mut self, objects: Vec<Object>, rv: ResourceVersion, trace: &mut SyncTrace) {
        self.last_sync_unavailable = false;
        // O(objects) of comparing: on a blocking thread, so that a relist
        // of a large type does not hold one of the runtime's few workers
        // (and with it other types' reflectors and subscribers). Nothing
        // else writes this store meanwhile: the reflector is its one
        // writer, and it waits here.
        let store = self.store.clone();
        let replaced = tokio::task::spawn_blocking(move || store.replace(objects, rv)).await;
        if let Err(err) = replaced
            && err.is_panic()
        {
            std::panic::resume_unwind(err.into_panic());
        }
        trace.step("store replaced");
        self.synced_to(rv);
        self.internal_errors.reset();
        if trace.log_if_slow() {
            self.status.lock().slow_syncs += 1;
        }
    }

    /// The RV a relist asks for (client-go's relistResourceVersion).
    fn relist_from(&self) -> String {
        match (self.last_sync_unavailable, self.last_sync) {
            (true, _) => String::new(),
            (false, None) => "0".into(),
            (false, Some(rv)) => rv.to_string(),
        }
    }

    /// The RV a watch-list asks for (client-go's rewatchResourceVersion).
    fn rewatch_from(&self) -> String {
        match (self.last_sync_unavailable, self.last_sync) {
            (false, Some(rv)) => rv.to_string(),
            _ => String::new(),
        }
    }

    fn watch_timeout(&self) -> String {
        let min = self.config.min_watch_timeout.as_secs();
        rand::rng().random_range(min..2 * min).to_string()
    }

    // ---- List ----

    async fn list_step(&mut self) -> State {
        self.set_phase(Phase::Listing);
        let mut trace = SyncTrace::new("list");
        let mut from = self.relist_from();
        let mut outcome = self.list(&from).await;
        if outcome.as_ref().is_err_and(ReflectorError::rv_unavailable) {
            // The RV cannot be served: relist at once with a consistent
            // read rather than back off, so the reflector moves forward.
            self.last_sync_unavailable = true;
            from = self.relist_from();
            outcome = self.list(&from).await;
        }
        match outcome {
            Ok((objects, rv, requests)) => {
                info!(%rv, from = %from, objects = objects.len(), requests, "listed");
                trace.step(format!("{} objects listed from RV {from:?}", objects.len()));
                self.replaced(objects, rv, &mut trace).await;
                let mut status = self.status.lock();
                status.lists += 1;
                status.last_list_from = Some(from);
                status.last_list_requests = requests;
                drop(status);
                State::Watch(None)
            }
            Err(err) => {
                let next = self.initial_state();
                self.fail(&err, next)
            }
        }
    }

    /// LISTs every object, in pages when the rules say so; returns them, the
    /// list's RV and how many requests it took.
    async fn list(
        &mut self,
        from: &str,
    ) -> Result<(Vec<Object>, ResourceVersion, u64), ReflectorError> {
        let page_size = match self.config.page_size {
            Some(size) => size,
            None if self.paginated_result => DEFAULT_PAGE_SIZE,
            None if !from.is_empty() && from != "0" => 0,
            None => DEFAULT_PAGE_SIZE,
        };
        let (objects, rv, requests) = self.list_pages(from, page_size).await?;
        // Only an answer to RV "0" says the watch cache is off: a list at
        // RV "" is paged by etcd even when the cache is on, and the cache
        // should still serve later relists.
        if from == "0" && requests > 1 {
            self.paginated_result = true;
        }
        Ok((objects, rv, requests))
    }

    /// Follows `continue` tokens to the end; returns the objects, the RV and
    /// the number of requests (more than one: the list was paginated). A first page's error is the caller's (a 410 there
    /// means the RV asked for is gone, and a full list at it would fail the
    /// same way); a continue token that expires mid-list falls back to one
    /// full list at `from`, as client-go's pager does.
    async fn list_pages(
        &self,
        from: &str,
        page_size: u32,
    ) -> Result<(Vec<Object>, ResourceVersion, u64), ReflectorError> {
        let limit = page_size.to_string();
        let mut continue_token = String::new();
        let mut objects = Vec::new();
        let mut requests = 0;
        loop {
            requests += 1;
            let mut query = Vec::new();
            if page_size > 0 {
                query.push(("limit", limit.as_str()));
            }
            if continue_token.is_empty() {
                query.push(("resourceVersion", from));
            } else {
                query.push(("continue", continue_token.as_str()));
            }
            let text = match self.upstream.list(&query).await {
                Err(e) if e.is_expired() && !continue_token.is_empty() => {
                    debug!(error = %e, "a continue token expired; listing in one page");
                    let text = self.upstream.list(&[("resourceVersion", from)]).await?;
                    let (objects, page) = self.decode_page(&text)?;
                    return Ok((objects, page.resource_version.parse()?, requests + 1));
                }
                text => text?,
            };
            let (page_objects, page) = self.decode_page(&text)?;
            objects.extend(page_objects);
            if page.continue_token.is_empty() {
                let rv = page.resource_version.parse()?;
                return Ok((objects, rv, requests));
            }
            continue_token = page.continue_token;
        }
    }

    /// One LIST answer's objects (those the store can take) and metadata.
    fn decode_page(&self, text: &str) -> Result<(Vec<Object>, ListMeta), ReflectorError> {
        let page: RawList = serde_json::from_str(text).map_err(ReflectorError::DecodeList)?;
        let objects = page
            .items
            .iter()
            .filter_map(|raw| self.decode(raw.get()))
            .collect();
        Ok((objects, page.metadata))
    }

    /// Parses an object, logging and dropping one that does not belong.
    fn decode(&self, raw: &str) -> Option<Object> {
        match Object::from_json(raw, &self.type_meta, &self.fields, self.config.transform) {
            Ok(object) => Some(object),
            Err(err) => {
                warn!(error = %err, "dropping an object the store cannot take");
                None
            }
        }
    }

    // ---- WatchList ----

    async fn watch_list_step(&mut self) -> State {
        self.set_phase(Phase::WatchListing);
        let mut trace = SyncTrace::new("watch-list");
        let from = self.rewatch_from();
        let outcome = match self.open_watch(&from, true).await {
            Ok(mut open) => self
                .stream_initial_events(&mut open)
                .await
                .map(|synced| synced.map(|(objects, rv)| (open, objects, rv))),
            Err(err) => Err(err),
        };
        match outcome {
            Ok(Some((open, objects, rv))) => {
                info!(%rv, from = %from, objects = objects.len(), "synced with watch-list");
                trace.step(format!(
                    "{} objects streamed from RV {from:?}",
                    objects.len()
                ));
                if self.config.check_watch_list_consistency {
                    self.check_consistency(&objects, rv).await;
                    trace.step("consistency checked");
                }
                self.replaced(objects, rv, &mut trace).await;
                self.status.lock().watch_lists += 1;
                State::Watch(Some(open))
            }
            Ok(None) => {
                // client-go retries the watch-list at once from the same RV
                // (what it streamed is thrown away): the stream was healthy
                // for a while, so a LIST would only cost more.
                debug!(from = %from, "the watch-list stream ended before its end bookmark; retrying it");
                State::WatchList
            }
            Err(err) if err.can_rewatch() => self.fail(&err, State::WatchList),
            Err(err) if err.rv_unavailable() => {
                debug!(error = %err, "watch-list RV unavailable; retrying at the freshest RV");
                self.last_sync_unavailable = true;
                State::WatchList
            }
            Err(err) => {
                warn!(
                    error = %err,
                    "the watch-list request failed; falling back to LIST and WATCH, because making progress beats deadlocking"
                );
                // Shown by ListResources: why this type syncs by LIST.
                self.status.lock().last_error = Some(err.to_string());
                State::List
            }
        }
    }

    /// Reads a watch-list's initial events up to the end bookmark; `None`
    /// if the stream ended (or broke) before it, unless that makes a very
    /// short watch.
    async fn stream_initial_events(
        &self,
        open: &mut OpenWatch,
    ) -> Result<Option<(Vec<Object>, ResourceVersion)>, ReflectorError> {
        let mut initial = HashMap::new();
        let mut last_event = Instant::now();
        let mut events = 0u64;
        loop {
            let line = match tokio::time::timeout_at(
                last_event + END_BOOKMARK_WARNING,
                open.lines.next(),
            )
            .await
            {
                Err(_) => {
                    warn!(
                        objects = initial.len(),
                        "the initial-events-end bookmark has not arrived 10s after the last event"
                    );
                    self.status.lock().end_bookmark_warnings += 1;
                    last_event = Instant::now();
                    continue;
                }
                Ok(Some(Ok(line))) => line,
                Ok(Some(Err(err))) => {
                    warn!(error = %err, "the watch-list stream broke");
                    return open.ended(events).map(|()| None);
                }
                Ok(None) => return open.ended(events).map(|()| None),
            };
            last_event = Instant::now();
            events += 1;
            if let Applied::Moved { rv, end: true } =
                self.apply(&line, Sink::Initial(&mut initial))?
            {
                return Ok(Some((initial.into_values().collect(), rv)));
            }
        }
    }

    /// The debug check client-go calls the watch-list consistency detector:
    /// LIST at exactly the synced RV and log every difference.
    async fn check_consistency(&self, streamed: &[Object], rv: ResourceVersion) {
        let rv_text = rv.to_string();
        let listed = self
            .upstream
            .list(&[
                ("resourceVersion", &rv_text),
                ("resourceVersionMatch", "Exact"),
            ])
            .await;
        let text = match listed {
            Ok(text) => text,
            Err(err) => {
                warn!(error = %err, "consistency check: the LIST failed");
                return;
            }
        };
        let Ok(page) = serde_json::from_str::<RawList>(&text) else {
            warn!("consistency check: the LIST is not a list");
            return;
        };
        let listed: Vec<Object> = page
            .items
            .iter()
            .filter_map(|raw| self.decode(raw.get()))
            .collect();
        let differences = differences(streamed, &listed);
        for difference in &differences {
            warn!(%rv, %difference, "consistency check: the watch-list differs from a LIST");
        }
        info!(%rv, differences = differences.len(), "consistency check done");
        self.status.lock().consistency_differences = Some(differences.len());
    }

    // ---- Watch ----

    async fn watch_step(&mut self, open: Option<OpenWatch>) -> State {
        self.set_phase(Phase::Watching);
        let open = match open {
            Some(open) => open,
            None => match self
                .open_watch(&self.last_sync.unwrap_or_default().to_string(), false)
                .await
            {
                Ok(open) => open,
                Err(err) if err.can_rewatch() => return self.fail(&err, State::Watch(None)),
                Err(err) => {
                    let next = self.initial_state();
                    return self.fail(&err, next);
                }
            },
        };
        let outcome = self.follow(open).await;
        if let Err(err) = &outcome
            && err.is_internal()
            && self.internal_errors.retry_after_error()
        {
            info!(error = %err, "retrying the watch after an internal error");
            return State::Watch(None);
        }
        match outcome {
            Ok(()) => State::Watch(None),
            Err(err) if err.can_rewatch() => self.fail(&err, State::Watch(None)),
            Err(err) => {
                // An expired RV is not marked unavailable here: a LIST at
                // the last synced RV may still be served (client-go's rule).
                let next = self.initial_state();
                self.fail(&err, next)
            }
        }
    }

    /// Opens a WATCH from `from` with bookmarks and a jittered timeout;
    /// with `initial_events`, a watch-list (`sendInitialEvents=true`).
    async fn open_watch(
        &mut self,
        from: &str,
        initial_events: bool,
    ) -> Result<OpenWatch, ReflectorError> {
        let timeout = self.watch_timeout();
        let mut query = vec![
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", from),
            ("timeoutSeconds", &timeout),
        ];
        if initial_events {
            query.extend([
                ("sendInitialEvents", "true"),
                ("resourceVersionMatch", "NotOlderThan"),
            ]);
        }
        // The clock starts before the request: some proxies send headers
        // only with the first event.
        let started = Instant::now();
        self.status.lock().watches += 1;
        let lines = self.upstream.watch(&query).await?;
        self.status.lock().failing_since = None;
        Ok(OpenWatch { lines, started })
    }

    /// Applies a watch's events until it ends (an undecodable line ends it
    /// with an error).
    async fn follow(&mut self, mut open: OpenWatch) -> Result<(), ReflectorError> {
        let mut events = 0u64;
        while let Some(line) = open.lines.next().await {
            let line = match line {
                Ok(line) => line,
                Err(err) => {
                    // A broken stream ends the watch like a timeout does
                    // (client-go's decoder closes the result channel): it
                    // is reopened from the last RV, and if the server is
                    // gone, that attempt is what backs off.
                    warn!(error = %err, "the watch stream broke");
                    break;
                }
            };
            events += 1;
            if let Applied::Moved { rv, .. } = self.apply(&line, Sink::Store(&self.store))? {
                self.synced_to(rv);
            }
        }
        open.ended(events)?;
        debug!(events, "watch ended; reopening");
        Ok(())
    }

    /// Applies one watch event line. Objects of another type (and bookmarks
    /// without a usable RV, which carry no change) are logged and skipped;
    /// an ERROR event, and a line that is not a watch event, are returned
    /// as errors.
    fn apply(&self, line: &str, sink: Sink<'_>) -> Result<Applied, ReflectorError> {
        if line.trim().is_empty() {
            return Ok(Applied::Skipped);
        }
        let event: RawEvent = serde_json::from_str(line)
            .map_err(|err| ReflectorError::DecodeEvent(err.to_string()))?;
        let kind = match event.kind.as_str() {
            "ADDED" => EventKind::Added,
            "MODIFIED" => EventKind::Modified,
            "DELETED" => EventKind::Deleted,
            "BOOKMARK" => {
                let Some(bookmark) = serde_json::from_str::<Bookmark>(event.object.get())
                    .ok()
                    .and_then(|b| {
                        Some((
                            b.metadata.resource_version.parse().ok()?,
                            b.metadata.annotations,
                        ))
                    })
                else {
                    warn!("skipping a bookmark without a usable resourceVersion");
                    return Ok(Applied::Skipped);
                };
                let (rv, annotations) = bookmark;
                if let Sink::Store(store) = sink {
                    store.bookmark(rv);
                }
                let end = annotations
                    .get(INITIAL_EVENTS_END)
                    .is_some_and(|v| v == "true");
                return Ok(Applied::Moved { rv, end });
            }
            "ERROR" => return Err(UpstreamError::from_watch_error(event.object.get()).into()),
            other => {
                return Err(ReflectorError::DecodeEvent(format!(
                    "unknown watch event type {}",
                    kube_fanout_core::quote::quote(other)
                )));
            }
        };
        let Some(object) = self.decode(event.object.get()) else {
            return Ok(Applied::Skipped);
        };
        let rv = object.resource_version;
        match sink {
            Sink::Store(store) => store.apply(kind, object),
            Sink::Initial(initial) if kind == EventKind::Deleted => {
                initial.remove(&object.key);
            }
            Sink::Initial(initial) => {
                initial.insert(object.key.clone(), object);
            }
        }
        Ok(Applied::Moved { rv, end: false })
    }
}

/// Every way two sets of objects differ, keyed by namespace/name.
pub fn differences(streamed: &[Object], listed: &[Object]) -> Vec<String> {
    let streamed: HashMap<&str, &Object> = streamed.iter().map(|o| (o.key.as_str(), o)).collect();
    let listed: HashMap<&str, &Object> = listed.iter().map(|o| (o.key.as_str(), o)).collect();
    let mut out: Vec<String> = Vec::new();
    for (key, s) in &streamed {
        match listed.get(key) {
            None => out.push(format!("{key} streamed but not listed")),
            Some(l) if !l.same_state(s) => out.push(format!(
                "{key} differs: streamed RV {}, listed RV {}",
                s.resource_version, l.resource_version
            )),
            Some(_) => {}
        }
    }
    out.extend(
        listed
            .keys()
            .filter(|key| !streamed.contains_key(*key))
            .map(|key| format!("{key} listed but not streamed")),
    );
    out.sort();
    out
}

pub mod backoff;
mod retry;
#[cfg(test)]
mod tests;
mod trace;
pub mod upstream;

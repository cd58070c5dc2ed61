//! The reflector: keeps one [`Store`] equal to the API server's state of one
//! resource type, by LIST and then WATCH, the way client-go's reflector does.
//!
//! It is an explicit state machine ([`State`]), one step per method:
//!
//! - **List**: a (paginated) LIST replaces the store. The first list asks
//!   for RV "0", which the API server answers from its watch cache; later
//!   ones ask for the last RV the store synced to; after the server said
//!   that RV is expired (410) or too large, RV "" (a consistent read).
//! - **Watch**: a WATCH from the store's RV, with bookmarks and a timeout
//!   drawn from [min, 2×min) so that many reflectors do not reconnect in
//!   step. A watch that ends normally is simply reopened from the RV
//!   reached, without relisting.
//! - **Backoff**: after a failure, wait (exponential, jittered) before the
//!   step the failure calls for.

use std::{sync::Arc, time::Duration};

use futures::{AsyncBufReadExt, TryStreamExt};
use parking_lot::Mutex;
use rand::Rng;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::{
    backoff::{Backoff, BackoffConfig},
    object::{Object, ObjectError, ResourceVersion, Transform, TypeMeta},
    store::{EventKind, Store},
};

/// How a reflector talks to the API server.
#[derive(Debug, Clone, Copy)]
pub struct ReflectorConfig {
    /// LIST page size (`limit`); 0 lists in one page.
    pub page_size: u32,
    /// Watch timeouts are drawn from [min, 2×min).
    pub min_watch_timeout: Duration,
    /// Applied to every object before it is stored.
    pub transform: Transform,
    /// Retry pacing.
    pub backoff: BackoffConfig,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        ReflectorConfig {
            page_size: 500,
            min_watch_timeout: Duration::from_secs(300),
            transform: Transform::default(),
            backoff: BackoffConfig::default(),
        }
    }
}

/// What a reflector is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    /// Running a LIST.
    #[default]
    Listing,
    /// Following a WATCH.
    Watching,
    /// Waiting after a failure.
    BackingOff,
}

impl Phase {
    /// The phase's name as ListResources shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Listing => "listing",
            Phase::Watching => "watching",
            Phase::BackingOff => "backing off",
        }
    }
}

/// A reflector's state for ListResources, health and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReflectorStatus {
    /// What it is doing.
    pub phase: Phase,
    /// The last failure, if any.
    pub last_error: Option<String>,
    /// Watches opened after the first.
    pub watch_restarts: u64,
}

/// Why one list or watch attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum ReflectorError {
    /// The API server answered with an error status or could not be reached.
    #[error("request failed: {0}")]
    Request(#[from] kube::Error),
    /// The resourceVersion asked for is older than etcd keeps (410 Gone).
    #[error("resource version expired: {0}")]
    Expired(String),
    /// The resourceVersion asked for is newer than the server has.
    #[error("too large resource version: {0}")]
    TooLarge(String),
    /// A LIST answer that is not a list.
    #[error("could not decode the list: {0}")]
    DecodeList(#[source] serde_json::Error),
    /// The watch stream broke.
    #[error("reading the watch stream failed: {0}")]
    Stream(#[source] std::io::Error),
    /// The API server sent an ERROR event that is not a 410.
    #[error("the watch stream carried an error: {0}")]
    WatchError(String),
    /// A watch that ended within a second without any event: the server is
    /// in trouble, and reopening at once would spin.
    #[error("very short watch: the watch closed within 1s and delivered no event")]
    VeryShortWatch,
}

impl ReflectorError {
    /// Whether the next LIST must ask for RV "" (a consistent read).
    fn needs_fresh_list(&self) -> bool {
        matches!(self, Self::Expired(_) | Self::TooLarge(_))
    }

    /// Whether the watch can simply be reopened from the RV it reached.
    fn can_rewatch(&self) -> bool {
        match self {
            Self::VeryShortWatch | Self::Stream(_) => true,
            Self::Request(kube::Error::Api(s)) => s.code == 429,
            Self::Request(kube::Error::HyperError(_) | kube::Error::Service(_)) => true,
            _ => false,
        }
    }

    fn from_status(code: u16, reason: &str, message: &str) -> Option<Self> {
        let text = format!("{reason}: {message}");
        if code == 410 || reason == "Expired" || reason == "Gone" {
            Some(Self::Expired(text))
        } else if message
            .to_ascii_lowercase()
            .contains("too large resource version")
        {
            Some(Self::TooLarge(text))
        } else {
            None
        }
    }

    fn classify(err: kube::Error) -> Self {
        if let kube::Error::Api(s) = &err
            && let Some(e) = Self::from_status(s.code, &s.reason, &s.message)
        {
            return e;
        }
        Self::Request(err)
    }
}

/// The reflector's states (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// LIST at this resourceVersion ("0", "" or a number).
    List {
        /// The `resourceVersion` parameter.
        from: String,
    },
    /// WATCH from this resourceVersion.
    Watch {
        /// The RV the store is at.
        from: ResourceVersion,
    },
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
    client: kube::Client,
    store: Arc<Store>,
    config: ReflectorConfig,
    path: String,
    type_meta: TypeMeta,
    status: Arc<Mutex<ReflectorStatus>>,
    backoff: Backoff,
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
}

#[derive(Deserialize)]
struct Bookmark {
    metadata: BookmarkMeta,
}

#[derive(Deserialize, Default)]
struct ApiStatus {
    #[serde(default)]
    code: u16,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    message: String,
}

impl Reflector {
    /// A reflector filling `store`.
    pub fn new(client: kube::Client, store: Arc<Store>, config: ReflectorConfig) -> Self {
        let resource = store.resource();
        Reflector {
            path: resource.url_path(),
            type_meta: resource.type_meta(),
            client,
            store,
            config,
            status: Arc::default(),
            backoff: Backoff::new(config.backoff),
        }
    }

    /// A handle on the reflector's status that stays valid while it runs.
    pub fn status(&self) -> Arc<Mutex<ReflectorStatus>> {
        self.status.clone()
    }

    /// Runs until `cancel` fires; stops promptly, mid-request or mid-wait.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut state = State::List { from: "0".into() };
        loop {
            state = tokio::select! {
                biased;
                () = cancel.cancelled() => {
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
            State::List { from } => self.list_step(from).await,
            State::Watch { from } => self.watch_step(from).await,
            State::Backoff { delay, then } => {
                self.set_phase(Phase::BackingOff);
                tokio::time::sleep(delay).await;
                *then
            }
        }
    }

    async fn list_step(&mut self, from: String) -> State {
        self.set_phase(Phase::Listing);
        match self.list(&from).await {
            Ok((objects, rv)) => {
                info!(%rv, objects = objects.len(), "listed");
                self.store.replace(objects, rv);
                State::Watch { from: rv }
            }
            Err(err) => {
                let from = if err.needs_fresh_list() {
                    String::new()
                } else {
                    from
                };
                self.fail(err, State::List { from })
            }
        }
    }

    async fn watch_step(&mut self, from: ResourceVersion) -> State {
        self.set_phase(Phase::Watching);
        let started = Instant::now();
        let (reached, events, outcome) = self.watch(from).await;
        match outcome {
            Ok(()) if events == 0 && started.elapsed() < Duration::from_secs(1) => self.fail(
                ReflectorError::VeryShortWatch,
                State::Watch { from: reached },
            ),
            Ok(()) => {
                self.status.lock().watch_restarts += 1;
                debug!(%reached, events, "watch ended; reopening");
                State::Watch { from: reached }
            }
            Err(err) if err.needs_fresh_list() => self.fail(
                err,
                State::List {
                    from: String::new(),
                },
            ),
            Err(err) if err.can_rewatch() => self.fail(err, State::Watch { from: reached }),
            Err(err) => self.fail(
                err,
                State::List {
                    from: reached.to_string(),
                },
            ),
        }
    }

    fn fail(&mut self, err: ReflectorError, then: State) -> State {
        let delay = self.backoff.next_delay();
        warn!(error = %err, ?delay, next = ?then, "reflector step failed");
        self.status.lock().last_error = Some(err.to_string());
        State::Backoff {
            delay,
            then: Box::new(then),
        }
    }

    fn set_phase(&self, phase: Phase) {
        self.status.lock().phase = phase;
    }

    fn request(&self, query: &[(&str, &str)]) -> http::Request<Vec<u8>> {
        let query = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(query)
            .finish();
        let mut request = http::Request::new(Vec::new());
        *request.uri_mut() = format!("{}?{}", self.path, query)
            .parse()
            .expect("resource paths and encoded queries form valid URIs");
        request
    }

    /// LISTs every object, following `continue` tokens, and returns them
    /// with the list's resourceVersion.
    async fn list(&self, from: &str) -> Result<(Vec<Object>, ResourceVersion), ReflectorError> {
        let limit = self.config.page_size.to_string();
        let mut continue_token = String::new();
        let mut objects = Vec::new();
        loop {
            let mut query = Vec::new();
            if self.config.page_size > 0 {
                query.push(("limit", limit.as_str()));
            }
            if continue_token.is_empty() {
                query.push(("resourceVersion", from));
            } else {
                query.push(("continue", continue_token.as_str()));
            }
            let text = self
                .client
                .request_text(self.request(&query))
                .await
                .map_err(ReflectorError::classify)?;
            let page: RawList = serde_json::from_str(&text).map_err(ReflectorError::DecodeList)?;
            objects.extend(page.items.iter().filter_map(|raw| self.decode(raw.get())));
            if page.metadata.continue_token.is_empty() {
                let rv = page
                    .metadata
                    .resource_version
                    .parse()
                    .map_err(|e: ObjectError| ReflectorError::WatchError(e.to_string()))?;
                return Ok((objects, rv));
            }
            continue_token = page.metadata.continue_token;
        }
    }

    /// Parses an object, logging and dropping one that does not belong.
    fn decode(&self, raw: &str) -> Option<Object> {
        match Object::from_json(raw, &self.type_meta, self.config.transform) {
            Ok(object) => Some(object),
            Err(err) => {
                warn!(error = %err, "dropping an object the store cannot take");
                None
            }
        }
    }

    /// Follows one WATCH from `from`. Returns the RV reached, the number of
    /// events seen, and how the watch ended.
    async fn watch(
        &self,
        from: ResourceVersion,
    ) -> (ResourceVersion, u64, Result<(), ReflectorError>) {
        let min = self.config.min_watch_timeout.as_secs().max(1);
        let timeout = rand::rng().random_range(min..2 * min).to_string();
        let from_text = from.to_string();
        let request = self.request(&[
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", &timeout),
            ("resourceVersion", &from_text),
        ]);
        let mut reached = from;
        let mut events = 0;
        let body = match self.client.request_stream(request).await {
            Ok(body) => body,
            Err(err) => return (reached, events, Err(ReflectorError::classify(err))),
        };
        let mut lines = body.lines();
        loop {
            let line = match lines.try_next().await {
                Ok(Some(line)) => line,
                Ok(None) => return (reached, events, Ok(())),
                Err(err) => return (reached, events, Err(ReflectorError::Stream(err))),
            };
            if line.trim().is_empty() {
                continue;
            }
            events += 1;
            match self.handle_event(&line) {
                Ok(Some(rv)) => reached = rv,
                Ok(None) => {}
                Err(err) => return (reached, events, Err(err)),
            }
        }
    }

    /// Applies one watch event line to the store. Returns the RV it moved
    /// the store to; malformed or foreign events are logged and skipped.
    fn handle_event(&self, line: &str) -> Result<Option<ResourceVersion>, ReflectorError> {
        let event: RawEvent = match serde_json::from_str(line) {
            Ok(event) => event,
            Err(err) => {
                warn!(error = %err, "skipping a malformed watch event");
                return Ok(None);
            }
        };
        let kind = match event.kind.as_str() {
            "ADDED" => EventKind::Added,
            "MODIFIED" => EventKind::Modified,
            "DELETED" => EventKind::Deleted,
            "BOOKMARK" => {
                let rv = serde_json::from_str::<Bookmark>(event.object.get())
                    .ok()
                    .and_then(|b| b.metadata.resource_version.parse().ok());
                let Some(rv) = rv else {
                    warn!("skipping a bookmark without a usable resourceVersion");
                    return Ok(None);
                };
                self.store.bookmark(rv);
                return Ok(Some(rv));
            }
            "ERROR" => {
                let status: ApiStatus =
                    serde_json::from_str(event.object.get()).unwrap_or_default();
                return Err(ReflectorError::from_status(
                    status.code,
                    &status.reason,
                    &status.message,
                )
                .unwrap_or_else(|| {
                    ReflectorError::WatchError(format!(
                        "{} {}: {}",
                        status.code, status.reason, status.message
                    ))
                }));
            }
            other => {
                warn!(event_type = other, "skipping a watch event of unknown type");
                return Ok(None);
            }
        };
        let Some(object) = self.decode(event.object.get()) else {
            return Ok(None);
        };
        let rv = object.resource_version;
        self.store.apply(kind, object);
        Ok(Some(rv))
    }
}

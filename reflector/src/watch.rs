//! The Watch phase: a WATCH from the synced RV with bookmarks and a
//! timeout drawn from [min, 2×min), its events applied to the store. A
//! watch that ends normally is reopened from where it got to; connection
//! refused and 429 back off and reopen it without relisting; internal
//! errors (a 500, or a line that is not a watch event) end the watch and
//! are retried at once from the last RV within a window ([`crate::retry`]);
//! other failures (an expired RV, a very short watch) back off and relist.
//!
//! The watch-list phase opens its stream here too and applies its initial
//! events with [`apply`] into a temporary map ([`Sink`]).

use std::collections::HashMap;

use futures::StreamExt;
use kube_fanout_core::{
    event::EventKind,
    object::{Object, ResourceVersion},
    reflector_status::Phase,
    store::Store,
};
use kube_fanout_proto::INITIAL_EVENTS_END;
use rand::Rng;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::{
    context::Context,
    error::ReflectorError,
    open_watch::OpenWatch,
    state::{State, SyncPoint},
    upstream::UpstreamError,
};

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
pub(crate) enum Applied {
    /// Moved the RV; `end` if it was the initial-events-end bookmark.
    Moved { rv: ResourceVersion, end: bool },
    /// Logged and skipped.
    Skipped,
}

/// Where a watch event goes: the live store, or the temporary map a
/// watch-list fills before it replaces the store.
pub(crate) enum Sink<'a> {
    Store(&'a Store),
    Initial(&'a mut HashMap<String, Object>),
}

/// Opens a watch from `from` and follows it.
pub(crate) async fn step(ctx: &mut Context, from: ResourceVersion) -> State {
    ctx.set_phase(Phase::Watching);
    match open(ctx, &from.to_string(), false).await {
        Ok(open) => follow(ctx, open, from).await,
        Err(err) if err.can_rewatch() => ctx.fail(&err, State::Watch(from)),
        Err(err) => {
            let next = ctx.resync(SyncPoint::At(from));
            ctx.fail(&err, next)
        }
    }
}

/// Follows `open`, synced to `from`, until it ends.
pub(crate) async fn follow(ctx: &mut Context, open: OpenWatch, from: ResourceVersion) -> State {
    ctx.set_phase(Phase::Watching);
    let (at, outcome) = apply_until_end(ctx, open, from).await;
    if let Err(err) = &outcome
        && err.is_internal()
        && ctx.internal_errors.retry_after_error()
    {
        info!(error = %err, "retrying the watch after an internal error");
        return State::Watch(at);
    }
    match outcome {
        Ok(()) => State::Watch(at),
        Err(err) if err.can_rewatch() => ctx.fail(&err, State::Watch(at)),
        Err(err) => {
            // An expired RV is not marked unavailable here: a LIST at
            // the last synced RV may still be served (client-go's rule).
            let next = ctx.resync(SyncPoint::At(at));
            ctx.fail(&err, next)
        }
    }
}

/// Opens a WATCH from `from` with bookmarks and a jittered timeout;
/// with `initial_events`, a watch-list (`sendInitialEvents=true`).
pub(crate) async fn open(
    ctx: &Context,
    from: &str,
    initial_events: bool,
) -> Result<OpenWatch, ReflectorError> {
    let timeout = timeout(ctx);
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
    ctx.status.lock().watches += 1;
    let lines = ctx.upstream.watch(&query).await?;
    let mut status = ctx.status.lock();
    status.failing_since = None;
    status.not_found_since = None;
    drop(status);
    Ok(OpenWatch::new(lines, started))
}

/// A watch's `timeoutSeconds`: drawn from [min, 2×min), so that the
/// watches of many reflectors do not all end at once.
pub(crate) fn timeout(ctx: &Context) -> String {
    let min = ctx.config.min_watch_timeout.as_secs();
    rand::rng().random_range(min..2 * min).to_string()
}

/// Applies a watch's events until it ends (an undecodable line ends it
/// with an error); returns the RV it got to from `from`, and how it
/// ended.
async fn apply_until_end(
    ctx: &Context,
    mut open: OpenWatch,
    from: ResourceVersion,
) -> (ResourceVersion, Result<(), ReflectorError>) {
    let mut at = from;
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
        match apply(ctx, &line, Sink::Store(&ctx.store)) {
            Ok(Applied::Moved { rv, .. }) => {
                at = rv;
                ctx.synced_to(rv);
            }
            Ok(Applied::Skipped) => {}
            Err(err) => return (at, Err(err)),
        }
    }
    if let Err(err) = open.ended(events) {
        return (at, Err(err));
    }
    debug!(events, "watch ended; reopening");
    (at, Ok(()))
}

/// Applies one watch event line. Objects of another type (and bookmarks
/// without a usable RV, which carry no change) are logged and skipped;
/// an ERROR event, and a line that is not a watch event, are returned
/// as errors.
pub(crate) fn apply(ctx: &Context, line: &str, sink: Sink<'_>) -> Result<Applied, ReflectorError> {
    if line.trim().is_empty() {
        return Ok(Applied::Skipped);
    }
    let event: RawEvent =
        serde_json::from_str(line).map_err(|err| ReflectorError::DecodeEvent(err.to_string()))?;
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
    let Some(object) = ctx.decoder.object(event.object.get()) else {
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

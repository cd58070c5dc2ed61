//! The WatchList phase: a WATCH with `sendInitialEvents=true` and
//! `resourceVersionMatch=NotOlderThan` streams the current objects into a
//! temporary map until the bookmark annotated `k8s.io/initial-events-end`;
//! then the store is replaced and the same watch stays open. A stream that
//! ends before that bookmark is retried from the same RV; one the server
//! refuses (or a very short or undecodable one) makes the reflector fall
//! back to List: progress beats deadlock.

use std::{collections::HashMap, time::Duration};

use futures::StreamExt;
use kube_fanout_core::{
    object::{Object, ResourceVersion},
    reflector_status::Phase,
};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::{
    context::Context,
    error::ReflectorError,
    open_watch::OpenWatch,
    state::{State, SyncPoint},
    trace::SyncTrace,
    watch::{self, Applied, Sink},
};

/// How long a watch-list may go without its end bookmark after the last
/// event before the reflector warns.
const END_BOOKMARK_WARNING: Duration = Duration::from_secs(10);

/// Streams the objects from `point` and replaces the store; then the same
/// watch is followed.
pub(crate) async fn step(ctx: &mut Context, point: SyncPoint) -> State {
    ctx.set_phase(Phase::WatchListing);
    let mut trace = SyncTrace::new("watch-list");
    let from = point.rewatch_from();
    let outcome = match watch::open(ctx, &from, true).await {
        Ok(mut open) => stream_initial_events(ctx, &mut open)
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
            if ctx.config.check_watch_list_consistency {
                check_consistency(ctx, &objects, rv).await;
                trace.step("consistency checked");
            }
            ctx.replaced(objects, rv, &mut trace).await;
            ctx.status.lock().watch_lists += 1;
            State::Follow { open, at: rv }
        }
        Ok(None) => {
            // client-go retries the watch-list at once from the same RV
            // (what it streamed is thrown away): the stream was healthy
            // for a while, so a LIST would only cost more.
            debug!(from = %from, "the watch-list stream ended before its end bookmark; retrying it");
            State::WatchList(point)
        }
        Err(err) if err.can_rewatch() => ctx.fail(&err, State::WatchList(point)),
        Err(err) if err.rv_unavailable() => {
            debug!(error = %err, "watch-list RV unavailable; retrying at the freshest RV");
            State::WatchList(SyncPoint::Unavailable)
        }
        Err(err) => {
            warn!(
                error = %err,
                "the watch-list request failed; falling back to LIST and WATCH, because making progress beats deadlocking"
            );
            // Shown by ListResources: why this type syncs by LIST.
            ctx.status.lock().last_error = Some(err.to_string());
            State::List(point)
        }
    }
}

/// Reads a watch-list's initial events up to the end bookmark; `None`
/// if the stream ended (or broke) before it, unless that makes a very
/// short watch.
async fn stream_initial_events(
    ctx: &Context,
    open: &mut OpenWatch,
) -> Result<Option<(Vec<Object>, ResourceVersion)>, ReflectorError> {
    let mut initial = HashMap::new();
    let mut last_event = Instant::now();
    let mut events = 0u64;
    loop {
        let line =
            match tokio::time::timeout_at(last_event + END_BOOKMARK_WARNING, open.lines.next())
                .await
            {
                Err(_) => {
                    warn!(
                        objects = initial.len(),
                        "the initial-events-end bookmark has not arrived 10s after the last event"
                    );
                    ctx.status.lock().end_bookmark_warnings += 1;
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
            watch::apply(ctx, &line, Sink::Initial(&mut initial))?
        {
            return Ok(Some((initial.into_values().collect(), rv)));
        }
    }
}

/// The debug check client-go calls the watch-list consistency detector:
/// LIST at exactly the synced RV and log every difference.
async fn check_consistency(ctx: &Context, streamed: &[Object], rv: ResourceVersion) {
    let rv_text = rv.to_string();
    let listed = ctx
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
    let listed = match ctx.decoder.page(&text) {
        Ok((listed, _)) => listed,
        Err(err) => {
            warn!(error = %err, "consistency check: the LIST is not the type's list");
            return;
        }
    };
    let differences = differences(streamed, &listed);
    for difference in &differences {
        warn!(%rv, %difference, "consistency check: the watch-list differs from a LIST");
    }
    info!(%rv, differences = differences.len(), "consistency check done");
    ctx.status.lock().consistency_differences = Some(differences.len());
}

/// Every way two sets of objects differ, keyed by namespace/name.
pub(crate) fn differences(streamed: &[Object], listed: &[Object]) -> Vec<String> {
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

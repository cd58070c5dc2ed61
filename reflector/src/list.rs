//! The List phase: a LIST, in pages when client-go's pager rules say so,
//! replaces the store. The first asks for RV "0" (served from the watch
//! cache), later ones for the synced RV; after an Expired (410) or
//! too-large-RV answer the list is retried at once at RV "", a consistent
//! read. Only a continue token that expires mid-list falls back to one
//! full list.

use kube_fanout_core::{
    object::{Object, ResourceVersion},
    reflector_status::Phase,
};
use tracing::{debug, info};

use crate::{
    context::Context,
    error::ReflectorError,
    state::{State, SyncPoint},
    trace::SyncTrace,
};

/// What a LIST got: the objects, the list's RV and how many requests it took.
struct Listed {
    objects: Vec<Object>,
    rv: ResourceVersion,
    requests: u64,
}

/// Lists from `point` and replaces the store; then a watch from the
/// list's RV.
pub(crate) async fn step(ctx: &mut Context, point: SyncPoint) -> State {
    ctx.set_phase(Phase::Listing);
    let mut trace = SyncTrace::new("list");
    let mut from = point.relist_from();
    let mut outcome = list(ctx, &from).await;
    let mut point = point;
    if outcome.as_ref().is_err_and(ReflectorError::rv_unavailable) {
        // The RV cannot be served: relist at once with a consistent
        // read rather than back off, so the reflector moves forward.
        point = SyncPoint::Unavailable;
        from = point.relist_from();
        outcome = list(ctx, &from).await;
    }
    match outcome {
        Ok(Listed {
            objects,
            rv,
            requests,
        }) => {
            info!(%rv, from = %from, objects = objects.len(), requests, "listed");
            trace.step(format!("{} objects listed from RV {from:?}", objects.len()));
            ctx.replaced(objects, rv, &mut trace).await;
            let mut status = ctx.status.lock();
            status.lists += 1;
            status.last_list_from = Some(from);
            status.last_list_requests = requests;
            drop(status);
            State::Watch(rv)
        }
        Err(err) => {
            let next = ctx.resync(point);
            ctx.fail(&err, next)
        }
    }
}

/// LISTs every object from `from`, in pages when the rules say so.
async fn list(ctx: &mut Context, from: &str) -> Result<Listed, ReflectorError> {
    let listed = list_pages(ctx, from, ctx.paging.page_size(from)).await?;
    ctx.paging = ctx.paging.after(from, listed.requests);
    Ok(listed)
}

/// Follows `continue` tokens to the end (more than one request: the
/// list was paginated). A first page's error is the caller's (a 410
/// there means the RV asked for is gone, and a full list at it would
/// fail the same way); a continue token that expires mid-list falls
/// back to one full list at `from`, as client-go's pager does.
async fn list_pages(ctx: &Context, from: &str, page_size: u32) -> Result<Listed, ReflectorError> {
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
        let text = match ctx.upstream.list(&query).await {
            Err(e) if e.is_expired() && !continue_token.is_empty() => {
                debug!(error = %e, "a continue token expired; listing in one page");
                let text = ctx.upstream.list(&[("resourceVersion", from)]).await?;
                let (objects, page) = ctx.decoder.page(&text)?;
                return Ok(Listed {
                    objects,
                    rv: page.resource_version.parse()?,
                    requests: requests + 1,
                });
            }
            text => text?,
        };
        let (page_objects, page) = ctx.decoder.page(&text)?;
        objects.extend(page_objects);
        if page.continue_token.is_empty() {
            return Ok(Listed {
                objects,
                rv: page.resource_version.parse()?,
                requests,
            });
        }
        continue_token = page.continue_token;
    }
}

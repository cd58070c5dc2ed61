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
    Reflector,
    error::ReflectorError,
    state::{State, SyncPoint},
    trace::SyncTrace,
};

/// The page size when paging is on and none was configured (client-go's pager).
const DEFAULT_PAGE_SIZE: u32 = 500;

/// How LISTs are paged: the configured size, or client-go's rules and what
/// the answers so far said about the watch cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Paging {
    /// Every list in pages of this size (configured).
    Fixed(u32),
    /// client-go's default: pages of 500 at RV "" and "0", none at a
    /// specific RV, so that the watch cache serves it.
    WatchCache,
    /// A list at RV "0" came back in pages: the watch cache is off for this
    /// type, so every list is paged.
    NoWatchCache,
}

impl Paging {
    /// The paging a new reflector starts with.
    pub(crate) fn new(page_size: Option<u32>) -> Self {
        page_size.map_or(Paging::WatchCache, Paging::Fixed)
    }

    /// The page size of a list from `from` (0: unpaged).
    fn page_size(self, from: &str) -> u32 {
        match self {
            Paging::Fixed(size) => size,
            Paging::WatchCache if !from.is_empty() && from != "0" => 0,
            Paging::WatchCache | Paging::NoWatchCache => DEFAULT_PAGE_SIZE,
        }
    }

    /// The paging after a list from `from` took `requests`. Only an answer
    /// to RV "0" says the watch cache is off: a list at RV "" is paged by
    /// etcd even when the cache is on, and the cache should still serve
    /// later relists.
    fn after(self, from: &str, requests: u64) -> Self {
        match self {
            Paging::WatchCache if from == "0" && requests > 1 => Paging::NoWatchCache,
            paging => paging,
        }
    }
}

/// What a LIST got: the objects, the list's RV and how many requests it took.
struct Listed {
    objects: Vec<Object>,
    rv: ResourceVersion,
    requests: u64,
}

impl Reflector {
    pub(crate) async fn list_step(&mut self, point: SyncPoint) -> State {
        self.set_phase(Phase::Listing);
        let mut trace = SyncTrace::new("list");
        let mut from = point.relist_from();
        let mut outcome = self.list(&from).await;
        let mut point = point;
        if outcome.as_ref().is_err_and(ReflectorError::rv_unavailable) {
            // The RV cannot be served: relist at once with a consistent
            // read rather than back off, so the reflector moves forward.
            point = SyncPoint::Unavailable;
            from = point.relist_from();
            outcome = self.list(&from).await;
        }
        match outcome {
            Ok(Listed {
                objects,
                rv,
                requests,
            }) => {
                info!(%rv, from = %from, objects = objects.len(), requests, "listed");
                trace.step(format!("{} objects listed from RV {from:?}", objects.len()));
                self.replaced(objects, rv, &mut trace).await;
                let mut status = self.status.lock();
                status.lists += 1;
                status.last_list_from = Some(from);
                status.last_list_requests = requests;
                drop(status);
                State::Watch(rv)
            }
            Err(err) => {
                let next = self.resync(point);
                self.fail(&err, next)
            }
        }
    }

    /// LISTs every object from `from`, in pages when the rules say so.
    async fn list(&mut self, from: &str) -> Result<Listed, ReflectorError> {
        let listed = self.list_pages(from, self.paging.page_size(from)).await?;
        self.paging = self.paging.after(from, listed.requests);
        Ok(listed)
    }

    /// Follows `continue` tokens to the end (more than one request: the
    /// list was paginated). A first page's error is the caller's (a 410
    /// there means the RV asked for is gone, and a full list at it would
    /// fail the same way); a continue token that expires mid-list falls
    /// back to one full list at `from`, as client-go's pager does.
    async fn list_pages(&self, from: &str, page_size: u32) -> Result<Listed, ReflectorError> {
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
                    let (objects, page) = self.decoder.page(&text)?;
                    return Ok(Listed {
                        objects,
                        rv: page.resource_version.parse()?,
                        requests: requests + 1,
                    });
                }
                text => text?,
            };
            let (page_objects, page) = self.decoder.page(&text)?;
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
}

//! List pages: every page of one List call is cut from the same snapshot,
//! named by a `continue` token that carries its resourceVersion and the
//! last key sent, like the API server's own.
//!
//! The first page takes a snapshot and filters it (O(objects), as any
//! consistent list must); when more pages follow, the filtered, ordered
//! list is kept for a while ([`Pages`]), so each later page costs a binary
//! search and the page itself. A token whose list is no longer kept (it
//! aged out, or was made by another replica) is served by rewinding the
//! store to the token's resourceVersion, which is exact too.

use std::{collections::VecDeque, sync::Arc, time::Duration};

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::{
    filter::Filter,
    object::{Object, ResourceVersion},
    store::{ReadError, Store},
};

/// How many cut lists are kept, and for how long after their last page.
const KEEP: usize = 16;
const KEEP_FOR: Duration = Duration::from_secs(60);

/// A malformed `continue` token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid continue token {}: pass back the `continue` of the previous page unchanged",
    crate::quote::quote(.0)
)]
pub struct BadToken(pub String);

/// Where the next page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinueToken {
    /// The snapshot's resourceVersion.
    pub resource_version: ResourceVersion,
    /// The key of the last object sent.
    pub after: String,
}

impl ContinueToken {
    /// The token's text.
    pub fn encode(&self) -> String {
        format!("{}:{}", self.resource_version, self.after)
    }

    /// Parses a token made by [`ContinueToken::encode`].
    pub fn parse(token: &str) -> Result<Self, BadToken> {
        let bad = || BadToken(token.to_owned());
        let (rv, after) = token.split_once(':').ok_or_else(bad)?;
        Ok(ContinueToken {
            resource_version: rv.parse().map_err(|_| bad())?,
            after: after.to_owned(),
        })
    }
}

/// One page of a List.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The resourceVersion of the snapshot every page comes from.
    pub resource_version: ResourceVersion,
    /// The objects, ordered by key.
    pub objects: Vec<Arc<Object>>,
    /// Where the next page starts, if more follow.
    pub next: Option<ContinueToken>,
    /// How many matching objects follow.
    pub remaining: u64,
}

/// Why a page cannot be cut.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    /// The token is malformed.
    #[error(transparent)]
    Token(#[from] BadToken),
    /// The token's snapshot is older than the event history.
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// The most bytes of objects one page may hold, and how an object's bytes
/// are counted (as the caller receives it). A page always holds at least
/// one object, so a page stops short of its bound by less than one
/// object, or exceeds it by a single object larger than the bound.
#[derive(Clone, Copy)]
pub struct PageBytes<'a> {
    /// The bound.
    pub max: u64,
    /// An object's size.
    pub of: &'a dyn Fn(&Object) -> u64,
}

/// The matching objects of one snapshot, ordered by key.
#[derive(Debug)]
struct Cut {
    resource_version: ResourceVersion,
    filter: Filter,
    objects: Vec<Arc<Object>>,
}

/// The lists of one resource type whose later pages are still expected,
/// each with when its last page was cut.
#[derive(Debug, Default)]
pub struct Pages {
    recent: Mutex<VecDeque<(Instant, Arc<Cut>)>>,
}

impl Pages {
    /// The page of `store` that `continue_token` (empty for the first)
    /// names, of at most `limit` objects (0: all) matching `filter`, and
    /// within `bytes`: a page cut short by its bytes has a `continue`
    /// token, as a page cut by its limit does.
    pub fn page(
        &self,
        store: &Store,
        filter: &Filter,
        limit: u32,
        continue_token: &str,
        bytes: PageBytes<'_>,
    ) -> Result<Page, PageError> {
        let (cut, start) = if continue_token.is_empty() {
            let snapshot = store.snapshot();
            (
                self.cut(snapshot.resource_version, filter, &snapshot.objects),
                0,
            )
        } else {
            let token = ContinueToken::parse(continue_token)?;
            let cut = match self.find(token.resource_version, filter) {
                Some(cut) => cut,
                None => {
                    let snapshot = store.snapshot_at(token.resource_version)?;
                    self.cut(snapshot.resource_version, filter, &snapshot.objects)
                }
            };
            let start = cut.objects.partition_point(|o| o.key <= token.after);
            (cut, start)
        };
        let limit = if limit == 0 {
            usize::MAX
        } else {
            limit as usize
        };
        let last = start.saturating_add(limit).min(cut.objects.len());
        let (mut end, mut held) = (start, 0u64);
        while end < last {
            let size = (bytes.of)(&cut.objects[end]);
            if end > start && held.saturating_add(size) > bytes.max {
                break;
            }
            held = held.saturating_add(size);
            end += 1;
        }
        let objects = cut.objects[start..end].to_vec();
        let remaining = (cut.objects.len() - end) as u64;
        let next = (remaining > 0).then(|| ContinueToken {
            resource_version: cut.resource_version,
            after: objects.last().map(|o| o.key.clone()).unwrap_or_default(),
        });
        if next.is_some() {
            self.keep(cut.clone());
        }
        Ok(Page {
            resource_version: cut.resource_version,
            objects,
            next,
            remaining,
        })
    }

    /// The matching objects of a snapshot.
    fn cut(&self, rv: ResourceVersion, filter: &Filter, objects: &[Arc<Object>]) -> Arc<Cut> {
        Arc::new(Cut {
            resource_version: rv,
            filter: filter.clone(),
            objects: objects[filter.candidates(objects)]
                .iter()
                .filter(|o| filter.matches_candidate(o))
                .cloned()
                .collect(),
        })
    }

    /// A kept list of this snapshot and filter.
    fn find(&self, rv: ResourceVersion, filter: &Filter) -> Option<Arc<Cut>> {
        let recent = self.recent.lock();
        recent
            .iter()
            .find(|(_, c)| c.resource_version == rv && c.filter == *filter)
            .map(|(_, c)| c.clone())
    }

    /// Keeps `cut` for its next page, dropping the oldest and the stale.
    fn keep(&self, cut: Arc<Cut>) {
        let now = Instant::now();
        let mut recent = self.recent.lock();
        recent.retain(|(used, c)| !Arc::ptr_eq(c, &cut) && now.duration_since(*used) < KEEP_FOR);
        recent.push_back((now, cut));
        while recent.len() > KEEP {
            recent.pop_front();
        }
    }

    /// How many lists are kept.
    pub fn kept(&self) -> usize {
        self.recent.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        event::EventKind,
        store::tests::{configmaps, object},
    };

    fn no_bytes(_: &Object) -> u64 {
        0
    }

    /// No byte bound.
    const ANY: PageBytes<'static> = PageBytes {
        max: u64::MAX,
        of: &no_bytes,
    };

    #[test]
    fn a_page_stops_before_its_byte_bound_and_continues_from_there() {
        let store = Store::new(configmaps(), 100);
        let pages = Pages::default();
        let all: Vec<Object> = (0..5).map(|i| object(&format!("o{i}"), 1, "{}")).collect();
        store.replace(all, ResourceVersion(1));
        let ten = |_: &Object| 10;
        let bytes = PageBytes { max: 25, of: &ten };
        let first = pages
            .page(&store, &Filter::default(), 0, "", bytes)
            .unwrap();
        assert_eq!((names(&first), first.remaining), (vec!["o0", "o1"], 3));
        let token = first.next.unwrap().encode();
        let second = pages
            .page(&store, &Filter::default(), 0, &token, bytes)
            .unwrap();
        assert_eq!(names(&second), ["o2", "o3"]);
        // An object larger than the bound still makes a page of its own.
        let tiny = PageBytes { max: 1, of: &ten };
        let one = pages.page(&store, &Filter::default(), 3, "", tiny).unwrap();
        assert_eq!((names(&one), one.remaining), (vec!["o0"], 4));
    }

    fn names(page: &Page) -> Vec<&str> {
        page.objects.iter().map(|o| o.name.as_str()).collect()
    }

    #[test]
    fn pages_of_one_list_come_from_one_snapshot_even_while_the_store_changes() {
        let store = Store::new(configmaps(), 100);
        let pages = Pages::default();
        let all: Vec<Object> = (0..5).map(|i| object(&format!("o{i}"), 1, "{}")).collect();
        store.replace(all, ResourceVersion(1));
        let everything = Filter::default();
        let first = pages.page(&store, &everything, 2, "", ANY).unwrap();
        assert_eq!((names(&first), first.remaining), (vec!["o0", "o1"], 3));
        store.apply(EventKind::Deleted, object("o2", 2, "{}"));
        store.apply(EventKind::Added, object("o25", 3, "{}"));
        let token = first.next.unwrap().encode();
        let second = pages.page(&store, &everything, 2, &token, ANY).unwrap();
        assert_eq!(
            (names(&second), second.resource_version),
            (vec!["o2", "o3"], ResourceVersion(1))
        );
        let last = pages
            .page(&store, &everything, 2, &second.next.unwrap().encode(), ANY)
            .unwrap();
        assert_eq!(
            (names(&last), last.next.clone(), last.remaining),
            (vec!["o4"], None, 0)
        );
        let fresh = pages.page(&store, &everything, 0, "", ANY).unwrap();
        assert_eq!(names(&fresh), ["o0", "o1", "o25", "o3", "o4"]);
    }

    #[test]
    fn bad_and_expired_tokens_are_clear_errors() {
        let store = Store::new(configmaps(), 1);
        let pages = Pages::default();
        store.replace(vec![object("a", 1, "{}")], ResourceVersion(1));
        let everything = Filter::default();
        assert_eq!(
            pages.page(&store, &everything, 1, "garbage", ANY),
            Err(PageError::Token(BadToken("garbage".into())))
        );
        store.apply(EventKind::Added, object("b", 2, "{}"));
        store.apply(EventKind::Added, object("c", 3, "{}"));
        assert!(matches!(
            pages.page(&store, &everything, 1, "1:ns/a", ANY),
            Err(PageError::Read(ReadError::Expired { .. }))
        ));
    }

    #[test]
    fn a_huge_bad_token_is_quoted_with_a_bound() {
        let store = Store::new(configmaps(), 1);
        store.replace(Vec::new(), ResourceVersion(1));
        let token = "x".repeat(1 << 20);
        let err = Pages::default()
            .page(&store, &Filter::default(), 1, &token, ANY)
            .unwrap_err();
        let message = err.to_string();
        assert!(message.len() < 300, "{} bytes", message.len());
        assert!(message.contains("1048576 bytes"), "{message}");
    }

    #[test]
    fn later_pages_come_from_the_kept_list_and_any_replica_cuts_the_same() {
        let store = Store::new(configmaps(), 3);
        let pages = Pages::default();
        let all: Vec<Object> = (0..6)
            .map(|i| object(&format!("o{i}"), 1, r#"{"app":"x"}"#))
            .collect();
        store.replace(all, ResourceVersion(1));
        let filter =
            Filter::new("", "app=x", "", &crate::fields::SelectableFields::default()).unwrap();
        let first = pages.page(&store, &filter, 2, "", ANY).unwrap();
        assert_eq!(pages.kept(), 1);
        let token = first.next.unwrap().encode();
        // Another replica (no kept list) rewinds the store: same page.
        let elsewhere = Pages::default()
            .page(&store, &filter, 2, &token, ANY)
            .unwrap();
        // The store moves on past its whole history: the token can no
        // longer be rewound to, yet the kept list still serves it, so no
        // page after the first walks the store.
        for rv in 2..=6 {
            store.apply(
                EventKind::Deleted,
                object(&format!("o{}", rv - 2), rv, "{}"),
            );
        }
        assert!(matches!(
            Pages::default().page(&store, &filter, 2, &token, ANY),
            Err(PageError::Read(ReadError::Expired { .. }))
        ));
        let second = pages.page(&store, &filter, 2, &token, ANY).unwrap();
        assert_eq!(second, elsewhere);
        assert_eq!(
            (names(&second), second.remaining, second.resource_version),
            (vec!["o2", "o3"], 2, ResourceVersion(1))
        );
        let last = pages
            .page(&store, &filter, 2, &second.next.unwrap().encode(), ANY)
            .unwrap();
        assert_eq!((names(&last), last.next.clone()), (vec!["o4", "o5"], None));
    }
}

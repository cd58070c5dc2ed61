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
    crate::error::quote(.0)
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
    /// names, of at most `limit` objects (0: all) matching `filter`.
    pub fn page(
        &self,
        store: &Store,
        filter: &Filter,
        limit: u32,
        continue_token: &str,
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
        let end = start.saturating_add(limit).min(cut.objects.len());
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
    use crate::store::{
        EventKind,
        tests::{configmaps, object},
    };

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
        let first = pages.page(&store, &everything, 2, "").unwrap();
        assert_eq!((names(&first), first.remaining), (vec!["o0", "o1"], 3));
        store.apply(EventKind::Deleted, object("o2", 2, "{}"));
        store.apply(EventKind::Added, object("o25", 3, "{}"));
        let token = first.next.unwrap().encode();
        let second = pages.page(&store, &everything, 2, &token).unwrap();
        assert_eq!(
            (names(&second), second.resource_version),
            (vec!["o2", "o3"], ResourceVersion(1))
        );
        let last = pages
            .page(&store, &everything, 2, &second.next.unwrap().encode())
            .unwrap();
        assert_eq!(
            (names(&last), last.next.clone(), last.remaining),
            (vec!["o4"], None, 0)
        );
        let fresh = pages.page(&store, &everything, 0, "").unwrap();
        assert_eq!(names(&fresh), ["o0", "o1", "o25", "o3", "o4"]);
    }

    #[test]
    fn bad_and_expired_tokens_are_clear_errors() {
        let store = Store::new(configmaps(), 1);
        let pages = Pages::default();
        store.replace(vec![object("a", 1, "{}")], ResourceVersion(1));
        let everything = Filter::default();
        assert_eq!(
            pages.page(&store, &everything, 1, "garbage"),
            Err(PageError::Token(BadToken("garbage".into())))
        );
        store.apply(EventKind::Added, object("b", 2, "{}"));
        store.apply(EventKind::Added, object("c", 3, "{}"));
        assert!(matches!(
            pages.page(&store, &everything, 1, "1:ns/a"),
            Err(PageError::Read(ReadError::Expired { .. }))
        ));
    }

    #[test]
    fn a_huge_bad_token_is_quoted_with_a_bound() {
        let store = Store::new(configmaps(), 1);
        store.replace(Vec::new(), ResourceVersion(1));
        let token = "x".repeat(1 << 20);
        let err = Pages::default()
            .page(&store, &Filter::default(), 1, &token)
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
        let first = pages.page(&store, &filter, 2, "").unwrap();
        assert_eq!(pages.kept(), 1);
        let token = first.next.unwrap().encode();
        // Another replica (no kept list) rewinds the store: same page.
        let elsewhere = Pages::default().page(&store, &filter, 2, &token).unwrap();
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
            Pages::default().page(&store, &filter, 2, &token),
            Err(PageError::Read(ReadError::Expired { .. }))
        ));
        let second = pages.page(&store, &filter, 2, &token).unwrap();
        assert_eq!(second, elsewhere);
        assert_eq!(
            (names(&second), second.remaining, second.resource_version),
            (vec!["o2", "o3"], 2, ResourceVersion(1))
        );
        let last = pages
            .page(&store, &filter, 2, &second.next.unwrap().encode())
            .unwrap();
        assert_eq!((names(&last), last.next.clone()), (vec!["o4", "o5"], None));
    }
}

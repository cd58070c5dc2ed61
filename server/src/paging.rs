//! List pages: every page of one List call is cut from the same snapshot,
//! named by a `continue` token that carries its resourceVersion and the
//! last key sent, like the API server's own.

use std::sync::Arc;

use crate::{
    filter::Filter,
    object::{Object, ResourceVersion},
    store::{ReadError, Snapshot, Store},
};

/// A malformed `continue` token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid continue token {0:?}: pass back the `continue` of the previous page unchanged")]
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

/// The page of `store` that `continue_token` (empty for the first) names,
/// of at most `limit` objects (0: all) matching `filter`.
pub fn page(
    store: &Store,
    filter: &Filter,
    limit: u32,
    continue_token: &str,
) -> Result<Page, PageError> {
    let (snapshot, after): (Snapshot, Option<String>) = if continue_token.is_empty() {
        (store.snapshot(), None)
    } else {
        let token = ContinueToken::parse(continue_token)?;
        (
            store.snapshot_at(token.resource_version)?,
            Some(token.after),
        )
    };
    let mut matching = snapshot
        .objects
        .into_iter()
        .filter(|o| filter.matches(o))
        .filter(|o| after.as_ref().is_none_or(|a| o.key > *a));
    let limit = if limit == 0 {
        usize::MAX
    } else {
        limit as usize
    };
    let objects: Vec<Arc<Object>> = matching.by_ref().take(limit).collect();
    let remaining = matching.count() as u64;
    let next = (remaining > 0).then(|| ContinueToken {
        resource_version: snapshot.resource_version,
        after: objects.last().map(|o| o.key.clone()).unwrap_or_default(),
    });
    Ok(Page {
        resource_version: snapshot.resource_version,
        objects,
        next,
        remaining,
    })
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
        let all: Vec<Object> = (0..5).map(|i| object(&format!("o{i}"), 1, "{}")).collect();
        store.replace(all, ResourceVersion(1));
        let everything = Filter::default();
        let first = page(&store, &everything, 2, "").unwrap();
        assert_eq!((names(&first), first.remaining), (vec!["o0", "o1"], 3));
        store.apply(EventKind::Deleted, object("o2", 2, "{}"));
        store.apply(EventKind::Added, object("o25", 3, "{}"));
        let token = first.next.unwrap().encode();
        let second = page(&store, &everything, 2, &token).unwrap();
        assert_eq!(
            (names(&second), second.resource_version),
            (vec!["o2", "o3"], ResourceVersion(1))
        );
        let last = page(&store, &everything, 2, &second.next.unwrap().encode()).unwrap();
        assert_eq!(
            (names(&last), last.next.clone(), last.remaining),
            (vec!["o4"], None, 0)
        );
        let fresh = page(&store, &everything, 0, "").unwrap();
        assert_eq!(names(&fresh), ["o0", "o1", "o25", "o3", "o4"]);
    }

    #[test]
    fn bad_and_expired_tokens_are_clear_errors() {
        let store = Store::new(configmaps(), 1);
        store.replace(vec![object("a", 1, "{}")], ResourceVersion(1));
        let everything = Filter::default();
        assert_eq!(
            page(&store, &everything, 1, "garbage"),
            Err(PageError::Token(BadToken("garbage".into())))
        );
        store.apply(EventKind::Added, object("b", 2, "{}"));
        store.apply(EventKind::Added, object("c", 3, "{}"));
        assert!(matches!(
            page(&store, &everything, 1, "1:ns/a"),
            Err(PageError::Read(ReadError::Expired { .. }))
        ));
    }
}

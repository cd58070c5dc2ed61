//! Delivery shaping: what a ring event or a snapshot's end becomes for
//! one subscriber, through its filter and projection. A delivery equal to
//! its ring event carries that event ([`Unchanged`]), so that one encoding
//! serves every subscriber (`crate::codec`).

use std::sync::Arc;

use kube_fanout_proto::INITIAL_EVENTS_END;

use super::request::WatchSpec;
use crate::{
    event::{Event, EventKind},
    object::{Object, ResourceVersion, with_resource_version},
    projection::Projection,
    store::Store,
};

/// One event as a subscriber receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// What happened, as this subscriber's filter sees it.
    pub(crate) kind: EventKind,
    /// Where the stream is once this event is applied.
    pub(crate) resource_version: ResourceVersion,
    /// The object's JSON (a minimal object for bookmarks).
    pub(crate) object: Arc<str>,
    /// Part of a re-sync unit: a change of it, or the bookmark closing it.
    pub(crate) resync: bool,
    /// How `object` shows the object; it picks which of the ring event's
    /// shared encodings `unchanged` stands for.
    pub(crate) projection: Projection,
    /// The ring event, when this delivery is that event unchanged: its one
    /// encoding then serves every subscriber ([`Event::encoded`]).
    pub(crate) unchanged: Option<Unchanged>,
    /// On a bookmark of a stream with head bookmarks: where the store was
    /// as it was handed out.
    pub(crate) head: Option<ResourceVersion>,
}

/// A ring event that a delivery passes on as it is.
#[derive(Debug, Clone)]
pub(crate) struct Unchanged(pub(crate) Arc<Event>);

impl PartialEq for Unchanged {
    // The same ring entry; what it says is in the delivery's other fields.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Unchanged {}

/// What a change event looks like through `spec`'s filter: filter
/// transitions turn into ADDED or DELETED, events it cannot see into
/// nothing. `None` for bookmarks too.
pub(super) fn visible<'e>(spec: &WatchSpec, event: &'e Event) -> Option<(EventKind, &'e Object)> {
    let object = event.object.as_deref()?;
    let before = event.previous.as_deref().map(|p| spec.filter.matches(p));
    if event.kind == EventKind::Deleted {
        // The subscriber holds the object iff its last state before the
        // deletion matched (or, unknown to the store, its final state does).
        return before
            .unwrap_or_else(|| spec.filter.matches(object))
            .then_some((EventKind::Deleted, object));
    }
    match (before.unwrap_or(false), spec.filter.matches(object)) {
        (false, false) => None,
        (false, true) => Some((EventKind::Added, object)),
        (true, false) => Some((EventKind::Deleted, event.previous.as_deref()?)),
        (true, true) => Some((event.kind, object)),
    }
}

/// What `event` (not one that closes a unit) becomes for this subscriber.
pub(super) fn deliver(store: &Store, spec: &WatchSpec, event: &Arc<Event>) -> Option<Delivery> {
    let rv = event.resource_version;
    let Some(object) = &event.object else {
        // The same bookmark for every subscriber, so it is shared too.
        return spec.allow_bookmarks.then(|| Delivery {
            unchanged: Some(Unchanged(event.clone())),
            ..bookmark(store, rv, Marker::None, spec.projection)
        });
    };
    let (kind, shown) = visible(spec, event)?;
    let unchanged =
        (kind == event.kind && std::ptr::eq(shown, &**object)).then(|| Unchanged(event.clone()));
    // A DELETED for leaving the filter shows the last matching state at
    // the event's resourceVersion, as the API server does.
    let mut json = spec.projection.json(shown);
    if unchanged.is_none() && kind == EventKind::Deleted {
        json = with_resource_version(&json, rv);
    }
    Some(Delivery {
        kind,
        resource_version: rv,
        object: json,
        resync: event.resync,
        projection: spec.projection,
        unchanged,
        head: None,
    })
}

/// What a bookmark marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Marker {
    /// Nothing: the resourceVersion moved on.
    None,
    /// The end of a snapshot (annotated [`INITIAL_EVENTS_END`]).
    InitialEventsEnd,
    /// The end of a re-sync unit (flagged `resync`).
    ResyncEnd,
}

/// A bookmark object of the store's kind (or `PartialObjectMetadata`) at
/// `rv`, as the API server sends one: apiVersion, kind and
/// metadata.resourceVersion only.
pub(super) fn bookmark(
    store: &Store,
    rv: ResourceVersion,
    marker: Marker,
    projection: Projection,
) -> Delivery {
    let resource = store.resource();
    let api_version = resource.gvr.api_version();
    let (api_version, kind) = projection.type_meta(&api_version, &resource.kind);
    let mut metadata = serde_json::json!({ "resourceVersion": rv.to_string() });
    if marker == Marker::InitialEventsEnd {
        metadata["annotations"] = serde_json::json!({ INITIAL_EVENTS_END: "true" });
    }
    let object = serde_json::json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": metadata,
    });
    Delivery {
        kind: EventKind::Bookmark,
        resource_version: rv,
        object: object.to_string().into(),
        resync: marker == Marker::ResyncEnd,
        projection,
        unchanged: None,
        head: None,
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use futures::{Stream, StreamExt};
    use kube_fanout_proto::INITIAL_EVENTS_END;

    use crate::{
        event::EventKind,
        fixtures::{configmaps, object},
        object::ResourceVersion,
        store::Store,
        subscription::{
            Delivery, Limits, Start, WatchError,
            delivery::Unchanged,
            tests::{ready, spec, stream_of, watch},
        },
    };

    #[tokio::test(start_paused = true)]
    async fn filter_transitions_become_added_and_deleted() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 1, r#"{"app":"x"}"#)], ResourceVersion(1));
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("app=x", Start::Latest, true),
            Limits::default(),
        ));
        assert_eq!(
            ready(&mut stream).await,
            [Ok((EventKind::Added, 1)), Ok((EventKind::Bookmark, 1))]
        );
        store.apply(EventKind::Modified, object("a", 2, r#"{"app":"y"}"#));
        store.apply(EventKind::Modified, object("a", 3, r#"{"app":"z"}"#));
        store.apply(EventKind::Modified, object("a", 4, r#"{"app":"x"}"#));
        store.apply(EventKind::Modified, object("a", 5, r#"{"app":"x"}"#));
        store.apply(EventKind::Deleted, object("a", 6, r#"{"app":"x"}"#));
        store.apply(EventKind::Added, object("b", 7, r#"{"app":"y"}"#));
        store.apply(EventKind::Deleted, object("b", 8, r#"{"app":"y"}"#));
        store.bookmark(ResourceVersion(9));
        let seen = ready(&mut stream).await;
        assert_eq!(
            seen,
            [
                Ok((EventKind::Deleted, 2)),
                Ok((EventKind::Added, 4)),
                Ok((EventKind::Modified, 5)),
                Ok((EventKind::Deleted, 6)),
                Ok((EventKind::Bookmark, 9)),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_for_leaving_the_filter_shows_the_last_match_at_the_events_rv() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 1, r#"{"app":"x"}"#)], ResourceVersion(1));
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("app=x", Start::At(ResourceVersion(1)), false),
            Limits::default(),
        ));
        store.apply(EventKind::Modified, object("a", 2, r#"{"app":"y"}"#));
        let left = stream.next().await.unwrap().unwrap();
        assert_eq!(
            (left.kind, left.resource_version),
            (EventKind::Deleted, ResourceVersion(2))
        );
        let shown: serde_json::Value = serde_json::from_str(&left.object).unwrap();
        assert_eq!(shown["metadata"]["resourceVersion"], "2", "{shown}");
        assert_eq!(
            shown["metadata"]["labels"]["app"], "x",
            "the last matching state"
        );
    }

    /// In a re-sync unit at L, an object that left the filter is DELETED
    /// with its last matching state at L (the rule the API server's watch
    /// follows for a DELETED: the event's resourceVersion), and one deleted
    /// upstream keeps the resourceVersion of the state it removes, its
    /// deletion's being lost with the history: what the proto and docs/api.md
    /// say.
    #[tokio::test(start_paused = true)]
    async fn a_resync_deleted_for_leaving_is_at_l_and_one_for_a_deletion_keeps_its_rv() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(
            vec![
                object("a", 1, r#"{"app":"x"}"#),
                object("b", 2, r#"{"app":"x"}"#),
            ],
            ResourceVersion(2),
        );
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("app=x", Start::At(ResourceVersion(2)), false),
            Limits::default(),
        ));
        store.replace(vec![object("a", 5, r#"{"app":"y"}"#)], ResourceVersion(9));
        let mut seen = std::collections::BTreeMap::new();
        for _ in 0..2 {
            let d = stream.next().await.unwrap().unwrap();
            assert_eq!(
                (d.kind, d.resource_version, d.resync),
                (EventKind::Deleted, ResourceVersion(9), true)
            );
            let shown: serde_json::Value = serde_json::from_str(&d.object).unwrap();
            assert_eq!(shown["metadata"]["labels"]["app"], "x", "{shown}");
            seen.insert(
                shown["metadata"]["name"].as_str().unwrap().to_owned(),
                shown["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
        assert_eq!(
            seen,
            [("a".to_owned(), "9".to_owned()), ("b".into(), "2".into())].into()
        );
        let close = stream.next().await.unwrap().unwrap();
        assert_eq!(
            (close.kind, close.resource_version, close.resync),
            (EventKind::Bookmark, ResourceVersion(9), true)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_end_bookmark_carries_the_annotation_and_the_snapshot_rv() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 3, "{}")], ResourceVersion(4));
        let mut stream = Box::pin(watch(
            store,
            spec("", Start::Latest, true),
            Limits::default(),
        ));
        stream.next().await.unwrap().unwrap();
        let end = stream.next().await.unwrap().unwrap();
        assert_eq!(end.kind, EventKind::Bookmark);
        let value: serde_json::Value = serde_json::from_str(&end.object).unwrap();
        assert_eq!(value["metadata"]["annotations"][INITIAL_EVENTS_END], "true");
        assert_eq!(value["metadata"]["resourceVersion"], "4");
        assert_eq!(
            (value["kind"].as_str(), value["apiVersion"].as_str()),
            (Some("ConfigMap"), Some("v1"))
        );
    }

    /// A delivery that is its ring event as it is carries that ring entry,
    /// so one encoding serves every subscriber (`crate::codec`); one that
    /// differs from it (a filter transition) carries none.
    #[tokio::test(start_paused = true)]
    async fn only_deliveries_equal_to_their_ring_event_share_it() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 1, r#"{"app":"x"}"#)], ResourceVersion(1));
        let mut all = stream_of(
            &store,
            spec("", Start::At(ResourceVersion(1)), false),
            Limits::default(),
        );
        let mut xs = stream_of(
            &store,
            spec("app=x", Start::At(ResourceVersion(1)), false),
            Limits::default(),
        );
        store.apply(EventKind::Modified, object("a", 2, r#"{"app":"y"}"#));
        store.apply(EventKind::Modified, object("a", 3, r#"{"app":"x"}"#));
        store.apply(EventKind::Modified, object("a", 4, r#"{"app":"x"}"#));
        store.bookmark(ResourceVersion(5));
        // A relist that finds nothing changed: a unit of its close alone.
        store.replace(vec![object("a", 4, r#"{"app":"x"}"#)], ResourceVersion(7));
        let ring = store.read_after(0, 10).unwrap();
        assert_eq!(ring.len(), 5);
        async fn shared(
            stream: &mut (impl Stream<Item = Result<Delivery, WatchError>> + Unpin),
        ) -> Vec<(EventKind, u64, Option<u64>)> {
            let mut out = Vec::new();
            while let Ok(Some(item)) =
                tokio::time::timeout(Duration::from_millis(50), stream.next()).await
            {
                let d = item.unwrap();
                out.push((d.kind, d.resource_version.0, d.unchanged.map(|u| u.0.seq)));
            }
            out
        }
        use EventKind::*;
        assert_eq!(
            shared(&mut all).await,
            [
                (Modified, 2, Some(1)),
                (Modified, 3, Some(2)),
                (Modified, 4, Some(3)),
                (Bookmark, 5, Some(4)),
                (Bookmark, 7, Some(5)),
            ]
        );
        assert_eq!(
            shared(&mut xs).await,
            [
                (Deleted, 2, None),
                (Added, 3, None),
                (Modified, 4, Some(3)),
                (Bookmark, 5, Some(4)),
                (Bookmark, 7, Some(5)),
            ]
        );
        // Equal means the same ring entry, whatever the entries say.
        assert_eq!(Unchanged(ring[2].clone()), Unchanged(ring[2].clone()));
        assert_ne!(Unchanged(ring[2].clone()), Unchanged(ring[3].clone()));
    }
}

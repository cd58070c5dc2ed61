//! The deliveries that end a unit of a Watch stream (see the Watch comment
//! in `fanout.proto`): the bookmark that ends a snapshot and the one that
//! closes a re-sync unit. Only after one of them (or after a live event,
//! a unit of its own) is the stream's resourceVersion a resume point.

use crate::v1::{EventType, WatchEvent};

/// The annotation on the bookmark that ends the initial events, as the API
/// server's watch-list sets it (value `"true"`).
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Whether `event` is the bookmark that ends a snapshot (annotated
/// [`INITIAL_EVENTS_END`]: `"true"`).
pub fn ends_initial_events(event: &WatchEvent) -> bool {
    event.r#type() == EventType::Bookmark
        && serde_json::from_str::<serde_json::Value>(&event.object).is_ok_and(|o| {
            o["metadata"]["annotations"][INITIAL_EVENTS_END].as_str() == Some("true")
        })
}

/// Whether `event` is the bookmark that closes a re-sync unit: the
/// resync events before it, all at its resourceVersion, apply together.
pub fn ends_resync(event: &WatchEvent) -> bool {
    event.r#type() == EventType::Bookmark && event.resync
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bookmark(object: serde_json::Value, resync: bool) -> WatchEvent {
        WatchEvent {
            r#type: EventType::Bookmark.into(),
            resource_version: "5".into(),
            object: object.to_string(),
            resync,
            head_resource_version: String::new(),
        }
    }

    #[test]
    fn only_the_annotated_bookmark_ends_the_initial_events() {
        let annotated = |value: &str| serde_json::json!({"metadata": {"annotations": {INITIAL_EVENTS_END: value}}});
        assert!(ends_initial_events(&bookmark(annotated("true"), false)));
        assert!(!ends_initial_events(&bookmark(annotated("false"), false)));
        assert!(!ends_initial_events(&bookmark(
            serde_json::json!({"metadata": {}}),
            false
        )));
        let mut added = bookmark(annotated("true"), false);
        added.r#type = EventType::Added.into();
        assert!(!ends_initial_events(&added));
    }

    #[test]
    fn only_a_resync_bookmark_closes_a_resync_unit() {
        let object = serde_json::json!({"metadata": {}});
        assert!(ends_resync(&bookmark(object.clone(), true)));
        assert!(!ends_resync(&bookmark(object.clone(), false)));
        let mut deleted = bookmark(object, true);
        deleted.r#type = EventType::Deleted.into();
        assert!(!ends_resync(&deleted));
    }
}

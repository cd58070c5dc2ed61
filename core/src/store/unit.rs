//! Re-sync units: the vocabulary of a relist's difference as the ring
//! holds it (see the store's docs, "Re-sync units and gaps"). The store
//! writes a unit (`Store::replace`); the ring keeps its events while it is
//! open and records the gap it skips.

use crate::object::ResourceVersion;

/// A range of resourceVersions that a relist skipped: (after, until).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// S: the store's resourceVersion before the relist.
    pub after: ResourceVersion,
    /// L: the relist's resourceVersion.
    pub until: ResourceVersion,
}

impl Gap {
    /// Whether a resume from `rv` cannot be served exactly.
    pub fn contains(&self, rv: ResourceVersion) -> bool {
        self.after < rv && rv < self.until
    }
}

/// A re-sync unit being written.
#[derive(Debug, Clone, Copy)]
pub(super) struct OpenUnit {
    /// Its first event.
    pub(super) first_seq: u64,
}

/// How many changes of a re-sync unit are written per hold of the ring's
/// mutex: readers and the head move on between chunks.
pub(super) const UNIT_CHUNK: usize = 512;

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, sync::Arc};

    use super::*;
    use crate::{
        event::EventKind,
        fixtures::{configmaps, contents, keep_new, object, seen},
        object::Object,
        store::{ReadError, Store},
    };

    #[test]
    fn a_relist_publishes_its_difference_as_one_unit_at_the_list_rv() {
        let store = Store::new(configmaps(), 100);
        store.replace(
            vec![
                object("a", 1, "{}"),
                object("b", 2, "{}"),
                object("e", 3, "{}"),
            ],
            ResourceVersion(5),
        );
        assert_eq!(store.head().seq, 0, "the first list publishes no events");
        store.replace(
            vec![
                object("b", 7, "{}"),
                object("c", 6, "{}"),
                object("d", 9, "{}"),
                object("e", 3, "{}"),
            ],
            ResourceVersion(10),
        );
        let events = store.read_after(0, 10).unwrap();
        use EventKind::*;
        assert_eq!(
            seen(&events),
            [
                (Deleted, "a", 10, true),
                (Modified, "b", 10, true),
                (Added, "c", 10, true),
                (Added, "d", 10, true),
                (Bookmark, "", 10, true),
            ],
            "every change at the list RV, flagged, closed by a flagged bookmark; e unchanged"
        );
        assert!(events[4].closes_unit());
        assert_eq!(
            events[1].previous.as_ref().map(|o| o.resource_version.0),
            Some(2),
            "a unit's change holds the state it replaces"
        );
        assert_eq!(store.head().resource_version, ResourceVersion(10));
        let status = store.status();
        assert_eq!(status.relists, 1);
        assert_eq!(
            status.gaps,
            [Gap {
                after: ResourceVersion(5),
                until: ResourceVersion(10)
            }]
        );
        let snapshot = store.snapshot();
        assert_eq!(
            contents(&snapshot.objects),
            BTreeMap::from([
                ("ns/b".into(), 7),
                ("ns/c".into(), 6),
                ("ns/d".into(), 9),
                ("ns/e".into(), 3)
            ])
        );
        assert_eq!(snapshot.resource_version, ResourceVersion(10));
    }

    /// Finding 2 of issue 8: every event of a re-sync shared one RV, so a
    /// resume from that RV after the first of them lost the rest.
    #[test]
    fn a_resume_before_a_unit_gets_it_whole_and_inside_its_gap_is_refused() {
        let store = Store::new(configmaps(), 100);
        store.replace(Vec::new(), ResourceVersion(5));
        store.apply(EventKind::Added, object("x", 6, "{}"));
        let six: Vec<Object> = (0..6)
            .map(|i| object(&format!("n{i}"), 20 + i, "{}"))
            .collect();
        store.replace(six, ResourceVersion(30));
        let after = |rv| {
            store
                .read_after(store.cursor_after(ResourceVersion(rv)).unwrap(), 100)
                .unwrap()
        };
        // From 6 (S) the whole unit: x deleted, six added, the close.
        let unit = after(6);
        assert_eq!(unit.len(), 8);
        assert!(unit.iter().all(|e| e.resync && e.resource_version.0 == 30));
        // From 30 (L, the closed unit) nothing of it.
        assert!(after(30).is_empty());
        // From inside (6, 30): the replica does not know what happened.
        for rv in [7, 20, 29] {
            assert_eq!(
                store.cursor_after(ResourceVersion(rv)),
                Err(ReadError::InGap {
                    asked: ResourceVersion(rv),
                    gap: Gap {
                        after: ResourceVersion(6),
                        until: ResourceVersion(30)
                    }
                })
            );
            assert!(matches!(
                store.snapshot_at(ResourceVersion(rv)),
                Err(ReadError::InGap { .. })
            ));
        }
        // And rewinding to S undoes the unit exactly.
        assert_eq!(
            contents(&store.snapshot_at(ResourceVersion(6)).unwrap().objects),
            BTreeMap::from([("ns/x".into(), 6)])
        );
    }

    /// A relist at the store's own RV that still differs publishes its
    /// unit at that RV and records no gap: no RV was skipped.
    #[test]
    fn a_relist_at_the_current_rv_publishes_its_difference_without_a_gap() {
        let store = Store::new(configmaps(), 100);
        // History reaches back past 10, so a gap ending there would stay.
        store.replace(Vec::new(), ResourceVersion(5));
        store.apply(EventKind::Added, object("a", 10, "{}"));
        store.replace(vec![object("b", 2, "{}")], ResourceVersion(10));
        use EventKind::*;
        assert_eq!(
            seen(&store.read_after(1, 10).unwrap()),
            [
                (Deleted, "a", 10, true),
                (Added, "b", 10, true),
                (Bookmark, "", 10, true),
            ]
        );
        let status = store.status();
        assert_eq!((status.relists, status.gaps), (1, Vec::new()));
        assert_eq!(status.head.resource_version, ResourceVersion(10));
    }

    /// A unit larger than the whole history (a relist of more objects than
    /// the ring holds, as with production's defaults) keeps all its events
    /// while it is written, so a snapshot taken meanwhile undoes it whole;
    /// once it closes, the history is back within its bound.
    #[test]
    fn a_unit_larger_than_the_history_stays_whole_while_it_is_written() {
        const KEYS: usize = 3 * UNIT_CHUNK;
        const HISTORY: u64 = 8;
        let list = |rv: u64| -> Vec<Object> {
            (0..KEYS)
                .map(|i| object(&format!("k{i}"), rv, "{}"))
                .collect()
        };
        let mut undone = 0;
        for _ in 0..200 {
            let store = Arc::new(Store::new(configmaps(), HISTORY as usize));
            store.replace(list(1), ResourceVersion(1));
            let writer = {
                let (store, relist) = (store.clone(), list(2));
                std::thread::spawn(move || store.replace(relist, ResourceVersion(2)))
            };
            let mut snapshots = Vec::new();
            while !writer.is_finished() {
                keep_new(&mut snapshots, store.snapshot());
            }
            writer.join().unwrap();
            for snapshot in &snapshots {
                let rv = snapshot.resource_version.0;
                assert_eq!(snapshot.objects.len(), KEYS);
                assert!(
                    snapshot.objects.iter().all(|o| o.resource_version.0 == rv),
                    "the snapshot at {rv} mixes the states before and after the unit"
                );
                let expected_seq = if rv == 1 { 0 } else { KEYS as u64 + 1 };
                assert_eq!(snapshot.seq, expected_seq);
            }
            let head = store.head().seq;
            assert_eq!(head, KEYS as u64 + 1);
            assert_eq!(
                store.read_after(head - HISTORY, 100).map(|e| e.len()),
                Ok(HISTORY as usize)
            );
            assert!(store.read_after(head - HISTORY - 1, 100).is_err());
            undone += store.probes().snapshot_paths().1;
            if undone > 0 {
                break;
            }
        }
        assert!(undone > 0, "some snapshot was taken inside the unit");
    }
}

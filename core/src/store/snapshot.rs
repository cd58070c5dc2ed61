//! Consistent snapshots of the store (see the store's docs, "Consistent
//! snapshots"): a walk of the map between two ring positions, the events
//! in between replayed over it (and an open unit undone), the sharing of
//! one copy by every snapshot at the same position, and the rewinding of a
//! snapshot to an older resourceVersion.
//!
//! The tests open with the races that prove it: a writer, then relists,
//! against readers, every snapshot checked against a replay of the writes.

use std::{
    collections::HashMap,
    sync::{Arc, Weak},
};

use dashmap::DashMap;
use parking_lot::Mutex;

use super::{probes::Probes, ring::Ring};
use crate::{
    event::{Event, EventKind},
    object::{Object, ResourceVersion},
};

/// A consistent copy of the store.
#[derive(Debug)]
pub struct Snapshot {
    /// The resourceVersion the copy is exact at.
    pub resource_version: ResourceVersion,
    /// The ring position of that state: events after it follow the snapshot.
    pub seq: u64,
    /// The objects, ordered by key; shared by every snapshot taken at the
    /// same ring position while one of them is still in use.
    pub objects: Arc<[Arc<Object>]>,
}

/// The last snapshot taken, for others at the same ring position to share
/// (a restart herd: many subscribers ask for the same state at once). Weak:
/// it lives only while someone still sends or pages through it, so the
/// store never keeps an old state alive on its own.
struct SharedSnapshot {
    seq: u64,
    resource_version: ResourceVersion,
    objects: Weak<[Arc<Object>]>,
}

/// The sharing of snapshots: the last one taken, if any. Its mutex is
/// taken after the ring's when both are held.
#[derive(Default)]
pub(super) struct Snapshots {
    last: Mutex<Option<SharedSnapshot>>,
}

impl Snapshots {
    /// A consistent copy of `objects` as `ring` has it (see the store's
    /// docs), shared with the last one taken if that one is still in use
    /// and no write came since.
    pub(super) fn take(
        &self,
        ring: &Mutex<Ring>,
        objects: &DashMap<String, Arc<Object>>,
        probes: &Probes,
    ) -> Snapshot {
        if let Some(shared) = self.shared(ring) {
            return shared;
        }
        loop {
            let p0 = ring.lock().seq;
            let walked: Vec<Arc<Object>> = objects.iter().map(|e| e.value().clone()).collect();
            let (p1, rv, replay, open_unit, synced) = {
                let ring = ring.lock();
                if ring.oldest_seq() > p0 + 1 {
                    // The events between P0 and P1 left the ring during the
                    // walk; walk again rather than return a torn copy.
                    continue;
                }
                // Events of an open unit are never evicted, so the replay
                // reaches back to the unit's start as well.
                let from = ring.open_unit.map_or(p0, |u| p0.min(u.first_seq - 1));
                let replay: Vec<Arc<Event>> = ring
                    .events
                    .iter()
                    .skip_while(|e| e.seq <= from)
                    .cloned()
                    .collect();
                (
                    ring.seq,
                    ring.resource_version,
                    replay,
                    ring.open_unit,
                    ring.floor.is_some(),
                )
            };
            probes.snapshot(p1 > p0, open_unit.is_some());
            // Nothing to replay or undo (no write during the walk, no unit
            // open): the walk is the state at P1 as it is. Otherwise the
            // events are applied over a map of it by key.
            let (seq, objects) = if replay.is_empty() {
                (p1, walked)
            } else {
                let mut copy: HashMap<String, Arc<Object>> =
                    walked.into_iter().map(|o| (o.key.clone(), o)).collect();
                for event in replay.iter().filter(|e| e.seq > p0) {
                    redo(&mut copy, event);
                }
                let seq = match open_unit {
                    None => p1,
                    Some(unit) => {
                        for event in replay.iter().rev().take_while(|e| e.seq >= unit.first_seq) {
                            undo(&mut copy, event);
                        }
                        unit.first_seq - 1
                    }
                };
                (seq, copy.into_values().collect())
            };
            let objects = sorted(objects);
            // Exact at P1 when no unit was open there: any later snapshot
            // that still finds the ring at P1 may have it.
            if open_unit.is_none() && synced {
                *self.last.lock() = Some(SharedSnapshot {
                    seq,
                    resource_version: rv,
                    objects: Arc::downgrade(&objects),
                });
            }
            return Snapshot {
                resource_version: rv,
                seq,
                objects,
            };
        }
    }

    /// The last snapshot, if the ring is still where it was taken and it is
    /// still in use. Every write after the first sync moves the ring's
    /// position under its mutex (held here), so an unchanged position
    /// means unchanged contents.
    pub(super) fn shared(&self, ring: &Mutex<Ring>) -> Option<Snapshot> {
        let ring = ring.lock();
        let shared = self.last.lock();
        let shared = shared.as_ref()?;
        if ring.seq != shared.seq
            || ring.resource_version != shared.resource_version
            || ring.open_unit.is_some()
            || ring.floor.is_none()
        {
            return None;
        }
        Some(Snapshot {
            resource_version: shared.resource_version,
            seq: shared.seq,
            objects: shared.objects.upgrade()?,
        })
    }
}

/// `now` rewound to ring position `cursor` at `rv` by undoing `newer`, the
/// ring's events after `cursor` (those after `now` are left alone).
pub(super) fn rewind(
    now: &Snapshot,
    rv: ResourceVersion,
    cursor: u64,
    newer: &[Arc<Event>],
) -> Snapshot {
    let mut objects: HashMap<String, Arc<Object>> = now
        .objects
        .iter()
        .map(|o| (o.key.clone(), o.clone()))
        .collect();
    for event in newer.iter().rev().filter(|e| e.seq <= now.seq) {
        undo(&mut objects, event);
    }
    Snapshot {
        resource_version: rv,
        seq: cursor,
        objects: sorted(objects.into_values().collect()),
    }
}

/// Applies `event` to a copy of the store.
fn redo(copy: &mut HashMap<String, Arc<Object>>, event: &Event) {
    if let Some(object) = &event.object {
        match event.kind {
            EventKind::Deleted => copy.remove(&object.key),
            _ => copy.insert(object.key.clone(), object.clone()),
        };
    }
}

/// Takes `event` back out of a copy of the store.
fn undo(copy: &mut HashMap<String, Arc<Object>>, event: &Event) {
    if let Some(object) = &event.object {
        match &event.previous {
            Some(previous) => copy.insert(previous.key.clone(), previous.clone()),
            None => copy.remove(&object.key),
        };
    }
}

/// The objects of a copy, ordered by key (keys are unique: no stability
/// needed).
fn sorted(mut objects: Vec<Arc<Object>>) -> Arc<[Arc<Object>]> {
    objects.sort_unstable_by(|a, b| a.key.cmp(&b.key));
    objects.into()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{
        fixtures::{configmaps, contents, keep_new, object},
        store::{ReadError, Store},
    };

    /// A pseudo-random sequence of changes over a few keys.
    fn change(i: u64) -> (EventKind, Object) {
        let key = (i * 7919) % 37;
        let kind = match (i * 104_729) % 5 {
            0 => EventKind::Deleted,
            1 | 2 => EventKind::Added,
            _ => EventKind::Modified,
        };
        (kind, object(&format!("cm-{key}"), 100 + i, "{}"))
    }

    #[test]
    fn snapshots_are_exact_while_the_writer_runs() {
        let store = Arc::new(Store::new(configmaps(), 1_000_000));
        store.replace(Vec::new(), ResourceVersion(100));
        // At least this many events, and on (to at most ten times as
        // many) until a snapshot has replayed events appended during its
        // walk: the walk of a few dozen objects is short, so on a quiet
        // machine the writer may append inside one only rarely.
        const EVENTS: u64 = 30_000;
        let writer = {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 1..=10 * EVENTS {
                    let (kind, obj) = change(i);
                    store.apply(kind, obj);
                    if i >= EVENTS && store.probes().snapshot_paths().0 > 0 {
                        break;
                    }
                }
            })
        };
        let mut snapshots = Vec::new();
        while !writer.is_finished() {
            keep_new(&mut snapshots, store.snapshot());
        }
        writer.join().unwrap();
        snapshots.push(store.snapshot());
        assert!(snapshots.len() > 2, "the reader raced the writer");
        assert!(
            store.probes().snapshot_paths().0 > 0,
            "some snapshot replayed events the writer appended during its walk"
        );

        // Replay the writer's changes to the position of each snapshot: the
        // snapshot must be exactly that state.
        let mut state = BTreeMap::new();
        let mut applied = 0;
        for snapshot in &snapshots {
            while applied < snapshot.seq {
                applied += 1;
                let (kind, obj) = change(applied);
                match kind {
                    EventKind::Deleted => state.remove(&obj.key),
                    _ => state.insert(obj.key.clone(), obj.resource_version.0),
                };
            }
            assert_eq!(
                contents(&snapshot.objects),
                state,
                "at seq {}",
                snapshot.seq
            );
            let expected_rv = if snapshot.seq == 0 {
                100
            } else {
                100 + snapshot.seq
            };
            assert_eq!(snapshot.resource_version, ResourceVersion(expected_rv));
        }
    }

    /// Relists with large differences race snapshots: every snapshot is
    /// the exact state at its ring position, and that position is never
    /// inside a unit (a snapshot that lands in one undoes it).
    #[test]
    fn snapshots_are_exact_and_never_inside_a_unit_while_relists_run() {
        let store = Arc::new(Store::new(configmaps(), 1_000_000));
        store.replace(Vec::new(), ResourceVersion(100));
        const KEYS: u64 = 3_000;
        const ROUNDS: u64 = 40;
        // Whether a snapshot lands inside a unit is up to the scheduler:
        // the writer goes on past ROUNDS until both snapshot paths have
        // run (bounded so that every event stays in the ring).
        const MAX_ROUNDS: u64 = 300;
        let both_paths = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let store = store.clone();
            let both_paths = both_paths.clone();
            std::thread::spawn(move || {
                let mut rv = 100;
                for round in 0..MAX_ROUNDS {
                    if round >= ROUNDS && both_paths.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    for i in 0..50 {
                        rv += 1;
                        store.apply(EventKind::Added, object(&format!("live-{i}"), rv, "{}"));
                    }
                    // Half the keys change sides every round: a unit of
                    // KEYS changes, written in several chunks.
                    rv += 1;
                    let list = (0..KEYS)
                        .filter(|i| (i + round) % 2 == 0)
                        .map(|i| object(&format!("k{i}"), rv, "{}"))
                        .chain((0..50).map(|i| {
                            let name = format!("live-{i}");
                            let current = store.get(&format!("ns/{name}")).unwrap();
                            object(&name, current.resource_version.0, "{}")
                        }))
                        .collect();
                    store.replace(list, ResourceVersion(rv));
                }
            })
        };
        let mut snapshots = Vec::new();
        while !writer.is_finished() {
            keep_new(&mut snapshots, store.snapshot());
            let (replayed, undone) = store.probes().snapshot_paths();
            if replayed > 0 && undone > 0 {
                both_paths.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        writer.join().unwrap();
        let (replayed, undone) = store.probes().snapshot_paths();
        assert!(
            replayed > 0 && undone > 0,
            "both snapshot paths ran: replayed {replayed}, undone {undone} of {}",
            snapshots.len()
        );

        let events = store.read_after(0, usize::MAX).unwrap();
        let mut state: HashMap<String, Arc<Object>> = HashMap::new();
        let mut applied = 0;
        let mut rv = ResourceVersion(100);
        for snapshot in &snapshots {
            while applied < snapshot.seq {
                let event = &events[applied as usize];
                redo(&mut state, event);
                if !event.resync || event.closes_unit() {
                    rv = event.resource_version;
                }
                applied += 1;
            }
            let inside = applied > 0 && {
                let last = &events[applied as usize - 1];
                last.resync && !last.closes_unit()
            };
            assert!(!inside, "snapshot at seq {} is inside a unit", snapshot.seq);
            assert_eq!(snapshot.resource_version, rv, "at seq {}", snapshot.seq);
            assert_eq!(
                contents(&snapshot.objects),
                contents(&sorted(state.values().cloned().collect())),
                "at seq {}",
                snapshot.seq
            );
        }
    }

    /// Snapshots at one ring position share one copy while it is in use;
    /// after a write the next is a copy of its own, exact at the new
    /// position; and a copy nobody uses any more is not kept.
    #[test]
    fn snapshots_at_one_position_share_a_copy_while_it_is_in_use() {
        let store = Store::new(configmaps(), 100);
        store.replace(
            vec![object("a", 1, "{}"), object("b", 2, "{}")],
            ResourceVersion(2),
        );
        let first = store.snapshot();
        let second = store.snapshot();
        assert!(
            Arc::ptr_eq(&first.objects, &second.objects),
            "no write in between: one copy"
        );
        // A write that leaves the resourceVersion where it was still moves
        // the position: the next snapshot is its own.
        store.apply(EventKind::Deleted, object("b", 2, "{}"));
        let without_b = store.snapshot();
        assert_eq!(without_b.resource_version, ResourceVersion(2));
        assert_eq!(
            contents(&without_b.objects),
            BTreeMap::from([("ns/a".to_owned(), 1)])
        );
        store.apply(EventKind::Added, object("b", 2, "{}"));
        store.apply(EventKind::Added, object("c", 3, "{}"));
        let third = store.snapshot();
        assert!(!Arc::ptr_eq(&first.objects, &third.objects));
        assert_eq!(
            contents(&third.objects),
            BTreeMap::from([
                ("ns/a".to_owned(), 1),
                ("ns/b".to_owned(), 2),
                ("ns/c".to_owned(), 3)
            ])
        );
        assert_eq!(
            (third.resource_version, third.seq),
            (ResourceVersion(3), store.head().seq)
        );
        assert_eq!(contents(&first.objects).len(), 2, "the first is unchanged");
        drop(third);
        assert!(
            store.snapshots.shared(&store.ring).is_none(),
            "a copy nobody uses is not kept"
        );
    }

    #[test]
    fn a_snapshot_at_an_older_rv_undoes_the_newer_events_exactly() {
        let store = Store::new(configmaps(), 100);
        store.replace(
            vec![object("a", 1, "{}"), object("b", 2, "{}")],
            ResourceVersion(2),
        );
        store.apply(EventKind::Modified, object("a", 3, r#"{"v":"3"}"#));
        store.apply(EventKind::Added, object("c", 4, "{}"));
        store.apply(EventKind::Deleted, object("b", 5, "{}"));
        store.apply(EventKind::Modified, object("a", 6, r#"{"v":"6"}"#));
        let at = |rv| contents(&store.snapshot_at(ResourceVersion(rv)).unwrap().objects);
        assert_eq!(
            at(2),
            BTreeMap::from([("ns/a".into(), 1), ("ns/b".into(), 2)])
        );
        assert_eq!(
            at(3),
            BTreeMap::from([("ns/a".into(), 3), ("ns/b".into(), 2)])
        );
        assert_eq!(
            at(4),
            BTreeMap::from([("ns/a".into(), 3), ("ns/b".into(), 2), ("ns/c".into(), 4)])
        );
        assert_eq!(
            at(5),
            BTreeMap::from([("ns/a".into(), 3), ("ns/c".into(), 4)])
        );
        assert_eq!(at(6), contents(&store.snapshot().objects));
        assert!(matches!(
            store.snapshot_at(ResourceVersion(7)),
            Err(ReadError::TooLarge { .. })
        ));
        assert!(matches!(
            store.snapshot_at(ResourceVersion(1)),
            Err(ReadError::Expired { .. })
        ));
    }
}

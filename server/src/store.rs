//! The per-type cache: objects in a `DashMap`, an ordered ring of recent
//! events, and the resourceVersion they add up to.
//!
//! The reflector is the only writer. Every write takes the ring's mutex,
//! updates the map, appends the event and bumps the sequence number, all
//! before releasing it. Readers take that mutex only to read positions and
//! copy `Arc`s out of the ring, never while walking the map, so a reader
//! never holds up the writer for longer than a few pointer copies.
//!
//! A consistent snapshot over the concurrent map follows from that order:
//! note the ring position P0, walk the map, note P1 and copy the ring's
//! events in (P0, P1]. Every event up to P0 was fully applied before the
//! walk began; any change the walk saw was appended by P1 (the writer
//! appends before it lets go of the mutex the reader needs to read P1); so
//! replaying (P0, P1] over the copy yields exactly the state at P1.
//!
//! The ring doubles as the fanout: each subscriber keeps a cursor (a
//! sequence number) into it, like a `tokio::sync::broadcast` receiver, and
//! resuming from a resourceVersion is finding the cursor for it. A cursor
//! that falls off the ring's tail has missed events: the subscriber is told
//! it lagged and must resume, so a slow subscriber costs no memory beyond
//! the shared ring.

use std::{collections::HashMap, collections::VecDeque, sync::Arc, time::Duration};

use dashmap::DashMap;
use parking_lot::Mutex;
use tokio::{sync::watch, time::Instant};

use crate::{
    object::{Object, ResourceVersion},
    resource::ResourceType,
};

/// What an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The object was created (or first seen).
    Added,
    /// The object changed.
    Modified,
    /// The object was deleted.
    Deleted,
    /// No object changed; the resourceVersion moved on.
    Bookmark,
}

/// One entry of the ring.
#[derive(Debug)]
pub struct Event {
    /// Position in the ring; consecutive, starting at 1.
    pub seq: u64,
    /// What happened.
    pub kind: EventKind,
    /// The resourceVersion the store is at once this event is applied.
    pub resource_version: ResourceVersion,
    /// The object after the event; for `Deleted`, its last state. `None`
    /// for bookmarks.
    pub object: Option<Arc<Object>>,
    /// The object before the event, if the store held it. Filters compare
    /// it with `object` to turn a change of match into ADDED or DELETED.
    pub previous: Option<Arc<Object>>,
    /// The JSON bytes of every event up to and including this one: how far
    /// behind a subscriber is, in bytes, is the head's total minus this.
    pub bytes_through: u64,
    /// When the event entered the ring, for the age bound.
    pub at: Instant,
    /// The event as an encoded `kubefanout.v1.WatchEvent`, made by the
    /// first subscriber that receives the event unchanged and shared by
    /// every other one (see `crate::codec`).
    pub encoded: std::sync::OnceLock<bytes::Bytes>,
}

impl Event {
    /// The JSON bytes of every event before this one.
    pub fn bytes_before(&self) -> u64 {
        self.bytes_through - self.object.as_ref().map_or(0, |o| o.json.len() as u64)
    }
}

/// Where the store is, as subscribers wait on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Head {
    /// Sequence number of the newest event (0 before any).
    pub seq: u64,
    /// The resourceVersion of the cached state.
    pub resource_version: ResourceVersion,
    /// Whether the first list has been applied.
    pub synced: bool,
    /// The JSON bytes of every event so far (see [`Event::bytes_through`]).
    pub bytes: u64,
}

/// A consistent copy of the store.
#[derive(Debug)]
pub struct Snapshot {
    /// The resourceVersion the copy is exact at.
    pub resource_version: ResourceVersion,
    /// The ring position of that state: events after it follow the snapshot.
    pub seq: u64,
    /// The objects, ordered by key.
    pub objects: Vec<Arc<Object>>,
}

/// Why a reader cannot start at or continue from a position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The ring no longer holds the events after this point.
    #[error("resourceVersion {asked} is too old: the oldest resumable resourceVersion is {oldest}")]
    Expired {
        /// The point asked for.
        asked: ResourceVersion,
        /// The oldest point the ring can resume from.
        oldest: ResourceVersion,
    },
    /// The store has not reached this resourceVersion.
    #[error("too large resource version: {asked}, current resource version is {current}")]
    TooLarge {
        /// The point asked for.
        asked: ResourceVersion,
        /// Where the store is.
        current: ResourceVersion,
    },
    /// The store has not finished its first list.
    #[error("the cache has not synced yet")]
    NotSynced,
}

/// Counters and positions for ListResources, health and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreStatus {
    /// Number of cached objects.
    pub objects: u64,
    /// Where the store is.
    pub head: Head,
    /// The oldest resourceVersion a watch can resume from, once synced.
    pub oldest_resumable: Option<ResourceVersion>,
    /// How many times a relist replaced the contents.
    pub relists: u64,
}

struct Ring {
    events: VecDeque<Arc<Event>>,
    seq: u64,
    bytes: u64,
    resource_version: ResourceVersion,
    /// The resourceVersion just before the oldest retained event: a resume
    /// from here or later finds every event it needs. `None` until synced.
    floor: Option<ResourceVersion>,
    relists: u64,
}

impl Ring {
    fn oldest_seq(&self) -> u64 {
        self.events.front().map_or(self.seq + 1, |e| e.seq)
    }
}

/// The cache of one resource type.
pub struct Store {
    resource: ResourceType,
    objects: DashMap<String, Arc<Object>>,
    ring: Mutex<Ring>,
    head: watch::Sender<Head>,
    limits: HistoryLimits,
}

/// How much history the ring keeps for resuming watches and for slow
/// subscribers: the newest `events`, none older than `age`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryLimits {
    /// At most this many events (at least 1).
    pub events: usize,
    /// Events older than this are dropped as new ones arrive.
    pub age: Duration,
}

impl Default for HistoryLimits {
    /// 10,000 events, and 75 s as the API server's watch cache keeps.
    fn default() -> Self {
        HistoryLimits {
            events: 10_000,
            age: Duration::from_secs(75),
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("resource", &self.resource)
            .field("head", &*self.head.borrow())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// An empty, unsynced store that keeps the last `capacity` events (for
    /// at most the default age) for resume and fanout.
    pub fn new(resource: ResourceType, capacity: usize) -> Self {
        Self::with_history(
            resource,
            HistoryLimits {
                events: capacity,
                ..HistoryLimits::default()
            },
        )
    }

    /// An empty, unsynced store keeping the history `limits` allow.
    pub fn with_history(resource: ResourceType, limits: HistoryLimits) -> Self {
        let limits = HistoryLimits {
            events: limits.events.max(1),
            ..limits
        };
        Store {
            resource,
            objects: DashMap::new(),
            ring: Mutex::new(Ring {
                events: VecDeque::with_capacity(limits.events.min(4096)),
                seq: 0,
                bytes: 0,
                resource_version: ResourceVersion::default(),
                floor: None,
                relists: 0,
            }),
            head: watch::Sender::new(Head::default()),
            limits,
        }
    }

    /// The resource type this store caches.
    pub fn resource(&self) -> &ResourceType {
        &self.resource
    }

    /// Applies one watch event from the API server.
    pub fn apply(&self, kind: EventKind, object: Object) {
        let object = Arc::new(object);
        let mut ring = self.ring.lock();
        let previous = match kind {
            EventKind::Deleted => self.objects.remove(&object.key).map(|(_, o)| o),
            _ => self.objects.insert(object.key.clone(), object.clone()),
        };
        let rv = object.resource_version.max(ring.resource_version);
        self.push(&mut ring, kind, rv, Some(object), previous);
    }

    /// Moves the store to `rv` without changing an object.
    pub fn bookmark(&self, rv: ResourceVersion) {
        let mut ring = self.ring.lock();
        if rv > ring.resource_version {
            self.push(&mut ring, EventKind::Bookmark, rv, None, None);
        }
    }

    /// Replaces the contents with the result of a LIST at `rv`.
    ///
    /// The first replace fills the empty store and marks it synced. Later
    /// ones publish the difference between the old and new contents as
    /// ordinary events, so subscribers converge without re-snapshotting:
    /// additions and modifications at the RVs their objects carry, in that
    /// order, then deletions at `rv`.
    pub fn replace(&self, objects: Vec<Object>, rv: ResourceVersion) {
        let mut ring = self.ring.lock();
        let rv = rv.max(ring.resource_version);
        let mut fresh: HashMap<String, Arc<Object>> = objects
            .into_iter()
            .map(|o| (o.key.clone(), Arc::new(o)))
            .collect();
        let first = ring.floor.is_none();
        let mut changes = Vec::new();
        self.objects.retain(|key, old| match fresh.remove(key) {
            Some(new) => {
                if new.json != old.json {
                    changes.push((EventKind::Modified, new.clone(), Some(old.clone())));
                    *old = new;
                }
                true
            }
            None => {
                changes.push((EventKind::Deleted, old.clone(), Some(old.clone())));
                false
            }
        });
        for (key, new) in fresh {
            self.objects.insert(key, new.clone());
            changes.push((EventKind::Added, new, None));
        }
        if first {
            ring.floor = Some(rv);
            ring.resource_version = rv;
            self.publish(&ring, true);
            return;
        }
        ring.relists += 1;
        // Each changed object carries the RV it last changed at, which is
        // past the old state: publishing the changes in that order, at those
        // RVs, keeps RVs unique, so a subscriber that hangs up halfway
        // resumes exactly. Deletions have no RV of their own; they come
        // last, at the list's RV.
        changes.sort_by_key(|(kind, object, _)| {
            (*kind == EventKind::Deleted, object.resource_version)
        });
        for (kind, object, previous) in changes {
            let at = match kind {
                EventKind::Deleted => rv,
                _ => object.resource_version.max(ring.resource_version).min(rv),
            };
            self.push(&mut ring, kind, at, Some(object), previous);
        }
        if ring.resource_version < rv {
            self.push(&mut ring, EventKind::Bookmark, rv, None, None);
        }
    }

    fn push(
        &self,
        ring: &mut Ring,
        kind: EventKind,
        rv: ResourceVersion,
        object: Option<Arc<Object>>,
        previous: Option<Arc<Object>>,
    ) {
        ring.seq += 1;
        ring.resource_version = rv;
        ring.bytes += object.as_ref().map_or(0, |o| o.json.len() as u64);
        let now = Instant::now();
        ring.events.push_back(Arc::new(Event {
            seq: ring.seq,
            kind,
            resource_version: rv,
            object,
            previous,
            bytes_through: ring.bytes,
            at: now,
            encoded: Default::default(),
        }));
        // Bounded by count, and by age like the API server's own history,
        // but the newest event always stays: resuming from the head works.
        while ring.events.len() > self.limits.events
            || (ring.events.len() > 1
                && ring
                    .events
                    .front()
                    .is_some_and(|e| now.duration_since(e.at) > self.limits.age))
        {
            if let Some(evicted) = ring.events.pop_front() {
                ring.floor = ring.floor.map(|f| f.max(evicted.resource_version));
            }
        }
        let synced = self.head.borrow().synced;
        self.publish(ring, synced);
    }

    fn publish(&self, ring: &Ring, synced: bool) {
        self.head.send_replace(Head {
            seq: ring.seq,
            resource_version: ring.resource_version,
            synced,
            bytes: ring.bytes,
        });
    }

    /// A receiver that sees every move of the head.
    pub fn subscribe(&self) -> watch::Receiver<Head> {
        self.head.subscribe()
    }

    /// Where the store is now.
    pub fn head(&self) -> Head {
        *self.head.borrow()
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// One object by key.
    pub fn get(&self, key: &str) -> Option<Arc<Object>> {
        self.objects.get(key).map(|o| o.clone())
    }

    /// A consistent copy of the whole store (see the module docs).
    pub fn snapshot(&self) -> Snapshot {
        loop {
            let p0 = self.ring.lock().seq;
            let mut copy: HashMap<String, Arc<Object>> = self
                .objects
                .iter()
                .map(|e| (e.key().clone(), e.value().clone()))
                .collect();
            let (p1, rv, replay) = {
                let ring = self.ring.lock();
                if ring.oldest_seq() > p0 + 1 {
                    // The events between P0 and P1 left the ring during the
                    // walk; walk again rather than return a torn copy.
                    continue;
                }
                let replay: Vec<Arc<Event>> = ring
                    .events
                    .iter()
                    .skip_while(|e| e.seq <= p0)
                    .cloned()
                    .collect();
                (ring.seq, ring.resource_version, replay)
            };
            for event in replay {
                if let Some(object) = &event.object {
                    match event.kind {
                        EventKind::Deleted => copy.remove(&object.key),
                        _ => copy.insert(object.key.clone(), object.clone()),
                    };
                }
            }
            let mut objects: Vec<Arc<Object>> = copy.into_values().collect();
            objects.sort_by(|a, b| a.key.cmp(&b.key));
            return Snapshot {
                resource_version: rv,
                seq: p1,
                objects,
            };
        }
    }

    /// The exact state at `rv`, rewound from the current state by undoing
    /// the ring's newer events (each holds the object it replaced). Fails
    /// as Expired once the ring no longer reaches back to `rv`.
    pub fn snapshot_at(&self, rv: ResourceVersion) -> Result<Snapshot, ReadError> {
        let now = self.snapshot();
        if rv > now.resource_version {
            return Err(ReadError::TooLarge {
                asked: rv,
                current: now.resource_version,
            });
        }
        let cursor = self.cursor_after(rv)?;
        let expired = |oldest| ReadError::Expired { asked: rv, oldest };
        let newer = self
            .read_after(cursor, (now.seq - cursor) as usize)
            .map_err(expired)?;
        let mut objects: HashMap<String, Arc<Object>> = now
            .objects
            .into_iter()
            .map(|o| (o.key.clone(), o))
            .collect();
        for event in newer.iter().rev() {
            let Some(object) = &event.object else {
                continue;
            };
            match &event.previous {
                Some(previous) => objects.insert(previous.key.clone(), previous.clone()),
                None => objects.remove(&object.key),
            };
        }
        let mut objects: Vec<Arc<Object>> = objects.into_values().collect();
        objects.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Snapshot {
            resource_version: rv,
            seq: cursor,
            objects,
        })
    }

    /// Up to `max` events after ring position `cursor`, or `Err(oldest)`
    /// with the oldest resumable resourceVersion when the ring has already
    /// dropped some of them.
    pub fn read_after(&self, cursor: u64, max: usize) -> Result<Vec<Arc<Event>>, ResourceVersion> {
        let ring = self.ring.lock();
        let oldest = ring.oldest_seq();
        if cursor + 1 < oldest {
            return Err(ring.floor.unwrap_or_default());
        }
        let skip = (cursor + 1 - oldest) as usize;
        Ok(ring.events.iter().skip(skip).take(max).cloned().collect())
    }

    /// The ring position from which a watch resuming after `rv` continues.
    pub fn cursor_after(&self, rv: ResourceVersion) -> Result<u64, ReadError> {
        let ring = self.ring.lock();
        let floor = ring.floor.ok_or(ReadError::NotSynced)?;
        if rv < floor {
            return Err(ReadError::Expired {
                asked: rv,
                oldest: floor,
            });
        }
        if rv > ring.resource_version {
            return Err(ReadError::TooLarge {
                asked: rv,
                current: ring.resource_version,
            });
        }
        let pending = ring
            .events
            .iter()
            .position(|e| e.resource_version > rv)
            .unwrap_or(ring.events.len());
        Ok(ring.oldest_seq() + pending as u64 - 1)
    }

    /// Counters and positions.
    pub fn status(&self) -> StoreStatus {
        let ring = self.ring.lock();
        StoreStatus {
            objects: self.objects.len() as u64,
            head: *self.head.borrow(),
            oldest_resumable: ring.floor,
            relists: ring.relists,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::object::{Transform, TypeMeta};

    pub(crate) fn configmaps() -> ResourceType {
        ResourceType {
            gvr: "v1/configmaps".parse().expect("a valid resource"),
            kind: "ConfigMap".into(),
            namespaced: true,
        }
    }

    pub(crate) fn object(name: &str, rv: u64, labels: &str) -> Object {
        let raw = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}","labels":{labels}}}}}"#
        );
        let meta = TypeMeta {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        Object::from_json(&raw, &meta, Transform::default()).unwrap()
    }

    fn contents(objects: &[Arc<Object>]) -> BTreeMap<String, u64> {
        objects
            .iter()
            .map(|o| (o.key.clone(), o.resource_version.0))
            .collect()
    }

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
        const EVENTS: u64 = 30_000;
        let writer = {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 1..=EVENTS {
                    let (kind, obj) = change(i);
                    store.apply(kind, obj);
                }
            })
        };
        let mut snapshots = Vec::new();
        while !writer.is_finished() {
            snapshots.push(store.snapshot());
        }
        writer.join().unwrap();
        snapshots.push(store.snapshot());
        assert!(snapshots.len() > 2, "the reader raced the writer");

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

    #[test]
    fn a_relist_publishes_the_difference_in_object_rv_order_then_deletions() {
        let store = Store::new(configmaps(), 100);
        store.replace(
            vec![object("a", 1, "{}"), object("b", 2, "{}")],
            ResourceVersion(5),
        );
        assert_eq!(store.head().seq, 0, "the first list publishes no events");
        store.replace(
            vec![
                object("b", 7, "{}"),
                object("c", 6, "{}"),
                object("d", 9, "{}"),
            ],
            ResourceVersion(10),
        );
        let events = store.read_after(0, 10).unwrap();
        let seen: Vec<(EventKind, &str, u64)> = events
            .iter()
            .map(|e| {
                (
                    e.kind,
                    e.object.as_ref().map_or("", |o| o.name.as_str()),
                    e.resource_version.0,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (EventKind::Added, "c", 6),
                (EventKind::Modified, "b", 7),
                (EventKind::Added, "d", 9),
                (EventKind::Deleted, "a", 10)
            ],
            "changes at their objects' RVs, in order, then deletions at the list RV"
        );
        // Resuming halfway continues exactly.
        let rest = store
            .read_after(store.cursor_after(ResourceVersion(7)).unwrap(), 10)
            .unwrap();
        assert_eq!(
            rest.iter()
                .map(|e| e.resource_version.0)
                .collect::<Vec<_>>(),
            [9, 10]
        );
        assert_eq!(store.status().relists, 1);
        let snapshot = store.snapshot();
        assert_eq!(
            contents(&snapshot.objects),
            BTreeMap::from([("ns/b".into(), 7), ("ns/c".into(), 6), ("ns/d".into(), 9)])
        );
        assert_eq!(snapshot.resource_version, ResourceVersion(10));
    }

    #[test]
    fn resume_points_are_exact_and_old_ones_expire() {
        let store = Store::new(configmaps(), 3);
        store.replace(Vec::new(), ResourceVersion(10));
        for rv in 11..=15 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        // The ring holds 13, 14, 15: resuming after 12 or later works.
        assert_eq!(
            store.cursor_after(ResourceVersion(11)),
            Err(ReadError::Expired {
                asked: ResourceVersion(11),
                oldest: ResourceVersion(12)
            })
        );
        let after = |rv| {
            let cursor = store.cursor_after(ResourceVersion(rv)).unwrap();
            store
                .read_after(cursor, 10)
                .unwrap()
                .iter()
                .map(|e| e.resource_version.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(after(12), [13, 14, 15]);
        assert_eq!(after(14), [15]);
        assert_eq!(after(15), Vec::<u64>::new());
        assert!(matches!(
            store.cursor_after(ResourceVersion(16)),
            Err(ReadError::TooLarge { .. })
        ));
        assert_eq!(store.read_after(0, 10).err(), Some(ResourceVersion(12)));
    }

    #[tokio::test(start_paused = true)]
    async fn history_is_bounded_by_age_as_well_as_count() {
        let store = Store::with_history(
            configmaps(),
            HistoryLimits {
                events: 100,
                age: Duration::from_secs(75),
            },
        );
        store.replace(Vec::new(), ResourceVersion(10));
        store.apply(EventKind::Added, object("old", 11, "{}"));
        tokio::time::advance(Duration::from_secs(60)).await;
        store.apply(EventKind::Added, object("mid", 12, "{}"));
        tokio::time::advance(Duration::from_secs(20)).await;
        store.apply(EventKind::Added, object("new", 13, "{}"));
        // "old" is 80 s old: gone, so resuming from before it is Expired.
        assert_eq!(store.status().oldest_resumable, Some(ResourceVersion(11)));
        assert!(matches!(
            store.cursor_after(ResourceVersion(10)),
            Err(ReadError::Expired { .. })
        ));
        assert_eq!(
            store
                .read_after(store.cursor_after(ResourceVersion(11)).unwrap(), 10)
                .unwrap()
                .len(),
            2
        );
        // However old, the newest event stays.
        tokio::time::advance(Duration::from_secs(600)).await;
        store.bookmark(ResourceVersion(14));
        assert_eq!(store.status().oldest_resumable, Some(ResourceVersion(13)));
        let applied: usize = [
            object("old", 11, "{}"),
            object("mid", 12, "{}"),
            object("new", 13, "{}"),
        ]
        .iter()
        .map(|o| o.json.len())
        .sum();
        assert_eq!(store.head().bytes, applied as u64, "bookmarks add no bytes");
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

    #[test]
    fn bookmarks_only_move_forward() {
        let store = Store::new(configmaps(), 10);
        store.replace(Vec::new(), ResourceVersion(10));
        store.bookmark(ResourceVersion(9));
        store.bookmark(ResourceVersion(10));
        assert_eq!(store.head().seq, 0);
        store.bookmark(ResourceVersion(12));
        assert_eq!(store.head().resource_version, ResourceVersion(12));
        assert_eq!(store.head().seq, 1);
    }
}

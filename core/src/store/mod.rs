//! The per-type cache: objects in a `DashMap`, an ordered ring of recent
//! events, and the resourceVersion they add up to.
//!
//! # Writers and readers
//!
//! The reflector is the only writer. Every write takes the ring's mutex,
//! updates the map, appends the event and bumps the sequence number, all
//! before releasing it. Readers take that mutex only to read positions and
//! copy `Arc`s out of the ring, never while walking the map, so a reader
//! never holds up the writer for longer than a few pointer copies. The
//! writer, in turn, never does O(objects) work or wakes subscribers while
//! it holds the mutex: a relist computes its difference before taking it,
//! and the new head is published (which wakes every waiting subscriber)
//! after releasing it. Publishing after the lock is safe because there is
//! one writer: heads are sent in the order the ring reached them.
//!
//! Between the two, the writer marks the indexed subscribers the new
//! events concern ([`crate::dispatch`]): marks precede the head that
//! includes their events, so a subscriber that sees a head and no mark
//! knows nothing up to that head concerns it.
//!
//! Lock order: the ring's mutex, then a map shard. Readers walk the map
//! without the mutex and take the mutex only once the walk is done.
//!
//! # Consistent snapshots
//!
//! A consistent snapshot over the concurrent map follows from that order:
//! note the ring position P0, walk the map, note P1 and copy the ring's
//! events in (P0, P1]. Every event up to P0 was fully applied before the
//! walk began; any change the walk saw was appended by P1 (the writer
//! appends before it lets go of the mutex the reader needs to read P1); so
//! replaying (P0, P1] over the copy yields exactly the state at P1. If P1
//! falls inside a re-sync unit that is still being written, the unit's
//! events up to P1 are undone again (each holds the object it replaced):
//! the snapshot is then the exact state just before the unit, and the unit
//! follows it whole.
//!
//! Snapshots at the same position share one copy: the last one taken is
//! remembered (weakly: only while someone still uses it) with its
//! position, and a snapshot that finds the ring still there, with no unit
//! open, takes it instead of walking the map again. Every write after the
//! first sync moves the position under the mutex, so an unchanged position
//! means unchanged contents. A restart herd, many subscribers asking at
//! once, then costs one walk and one sorted copy rather than one each.
//!
//! # Re-sync units and gaps
//!
//! After the API server lost history (a 410 after its restart, say), the
//! reflector relists at L and calls [`Store::replace`]. The changes made
//! upstream between the store's last resourceVersion S and L cannot be
//! replayed, not even by the API server. The store publishes the
//! difference between its old contents and the list as one **re-sync
//! unit**: every change at L with [`Event::resync`] set, then a closing
//! bookmark at L, also flagged. A subscriber applies the unit as a whole
//! (the states in between never existed upstream). The head's
//! resourceVersion stays at S until the unit is closed, so nobody is told L
//! before the unit that leads there is complete.
//!
//! The store records (S, L) as a [`Gap`]: a resume from an RV strictly
//! inside it is answered with [`ReadError::InGap`], because what happened
//! upstream in between is not known here; resumes from S or earlier get
//! the unit whole, and resumes from L or later are exact.
//!
//! # Fanout and history
//!
//! The ring doubles as the fanout: each subscriber keeps a cursor (a
//! sequence number) into it, like a `tokio::sync::broadcast` receiver, and
//! resuming from a resourceVersion is finding the cursor for it. History is
//! bounded by events, age and bytes ([`HistoryLimits`]); the newest event,
//! and every event of a unit still being written, always stay. A slow
//! subscriber costs no memory beyond the shared ring: once half the history
//! lies behind its cursor it is told it lagged and where to resume, while
//! the ring still holds what follows that point for the other half
//! ([`HistoryLimits::past_newer_half`]); a cursor that fell off the ring's
//! tail all the same (a reader the transport did not poll meanwhile) is
//! told where it got to, which is then Expired.

mod cursor;
mod probes;
mod readers;
mod relist;
mod ring;
mod snapshot;
mod unit;

use std::sync::{
    Arc,
    atomic::{AtomicU8, Ordering},
};

use dashmap::DashMap;
use parking_lot::Mutex;
use tokio::{
    sync::watch,
    time::{Duration, Instant},
};

pub(crate) use self::readers::Reader;
pub use self::{
    cursor::ReadError,
    readers::Behind,
    ring::{Head, HistoryLimits},
    snapshot::Snapshot,
    unit::Gap,
};
use self::{
    probes::Probes,
    readers::Readers,
    relist::{Change, difference, free_elsewhere},
    ring::Ring,
    snapshot::Snapshots,
    unit::{OpenUnit, UNIT_CHUNK},
};
use crate::{
    dispatch::{Dispatch, IndexedField},
    event::{Event, EventKind},
    object::{Object, ResourceVersion},
    resource::ResourceType,
};

/// Why a store's subscriptions end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    /// The server is stopping ([`Store::close_subscribers`]).
    ShuttingDown,
    /// The API server no longer serves the type ([`Store::close_removed`]).
    Removed,
}

/// [`Store::closing`]: subscriptions go on.
const OPEN: u8 = 0;
/// [`Store::closing`]: the server is stopping.
const SHUTTING_DOWN: u8 = 1;
/// [`Store::closing`]: the API server no longer serves the type.
const REMOVED: u8 = 2;

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
    /// The re-sync gaps still inside the history, oldest first.
    pub gaps: Vec<Gap>,
    /// The JSON bytes the history holds.
    pub history_bytes: u64,
}

/// The cache of one resource type.
pub struct Store {
    resource: ResourceType,
    objects: DashMap<String, Arc<Object>>,
    ring: Mutex<Ring>,
    /// The ring's bounds, readable without its lock.
    history: HistoryLimits,
    /// The last snapshot, for others at its position to share; taken after
    /// `ring` when both are held.
    snapshots: Snapshots,
    head: watch::Sender<Head>,
    dispatch: Arc<Dispatch>,
    /// Where each live subscriber has read to (for metrics only).
    readers: Arc<Readers>,
    /// Set once, when the server stops or the type goes (see
    /// [`Store::close_subscribers`]): [`OPEN`], [`SHUTTING_DOWN`] or
    /// [`REMOVED`].
    closing: AtomicU8,
    /// What the tests observe (nothing outside them).
    probes: Probes,
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
    /// at most the default age and bytes) for resume and fanout.
    pub fn new(resource: ResourceType, capacity: usize) -> Self {
        Self::with_history(
            resource,
            HistoryLimits {
                events: capacity,
                ..HistoryLimits::default()
            },
        )
    }

    /// An empty, unsynced store keeping the history `limits` allow, its
    /// subscribers indexed by the type's default fields.
    pub(crate) fn with_history(resource: ResourceType, limits: HistoryLimits) -> Self {
        let fields = IndexedField::for_type(&resource, &[])
            .expect("the default indexed fields are every type's own");
        Self::with_index(resource, limits, fields)
    }

    /// An empty, unsynced store keeping the history `limits` allow, its
    /// subscribers indexed by `fields` (see [`IndexedField::for_type`]).
    pub fn with_index(
        resource: ResourceType,
        limits: HistoryLimits,
        fields: Vec<IndexedField>,
    ) -> Self {
        Store {
            objects: DashMap::new(),
            ring: Mutex::new(Ring::new(limits)),
            history: limits,
            snapshots: Snapshots::default(),
            head: watch::Sender::new(Head::default()),
            dispatch: Arc::new(Dispatch::new(fields)),
            readers: Arc::default(),
            closing: AtomicU8::new(OPEN),
            resource,
            probes: Probes::default(),
        }
    }

    /// The resource type this store caches.
    pub fn resource(&self) -> &ResourceType {
        &self.resource
    }

    /// Applies one watch event from the API server.
    pub fn apply(&self, kind: EventKind, object: Object) {
        let object = Arc::new(object);
        let (event, head) = {
            let mut ring = self.ring.lock();
            let previous = match kind {
                EventKind::Deleted => self.objects.remove(&object.key).map(|(_, o)| o),
                _ => self.objects.insert(object.key.clone(), object.clone()),
            };
            let rv = object.resource_version.max(ring.resource_version);
            ring.resource_version = rv;
            let event = ring.push(kind, rv, Some(object), previous, false);
            (event, ring.head())
        };
        self.publish(&[event], head);
    }

    /// Moves the store to `rv` without changing an object.
    pub fn bookmark(&self, rv: ResourceVersion) {
        let (event, head) = {
            let mut ring = self.ring.lock();
            if rv <= ring.resource_version {
                return;
            }
            ring.resource_version = rv;
            let event = ring.push(EventKind::Bookmark, rv, None, None, false);
            (event, ring.head())
        };
        self.publish(&[event], head);
    }

    /// Replaces the contents with the result of a LIST at `rv`.
    ///
    /// The first replace fills the empty store and marks it synced. Later
    /// ones publish the difference between the old and new contents as one
    /// re-sync unit at `rv` and record the gap they skip (see the module
    /// docs). Objects whose state did not change produce nothing.
    ///
    /// The difference is computed before the ring's mutex is taken (the
    /// reflector is the only writer, so the map cannot change meanwhile),
    /// and the unit is written in chunks, so neither the walk over every
    /// object nor a large unit stalls readers.
    ///
    /// It runs in a `relist` span (the resource, the objects listed, the
    /// RV, whether it is the first, and after the comparison the changes
    /// and unchanged objects), and the unit in a `unit` span inside it:
    /// what the server's exported traces show of a relist.
    pub fn replace(&self, objects: Vec<Object>, rv: ResourceVersion) {
        let first = self.ring.lock().floor.is_none();
        let span = tracing::info_span!(
            "relist",
            resource = %self.resource().gvr,
            objects = objects.len(),
            %rv,
            first,
            changes = tracing::field::Empty,
            unchanged = tracing::field::Empty,
        );
        let _entered = span.enter();
        if first {
            self.objects.clear();
            for object in objects {
                self.objects.insert(object.key.clone(), Arc::new(object));
            }
            let head = {
                let mut ring = self.ring.lock();
                ring.floor = Some(rv);
                ring.resource_version = rv;
                ring.head()
            };
            self.head.send_replace(head);
            return;
        }
        let (mut changes, unchanged) = difference(&self.objects, objects, &self.probes);
        span.record("changes", changes.len());
        span.record("unchanged", unchanged.len());
        // Any order is exact (the unit is applied whole); key order makes
        // the stream easy to read and to test.
        changes.sort_by(|a, b| a.1.key.cmp(&b.1.key));
        self.publish_unit(changes, rv);
        free_elsewhere(unchanged);
    }

    /// [`replace`](Self::replace) on a blocking thread, in the caller's
    /// span: after the first, a replace compares every object
    /// (O(objects)), and must not hold one of the runtime's few workers
    /// (and with them other types' writers and subscribers). The caller
    /// is the store's one writer and waits here, so nothing else writes
    /// meanwhile. A panic in it is resumed in the caller.
    pub async fn replace_blocking(self: &Arc<Self>, objects: Vec<Object>, rv: ResourceVersion) {
        let (store, span) = (self.clone(), tracing::Span::current());
        let replaced =
            tokio::task::spawn_blocking(move || span.in_scope(|| store.replace(objects, rv))).await;
        if let Err(err) = replaced
            && err.is_panic()
        {
            std::panic::resume_unwind(err.into_panic());
        }
    }

    /// Applies a re-sync unit received whole from an upstream kube-fanout
    /// (a tier's parent): `changes`, all at `rv`, are published as one
    /// unit at `rv` in the order given, and the gap from the store's RV to
    /// `rv` is recorded. Fed the parent's every event, the store's RV is
    /// the parent's before its unit, so the gap is the parent's own; a
    /// unit with no changes still records it.
    ///
    /// Only after the first [`replace`](Self::replace): a unit changes a
    /// synced state. The map is read outside the ring's mutex for what
    /// each change replaces, as [`replace`](Self::replace) does: the feed
    /// is the only writer.
    pub fn apply_unit(&self, changes: Vec<(EventKind, Object)>, rv: ResourceVersion) {
        let changes = changes
            .into_iter()
            .map(|(kind, object)| {
                let previous = self.objects.get(&object.key).map(|o| o.clone());
                (kind, Arc::new(object), previous)
            })
            .collect();
        self.publish_unit(changes, rv);
    }

    /// Writes a relist's difference as one re-sync unit at `rv`.
    fn publish_unit(&self, changes: Vec<Change>, rv: ResourceVersion) {
        let _span = tracing::info_span!("unit", changes = changes.len(), %rv).entered();
        let mut ring = self.ring.lock();
        ring.relists += 1;
        let before = ring.resource_version;
        if rv <= before && changes.is_empty() {
            return;
        }
        let rv = rv.max(before);
        if before < rv {
            ring.gaps.push_back(Gap {
                after: before,
                until: rv,
            });
        }
        if changes.is_empty() {
            // An empty unit: nothing differs, but the history between S and
            // L is still lost, and subscribers are told so.
            ring.resource_version = rv;
            let close = ring.push(EventKind::Bookmark, rv, None, None, true);
            let head = ring.head();
            drop(ring);
            self.publish(&[close], head);
            return;
        }
        ring.open_unit = Some(OpenUnit {
            first_seq: ring.seq + 1,
        });
        let mut changes = changes.into_iter().peekable();
        let mut chunk = Vec::with_capacity(UNIT_CHUNK.min(changes.len()));
        while changes.peek().is_some() {
            for (kind, object, previous) in changes.by_ref().take(UNIT_CHUNK) {
                if kind == EventKind::Deleted {
                    self.objects.remove(&object.key);
                } else {
                    self.objects.insert(object.key.clone(), object.clone());
                }
                chunk.push(ring.push(kind, rv, Some(object), previous, true));
            }
            // Let readers and the head move on between chunks; the head
            // still says `before`, so nobody is told `rv` yet.
            let head = ring.head();
            drop(ring);
            self.publish(&chunk, head);
            chunk.clear();
            ring = self.ring.lock();
        }
        ring.resource_version = rv;
        let close = ring.push(EventKind::Bookmark, rv, None, None, true);
        ring.open_unit = None;
        // Evictions held back while the unit was open catch up now.
        ring.evict(Instant::now());
        let head = ring.head();
        drop(ring);
        self.publish(&[close], head);
    }

    /// Makes `events`, just appended, known to subscribers: marks the
    /// indexed ones they concern, then publishes `head`, which includes
    /// them. Called after the ring's mutex is released; the order of the
    /// two is what lets an indexed subscriber skip (see `crate::dispatch`).
    fn publish(&self, events: &[Arc<Event>], head: Head) {
        self.dispatch.mark(events);
        self.head.send_replace(head);
    }

    /// The registry of indexed subscribers the writer marks.
    pub fn dispatch(&self) -> &Arc<Dispatch> {
        &self.dispatch
    }

    /// Registers a live subscriber's read position (see [`Store::behind`]).
    pub(crate) fn reader(&self) -> Reader {
        self.readers.register()
    }

    /// How far behind the head the slowest live subscribers are.
    pub fn behind(&self) -> Behind {
        self.readers.behind(&self.head.borrow())
    }

    /// A receiver that sees every move of the head.
    pub fn subscribe(&self) -> watch::Receiver<Head> {
        self.head.subscribe()
    }

    /// Ends every subscription of this store, open or yet to open, with
    /// `ShuttingDown` at its next step: the server is stopping.
    ///
    /// A subscription checks `Store::is_closing` before each delivery and
    /// again after it reads the head (before it reads the ring or waits),
    /// and waits on the head (unindexed) or on its mark's wake-up
    /// (indexed). The flag is set before both are woken (a change of the
    /// head's version, which the read after it either takes, then seeing
    /// the flag, or leaves for the wait; every registered mark's waker,
    /// which keeps the wake-up for a subscriber not yet waiting), so none
    /// sleeps through it; one registering after the wake-ups checks it
    /// after registering. This replaces a cancellation future per
    /// subscription: checking that took a mutex shared by every subscriber
    /// on each delivery.
    pub fn close_subscribers(&self) {
        self.close(SHUTTING_DOWN);
    }

    /// Ends every subscription of this store, open or yet to open, with
    /// `WatchError::Removed`: the API server no longer serves the type
    /// (its CRD was deleted). Otherwise as [`Store::close_subscribers`].
    pub fn close_removed(&self) {
        self.close(REMOVED);
    }

    /// Sets the closing reason (the first one set stays) and wakes every
    /// subscription (see [`Store::close_subscribers`]).
    fn close(&self, why: u8) {
        let _ = self
            .closing
            .compare_exchange(OPEN, why, Ordering::AcqRel, Ordering::Acquire);
        self.head.send_modify(|_| {});
        self.dispatch.wake_all();
    }

    /// Whether [`Store::close_subscribers`] or [`Store::close_removed`]
    /// was called.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire) != OPEN
    }

    /// Why the store's subscriptions end, once they do.
    pub(crate) fn closing(&self) -> Option<Closing> {
        match self.closing.load(Ordering::Acquire) {
            OPEN => None,
            REMOVED => Some(Closing::Removed),
            _ => Some(Closing::ShuttingDown),
        }
    }

    /// Waits until the store has synced (or is closing), for at most
    /// `timeout`: a request on a type not synced yet is answered within the
    /// bound, never held open until an upstream that may never answer
    /// does. On time-out [`ReadError::NotSynced`].
    pub async fn wait_synced(&self, timeout: Duration) -> Result<(), ReadError> {
        let mut head = self.subscribe();
        let synced = head.wait_for(|h| h.synced || self.is_closing());
        match tokio::time::timeout(timeout, synced).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(ReadError::NotSynced),
        }
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

    /// A consistent copy of the whole store (see the module docs), shared
    /// with the last one taken if that one is still in use and no write
    /// came since.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshots.take(&self.ring, &self.objects, &self.probes)
    }

    /// The exact state at `rv`, rewound from the current state by undoing
    /// the ring's newer events. Fails as Expired once the ring no longer
    /// reaches back to `rv`, and as InGap inside a re-sync gap.
    pub(crate) fn snapshot_at(&self, rv: ResourceVersion) -> Result<Snapshot, ReadError> {
        let now = self.snapshot();
        if rv > now.resource_version {
            return Err(ReadError::TooLarge {
                asked: rv,
                current: now.resource_version,
            });
        }
        let cursor = self.cursor_after(rv)?;
        let newer = self
            .read_after(cursor, now.seq.saturating_sub(cursor) as usize)
            .map_err(|oldest| ReadError::Expired { asked: rv, oldest })?;
        Ok(snapshot::rewind(&now, rv, cursor, &newer))
    }

    /// Up to `max` events after ring position `cursor`, or `Err(oldest)`
    /// with the oldest resumable resourceVersion when the ring has already
    /// dropped some of them.
    pub fn read_after(&self, cursor: u64, max: usize) -> Result<Vec<Arc<Event>>, ResourceVersion> {
        self.probes.read();
        self.ring.lock().read_after(cursor, max)
    }

    /// The history this store keeps.
    pub fn history(&self) -> HistoryLimits {
        self.history
    }

    /// Whether a reader that has read up to ring position `from` (`from_bytes`
    /// of JSON) is past the newer half of the history (see
    /// [`HistoryLimits::past_newer_half`]), or the ring has dropped what it
    /// needs next.
    pub(crate) fn past_newer_half(&self, from: u64, from_bytes: u64) -> bool {
        self.ring
            .lock()
            .past_newer_half(from, from_bytes, Instant::now())
    }

    /// The ring position from which a watch resuming after `rv` continues.
    pub(crate) fn cursor_after(&self, rv: ResourceVersion) -> Result<u64, ReadError> {
        self.ring.lock().cursor_after(rv)
    }

    /// Counters and positions.
    pub fn status(&self) -> StoreStatus {
        let ring = self.ring.lock();
        StoreStatus {
            objects: self.objects.len() as u64,
            head: ring.head(),
            oldest_resumable: ring.floor,
            relists: ring.relists,
            gaps: ring.gaps.iter().copied().collect(),
            history_bytes: ring.retained_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{configmaps, empty_store, object};

    /// The dispatch tests prove a subscriber did not read the ring by the
    /// count of ring reads staying put: the count must move on a read, or
    /// those checks could not fail.
    #[test]
    fn every_ring_read_is_counted_for_the_tests_that_prove_none_happened() {
        let store = empty_store();
        store.apply(EventKind::Added, object("a", 2, "{}"));
        let before = store.probes().reads();
        assert_eq!(store.read_after(0, 10).map(|e| e.len()), Ok(1));
        assert_eq!(store.probes().reads(), before + 1);
    }

    /// The plain accessors: object count, lookup by key, and the debug
    /// form that logs show (the resource and the head).
    #[test]
    fn accessors_report_the_cached_objects_and_the_head() {
        let store = Store::new(configmaps(), 10);
        assert!(store.is_empty());
        store.replace(
            vec![object("a", 1, "{}"), object("b", 2, "{}")],
            ResourceVersion(2),
        );
        assert_eq!((store.len(), store.is_empty()), (2, false));
        assert_eq!(
            store.get("ns/a").map(|o| o.resource_version),
            Some(ResourceVersion(1))
        );
        assert!(store.get("ns/c").is_none());
        let debug = format!("{store:?}");
        assert!(
            debug.contains("ConfigMap") && debug.contains("resource_version: ResourceVersion(2)"),
            "{debug}"
        );
    }

    /// A parent's unit arrives at a leaf's store as the same unit: its
    /// changes in its order, each with the state it replaces, all at its
    /// RV and flagged, closed by a flagged bookmark, and the gap from the
    /// store's RV to it recorded; an empty unit records its gap too.
    #[test]
    fn a_unit_from_upstream_is_published_whole_with_its_gap() {
        use crate::fixtures::seen;
        let store = Store::new(configmaps(), 100);
        store.replace(
            vec![object("a", 2, "{}"), object("b", 3, "{}")],
            ResourceVersion(3),
        );
        store.bookmark(ResourceVersion(5));
        let before = store.head();
        store.apply_unit(
            vec![
                (EventKind::Deleted, object("a", 2, "{}")),
                (EventKind::Modified, object("b", 8, r#"{"x":"y"}"#)),
                (EventKind::Added, object("c", 7, "{}")),
            ],
            ResourceVersion(9),
        );
        let events = store.read_after(before.seq, 10).unwrap();
        assert_eq!(
            seen(&events),
            [
                (EventKind::Deleted, "a", 9, true),
                (EventKind::Modified, "b", 9, true),
                (EventKind::Added, "c", 9, true),
                (EventKind::Bookmark, "", 9, true),
            ]
        );
        let replaced: Vec<_> = events
            .iter()
            .map(|e| e.previous.as_ref().map(|p| p.resource_version.0))
            .collect();
        assert_eq!(replaced, [Some(2), Some(3), None, None]);
        let keys: Vec<_> = store
            .snapshot()
            .objects
            .iter()
            .map(|o| o.key.clone())
            .collect();
        assert_eq!(keys, ["ns/b", "ns/c"]);
        assert_eq!(store.head().resource_version, ResourceVersion(9));
        store.apply_unit(Vec::new(), ResourceVersion(12));
        assert_eq!(
            store.status().gaps,
            [
                Gap {
                    after: ResourceVersion(5),
                    until: ResourceVersion(9)
                },
                Gap {
                    after: ResourceVersion(9),
                    until: ResourceVersion(12)
                }
            ]
        );
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

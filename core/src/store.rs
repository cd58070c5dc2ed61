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
//! and every event of a unit still being written, always stay. A cursor
//! that falls off the ring's tail has missed events: the subscriber is told
//! it lagged and where to resume, so a slow subscriber costs no memory
//! beyond the shared ring.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use dashmap::DashMap;
use parking_lot::Mutex;
use tokio::{sync::watch, time::Instant};

use crate::{
    dispatch::{Dispatch, IndexedField},
    event::{Event, EventKind},
    object::{Object, ResourceVersion},
    resource::ResourceType,
};

/// Where the store is, as subscribers wait on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Head {
    /// Sequence number of the newest event (0 before any).
    pub seq: u64,
    /// The resourceVersion of the cached state, as of the last finished
    /// unit: while a re-sync unit is being written this stays at the RV
    /// before it.
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
    /// The point lies inside a re-sync gap: what happened upstream between
    /// the gap's ends is not known here.
    #[error(
        "resourceVersion {asked} lies between {} and {}, which this replica re-synced over \
         without seeing the changes in between; take a new snapshot",
        .gap.after, .gap.until
    )]
    InGap {
        /// The point asked for.
        asked: ResourceVersion,
        /// The gap it lies in.
        gap: Gap,
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
    /// The re-sync gaps still inside the history, oldest first.
    pub gaps: Vec<Gap>,
    /// The JSON bytes the history holds.
    pub history_bytes: u64,
}

/// A re-sync unit being written.
#[derive(Debug, Clone, Copy)]
struct OpenUnit {
    /// Its first event.
    first_seq: u64,
}

struct Ring {
    events: VecDeque<Arc<Event>>,
    seq: u64,
    bytes: u64,
    /// The resourceVersion of the last finished unit (see [`Head`]).
    resource_version: ResourceVersion,
    /// The resourceVersion just before the oldest retained event: a resume
    /// from here or later finds every event it needs. `None` until synced.
    floor: Option<ResourceVersion>,
    relists: u64,
    gaps: VecDeque<Gap>,
    open_unit: Option<OpenUnit>,
}

impl Ring {
    fn oldest_seq(&self) -> u64 {
        self.events.front().map_or(self.seq + 1, |e| e.seq)
    }

    fn head(&self) -> Head {
        Head {
            seq: self.seq,
            resource_version: self.resource_version,
            synced: self.floor.is_some(),
            bytes: self.bytes,
        }
    }

    /// The bytes the retained events carry.
    fn retained_bytes(&self) -> u64 {
        self.events
            .front()
            .map_or(0, |e| self.bytes - e.bytes_before())
    }

    /// The gap `rv` lies in, if any.
    fn gap_of(&self, rv: ResourceVersion) -> Option<Gap> {
        self.gaps.iter().find(|g| g.contains(rv)).copied()
    }
}

/// How many changes of a re-sync unit are written per hold of the ring's
/// mutex: readers and the head move on between chunks.
const UNIT_CHUNK: usize = 512;

/// The most threads a relist's comparison is split over.
const RELIST_THREADS: usize = 4;

/// The smallest list whose comparison is split over threads: below it a
/// thread's start costs more than it saves.
const RELIST_PARALLEL_FROM: usize = 8192;

/// The cache of one resource type.
pub struct Store {
    resource: ResourceType,
    objects: DashMap<String, Arc<Object>>,
    ring: Mutex<Ring>,
    /// Taken after `ring` when both are held.
    shared: Mutex<Option<SharedSnapshot>>,
    head: watch::Sender<Head>,
    dispatch: Arc<Dispatch>,
    /// Set once, when the server stops (see [`Store::close_subscribers`]).
    closing: AtomicBool,
    limits: HistoryLimits,
    /// Ring reads, so tests prove a subscriber did not read.
    #[cfg(test)]
    pub(crate) reads: std::sync::atomic::AtomicU64,
    /// Which snapshot paths ran, so the racing tests prove they were taken.
    #[cfg(test)]
    paths: tests::SnapshotPaths,
    /// The threads the last relist's comparison ran on.
    #[cfg(test)]
    comparison_threads: std::sync::atomic::AtomicUsize,
}

/// How much history the ring keeps for resuming watches and for slow
/// subscribers: the newest `events`, none older than `age`, at most
/// `bytes` of objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryLimits {
    /// At most this many events; the newest always stays, so 0 keeps one
    /// as 1 does.
    pub events: usize,
    /// Events older than this are dropped as new ones arrive.
    pub age: Duration,
    /// The objects of the retained events take at most this many bytes of
    /// JSON (the newest event always stays).
    pub bytes: u64,
}

impl Default for HistoryLimits {
    /// 10,000 events, 75 s as the API server's watch cache keeps, 256 MiB.
    fn default() -> Self {
        HistoryLimits {
            events: 10_000,
            age: Duration::from_secs(75),
            bytes: 256 << 20,
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

/// One change of a relist's difference: the kind, the new (or, for a
/// deletion, last) state and the state it replaces.
type Change = (EventKind, Arc<Object>, Option<Arc<Object>>);

/// Frees a relist's unchanged copies (most of a large relist) on a thread
/// of their own: freeing 100,000 objects costs about as much as finding
/// them unchanged, and the writer, behind which live events queue, has
/// better things to do. Relists are rare, so a thread each is cheap; if
/// none can be had, the caller frees them.
fn free_elsewhere(garbage: Vec<Object>) {
    if garbage.is_empty() {
        return;
    }
    let span = tracing::debug_span!("free_relist", objects = garbage.len());
    let spawned = std::thread::Builder::new()
        .name("free-relist".into())
        .spawn(move || {
            span.in_scope(|| {
                lower_this_threads_priority();
                drop(garbage)
            })
        });
    // Without a thread the closure, objects and all, is dropped here.
    if let Err(err) = spawned {
        tracing::debug!(error = %err, "freed a relist's copies on the writer");
    }
}

/// Gives the calling thread the lowest CPU priority (nice 19). Freeing a
/// relist's copies (a 100,000-object list: tens of milliseconds) is
/// needed by nobody soon, while the unit it follows is being written to
/// every subscriber at that moment; at nice 19 the freeing gets about 1.5 %
/// of a core the subscribers' tasks want and all of an idle one. On Linux
/// a nice value belongs to a thread, so only this one is lowered; where it
/// cannot be (other systems, or a refused call) the thread runs as it is.
fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    if let Err(err) =
        rustix::process::setpriority_process(Some(rustix::thread::gettid()), LOWEST_PRIORITY)
    {
        tracing::debug!(error = %err, "could not lower the freeing thread's priority");
    }
}

/// The highest nice value: the lowest priority a thread can be given.
#[cfg(target_os = "linux")]
const LOWEST_PRIORITY: i32 = 19;

/// A listed object that differs from the store: its index in the list,
/// and the state it replaces (none: the store does not hold it).
type Changed = (usize, Option<Arc<Object>>);

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
    pub fn with_history(resource: ResourceType, limits: HistoryLimits) -> Self {
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
            ring: Mutex::new(Ring {
                events: VecDeque::with_capacity(limits.events.min(4096)),
                seq: 0,
                bytes: 0,
                resource_version: ResourceVersion::default(),
                floor: None,
                relists: 0,
                gaps: VecDeque::new(),
                open_unit: None,
            }),
            shared: Mutex::default(),
            head: watch::Sender::new(Head::default()),
            dispatch: Arc::new(Dispatch::new(fields)),
            closing: AtomicBool::new(false),
            limits,
            resource,
            #[cfg(test)]
            reads: Default::default(),
            #[cfg(test)]
            paths: Default::default(),
            #[cfg(test)]
            comparison_threads: Default::default(),
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
            let event = self.push(&mut ring, kind, rv, Some(object), previous, false);
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
            let event = self.push(&mut ring, EventKind::Bookmark, rv, None, None, false);
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
    pub fn replace(&self, objects: Vec<Object>, rv: ResourceVersion) {
        if self.ring.lock().floor.is_none() {
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
        let (mut changes, unchanged) = self.difference(objects);
        // Any order is exact (the unit is applied whole); key order makes
        // the stream easy to read and to test.
        changes.sort_by(|a, b| a.1.key.cmp(&b.1.key));
        self.publish_unit(changes, rv);
        free_elsewhere(unchanged);
    }

    /// What a relist to `listed` changes. One lookup in the map per listed
    /// object (its resourceVersion and digest compared, see
    /// [`Object::same_state`]), and an allocation only for an object that
    /// changed; the listed keys are indexed only when the lookups found
    /// fewer objects than the store holds, that is when something was
    /// deleted. This relies on a LIST naming each key once, as the API
    /// server's does (one etcd key per namespace and name). The map is read
    /// one shard lock at a time; the reflector, the only writer, is the
    /// caller, so nothing changes underneath.
    ///
    /// Returns the changes, and the listed objects that are unchanged (for
    /// the caller to free once the changes are out).
    fn difference(&self, listed: Vec<Object>) -> (Vec<Change>, Vec<Object>) {
        let (changed, found) = self.changed(&listed);
        let mut changes: Vec<Change> = Vec::with_capacity(changed.len());
        if found < self.objects.len() {
            let keys: HashSet<&str> = listed.iter().map(|o| o.key.as_str()).collect();
            for entry in self.objects.iter() {
                if !keys.contains(entry.key().as_str()) {
                    let old = entry.value();
                    changes.push((EventKind::Deleted, old.clone(), Some(old.clone())));
                }
            }
        }
        // The changed objects are taken out from the highest index down, so
        // each `swap_remove` fills its hole with an unchanged object (every
        // changed one above it is already out) and what is left is exactly
        // the unchanged ones: O(changes) moves, not one per listed object.
        let mut unchanged = listed;
        for (index, old) in changed.into_iter().rev() {
            let new = Arc::new(unchanged.swap_remove(index));
            changes.push(match old {
                Some(old) => (EventKind::Modified, new, Some(old)),
                None => (EventKind::Added, new, None),
            });
        }
        (changes, unchanged)
    }

    /// The listed objects that changed, by index in ascending order, each
    /// with the state it replaces (none: it is new), and how many listed
    /// objects the store holds. The lookups are independent reads of the
    /// map, and a large list's are split over the machine's cores (at most
    /// [`RELIST_THREADS`]): each lookup waits on memory (the map's bucket,
    /// the stored object), and live events queue behind the relist's
    /// writer meanwhile, while the subscribers' tasks, with nothing new to
    /// send, leave the other cores idle.
    fn changed(&self, listed: &[Object]) -> (Vec<Changed>, usize) {
        // The core count is read (from the cgroup's files, on Linux) only
        // for a list large enough to split.
        let threads = if listed.len() < RELIST_PARALLEL_FROM {
            1
        } else {
            std::thread::available_parallelism()
                .map_or(1, usize::from)
                .min(RELIST_THREADS)
        };
        if threads == 1 {
            #[cfg(test)]
            self.comparison_threads
                .store(1, std::sync::atomic::Ordering::Relaxed);
            return self.changed_in(listed, 0);
        }
        let span = tracing::Span::current();
        let size = listed.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let mut parts = listed.chunks(size).enumerate();
            let mine = parts.next().map_or(&[][..], |(_, part)| part);
            let others: Vec<_> = parts
                .map(|(i, part)| {
                    let span = span.clone();
                    let offset = i * size;
                    let spawned = std::thread::Builder::new()
                        .name("relist-diff".into())
                        .spawn_scoped(scope, move || {
                            span.in_scope(|| self.changed_in(part, offset))
                        });
                    // Without a thread, this part is compared here, after
                    // this thread's own.
                    spawned.map_err(|_| (part, offset))
                })
                .collect();
            #[cfg(test)]
            self.comparison_threads.store(
                1 + others.iter().filter(|o| o.is_ok()).count(),
                std::sync::atomic::Ordering::Relaxed,
            );
            let (mut changed, mut found) = self.changed_in(mine, 0);
            for other in others {
                let (part_changed, part_found) = match other {
                    Ok(thread) => thread
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                    Err((part, offset)) => self.changed_in(part, offset),
                };
                changed.extend(part_changed);
                found += part_found;
            }
            (changed, found)
        })
    }

    /// [`Store::changed`] of `listed`, on this thread; its indices start
    /// at `offset`.
    fn changed_in(&self, listed: &[Object], offset: usize) -> (Vec<Changed>, usize) {
        let mut changed = Vec::new();
        let mut found = 0;
        for (i, new) in listed.iter().enumerate() {
            match self.objects.get(&new.key) {
                Some(old) => {
                    found += 1;
                    if !new.same_state(&old) {
                        changed.push((offset + i, Some(old.clone())));
                    }
                }
                None => changed.push((offset + i, None)),
            }
        }
        (changed, found)
    }

    /// Writes a relist's difference as one re-sync unit at `rv`.
    fn publish_unit(&self, changes: Vec<Change>, rv: ResourceVersion) {
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
            let close = self.push(&mut ring, EventKind::Bookmark, rv, None, None, true);
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
                chunk.push(self.push(&mut ring, kind, rv, Some(object), previous, true));
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
        let close = self.push(&mut ring, EventKind::Bookmark, rv, None, None, true);
        ring.open_unit = None;
        // Evictions held back while the unit was open catch up now.
        self.evict(&mut ring, Instant::now());
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

    fn push(
        &self,
        ring: &mut Ring,
        kind: EventKind,
        rv: ResourceVersion,
        object: Option<Arc<Object>>,
        previous: Option<Arc<Object>>,
        resync: bool,
    ) -> Arc<Event> {
        ring.seq += 1;
        ring.bytes += object.as_ref().map_or(0, |o| o.json.len() as u64);
        let now = Instant::now();
        let event = Arc::new(Event {
            seq: ring.seq,
            kind,
            resource_version: rv,
            object,
            previous,
            resync,
            bytes_through: ring.bytes,
            at: now,
            encoded: Default::default(),
        });
        ring.events.push_back(event.clone());
        self.evict(ring, now);
        event
    }

    /// Drops the oldest events past the history limits. The newest event
    /// always stays (resuming from the head works), and so does every event
    /// of an open unit (a snapshot taken meanwhile undoes them).
    fn evict(&self, ring: &mut Ring, now: Instant) {
        let limits = &self.limits;
        while let Some(front) = ring.events.front() {
            let over = ring.events.len() > limits.events
                || now.duration_since(front.at) > limits.age
                || ring.retained_bytes() > limits.bytes;
            let pinned =
                ring.events.len() == 1 || ring.open_unit.is_some_and(|u| front.seq >= u.first_seq);
            if !over || pinned {
                break;
            }
            let evicted_rv = front.resource_version;
            ring.events.pop_front();
            ring.floor = ring.floor.map(|f| f.max(evicted_rv));
        }
        // A gap entirely below the floor is answered as Expired anyway.
        if let Some(floor) = ring.floor {
            while ring.gaps.front().is_some_and(|g| g.until <= floor) {
                ring.gaps.pop_front();
            }
        }
    }

    /// The registry of indexed subscribers the writer marks.
    pub fn dispatch(&self) -> &Arc<Dispatch> {
        &self.dispatch
    }

    /// A receiver that sees every move of the head.
    pub fn subscribe(&self) -> watch::Receiver<Head> {
        self.head.subscribe()
    }

    /// Ends every subscription of this store, open or yet to open, with
    /// `ShuttingDown` at its next step: the server is stopping.
    ///
    /// A subscription checks [`Store::is_closing`] before each delivery and
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
        self.closing.store(true, Ordering::Release);
        self.head.send_modify(|_| {});
        self.dispatch.wake_all();
    }

    /// Whether [`Store::close_subscribers`] was called.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
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
        if let Some(shared) = self.shared_snapshot() {
            return shared;
        }
        loop {
            let p0 = self.ring.lock().seq;
            let walked: Vec<Arc<Object>> = self.objects.iter().map(|e| e.value().clone()).collect();
            let (p1, rv, replay, open_unit, synced) = {
                let ring = self.ring.lock();
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
            #[cfg(test)]
            self.paths.record(p1 > p0, open_unit.is_some());
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
                *self.shared.lock() = Some(SharedSnapshot {
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
    fn shared_snapshot(&self) -> Option<Snapshot> {
        let ring = self.ring.lock();
        let shared = self.shared.lock();
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

    /// The exact state at `rv`, rewound from the current state by undoing
    /// the ring's newer events. Fails as Expired once the ring no longer
    /// reaches back to `rv`, and as InGap inside a re-sync gap.
    pub fn snapshot_at(&self, rv: ResourceVersion) -> Result<Snapshot, ReadError> {
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
        let mut objects: HashMap<String, Arc<Object>> = now
            .objects
            .iter()
            .map(|o| (o.key.clone(), o.clone()))
            .collect();
        for event in newer.iter().rev().filter(|e| e.seq <= now.seq) {
            undo(&mut objects, event);
        }
        Ok(Snapshot {
            resource_version: rv,
            seq: cursor,
            objects: sorted(objects.into_values().collect()),
        })
    }

    /// Up to `max` events after ring position `cursor`, or `Err(oldest)`
    /// with the oldest resumable resourceVersion when the ring has already
    /// dropped some of them.
    pub fn read_after(&self, cursor: u64, max: usize) -> Result<Vec<Arc<Event>>, ResourceVersion> {
        #[cfg(test)]
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
        if let Some(gap) = ring.gap_of(rv) {
            return Err(ReadError::InGap { asked: rv, gap });
        }
        if rv > ring.resource_version {
            return Err(ReadError::TooLarge {
                asked: rv,
                current: ring.resource_version,
            });
        }
        // Events are in RV order: a binary search, not a walk, under the lock.
        let pending = ring.events.partition_point(|e| e.resource_version <= rv);
        Ok(ring.oldest_seq() + pending as u64 - 1)
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
pub(crate) mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    pub(crate) use crate::fixtures::{configmaps, empty_store, object, object_in};
    use crate::object::{Transform, TypeMeta};

    /// How often a snapshot replayed ring events over its walk, and how
    /// often it undid the part of a unit still being written.
    #[derive(Debug, Default)]
    pub(crate) struct SnapshotPaths {
        replayed: std::sync::atomic::AtomicU64,
        undone: std::sync::atomic::AtomicU64,
    }

    impl SnapshotPaths {
        pub(crate) fn record(&self, replayed: bool, undone: bool) {
            use std::sync::atomic::Ordering::Relaxed;
            self.replayed.fetch_add(replayed.into(), Relaxed);
            self.undone.fetch_add(undone.into(), Relaxed);
        }

        fn counts(&self) -> (u64, u64) {
            use std::sync::atomic::Ordering::Relaxed;
            (self.replayed.load(Relaxed), self.undone.load(Relaxed))
        }
    }

    /// Keeps `snapshot` for checking unless it shares the copy of the one
    /// before: a reader that finds the ring where it was gets the same
    /// copy again, as fast as it can ask, and one check of it is enough.
    fn keep_new(snapshots: &mut Vec<Snapshot>, snapshot: Snapshot) {
        if snapshots
            .last()
            .is_none_or(|last| !Arc::ptr_eq(&last.objects, &snapshot.objects))
        {
            snapshots.push(snapshot);
        }
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
            store.shared_snapshot().is_none(),
            "a copy nobody uses is not kept"
        );
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
                    if i >= EVENTS && store.paths.counts().0 > 0 {
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
            store.paths.counts().0 > 0,
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

    /// (kind, name, RV, resync) of events.
    fn seen(events: &[Arc<Event>]) -> Vec<(EventKind, &str, u64, bool)> {
        events
            .iter()
            .map(|e| {
                (
                    e.kind,
                    e.object.as_ref().map_or("", |o| o.name.as_str()),
                    e.resource_version.0,
                    e.resync,
                )
            })
            .collect()
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
            let (replayed, undone) = store.paths.counts();
            if replayed > 0 && undone > 0 {
                both_paths.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        writer.join().unwrap();
        let (replayed, undone) = store.paths.counts();
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

    /// A list large enough to be compared on several threads: changes on
    /// both sides of every split (for two, three and four threads), new
    /// objects among the listed ones and deleted ones, all in the unit, and
    /// nothing else; what comes back to be freed is exactly the rest.
    #[test]
    fn a_list_compared_on_several_threads_yields_exactly_its_changes() {
        let n = 3 * RELIST_PARALLEL_FROM;
        let name = |i: usize| format!("o{i:06}");
        let store = Store::new(configmaps(), 100);
        store.replace(
            (0..n).map(|i| object(&name(i), 1, "{}")).collect(),
            ResourceVersion(1),
        );
        let mut modified = BTreeSet::new();
        for split in [n / 4, n / 3, n / 2, 2 * n / 3, 3 * n / 4] {
            modified.extend([split - 1, split, split + 1]);
        }
        modified.extend([0, n - 1]);
        let deleted = BTreeSet::from([5, n / 2 + 7, n - 2]);
        let mut listed = Vec::new();
        for i in (0..n).filter(|i| !deleted.contains(i)) {
            let rv = if modified.contains(&i) { 2 } else { 1 };
            listed.push(object(&name(i), rv, "{}"));
            if i == n / 3 {
                listed.push(object("added-in-the-middle", 2, "{}"));
            }
        }
        listed.push(object("added-at-the-end", 2, "{}"));
        let listed_count = listed.len();

        let (changes, unchanged) = store.difference(listed);
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(
            store
                .comparison_threads
                .load(std::sync::atomic::Ordering::Relaxed),
            cores.min(RELIST_THREADS),
            "compared on every core, at most {RELIST_THREADS}"
        );

        use EventKind::*;
        let mut expected: BTreeMap<String, EventKind> = modified
            .iter()
            .map(|&i| (name(i), Modified))
            .chain(deleted.iter().map(|&i| (name(i), Deleted)))
            .collect();
        expected.insert("added-in-the-middle".into(), Added);
        expected.insert("added-at-the-end".into(), Added);
        let found: BTreeMap<String, EventKind> = changes
            .iter()
            .map(|(kind, object, _)| (object.name.clone(), *kind))
            .collect();
        assert_eq!(found, expected);
        assert_eq!(changes.len(), expected.len(), "no change twice");
        for (kind, object, previous) in &changes {
            let previous_rv = previous.as_ref().map(|p| p.resource_version.0);
            match kind {
                Modified => assert_eq!(
                    (object.resource_version.0, previous_rv),
                    (2, Some(1)),
                    "{} replaces its own state",
                    object.name
                ),
                Added => assert_eq!(previous_rv, None, "{} is new", object.name),
                _ => assert_eq!(previous_rv, Some(1), "{} was held", object.name),
            }
        }
        assert_eq!(unchanged.len(), listed_count - modified.len() - 2);
        assert!(
            unchanged
                .iter()
                .all(|o| o.resource_version.0 == 1 && o.name.starts_with('o')),
            "only unchanged objects are left to free"
        );
        let unchanged_names: BTreeSet<&str> = unchanged.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(unchanged_names.len(), unchanged.len(), "none twice");
    }

    /// A relist's copies are freed at the lowest priority, on their own
    /// thread: the caller's thread keeps its own.
    #[cfg(target_os = "linux")]
    #[test]
    fn freeing_lowers_only_its_own_threads_priority() {
        use rustix::{process::getpriority_process, thread::gettid};
        let before = getpriority_process(Some(gettid())).unwrap();
        assert_ne!(
            before, LOWEST_PRIORITY,
            "tests run above the lowest priority"
        );
        let lowered = std::thread::spawn(|| {
            lower_this_threads_priority();
            getpriority_process(Some(gettid())).unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(lowered, LOWEST_PRIORITY);
        assert_eq!(getpriority_process(Some(gettid())).unwrap(), before);
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

    #[test]
    fn an_unchanged_object_yields_nothing_whatever_its_key_order() {
        let store = Store::new(configmaps(), 100);
        let meta = TypeMeta {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        let parse = |raw: &str| {
            Object::from_json(
                raw,
                &meta,
                &crate::fields::SelectableFields::default(),
                Transform::default(),
            )
            .unwrap()
        };
        // As a watch event sent it, and as a list re-encoded it.
        let watched = parse(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"4"},"data":{"z":"1","a":"2"}}"#,
        );
        let listed = parse(
            r#"{"data":{"a":"2","z":"1"},"kind":"ConfigMap","metadata":{"namespace":"ns","resourceVersion":"4","name":"a"},"apiVersion":"v1"}"#,
        );
        assert_ne!(watched.json, listed.json);
        store.replace(Vec::new(), ResourceVersion(3));
        store.apply(EventKind::Added, watched);
        let seq = store.head().seq;
        store.replace(vec![listed], ResourceVersion(4));
        assert_eq!(
            store.head().seq,
            seq,
            "nothing changed, so nothing is published"
        );
        // The same RV with other contents is a change (an etcd restore).
        let other = parse(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"4"},"data":{"a":"3"}}"#,
        );
        store.replace(vec![other], ResourceVersion(5));
        let events = store.read_after(seq, 10).unwrap();
        assert_eq!(seen(&events)[0], (EventKind::Modified, "a", 5, true));
    }

    #[test]
    fn history_is_bounded_by_bytes() {
        let one = object("o0", 1, "{}").json.len() as u64;
        let store = Store::with_history(
            configmaps(),
            HistoryLimits {
                bytes: 3 * one,
                ..HistoryLimits::default()
            },
        );
        store.replace(Vec::new(), ResourceVersion(1));
        for rv in 2..=9 {
            store.apply(EventKind::Added, object(&format!("o{}", rv % 10), rv, "{}"));
        }
        let status = store.status();
        assert_eq!(status.history_bytes, 3 * one);
        assert_eq!(status.oldest_resumable, Some(ResourceVersion(6)));
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

    /// Eviction never takes the newest event, so a count of 0 keeps one:
    /// a subscriber at the head can still resume from the event before it.
    #[test]
    fn a_history_of_no_events_still_keeps_the_newest() {
        let store = Store::new(configmaps(), 0);
        store.replace(Vec::new(), ResourceVersion(10));
        for rv in 11..=13 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        assert_eq!(store.status().oldest_resumable, Some(ResourceVersion(12)));
        let cursor = store.cursor_after(ResourceVersion(12)).unwrap();
        let events = store.read_after(cursor, 10).unwrap();
        let rvs: Vec<u64> = events.iter().map(|e| e.resource_version.0).collect();
        assert_eq!(rvs, [13]);
    }

    /// A store whose history is bounded by age (75 s) long before count.
    fn bounded_by_age() -> Store {
        Store::with_history(
            configmaps(),
            HistoryLimits {
                events: 100,
                age: Duration::from_secs(75),
                ..HistoryLimits::default()
            },
        )
    }

    #[tokio::test(start_paused = true)]
    async fn history_is_bounded_by_age_as_well_as_count() {
        let store = bounded_by_age();
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

    /// "None older than `age`": an event exactly that old stays.
    #[tokio::test(start_paused = true)]
    async fn an_event_exactly_as_old_as_the_age_bound_stays() {
        let store = bounded_by_age();
        store.replace(Vec::new(), ResourceVersion(10));
        store.apply(EventKind::Added, object("a", 11, "{}"));
        tokio::time::advance(Duration::from_secs(75)).await;
        store.apply(EventKind::Added, object("b", 12, "{}"));
        assert_eq!(store.status().oldest_resumable, Some(ResourceVersion(10)));
        tokio::time::advance(Duration::from_millis(1)).await;
        store.apply(EventKind::Added, object("c", 13, "{}"));
        assert_eq!(store.status().oldest_resumable, Some(ResourceVersion(11)));
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
            undone += store.paths.counts().1;
            if undone > 0 {
                break;
            }
        }
        assert!(undone > 0, "some snapshot was taken inside the unit");
    }

    /// The newest event stays even when it alone is over the byte bound,
    /// so a resume from the RV just before it still works.
    #[test]
    fn the_newest_event_stays_even_when_it_alone_is_over_the_byte_bound() {
        let store = Store::with_history(
            configmaps(),
            HistoryLimits {
                bytes: 10,
                ..HistoryLimits::default()
            },
        );
        store.replace(Vec::new(), ResourceVersion(1));
        store.apply(EventKind::Added, object("a", 2, "{}"));
        store.apply(EventKind::Added, object("b", 3, "{}"));
        assert_eq!(store.status().oldest_resumable, Some(ResourceVersion(2)));
        let cursor = store.cursor_after(ResourceVersion(2)).unwrap();
        assert_eq!(
            seen(&store.read_after(cursor, 10).unwrap()),
            [(EventKind::Added, "b", 3, false)]
        );
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
}

//! The ordered ring of recent events, its sequence numbers and the
//! history bounds (count, age, bytes) past which its oldest events go.
//!
//! Held under the store's mutex; every function here runs with it held.

use std::{collections::VecDeque, sync::Arc, time::Duration};

use tokio::time::Instant;

use super::unit::{Gap, OpenUnit};
use crate::{
    event::{Event, EventKind},
    object::{Object, ResourceVersion},
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

impl HistoryLimits {
    /// Whether a reader `events` and `bytes` behind the head, the next
    /// event it needs `age` old, is past the newer half of this history:
    /// more than half the events or bytes behind, or that event older than
    /// half the age.
    ///
    /// Its resume point then has at most the other half of the history
    /// left before the ring drops what follows it. Cut off there, a reader
    /// still has that half to read what it was already handed and to come
    /// back; cut off only once the ring drops its events, its resume point
    /// would already be gone. A reader behind by the newest event alone is
    /// never past it: the newest event always stays.
    pub fn past_newer_half(&self, events: u64, bytes: u64, age: Duration) -> bool {
        events >= 2
            && (events > self.events as u64 / 2 || bytes > self.bytes / 2 || age > self.age / 2)
    }
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

/// The events after the store's first list, newest last, and where they
/// add up to.
pub(super) struct Ring {
    pub(super) events: VecDeque<Arc<Event>>,
    pub(super) seq: u64,
    pub(super) bytes: u64,
    /// The resourceVersion of the last finished unit (see [`Head`]).
    pub(super) resource_version: ResourceVersion,
    /// The resourceVersion just before the oldest retained event: a resume
    /// from here or later finds every event it needs. `None` until synced.
    pub(super) floor: Option<ResourceVersion>,
    pub(super) relists: u64,
    pub(super) gaps: VecDeque<Gap>,
    pub(super) open_unit: Option<OpenUnit>,
    limits: HistoryLimits,
}

impl Ring {
    /// An empty ring, before the first list, keeping what `limits` allow.
    pub(super) fn new(limits: HistoryLimits) -> Self {
        Ring {
            events: VecDeque::with_capacity(limits.events.min(4096)),
            seq: 0,
            bytes: 0,
            resource_version: ResourceVersion::default(),
            floor: None,
            relists: 0,
            gaps: VecDeque::new(),
            open_unit: None,
            limits,
        }
    }

    pub(super) fn oldest_seq(&self) -> u64 {
        self.events.front().map_or(self.seq + 1, |e| e.seq)
    }

    pub(super) fn head(&self) -> Head {
        Head {
            seq: self.seq,
            resource_version: self.resource_version,
            synced: self.floor.is_some(),
            bytes: self.bytes,
        }
    }

    /// The bytes the retained events carry.
    pub(super) fn retained_bytes(&self) -> u64 {
        self.events
            .front()
            .map_or(0, |e| self.bytes - e.bytes_before())
    }

    /// Whether a reader that has read the ring up to position `from`
    /// (`from_bytes` of JSON) is past the newer half of the history (see
    /// [`HistoryLimits::past_newer_half`]); also when the ring has dropped
    /// the next event it needs.
    pub(super) fn past_newer_half(&self, from: u64, from_bytes: u64, now: Instant) -> bool {
        let oldest = self.oldest_seq();
        if from + 1 < oldest {
            return true;
        }
        let Some(next) = self.events.get((from + 1 - oldest) as usize) else {
            return false;
        };
        self.limits.past_newer_half(
            self.seq - from,
            self.bytes.saturating_sub(from_bytes),
            now.duration_since(next.at),
        )
    }

    /// The gap `rv` lies in, if any.
    pub(super) fn gap_of(&self, rv: ResourceVersion) -> Option<Gap> {
        self.gaps.iter().find(|g| g.contains(rv)).copied()
    }

    /// Appends one event at `rv` and drops what the history bounds no
    /// longer allow.
    pub(super) fn push(
        &mut self,
        kind: EventKind,
        rv: ResourceVersion,
        object: Option<Arc<Object>>,
        previous: Option<Arc<Object>>,
        resync: bool,
    ) -> Arc<Event> {
        self.seq += 1;
        self.bytes += object.as_ref().map_or(0, |o| o.json.len() as u64);
        let now = Instant::now();
        let event = Arc::new(Event {
            seq: self.seq,
            kind,
            resource_version: rv,
            object,
            previous,
            resync,
            bytes_through: self.bytes,
            at: now,
            encoded: Default::default(),
        });
        self.events.push_back(event.clone());
        self.evict(now);
        event
    }

    /// Drops the oldest events past the history limits. The newest event
    /// always stays (resuming from the head works), and so does every event
    /// of an open unit (a snapshot taken meanwhile undoes them).
    pub(super) fn evict(&mut self, now: Instant) {
        let limits = &self.limits;
        while let Some(front) = self.events.front() {
            let over = self.events.len() > limits.events
                || now.duration_since(front.at) > limits.age
                || self.retained_bytes() > limits.bytes;
            let pinned =
                self.events.len() == 1 || self.open_unit.is_some_and(|u| front.seq >= u.first_seq);
            if !over || pinned {
                break;
            }
            let evicted_rv = front.resource_version;
            self.events.pop_front();
            self.floor = self.floor.map(|f| f.max(evicted_rv));
        }
        // A gap entirely below the floor is answered as Expired anyway.
        if let Some(floor) = self.floor {
            while self.gaps.front().is_some_and(|g| g.until <= floor) {
                self.gaps.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        fixtures::{configmaps, object, seen},
        store::{ReadError, Store},
    };

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
}

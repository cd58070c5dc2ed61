//! Where each live subscriber has read the ring to, so that how far the
//! slowest one is behind the head can be graphed before the lag bound
//! cuts it off.
//!
//! Each live subscriber holds a [`Reader`] and publishes its position
//! with two relaxed stores as it reads (no lock, a cache line of its own);
//! only a scrape walks the registry. A subscriber waiting for the head to
//! move has read everything it was offered and publishes [`CAUGHT_UP`]:
//! an indexed subscriber whose cursor stays behind because nothing after
//! it concerns it is not behind. The pair is read without a lock, so a
//! scrape may see a position's events and bytes from two neighbouring
//! reads: a gauge, not a bound anything rests on.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering::Relaxed},
};

use dashmap::DashMap;

use super::ring::Head;

/// A published position meaning "read up to the head it last saw".
const CAUGHT_UP: u64 = u64::MAX;

/// One reader's published position.
#[derive(Debug)]
struct Position {
    /// The ring position read up to, or [`CAUGHT_UP`].
    seq: AtomicU64,
    /// The ring's JSON bytes up to `seq`.
    bytes: AtomicU64,
}

/// The live readers of one store.
#[derive(Debug, Default)]
pub(crate) struct Readers {
    next_id: AtomicU64,
    positions: DashMap<u64, Arc<Position>>,
}

/// How far behind the head the slowest live readers are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Behind {
    /// The most ring events one live reader has yet to read (of every
    /// filter: what its lag bound counts, only what its filter lets
    /// through, is at most this).
    pub events: u64,
    /// The most ring bytes one live reader has yet to read (perhaps not
    /// the same reader's).
    pub bytes: u64,
}

impl Readers {
    /// Registers a reader, caught up until it publishes a position.
    pub(crate) fn register(self: &Arc<Self>) -> Reader {
        let id = self.next_id.fetch_add(1, Relaxed);
        let position = Arc::new(Position {
            seq: AtomicU64::new(CAUGHT_UP),
            bytes: AtomicU64::new(0),
        });
        self.positions.insert(id, position.clone());
        Reader {
            id,
            position,
            readers: self.clone(),
        }
    }

    /// How far behind `head` the slowest readers are.
    pub(crate) fn behind(&self, head: &Head) -> Behind {
        let mut behind = Behind::default();
        for entry in &self.positions {
            let seq = entry.seq.load(Relaxed);
            if seq == CAUGHT_UP {
                continue;
            }
            let bytes = entry.bytes.load(Relaxed);
            behind.events = behind.events.max(head.seq.saturating_sub(seq));
            behind.bytes = behind.bytes.max(head.bytes.saturating_sub(bytes));
        }
        behind
    }
}

/// One live subscriber's published position; unregistered on drop.
#[derive(Debug)]
pub struct Reader {
    id: u64,
    position: Arc<Position>,
    readers: Arc<Readers>,
}

impl Reader {
    /// Publishes that the reader has read the ring up to position `seq`,
    /// `bytes` of JSON, and has more to read.
    pub(crate) fn read_to(&self, seq: u64, bytes: u64) {
        self.position.bytes.store(bytes, Relaxed);
        self.position.seq.store(seq, Relaxed);
    }

    /// Publishes that the reader has read all it was offered.
    pub(crate) fn caught_up(&self) {
        self.position.seq.store(CAUGHT_UP, Relaxed);
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.readers.positions.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(seq: u64, bytes: u64) -> Head {
        Head {
            seq,
            bytes,
            ..Head::default()
        }
    }

    #[test]
    fn the_slowest_reader_that_is_not_caught_up_is_how_far_behind_they_are() {
        let readers = Arc::new(Readers::default());
        let (a, b, c) = (readers.register(), readers.register(), readers.register());
        assert_eq!(readers.behind(&head(10, 1000)), Behind::default());
        a.read_to(7, 900);
        b.read_to(4, 950);
        c.read_to(1, 10);
        c.caught_up();
        assert_eq!(
            readers.behind(&head(10, 1000)),
            Behind {
                events: 6,
                bytes: 100
            }
        );
        drop(b);
        assert_eq!(
            readers.behind(&head(10, 1000)),
            Behind {
                events: 3,
                bytes: 100
            }
        );
        drop(a);
        assert_eq!(readers.behind(&head(10, 1000)), Behind::default());
        assert_eq!(readers.positions.len(), 1, "c is still registered");
    }
}

//! What the tests observe of the store, in one place: how often the ring
//! was read (a subscriber that should not have read it did not), which
//! paths a snapshot took (the racing tests prove both ran) and how many
//! threads a relist's comparison ran on.
//!
//! Outside the crate's tests `Probes` is an empty type whose recording
//! calls do nothing: the store's type and its hot paths carry no test
//! fields and no `cfg(test)`.

#[cfg(test)]
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// The store's test observer (empty outside tests).
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct Probes {
    /// Ring reads ([`super::Store::read_after`]).
    reads: AtomicU64,
    /// Snapshots that replayed ring events over their walk.
    replayed: AtomicU64,
    /// Snapshots that undid the part of a unit still being written.
    undone: AtomicU64,
    /// The threads the last relist's comparison ran on.
    comparison_threads: AtomicUsize,
}

/// The store's test observer (empty outside tests; braced, so that the
/// store builds it with `Default` in both forms).
#[cfg(not(test))]
#[derive(Debug, Default)]
pub(crate) struct Probes {}

#[cfg(test)]
impl Probes {
    pub(super) fn read(&self) {
        self.reads.fetch_add(1, Relaxed);
    }

    pub(super) fn snapshot(&self, replayed: bool, undone: bool) {
        self.replayed.fetch_add(replayed.into(), Relaxed);
        self.undone.fetch_add(undone.into(), Relaxed);
    }

    pub(super) fn compared_on(&self, threads: usize) {
        self.comparison_threads.store(threads, Relaxed);
    }

    /// How often the ring was read.
    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Relaxed)
    }

    /// How often a snapshot replayed ring events over its walk, and how
    /// often it undid the part of a unit still being written.
    pub(crate) fn snapshot_paths(&self) -> (u64, u64) {
        (self.replayed.load(Relaxed), self.undone.load(Relaxed))
    }

    /// The threads the last relist's comparison ran on.
    pub(crate) fn comparison_threads(&self) -> usize {
        self.comparison_threads.load(Relaxed)
    }
}

/// The store's probes, for the tests of this crate.
#[cfg(test)]
impl super::Store {
    pub(crate) fn probes(&self) -> &Probes {
        &self.probes
    }
}

#[cfg(not(test))]
impl Probes {
    #[inline(always)]
    pub(super) fn read(&self) {}

    #[inline(always)]
    pub(super) fn snapshot(&self, _replayed: bool, _undone: bool) {}

    #[inline(always)]
    pub(super) fn compared_on(&self, _threads: usize) {}
}

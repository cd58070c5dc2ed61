//! Read positions: the ring position (a cursor) a watch resumes from, the
//! events after one, and why a position cannot be read.

use std::sync::Arc;

use super::{ring::Ring, unit::Gap};
use crate::{event::Event, object::ResourceVersion};

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
    /// The store has not finished its first list (within the wait a
    /// request allows for it).
    #[error("the cache of this type has not synced with its upstream yet; retry later")]
    NotSynced,
}

impl Ring {
    /// Up to `max` events after ring position `cursor`, or `Err(oldest)`
    /// with the oldest resumable resourceVersion when the ring has already
    /// dropped some of them.
    pub(super) fn read_after(
        &self,
        cursor: u64,
        max: usize,
    ) -> Result<Vec<Arc<Event>>, ResourceVersion> {
        let oldest = self.oldest_seq();
        if cursor + 1 < oldest {
            return Err(self.floor.unwrap_or_default());
        }
        let skip = (cursor + 1 - oldest) as usize;
        Ok(self.events.iter().skip(skip).take(max).cloned().collect())
    }

    /// The ring position from which a watch resuming after `rv` continues.
    pub(super) fn cursor_after(&self, rv: ResourceVersion) -> Result<u64, ReadError> {
        let floor = self.floor.ok_or(ReadError::NotSynced)?;
        if rv < floor {
            return Err(ReadError::Expired {
                asked: rv,
                oldest: floor,
            });
        }
        if let Some(gap) = self.gap_of(rv) {
            return Err(ReadError::InGap { asked: rv, gap });
        }
        if rv > self.resource_version {
            return Err(ReadError::TooLarge {
                asked: rv,
                current: self.resource_version,
            });
        }
        // Events are in RV order: a binary search, not a walk, under the lock.
        let pending = self.events.partition_point(|e| e.resource_version <= rv);
        Ok(self.oldest_seq() + pending as u64 - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        event::EventKind,
        fixtures::{configmaps, object},
        store::Store,
    };

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
}

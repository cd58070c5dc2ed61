//! Lag accounting: whether a live subscriber has more left to receive
//! than [`Limits::max_lag_events`] and [`Limits::max_lag_bytes`] allow,
//! counting only what its filter lets through since its stream started,
//! so that a resume from any point the store still holds makes progress.

use super::{delivery::visible, request::Limits, request::WatchSpec};
use crate::store::{Head, Store};

/// How many ring entries a subscriber copies out per lock, as it reads on
/// and as its lag is counted.
pub(super) const BATCH: usize = 256;

/// The lag bound's bookkeeping (see [`Limits::max_lag_events`]).
pub(super) struct LagBound {
    /// Ring position and bytes when the stream started: events before it
    /// are owed to the subscriber but never count against it.
    start_seq: u64,
    start_bytes: u64,
    /// The last exact count showed room until the head passes these.
    recheck_seq: u64,
    recheck_bytes: u64,
}

impl LagBound {
    /// The bound of a stream that started with the ring at position
    /// `start_seq`, its JSON `start_bytes` long.
    pub(super) fn new(start_seq: u64, start_bytes: u64) -> Self {
        LagBound {
            start_seq,
            start_bytes,
            recheck_seq: 0,
            recheck_bytes: 0,
        }
    }

    /// The ring position (and its bytes) from which a subscriber at
    /// `cursor` is counted: the later of the cursor and the stream's start.
    pub(super) fn counted_from(&self, cursor: u64, cursor_bytes: u64) -> (u64, u64) {
        if cursor >= self.start_seq {
            (cursor, cursor_bytes)
        } else {
            (self.start_seq, self.start_bytes)
        }
    }

    /// Whether the subscriber at `cursor` has more left to receive than
    /// `limits` allow. The cheap check (every event since the later of the
    /// stream's start and the cursor) settles most calls; only when it
    /// fails are the events this subscriber would actually receive counted,
    /// and that count tells how far the head may move before the next one.
    pub(super) fn exceeded(
        &mut self,
        store: &Store,
        spec: &WatchSpec,
        limits: &Limits,
        head: &Head,
        cursor: u64,
        cursor_bytes: u64,
    ) -> bool {
        let (from, from_bytes) = self.counted_from(cursor, cursor_bytes);
        let events = head.seq.saturating_sub(from);
        let bytes = head.bytes.saturating_sub(from_bytes);
        if events <= limits.max_lag_events && bytes <= limits.max_lag_bytes {
            return false;
        }
        if head.seq < self.recheck_seq && head.bytes < self.recheck_bytes {
            return false;
        }
        let (mut owed_events, mut owed_bytes) = (0u64, 0u64);
        let mut at = from;
        while at < head.seq {
            let Ok(batch) = store.read_after(at, BATCH) else {
                // The ring dropped what the subscriber had not read.
                return true;
            };
            let Some(last) = batch.last() else { break };
            at = last.seq;
            for event in batch.iter().filter(|e| e.seq <= head.seq) {
                if let Some((_, shown)) = visible(spec, event) {
                    owed_events += 1;
                    // What this subscriber will be sent: a metadata-only
                    // subscriber owes the objects' metadata, not their
                    // full JSON.
                    owed_bytes += spec.projection.bytes(shown);
                }
            }
            if owed_events > limits.max_lag_events || owed_bytes > limits.max_lag_bytes {
                return true;
            }
        }
        self.recheck_seq = head.seq + (limits.max_lag_events - owed_events) + 1;
        self.recheck_bytes = head.bytes + (limits.max_lag_bytes - owed_bytes) + 1;
        false
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures::StreamExt;

    use crate::{
        event::EventKind,
        fixtures::{configmaps, empty_store, object},
        object::{Object, ResourceVersion},
        projection::Projection,
        store::Store,
        subscription::{
            Limits, Start, WatchError, WatchSpec,
            tests::{deliveries, ready, spec, stream_of, watch},
        },
    };

    #[tokio::test(start_paused = true)]
    async fn a_subscriber_that_falls_off_the_ring_is_told_where_to_resume() {
        let store = Arc::new(Store::new(configmaps(), 4));
        store.replace(Vec::new(), ResourceVersion(1));
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("", Start::At(ResourceVersion(1)), false),
            Limits::default(),
        ));
        store.apply(EventKind::Added, object("o2", 2, "{}"));
        assert_eq!(ready(&mut stream).await, [Ok((EventKind::Added, 2))]);
        for rv in 3..=10 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        assert_eq!(
            ready(&mut stream).await,
            [Err(WatchError::Lagged {
                resume_from: ResourceVersion(2)
            })]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscriber_too_many_bytes_behind_is_cut_off_with_its_resume_point() {
        let store = empty_store();
        let size = object("o2", 2, "{}").json.len() as u64;
        let limits = Limits {
            max_lag_bytes: 3 * size,
            ..Limits::default()
        };
        let mut stream = Box::pin(watch(
            store.clone(),
            spec("", Start::At(ResourceVersion(1)), false),
            limits,
        ));
        for rv in 2..=4 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        assert_eq!(
            ready(&mut stream).await.len(),
            3,
            "three objects behind is within the bound"
        );
        for rv in 5..=8 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        assert_eq!(
            ready(&mut stream).await,
            [Err(WatchError::Lagged {
                resume_from: ResourceVersion(4)
            })]
        );
    }

    /// Finding 4 of issue 8: the lag bound counted every event behind the
    /// head, so a resume from an RV more than the bound behind was cut off
    /// at once with that same RV, forever. Now only what the subscriber
    /// still has to receive since its stream started counts.
    #[tokio::test(start_paused = true)]
    async fn a_resume_always_makes_progress_and_a_cut_off_names_how_far_it_got() {
        let store = empty_store();
        for rv in 2..=8 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        let limits = Limits {
            max_lag_events: 2,
            ..Limits::default()
        };
        // Seven events behind, the bound two: it still gets them all.
        let mut stream = stream_of(
            &store,
            spec("", Start::At(ResourceVersion(1)), false),
            limits,
        );
        let caught_up: Vec<u64> = deliveries(&mut stream)
            .await
            .into_iter()
            .map(|d| d.unwrap().1)
            .collect();
        assert_eq!(caught_up, [2, 3, 4, 5, 6, 7, 8]);
        // Three new events arrive and it reads none of them: more than two
        // behind since it started, so it is cut off, naming the last RV it
        // got, from which a resume makes progress again.
        for rv in 9..=11 {
            store.apply(EventKind::Added, object(&format!("o{rv}"), rv, "{}"));
        }
        assert_eq!(
            stream.next().await,
            Some(Err(WatchError::Lagged {
                resume_from: ResourceVersion(8)
            }))
        );
        let mut resumed = stream_of(
            &store,
            spec("", Start::At(ResourceVersion(8)), false),
            limits,
        );
        assert_eq!(
            deliveries(&mut resumed).await.len(),
            3,
            "9..=11, no cut-off"
        );

        // Events a filter hides never count against it.
        let mut filtered = stream_of(
            &store,
            spec("app=mine", Start::At(ResourceVersion(11)), false),
            limits,
        );
        assert!(deliveries(&mut filtered).await.is_empty());
        for rv in 12..=20 {
            store.apply(
                EventKind::Added,
                object(&format!("o{rv}"), rv, r#"{"app":"theirs"}"#),
            );
        }
        store.apply(EventKind::Added, object("mine", 21, r#"{"app":"mine"}"#));
        assert_eq!(
            deliveries(&mut filtered).await,
            [Ok((EventKind::Added, 21, false, "mine".into()))]
        );
    }

    /// A metadata-only subscriber owes the metadata of the objects it is
    /// behind on, not their full JSON: with objects mostly data, a bound
    /// of three objects' metadata cuts off a full subscriber at once and
    /// the metadata subscriber only when it owes a fourth.
    #[tokio::test(start_paused = true)]
    async fn a_metadata_subscriber_is_held_to_the_bytes_it_receives() {
        let store = empty_store();
        let big = |rv: u64| {
            let raw = format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"o{rv}","namespace":"ns","resourceVersion":"{rv}"}},"data":{{"d":"{}"}}}}"#,
                "x".repeat(4096)
            );
            Object::from_json(
                &raw,
                &crate::object::TypeMeta {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                },
                &crate::fields::SelectableFields::default(),
                crate::object::Transform::default(),
            )
            .unwrap()
        };
        let metadata_size = Projection::Metadata.bytes(&big(2));
        assert!(big(2).json.len() as u64 > 3 * metadata_size);
        let limits = Limits {
            max_lag_bytes: 3 * metadata_size,
            ..Limits::default()
        };
        let start = |projection| WatchSpec {
            projection,
            ..spec("", Start::At(ResourceVersion(1)), false)
        };
        let mut full = stream_of(&store, start(Projection::Full), limits);
        let mut metadata = stream_of(&store, start(Projection::Metadata), limits);
        for stream in [&mut full, &mut metadata] {
            assert!(deliveries(stream).await.is_empty());
        }
        let lagged = |rv| {
            vec![Err(WatchError::Lagged {
                resume_from: ResourceVersion(rv),
            })]
        };
        for rv in 2..=4 {
            store.apply(EventKind::Added, big(rv));
        }
        assert_eq!(deliveries(&mut full).await, lagged(1));
        assert_eq!(
            deliveries(&mut metadata).await,
            (2..=4)
                .map(|rv| Ok((EventKind::Added, rv, false, format!("o{rv}"))))
                .collect::<Vec<_>>(),
            "three objects' metadata is within the bound"
        );
        for rv in 5..=8 {
            store.apply(EventKind::Added, big(rv));
        }
        assert_eq!(deliveries(&mut metadata).await, lagged(4));
    }

    /// What `app=mine` matches among these tests' objects (every one has
    /// `app`, `mine` or `theirs`), requiring no label so that dispatch
    /// cannot index it: the subscriber reads every event, and its lag is
    /// counted exactly (an indexed one skips what it is not owed).
    const MINE_UNINDEXED: &str = "app notin (theirs)";

    /// An exact count leaves the head room for exactly the bytes the bound
    /// still allows: an event that uses up that room and one byte more
    /// is counted again, so the subscriber is cut off by it, not by the
    /// next one.
    #[tokio::test(start_paused = true)]
    async fn the_byte_after_the_counted_room_is_counted() {
        let store = empty_store();
        let mine = object("o7", 7, r#"{"app":"mine"}"#);
        let limits = Limits {
            max_lag_bytes: mine.json.len() as u64 - 1,
            ..Limits::default()
        };
        let mut stream = stream_of(
            &store,
            spec(MINE_UNINDEXED, Start::At(ResourceVersion(1)), false),
            limits,
        );
        assert!(deliveries(&mut stream).await.is_empty());
        assert_eq!(store.dispatch().status().unindexed, 1, "{MINE_UNINDEXED}");
        // More bytes than the bound, none of them for this subscriber: it
        // counts exactly, owes nothing, and has the whole bound as room.
        for rv in 2..=6 {
            store.apply(
                EventKind::Added,
                object(&format!("t{rv}"), rv, r#"{"app":"theirs"}"#),
            );
        }
        assert!(deliveries(&mut stream).await.is_empty());
        store.apply(EventKind::Added, mine);
        assert_eq!(
            deliveries(&mut stream).await,
            [Err(WatchError::Lagged {
                resume_from: ResourceVersion(1)
            })]
        );
    }

    /// After an exact count of what a filtered subscriber owes, the head
    /// may move only as far as that count left room before the next one:
    /// the subscriber owing exactly the bound stays, and it is cut off as
    /// soon as it owes more, in events or in bytes.
    #[tokio::test(start_paused = true)]
    async fn an_exact_lag_count_is_repeated_once_the_head_uses_up_its_room() {
        let store = empty_store();
        let mine = |rv: u64| object(&format!("o{rv}"), rv, r#"{"app":"mine"}"#);
        // The bytes of one of o7..o9; o10 and later are one byte longer.
        let size = mine(7).json.len() as u64;
        let by_events = Limits {
            max_lag_events: 2,
            ..Limits::default()
        };
        let by_bytes = Limits {
            max_lag_bytes: 3 * size,
            ..Limits::default()
        };
        let start = || spec(MINE_UNINDEXED, Start::At(ResourceVersion(1)), false);
        let [mut a, mut b, mut d] = [(); 3].map(|()| stream_of(&store, start(), by_events));
        let [mut c, mut e] = [(); 2].map(|()| stream_of(&store, start(), by_bytes));
        for stream in [&mut a, &mut b, &mut c, &mut d, &mut e] {
            assert!(deliveries(stream).await.is_empty());
        }
        // Five changes they do not see: more than either bound behind in
        // all, so A, B and C count exactly, owe nothing, and have room.
        for rv in 2..=6 {
            store.apply(
                EventKind::Added,
                object(&format!("t{rv}"), rv, r#"{"app":"theirs"}"#),
            );
        }
        for stream in [&mut a, &mut b, &mut c] {
            assert!(deliveries(stream).await.is_empty());
        }
        let got = |rvs: &[u64]| -> Vec<Result<(EventKind, u64, bool, String), WatchError>> {
            rvs.iter()
                .map(|rv| Ok((EventKind::Added, *rv, false, format!("o{rv}"))))
                .collect()
        };
        let lagged = |rv| {
            vec![Err(WatchError::Lagged {
                resume_from: ResourceVersion(rv),
            })]
        };
        store.apply(EventKind::Added, mine(7));
        store.apply(EventKind::Added, mine(8));
        assert_eq!(deliveries(&mut d).await, got(&[7, 8]), "owes the bound");
        store.apply(EventKind::Added, mine(9));
        assert_eq!(deliveries(&mut a).await, lagged(1), "owes three events");
        assert_eq!(deliveries(&mut e).await, got(&[7, 8, 9]), "owes the bound");
        store.apply(EventKind::Added, mine(10));
        assert_eq!(deliveries(&mut b).await, lagged(1), "owes four events");
        assert_eq!(deliveries(&mut c).await, lagged(1), "owes four objects");
        store.apply(EventKind::Added, mine(11));
        assert_eq!(deliveries(&mut d).await, lagged(8), "owes 9, 10 and 11");
        store.apply(EventKind::Added, mine(12));
        assert_eq!(deliveries(&mut e).await, lagged(9), "owes 10, 11 and 12");
    }
}

//! A decision cache with a time to live per entry, like the API server's
//! cached webhook authenticator and authorizer. Concurrent misses for the
//! same key wait for one fetch (a thousand watches opened at once by one
//! caller cost one review, not a thousand); a failed fetch is not cached,
//! so the next request asks again (fail closed: never an answer without a
//! review behind it).

use std::{future::Future, hash::Hash, sync::Arc, time::Duration};

use dashmap::DashMap;
use tokio::{sync::OnceCell, time::Instant};

/// One key's answer, filled once by whichever request missed first.
type Slot<V> = Arc<OnceCell<(V, Instant)>>;

/// Answers by key until their expiry.
pub struct TtlCache<K, V> {
    entries: DashMap<K, Slot<V>>,
    capacity: usize,
}

impl<K: Eq + Hash, V> std::fmt::Debug for TtlCache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TtlCache")
            .field("entries", &self.entries.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    /// A cache of at most `capacity` answers. When full, expired answers
    /// are dropped; if that frees nothing, new keys are fetched without
    /// being cached, so a flood of distinct garbage tokens costs reviews
    /// but never memory.
    pub fn new(capacity: usize) -> Self {
        TtlCache {
            entries: DashMap::new(),
            capacity,
        }
    }

    /// The cached answer for `key` and when it expires, or the result of
    /// `fetch` (an answer and how long it holds), cached on success.
    pub async fn get_or_fetch<E, F, Fut>(&self, key: &K, fetch: F) -> Result<(V, Instant), E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(V, Duration), E>>,
    {
        let slot = self.slot(key);
        let (value, expires) = slot
            .get_or_try_init(|| async {
                let (value, ttl) = fetch().await?;
                Ok((value, Instant::now() + ttl))
            })
            .await?;
        Ok((value.clone(), *expires))
    }

    /// The live slot for `key`: the cached one unless it has expired.
    fn slot(&self, key: &K) -> Slot<V> {
        let now = Instant::now();
        let live = |slot: &Slot<V>| slot.get().is_none_or(|(_, expires)| *expires > now);
        if let Some(slot) = self.entries.get(key).filter(|s| live(s)) {
            return slot.clone();
        }
        if self.entries.len() >= self.capacity {
            self.entries.retain(|_, slot| live(slot));
            if self.entries.len() >= self.capacity {
                return Slot::default();
            }
        }
        let mut entry = self.entries.entry(key.clone()).or_default();
        if !live(&entry) {
            *entry = Slot::default();
        }
        entry.clone()
    }

    /// Cached answers (expired ones included until they are replaced).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    async fn fetch_counted(
        cache: &TtlCache<&'static str, u32>,
        key: &'static str,
        calls: &AtomicU32,
        ttl: Duration,
    ) -> Result<u32, &'static str> {
        cache
            .get_or_fetch(&key, || async {
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                Ok((n, ttl))
            })
            .await
            .map(|(v, _)| v)
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_holds_until_its_ttl_then_is_fetched_again() {
        let cache = TtlCache::new(10);
        let calls = AtomicU32::new(0);
        let ttl = Duration::from_secs(5);
        assert_eq!(fetch_counted(&cache, "k", &calls, ttl).await, Ok(1));
        tokio::time::advance(Duration::from_millis(4_999)).await;
        assert_eq!(fetch_counted(&cache, "k", &calls, ttl).await, Ok(1));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(fetch_counted(&cache, "k", &calls, ttl).await, Ok(2));
        assert_eq!(fetch_counted(&cache, "other", &calls, ttl).await, Ok(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_fetch_is_not_cached() {
        let cache: TtlCache<&str, u32> = TtlCache::new(10);
        let failed: Result<_, &str> = cache.get_or_fetch(&"k", || async { Err("down") }).await;
        assert_eq!(failed, Err("down"));
        let (value, _) = cache
            .get_or_fetch(&"k", || async {
                Ok::<_, &str>((7, Duration::from_secs(1)))
            })
            .await
            .unwrap();
        assert_eq!(value, 7);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_misses_share_one_fetch() {
        let cache = TtlCache::new(10);
        let calls = AtomicU32::new(0);
        let ttl = Duration::from_secs(5);
        let results = futures::future::join_all((0..50).map(|_| async {
            cache
                .get_or_fetch(&"k", || async {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    Ok::<_, ()>((calls.fetch_add(1, Ordering::SeqCst), ttl))
                })
                .await
        }))
        .await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(results.iter().all(|r| r == &results[0]));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_cache_fetches_new_keys_without_keeping_them() {
        let cache = TtlCache::new(2);
        let calls = AtomicU32::new(0);
        let ttl = Duration::from_secs(5);
        for key in ["a", "b", "c", "c"] {
            fetch_counted(&cache, key, &calls, ttl).await.unwrap();
        }
        assert_eq!(cache.len(), 2);
        assert_eq!(calls.load(Ordering::SeqCst), 4, "c fetched twice");
        tokio::time::advance(ttl).await;
        fetch_counted(&cache, "c", &calls, ttl).await.unwrap();
        assert_eq!(cache.len(), 1, "expired answers made room");
    }
}

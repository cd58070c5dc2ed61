//! A decision cache with a time to live per entry, like the API server's
//! cached webhook authenticator and authorizer, on moka's bounded
//! concurrent cache. Concurrent misses for the same key wait for one fetch
//! (a thousand watches opened at once by one caller cost one review, not a
//! thousand); a failed fetch is not cached, so the next request asks again
//! (fail closed: never an answer without a review behind it).
//!
//! A flood of distinct keys (garbage tokens) costs neither a scan nor
//! memory: moka bounds the entries, evicts in amortized O(1), and its
//! TinyLFU admission keeps keys asked for often (the tokens of real
//! clients) over keys asked for once.
//!
//! Expiry is read from tokio's clock, not moka's: moka's clock cannot be
//! replaced (moka-rs/moka#522) and does not follow tokio's paused time, so
//! each answer carries the instant it expires, checked on every read, and
//! moka's own per-entry expiry (on the real clock) only frees the memory
//! of answers kept a while past theirs (see [`STALE_GRACE`]).

use std::{future::Future, hash::Hash, time::Duration};

use moka::{
    Expiry,
    future::Cache,
    ops::compute::{CompResult, Op},
};
use tokio::time::Instant;

/// How long past its expiry an answer stays in memory, as a multiple of its
/// TTL: the fetch that replaces it is shown it (an accepted token asked
/// again is not a stranger's; see [`Authenticator`](crate::authn::Authenticator)).
const STALE_GRACE: u32 = 2;

/// An answer, how long it holds and until when.
#[derive(Debug, Clone)]
struct Held<V> {
    value: V,
    ttl: Duration,
    expires: Instant,
}

impl<V> Held<V> {
    fn live(&self) -> bool {
        self.expires > Instant::now()
    }
}

/// Frees an entry [`STALE_GRACE`] TTLs after it was written.
struct KeepPastExpiry;

impl<K, V> Expiry<K, Held<V>> for KeepPastExpiry {
    fn expire_after_create(
        &self,
        _key: &K,
        held: &Held<V>,
        _created_at: std::time::Instant,
    ) -> Option<Duration> {
        Some(held.ttl.saturating_mul(1 + STALE_GRACE))
    }

    fn expire_after_update(
        &self,
        _key: &K,
        held: &Held<V>,
        _updated_at: std::time::Instant,
        _duration_until_expiry: Option<Duration>,
    ) -> Option<Duration> {
        Some(held.ttl.saturating_mul(1 + STALE_GRACE))
    }
}

/// Answers by key until their expiry.
pub struct TtlCache<K, V> {
    entries: Cache<K, Held<V>>,
}

impl<K, V> std::fmt::Debug for TtlCache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TtlCache")
            .field("entries", &self.entries.entry_count())
            .finish()
    }
}

impl<K, V> TtlCache<K, V>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// A cache of at most `capacity` answers.
    pub fn new(capacity: u64) -> Self {
        TtlCache {
            entries: Cache::builder()
                .max_capacity(capacity)
                .expire_after(KeepPastExpiry)
                .build(),
        }
    }

    /// The answer held for `key` and when it expires (or expired: an
    /// expired answer is held a while, see [`STALE_GRACE`]), without
    /// fetching anything.
    pub async fn peek(&self, key: &K) -> Option<(V, Instant)> {
        self.entries
            .get(key)
            .await
            .map(|held| (held.value, held.expires))
    }

    /// The cached answer for `key` and when it expires, or the result of
    /// `fetch` (an answer and how long it holds), cached on success.
    /// `fetch` is shown the expired answer it replaces, if still held.
    pub async fn get_or_fetch<E, F, Fut>(&self, key: &K, fetch: F) -> Result<(V, Instant), E>
    where
        F: FnOnce(Option<V>) -> Fut,
        Fut: Future<Output = Result<(V, Duration), E>>,
        E: Send + Sync + 'static,
    {
        if let Some(held) = self.entries.get(key).await.filter(Held::live) {
            return Ok((held.value, held.expires));
        }
        // Serialized per key: whoever comes second finds the first one's
        // answer live and fetches nothing.
        let outcome = self
            .entries
            .entry(key.clone())
            .and_try_compute_with(|current| async move {
                let stale = match current.map(|e| e.into_value()) {
                    Some(held) if held.live() => return Ok(Op::Nop),
                    Some(held) => Some(held.value),
                    None => None,
                };
                let (value, ttl) = fetch(stale).await?;
                Ok(Op::Put(Held {
                    value,
                    ttl,
                    expires: Instant::now() + ttl,
                }))
            })
            .await?;
        match outcome {
            CompResult::Inserted(entry)
            | CompResult::ReplacedWith(entry)
            | CompResult::Unchanged(entry) => {
                let held = entry.into_value();
                Ok((held.value, held.expires))
            }
            CompResult::StillNone(_) | CompResult::Removed(_) => {
                unreachable!("the compute above either keeps a live answer or puts one")
            }
        }
    }

    /// How many answers are held, expired ones included (after moka's
    /// pending maintenance has run).
    #[cfg(test)]
    async fn held(&self) -> u64 {
        self.entries.run_pending_tasks().await;
        self.entries.entry_count()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    async fn fetch_counted(
        cache: &TtlCache<String, u32>,
        key: &str,
        calls: &AtomicU32,
        ttl: Duration,
    ) -> Result<u32, &'static str> {
        cache
            .get_or_fetch(&key.to_owned(), |_| async {
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
    async fn the_fetch_sees_the_expired_answer_it_replaces() {
        let cache: TtlCache<String, u32> = TtlCache::new(10);
        let key = "k".to_owned();
        let ttl = Duration::from_secs(1);
        let seen =
            |stale: Option<u32>| async move { Ok::<_, ()>((stale.map_or(1, |s| s + 1), ttl)) };
        assert_eq!(cache.get_or_fetch(&key, seen).await.unwrap().0, 1);
        tokio::time::advance(ttl).await;
        assert_eq!(cache.get_or_fetch(&key, seen).await.unwrap().0, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_fetch_is_not_cached() {
        let cache: TtlCache<String, u32> = TtlCache::new(10);
        let key = "k".to_owned();
        let failed: Result<_, &str> = cache.get_or_fetch(&key, |_| async { Err("down") }).await;
        assert_eq!(failed, Err("down"));
        let (value, _) = cache
            .get_or_fetch(&key, |_| async {
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
        let key = "k".to_owned();
        let results = futures::future::join_all((0..50).map(|_| async {
            cache
                .get_or_fetch(&key, |_| async {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    Ok::<_, ()>((calls.fetch_add(1, Ordering::SeqCst), ttl))
                })
                .await
        }))
        .await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(results.iter().all(|r| r == &results[0]));
    }

    /// A flood of keys asked once each (garbage tokens) keeps the cache at
    /// its capacity and does not push out a key asked for all along (a
    /// client's token), even one asked for only once every 20 of them.
    #[tokio::test(start_paused = true)]
    async fn a_flood_of_distinct_keys_stays_within_capacity_and_keeps_the_hot_key() {
        let cache = TtlCache::new(100);
        let calls = AtomicU32::new(0);
        let ttl = Duration::from_secs(60);
        for i in 0..10_000 {
            if i % 20 == 0 {
                fetch_counted(&cache, "hot", &calls, ttl).await.unwrap();
            }
            fetch_counted(&cache, &format!("garbage-{i}"), &calls, ttl)
                .await
                .unwrap();
        }
        let held = cache.held().await;
        assert!(held <= 100, "{held} entries held");
        fetch_counted(&cache, "hot", &calls, ttl).await.unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            10_001,
            "the hot key was fetched once, never evicted"
        );
    }
}

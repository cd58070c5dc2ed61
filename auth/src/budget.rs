//! What authenticating may cost the API server: TokenReviews for tokens
//! not already known are bounded in rate and concurrency, per source
//! address and in total. Every distinct garbage token would otherwise cost
//! one review; a request over a bound is refused at once (with a hint of
//! when to retry), which costs far less than a review, and the API server
//! never sees more than the total rate from one replica.
//!
//! Sources are client IP addresses; IPv6 ones by their /64, the block a
//! single host is usually given, so that one host cannot take a fresh
//! budget per address. The per-source state lives in a bounded moka cache
//! (idle sources are dropped), so a flood of sources costs bounded memory;
//! a source pushed out early only gets a fresh per-source budget, and the
//! total bound still holds.

use std::{
    net::IpAddr,
    num::NonZeroU32,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use governor::{
    Quota, RateLimiter,
    clock::Clock,
    middleware::NoOpMiddleware,
    state::{InMemoryState, NotKeyed},
};
use kube_fanout_listener::{clock::TokioClock, source::Source};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{AuthError, Exceeded};

/// Most sources whose budgets are tracked at once.
const MAX_SOURCES: u64 = 65_536;

/// A source's budget is forgotten after this long without a review.
const SOURCE_IDLE: Duration = Duration::from_secs(60);

/// What a caller refused for concurrency is told to wait: a review takes
/// milliseconds, so a slot is soon free again.
const CONCURRENCY_RETRY: Duration = Duration::from_secs(1);

/// A rate and concurrency bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// Reviews per second, sustained.
    pub rate: NonZeroU32,
    /// Reviews allowed at once above the rate (the bucket's size).
    pub burst: NonZeroU32,
    /// Reviews in flight at once.
    pub concurrency: NonZeroU32,
}

/// The bounds on TokenReviews.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReviewLimits {
    /// For each source address.
    pub per_source: Bound,
    /// For all sources together.
    pub total: Bound,
}

impl Default for ReviewLimits {
    /// 5 reviews/s per source (bursts of 20, 4 at once), 100/s in total
    /// (bursts of 200, 32 at once). docs/security.md says what they cost.
    fn default() -> Self {
        let n = |n: u32| NonZeroU32::new(n).expect("non-zero");
        ReviewLimits {
            per_source: Bound {
                rate: n(5),
                burst: n(20),
                concurrency: n(4),
            },
            total: Bound {
                rate: n(100),
                burst: n(200),
                concurrency: n(32),
            },
        }
    }
}

type Rate = RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<Duration>>;

/// One rate and concurrency bound in use.
#[derive(Debug)]
struct Budget {
    bound: Bound,
    rate: Rate,
    slots: Arc<Semaphore>,
    /// Until when (nanoseconds on the budget's clock) its rate refuses
    /// every review: what the last refusal by rate said, kept so that
    /// [`ReviewBudget::refuses`] can answer without drawing from it.
    empty_until: AtomicU64,
}

impl Budget {
    fn new(bound: Bound, clock: TokioClock) -> Self {
        Budget {
            bound,
            rate: RateLimiter::direct_with_clock(
                Quota::per_second(bound.rate).allow_burst(bound.burst),
                clock,
            ),
            slots: Arc::new(Semaphore::new(bound.concurrency.get() as usize)),
            empty_until: AtomicU64::new(0),
        }
    }

    /// Why [`Budget::take`] would refuse now, without taking anything: no
    /// slot free, or the rate empty until a later instant than now.
    fn refuses(&self, clock: &TokioClock, who: &Exceeded) -> Option<AuthError> {
        if self.slots.available_permits() == 0 {
            return Some(self.over_concurrency(who));
        }
        let now = clock.now();
        let until = Duration::from_nanos(self.empty_until.load(Ordering::Relaxed));
        (until > now).then(|| self.over_rate(who, until - now))
    }

    fn over_concurrency(&self, who: &Exceeded) -> AuthError {
        AuthError::Throttled {
            exceeded: who.clone(),
            limit: format!("{} at once", self.bound.concurrency),
            retry_after: CONCURRENCY_RETRY,
        }
    }

    fn over_rate(&self, who: &Exceeded, retry_after: Duration) -> AuthError {
        AuthError::Throttled {
            exceeded: who.clone(),
            limit: format!("{}/s, bursts of {}", self.bound.rate, self.bound.burst),
            retry_after,
        }
    }

    /// A slot, or how long to wait for one. The rate is drawn from only
    /// once a slot is had, so that a refused request spends nothing.
    fn take(&self, clock: &TokioClock, who: &Exceeded) -> Result<OwnedSemaphorePermit, AuthError> {
        let slot = self
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| self.over_concurrency(who))?;
        self.rate.check().map_err(|not_until| {
            let now = clock.now();
            let wait = not_until.wait_time_from(now);
            let until = u64::try_from((now + wait).as_nanos()).unwrap_or(u64::MAX);
            self.empty_until.fetch_max(until, Ordering::Relaxed);
            self.over_rate(who, wait)
        })?;
        Ok(slot)
    }
}

/// The budgets of every source and the total.
#[derive(Debug)]
pub struct ReviewBudget {
    limits: ReviewLimits,
    clock: TokioClock,
    total: Budget,
    sources: moka::sync::Cache<Source, Arc<Budget>>,
}

/// Leave to make one review; the slots it holds are given back on drop.
#[derive(Debug)]
pub struct Admitted {
    _source: Option<OwnedSemaphorePermit>,
    _total: OwnedSemaphorePermit,
}

impl ReviewBudget {
    /// Budgets enforcing `limits`.
    pub fn new(limits: ReviewLimits) -> Self {
        let clock = TokioClock::new();
        ReviewBudget {
            limits,
            total: Budget::new(limits.total, clock.clone()),
            clock,
            sources: moka::sync::Cache::builder()
                .max_capacity(MAX_SOURCES)
                .time_to_idle(SOURCE_IDLE)
                .build(),
        }
    }

    /// Why [`ReviewBudget::admit`] would refuse `source` now, found without
    /// drawing from any bound: a request that would be refused can be
    /// refused before anything else is done for it (the decision cache's
    /// per-key compute costs more than the refusal). `None` does not
    /// promise that `admit` succeeds, only that it is worth asking.
    pub fn refuses(&self, source: Option<IpAddr>) -> Option<AuthError> {
        if let Some(ip) = source {
            let key = Source::of(ip);
            if let Some(budget) = self.sources.get(&key)
                && let Some(refused) =
                    budget.refuses(&self.clock, &Exceeded::Source(key.to_string()))
            {
                return Some(refused);
            }
        }
        self.total.refuses(&self.clock, &Exceeded::Total)
    }

    /// Leave for one review on behalf of `source` (unknown: only the total
    /// bound applies; every listener knows its peers' addresses).
    pub fn admit(&self, source: Option<IpAddr>) -> Result<Admitted, AuthError> {
        let source_slot = match source {
            Some(ip) => {
                let key = Source::of(ip);
                let budget = self.sources.get_with(key, || {
                    Arc::new(Budget::new(self.limits.per_source, self.clock.clone()))
                });
                Some(budget.take(&self.clock, &Exceeded::Source(key.to_string()))?)
            }
            None => None,
        };
        let total = self.total.take(&self.clock, &Exceeded::Total)?;
        Ok(Admitted {
            _source: source_slot,
            _total: total,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    fn limits() -> ReviewLimits {
        ReviewLimits {
            per_source: Bound {
                rate: n(2),
                burst: n(4),
                concurrency: n(2),
            },
            total: Bound {
                rate: n(10),
                burst: n(10),
                concurrency: n(3),
            },
        }
    }

    fn retry_after(err: AuthError) -> (Exceeded, Duration) {
        match err {
            AuthError::Throttled {
                exceeded,
                retry_after,
                ..
            } => (exceeded, retry_after),
            other => panic!("not throttled: {other}"),
        }
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    #[tokio::test(start_paused = true)]
    async fn a_source_gets_its_burst_then_its_rate_and_is_told_when_to_retry() {
        let budget = ReviewBudget::new(limits());
        for _ in 0..4 {
            drop(budget.admit(Some(A)).unwrap());
        }
        let (who, wait) = retry_after(budget.admit(Some(A)).unwrap_err());
        assert_eq!(who, Exceeded::Source("10.0.0.1".into()));
        assert_eq!(wait, Duration::from_millis(500), "2/s: one every 500 ms");
        // Another source is not affected.
        drop(budget.admit(Some(B)).unwrap());
        tokio::time::advance(Duration::from_millis(499)).await;
        budget.admit(Some(A)).unwrap_err();
        tokio::time::advance(Duration::from_millis(1)).await;
        drop(budget.admit(Some(A)).unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn concurrency_is_bounded_per_source_and_in_total_and_slots_come_back() {
        let budget = ReviewBudget::new(limits());
        let a1 = budget.admit(Some(A)).unwrap();
        let _a2 = budget.admit(Some(A)).unwrap();
        let (who, wait) = retry_after(budget.admit(Some(A)).unwrap_err());
        assert_eq!(who, Exceeded::Source("10.0.0.1".into()));
        assert_eq!(wait, CONCURRENCY_RETRY);
        let _b1 = budget.admit(Some(B)).unwrap();
        // Three in flight in total: B's second is refused by the total.
        let (who, _) = retry_after(budget.admit(Some(B)).unwrap_err());
        assert_eq!(who, Exceeded::Total);
        drop(a1);
        budget.admit(Some(B)).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn many_sources_together_are_held_to_the_total_rate() {
        let budget = ReviewBudget::new(limits());
        let admitted = (0..100u8)
            .filter(|i| {
                let ip = IpAddr::V4(std::net::Ipv4Addr::new(10, 1, 0, *i));
                budget.admit(Some(ip)).is_ok()
            })
            .count();
        assert_eq!(admitted, 10, "the total burst, whatever the sources");
        tokio::time::advance(Duration::from_secs(1)).await;
        let admitted = (100..200u8)
            .filter(|i| {
                let ip = IpAddr::V4(std::net::Ipv4Addr::new(10, 1, 0, *i));
                budget.admit(Some(ip)).is_ok()
            })
            .count();
        assert_eq!(admitted, 10, "then the total rate");
    }

    #[tokio::test(start_paused = true)]
    async fn what_admit_would_refuse_is_known_without_drawing_from_the_bounds() {
        let budget = ReviewBudget::new(limits());
        assert!(budget.refuses(Some(A)).is_none(), "a new source");
        for _ in 0..4 {
            assert!(budget.refuses(Some(A)).is_none());
            drop(budget.admit(Some(A)).unwrap());
        }
        // The burst is spent; the refusal by rate says until when.
        budget.admit(Some(A)).unwrap_err();
        for _ in 0..100 {
            let (who, wait) = retry_after(budget.refuses(Some(A)).expect("refused"));
            assert_eq!(who, Exceeded::Source("10.0.0.1".into()));
            assert_eq!(wait, Duration::from_millis(500));
        }
        // Asking took nothing: the rate refills on time, and B is not held
        // to A's bound.
        assert!(budget.refuses(Some(B)).is_none());
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(budget.refuses(Some(A)).is_none());
        let _a = budget.admit(Some(A)).unwrap();
        // Concurrency: with all total slots held, every source is refused.
        let _b1 = budget.admit(Some(B)).unwrap();
        let _b2 = budget.admit(Some(B)).unwrap();
        let (who, wait) = retry_after(budget.refuses(Some(B)).expect("refused"));
        assert_eq!(
            (who, wait),
            (Exceeded::Source("10.0.0.2".into()), CONCURRENCY_RETRY)
        );
        let (who, _) = retry_after(budget.refuses(None).expect("refused"));
        assert_eq!(who, Exceeded::Total);
    }
}

//! What failing to authenticate may cost the server: each source has a
//! budget of failed authentications (a token bucket: a burst, refilled at
//! a rate), and a source that has spent it is shut out until its next
//! token: its connections that never authenticated are closed, and its
//! new ones are refused as they are accepted, before a handshake or a
//! request is spent on them.
//!
//! Why, beside the TokenReview budget (`kube_fanout_auth::budget`), which
//! already keeps a flood of garbage tokens from costing the API server
//! more than a stated rate: refusing a request is cheap next to a review,
//! but not free. A refused request still costs its HTTP/2 frames, header
//! decoding, a status and a response (about 0.2 ms of CPU in a release
//! build, BENCHMARKS.md), so a flood of hundreds a second from one client
//! took CPU from the subscribers on the same cores. With a failure budget
//! a source's flood costs at most its rate of failures (plus one refused
//! accept per connection attempt while it is shut out).
//!
//! While a source is shut out, its new connections are kept out in the
//! kernel: the listening socket's packet filter ([`crate::gate`]) drops
//! its SYNs, so its client's own TCP stack waits and retries (after 1 s,
//! then 3 s, ...) at no cost to the server; a connection from it accepted
//! anyway (before the filter is in place, or beyond the sources it holds)
//! is closed as it is accepted.
//!
//! A connection on which a request has been authenticated is never closed
//! for its source's failures: a client that shares its address with a
//! flooding one keeps the streams it has. Its new connections are refused
//! while the source is shut out, as any per-source bound does to whoever
//! shares the source.
//!
//! The per-source state lives in a bounded moka cache (idle sources are
//! dropped), so a flood of sources costs bounded memory; a source pushed
//! out early only gets a fresh budget.

use std::{
    collections::HashMap,
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

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::{clock::TokioClock, source::Source};

/// Most sources whose failures are tracked at once.
const MAX_SOURCES: u64 = 65_536;

/// A source's failures are forgotten after this long without one (far
/// longer than any shut-out lasts: a burst at the rate).
const SOURCE_IDLE: Duration = Duration::from_secs(60);

/// The shortest a shut-out lasts, even when the source's next failure is
/// allowed sooner: each time it is let in again costs a connection's
/// set-up, more than the failures it may then spend (measured: shut out
/// only until the next failure at 5/s, eight flooding sources cost 5.8
/// times a floodless phase's CPU). A second is also the wait of a client
/// whose SYN was dropped before its TCP stack sends it again.
const MIN_SHUT_OUT: Duration = Duration::from_secs(1);

/// How many failed authentications a source may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureBound {
    /// Failures per second, sustained.
    pub rate: NonZeroU32,
    /// Failures allowed at once above the rate (the bucket's size).
    pub burst: NonZeroU32,
}

impl Default for FailureBound {
    /// 10 failures a second, in bursts of 50: twice the TokenReview budget
    /// of a source (5/s, bursts of 20), so that a client retrying its
    /// refused reviews at the pace it is told is never shut out, and far
    /// below what a flood sends (hundreds a second).
    fn default() -> Self {
        let n = |n: u32| NonZeroU32::new(n).expect("non-zero");
        FailureBound {
            rate: n(10),
            burst: n(50),
        }
    }
}

impl std::fmt::Display for FailureBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/s, bursts of {}", self.rate, self.burst)
    }
}

/// A source shut out for failing to authenticate too often.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "too many failed authentications from {from}: at most {bound} \
     (--auth-failure-rate-per-source, --auth-failure-burst-per-source); \
     its connections that authenticated nothing are closed and new ones refused for {retry_after:?}"
)]
pub struct ShutOut {
    /// The source shut out.
    pub from: Source,
    /// The bound it spent.
    pub bound: FailureBound,
    /// When it has a failure to spend again (at least [`MIN_SHUT_OUT`]).
    pub retry_after: Duration,
}

type Rate = RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<Duration>>;

/// One source's budget of failures.
#[derive(Debug)]
struct SourceFailures {
    rate: Rate,
    /// Until when (nanoseconds on the clock) the source is shut out: what
    /// the last failure refused by the rate said, kept so that
    /// [`AuthFailures::shut_out`] can answer without drawing from it.
    shut_until: AtomicU64,
}

/// The failure budgets of every source of one listener.
#[derive(Debug)]
pub(crate) struct AuthFailures {
    bound: FailureBound,
    clock: TokioClock,
    sources: moka::sync::Cache<Source, Arc<SourceFailures>>,
    /// The sources shut out now (and maybe some whose time has passed),
    /// each until when: what the gate keeps out. Bounded by
    /// [`MAX_SOURCES`] as the budgets are.
    shut: Mutex<HashMap<Source, Duration>>,
    /// Told each time a source is newly shut out.
    changed: watch::Sender<()>,
}

impl AuthFailures {
    /// Budgets of `bound` each, for sources yet to fail.
    pub(crate) fn new(bound: FailureBound) -> Self {
        AuthFailures {
            bound,
            clock: TokioClock::new(),
            sources: moka::sync::Cache::builder()
                .max_capacity(MAX_SOURCES)
                .time_to_idle(SOURCE_IDLE)
                .build(),
            shut: Mutex::default(),
            changed: watch::Sender::new(()),
        }
    }

    /// Counts a failed authentication from `source`; `Err` once the
    /// source's budget is spent (it is then shut out until the returned
    /// time has passed).
    pub(crate) fn failed(&self, source: Source) -> Result<(), ShutOut> {
        let failures = self.sources.get_with(source, || {
            Arc::new(SourceFailures {
                rate: RateLimiter::direct_with_clock(
                    Quota::per_second(self.bound.rate).allow_burst(self.bound.burst),
                    self.clock.clone(),
                ),
                shut_until: AtomicU64::new(0),
            })
        });
        failures.rate.check().map_err(|not_until| {
            let now = self.clock.now();
            let wait = not_until.wait_time_from(now).max(MIN_SHUT_OUT);
            let until = u64::try_from((now + wait).as_nanos()).unwrap_or(u64::MAX);
            failures.shut_until.fetch_max(until, Ordering::Relaxed);
            self.record_shut_out(source, now + wait);
            self.shut_out_for(source, wait)
        })
    }

    /// Whether `source` is shut out now, found without drawing from its
    /// budget.
    pub(crate) fn shut_out(&self, source: Source) -> Option<ShutOut> {
        let failures = self.sources.get(&source)?;
        let now = self.clock.now();
        let until = Duration::from_nanos(failures.shut_until.load(Ordering::Relaxed));
        (until > now).then(|| self.shut_out_for(source, until - now))
    }

    fn record_shut_out(&self, source: Source, until: Duration) {
        let mut shut = self.shut.lock();
        let now = self.clock.now();
        if shut.len() as u64 >= MAX_SOURCES {
            shut.retain(|_, until| *until > now);
        }
        if (shut.len() as u64) < MAX_SOURCES {
            let newly = shut.insert(source, until).is_none_or(|was| was <= now);
            if newly {
                self.changed.send_replace(());
            }
        }
    }

    /// The sources shut out now, and when the first of them is let in
    /// again (`None`: none is shut out); those whose time has passed are
    /// forgotten.
    pub(crate) fn shut_sources(&self) -> (Vec<Source>, Option<tokio::time::Instant>) {
        let mut shut = self.shut.lock();
        let now = self.clock.now();
        shut.retain(|_, until| *until > now);
        let first = shut.values().min().map(|until| self.clock.instant(*until));
        (shut.keys().copied().collect(), first)
    }

    /// A receiver that is told each time a source is newly shut out.
    pub(crate) fn subscribe(&self) -> watch::Receiver<()> {
        self.changed.subscribe()
    }

    fn shut_out_for(&self, source: Source, retry_after: Duration) -> ShutOut {
        ShutOut {
            from: source,
            bound: self.bound,
            retry_after,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(s: &str) -> Source {
        Source::of(s.parse().unwrap())
    }

    fn bound(rate: u32, burst: u32) -> FailureBound {
        FailureBound {
            rate: NonZeroU32::new(rate).unwrap(),
            burst: NonZeroU32::new(burst).unwrap(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_is_shut_out_once_its_burst_is_spent_until_its_next_failure_is_allowed() {
        let failures = AuthFailures::new(bound(4, 3));
        let a = source("10.0.0.1");
        for _ in 0..3 {
            assert_eq!(failures.shut_out(a), None);
            failures.failed(a).unwrap();
        }
        assert_eq!(failures.shut_out(a), None, "not until a failure is refused");
        let out = failures.failed(a).unwrap_err();
        assert_eq!(
            out.retry_after, MIN_SHUT_OUT,
            "4/s would allow one after 250 ms, but a shut-out lasts a second"
        );
        assert_eq!(out.from, a);
        // Asking draws nothing: the shut-out ends on time however often
        // it is asked about.
        for _ in 0..100 {
            assert_eq!(
                failures.shut_out(a).map(|o| o.retry_after),
                Some(MIN_SHUT_OUT)
            );
        }
        // Another source is not shut out by A's failures.
        let b = source("10.0.0.2");
        assert_eq!(failures.shut_out(b), None);
        failures.failed(b).unwrap();
        tokio::time::advance(MIN_SHUT_OUT - Duration::from_millis(1)).await;
        assert_eq!(
            failures.shut_out(a).map(|o| o.retry_after),
            Some(Duration::from_millis(1))
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(failures.shut_out(a), None);
        // A second at 4/s earned back the whole burst, and no more.
        for _ in 0..3 {
            failures.failed(a).unwrap();
        }
        failures.failed(a).unwrap_err();
    }

    #[test]
    fn the_refusal_names_the_source_the_bound_and_the_flags() {
        let out = ShutOut {
            from: source("2001:db8::1"),
            bound: FailureBound::default(),
            retry_after: Duration::from_millis(100),
        };
        assert_eq!(
            out.to_string(),
            "too many failed authentications from 2001:db8::/64: at most 10/s, bursts of 50 \
             (--auth-failure-rate-per-source, --auth-failure-burst-per-source); \
             its connections that authenticated nothing are closed and new ones refused for 100ms"
        );
    }
}

//! How fast events reach one live subscriber, and so whether, woken, it
//! waits a little for more before reading: coalescing that costs no
//! latency where it cannot help.
//!
//! A subscriber woken by an event reads it at once unless events have
//! been coming to it faster than one per hold
//! ([`Limits::min_send_interval`](super::request::Limits::min_send_interval)),
//! so that more than one would share a write. Then it waits until the hold
//! has passed since its last delivery, and reads all that came meanwhile:
//! tonic encodes them into one HTTP/2 DATA frame, one TLS record, one
//! write. What waits is only an event that follows a delivery closer than
//! the hold, to a subscriber whose recent events came that fast; a lone
//! event, a burst after a quiet, and a steady 100 events a second (10 ms
//! apart) go at once.
//!
//! The rate is measured per batch, not per event (the clock is read when
//! the subscriber begins to wait, as it already is for the progress
//! timer): the time from one wait to the next over the events sent
//! between, smoothed over about eight batches. Each sample is capped at
//! four holds, so that a long quiet does not take a hundred fast events to
//! forget; a new subscriber starts at the cap, so its first events go at
//! once and it holds only after some ten batches came fast.
//!
//! The line is one event per hold (about 330 a second at 3 ms), not
//! lower: an API server under 1,000 writes a second delivers 600 to 900
//! of them a second (BENCHMARKS.md), and a line at half the hold (670 a
//! second) left coalescing off for most of such a stream.

use std::time::Duration;

use tokio::time::Instant;

/// The interval between the events a subscriber is sent, as measured so
/// far.
#[derive(Debug)]
pub(super) struct Pace {
    /// Smoothed interval between events.
    per_event: Duration,
    /// Events sent since the last wait began.
    sent: u32,
    /// When the last wait after a batch began (or the stream started).
    since: Instant,
}

impl Pace {
    /// A subscriber that starts following at `now`, with `hold`: as slow
    /// as a sample can be.
    pub(super) fn new(now: Instant, hold: Duration) -> Self {
        Pace {
            per_event: hold * 4,
            sent: 0,
            since: now,
        }
    }

    /// One event was handed out.
    pub(super) fn sent_one(&mut self) {
        self.sent = self.sent.saturating_add(1);
    }

    /// The subscriber begins to wait at `now`: the batch sent since the
    /// last wait is taken into the estimate (with `hold` as the cap's
    /// measure).
    pub(super) fn waiting(&mut self, now: Instant, hold: Duration) {
        if self.sent == 0 {
            return;
        }
        let sample = ((now - self.since) / self.sent).min(hold * 4);
        self.per_event = (self.per_event * 7 + sample) / 8;
        self.sent = 0;
        self.since = now;
    }

    /// Until when a subscriber woken now, last sent something at
    /// `last_sent`, waits before reading, given the `hold`: `last_sent +
    /// hold` if its events have come faster than one per hold,
    /// otherwise not at all (`None`; also with a zero hold).
    pub(super) fn hold_until(&self, last_sent: Instant, hold: Duration) -> Option<Instant> {
        (!hold.is_zero() && self.per_event < hold).then_some(last_sent + hold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: Duration = Duration::from_millis(3);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_new_subscriber_holds_only_after_many_fast_batches_and_never_with_a_zero_hold() {
        let start = Instant::now();
        let mut pace = Pace::new(start, HOLD);
        assert_eq!(pace.hold_until(start, HOLD), None);
        // Batches with no time between them: the fastest there are.
        let mut batches = 0;
        while pace.hold_until(start, HOLD).is_none() {
            pace.sent_one();
            pace.waiting(start, HOLD);
            batches += 1;
            assert!(batches < 100, "never holds");
        }
        assert!((9..=12).contains(&batches), "held after {batches} batches");
        assert_eq!(pace.hold_until(start, HOLD), Some(start + HOLD));
        assert_eq!(pace.hold_until(start, Duration::ZERO), None);
        let mut off = Pace::new(start, Duration::ZERO);
        off.sent_one();
        off.waiting(start, Duration::ZERO);
        assert_eq!(off.hold_until(start, Duration::ZERO), None);
    }

    #[test]
    fn events_ten_milliseconds_apart_never_hold_and_one_apart_soon_do() {
        let start = Instant::now();
        let mut pace = Pace::new(start, HOLD);
        let mut now = start;
        for _ in 0..50 {
            now += ms(10);
            pace.sent_one();
            pace.waiting(now, HOLD);
            assert_eq!(pace.hold_until(now, HOLD), None, "at 100 a second");
        }
        // From 10 ms down to under 3 ms: some twelve batches.
        let mut held_after = None;
        for i in 0..40 {
            now += ms(1);
            pace.sent_one();
            pace.waiting(now, HOLD);
            if pace.hold_until(now, HOLD) == Some(now + HOLD) {
                held_after.get_or_insert(i);
            }
        }
        let held_after = held_after.expect("holds at 1,000 a second");
        assert!(held_after < 15, "after {held_after} batches");
    }

    #[test]
    fn a_batch_counts_as_its_events_and_a_quiet_is_forgotten_soon() {
        let start = Instant::now();
        let mut pace = Pace::new(start, HOLD);
        // Three events per 3 ms batch: 1 ms each, so it holds on.
        let mut now = start;
        for _ in 0..40 {
            now += HOLD;
            for _ in 0..3 {
                pace.sent_one();
            }
            pace.waiting(now, HOLD);
        }
        assert!(pace.hold_until(now, HOLD).is_some());
        // An hour's quiet is one sample of at most 12 ms: still fast, but
        // the event after the quiet was not held (its last send was long
        // past), and two more slow batches turn the hold off.
        let before_quiet = now;
        now += Duration::from_secs(3600);
        assert!(pace.hold_until(before_quiet, HOLD).unwrap() < now);
        pace.sent_one();
        pace.waiting(now, HOLD);
        assert!(pace.per_event <= ms(3), "{:?}", pace.per_event);
        for _ in 0..2 {
            now += ms(10);
            pace.sent_one();
            pace.waiting(now, HOLD);
        }
        assert_eq!(pace.hold_until(now, HOLD), None);
        // A wait with nothing sent changes nothing.
        let before = pace.per_event;
        pace.waiting(now + ms(500), HOLD);
        assert_eq!(pace.per_event, before);
    }
}

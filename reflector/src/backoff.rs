//! Exponential backoff with jitter, reset after a healthy spell: the
//! reflector's and the client's retry pacing (client-go's defaults).

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

/// Backoff pacing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffConfig {
    /// The first delay.
    pub initial: Duration,
    /// The largest delay before jitter.
    pub max: Duration,
    /// After this long without a failure the delay starts over.
    pub reset_after: Duration,
    /// Each delay is stretched by a random factor in [1, 1 + jitter).
    pub jitter: f64,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            reset_after: Duration::from_secs(120),
            jitter: 1.0,
        }
    }
}

/// The state of one backoff sequence.
#[derive(Debug, Clone)]
pub struct Backoff {
    config: BackoffConfig,
    next: Duration,
    last_failure: Option<Instant>,
}

impl Backoff {
    /// A fresh sequence.
    pub fn new(config: BackoffConfig) -> Self {
        Backoff {
            config,
            next: config.initial,
            last_failure: None,
        }
    }

    /// The delay to wait after a failure now: doubles each time, capped,
    /// jittered, and back to the initial delay when the previous failure
    /// is older than `reset_after`.
    pub fn next_delay(&mut self) -> Duration {
        let now = Instant::now();
        if self
            .last_failure
            .is_some_and(|t| now.duration_since(t) >= self.config.reset_after)
        {
            self.next = self.config.initial;
        }
        self.last_failure = Some(now);
        let base = self.next;
        self.next = (self.next * 2).min(self.config.max);
        let stretch = 1.0 + rand::rng().random_range(0.0..=self.config.jitter.max(0.0));
        base.mul_f64(stretch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn doubles_to_the_cap_and_resets_after_a_healthy_spell() {
        let config = BackoffConfig {
            jitter: 0.0,
            ..BackoffConfig::default()
        };
        let mut b = Backoff::new(config);
        let delays: Vec<u64> = (0..8).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(delays, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        tokio::time::advance(Duration::from_secs(119)).await;
        assert_eq!(b.next_delay(), Duration::from_secs(30));
        tokio::time::advance(Duration::from_secs(120)).await;
        assert_eq!(b.next_delay(), Duration::from_millis(800));
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_stays_within_its_factor() {
        let mut b = Backoff::new(BackoffConfig::default());
        for base in [800u128, 1600, 3200] {
            let d = b.next_delay().as_millis();
            assert!(
                (base..=2 * base).contains(&d),
                "{d} outside [{base}, {}]",
                2 * base
            );
        }
    }
}

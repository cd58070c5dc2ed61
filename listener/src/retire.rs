//! Retiring old connections, so that subscribers spread over replicas.
//!
//! A watch never ends by itself, nor does the HTTP/2 connection under it.
//! Without help, a replica added later (a scale-up, an autoscaler, the
//! last pod of a rolling update) gets only the clients that connect after
//! it starts, and the others stay where they are for as long as they run.
//!
//! With a maximum connection age, each connection is told to go once it
//! is that old: an HTTP/2 GOAWAY (tonic's `max_connection_age`), after
//! which its client opens any new call on a new connection, which the
//! Service may send to any replica. Its watches end a little later, with
//! UNAVAILABLE, reason `ConnectionRetired`, and the resourceVersion to
//! resume from, and their clients resume on the new connection, exactly.
//! When that happens is drawn per connection within a tenth of the age
//! past it, so that clients that connected together (say after a replica
//! restarted) move apart rather than all at once. Once its last call has
//! ended, the connection closes.
//!
//! tonic's `max_connection_age_grace` is not used: with it, tonic sends no
//! GOAWAY at all and closes the connection at age + grace, ending its calls
//! abruptly.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

/// Time between the GOAWAY and the earliest end of the connection's
/// watches, so that a client resuming at once already knows to use a new
/// connection; tonic starts counting the age a moment after
/// [`MaxConnectionAge::retire_at`] is drawn.
const MARGIN: Duration = Duration::from_secs(1);

/// How old a connection may get before it is retired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxConnectionAge(pub Duration);

impl MaxConnectionAge {
    /// When the watches of a connection served from `start` end: after
    /// the age and [`MARGIN`], plus up to a tenth of the age, drawn anew
    /// for each connection.
    pub fn retire_at(&self, start: Instant) -> Instant {
        let spread = self.0.mul_f64(rand::rng().random_range(0.0..0.1));
        start + self.0 + MARGIN + spread
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_end_within_a_tenth_of_the_age_past_it() {
        let age = MaxConnectionAge(Duration::from_secs(600));
        let start = Instant::now();
        let ends: Vec<Instant> = (0..1000).map(|_| age.retire_at(start)).collect();
        for &end in &ends {
            assert!(end >= start + age.0 + MARGIN, "{:?}", end - start);
            assert!(
                end < start + age.0 + MARGIN + age.0 / 10,
                "{:?}",
                end - start
            );
        }
        // Spread over the tenth, not bunched: each sixth of it is drawn.
        let mut sixths = [0; 6];
        for &end in &ends {
            let into = (end - start - age.0 - MARGIN).as_secs_f64() / 60.0;
            sixths[(into * 6.0) as usize] += 1;
        }
        assert!(sixths.iter().all(|&n| n > 100), "{sixths:?}");
    }
}

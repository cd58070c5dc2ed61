//! What authenticating did, for operators to graph: TokenReviews made, by
//! outcome, and requests refused by a review bound, by bound. A rising
//! `throttled{bound="total"}` with few `rejected` reviews means the total
//! bound is turning away real clients; many `rejected` ones, a flood.

use prometheus_client::{
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

/// One label and its value.
type Label = [(&'static str, &'static str); 1];

/// The authentication counters.
#[derive(Debug, Clone, Default)]
pub struct AuthCounters {
    reviews: Family<Label, Counter>,
    throttled: Family<Label, Counter>,
}

/// How a TokenReview ended.
#[derive(Debug, Clone, Copy)]
pub enum Outcome {
    /// The token was accepted.
    Accepted,
    /// The token was not accepted.
    Rejected,
    /// No answer (the API server unreachable, an error, a timeout).
    Failed,
}

impl AuthCounters {
    /// One TokenReview made.
    pub fn reviewed(&self, outcome: Outcome) {
        let value = match outcome {
            Outcome::Accepted => "accepted",
            Outcome::Rejected => "rejected",
            Outcome::Failed => "failed",
        };
        self.reviews.get_or_create(&[("outcome", value)]).inc();
    }

    /// One request refused by the per-source (`source`) or the total bound.
    pub fn throttled(&self, per_source: bool) {
        let bound = if per_source { "source" } else { "total" };
        self.throttled.get_or_create(&[("bound", bound)]).inc();
    }

    /// Adds the counters to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kube_fanout_token_reviews",
            "TokenReviews made, by outcome (accepted, rejected, failed).",
            self.reviews.clone(),
        );
        registry.register(
            "kube_fanout_token_reviews_throttled",
            "Requests refused without a TokenReview because a review bound (source: the client address's, total) was reached.",
            self.throttled.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_exposed_by_label() {
        let counters = AuthCounters::default();
        counters.reviewed(Outcome::Rejected);
        counters.reviewed(Outcome::Rejected);
        counters.throttled(true);
        let mut registry = Registry::default();
        counters.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "kube_fanout_token_reviews_total{outcome=\"rejected\"} 2",
            "kube_fanout_token_reviews_throttled_total{bound=\"source\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
    }
}

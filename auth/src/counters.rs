//! What authenticating and authorizing did, for operators to graph:
//! TokenReviews and SubjectAccessReviews made, by outcome; requests
//! refused by a review bound, by bound; and tokens and accesses checked,
//! cached answers included, so that reviews over checks is the share the
//! caches did not answer. A rising `throttled{bound="total"}` with few
//! `rejected` reviews means the total bound is turning away real clients;
//! many `rejected` ones, a flood.

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
    access_reviews: Family<Label, Counter>,
    checks: Family<Label, Counter>,
    shut_out: Counter,
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

/// How a SubjectAccessReview ended.
#[derive(Debug, Clone, Copy)]
pub enum AccessOutcome {
    /// The access was allowed.
    Allowed,
    /// The access was denied.
    Denied,
    /// No answer (the API server unreachable, an error, a timeout).
    Failed,
}

/// What was checked, from the cache or by a review.
#[derive(Debug, Clone, Copy)]
pub enum Check {
    /// A bearer token (TokenReview).
    Token,
    /// A resource access (SubjectAccessReview).
    Access,
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

    /// One SubjectAccessReview made.
    pub fn access_reviewed(&self, outcome: AccessOutcome) {
        let value = match outcome {
            AccessOutcome::Allowed => "allowed",
            AccessOutcome::Denied => "denied",
            AccessOutcome::Failed => "failed",
        };
        self.access_reviews
            .get_or_create(&[("outcome", value)])
            .inc();
    }

    /// One request refused without looking at its credentials, because
    /// its source was shut out for failing to authenticate too often.
    pub fn refused_shut_out(&self) {
        self.shut_out.inc();
    }

    /// One token or access checked, whether the cache answered or not.
    pub fn checked(&self, check: Check) {
        let value = match check {
            Check::Token => "token",
            Check::Access => "access",
        };
        self.checks.get_or_create(&[("check", value)]).inc();
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
        registry.register(
            "kube_fanout_access_reviews",
            "SubjectAccessReviews made for Watch, List and Get, by outcome (allowed, denied, failed).",
            self.access_reviews.clone(),
        );
        registry.register(
            "kube_fanout_auth_checks",
            "Tokens (check=token) and resource accesses (check=access) checked, answered from the cache or by a review: reviews over checks is the caches' miss rate.",
            self.checks.clone(),
        );
        registry.register(
            "kube_fanout_auth_refused_shut_out",
            "Requests refused without looking at their credentials because their source had failed to authenticate too often (--auth-failure-rate-per-source); the connections closed and refused for it are kube_fanout_connections_closed_shut_out_total and kube_fanout_connections_refused_total{bound=\"shut_out\"}.",
            self.shut_out.clone(),
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
        counters.access_reviewed(AccessOutcome::Denied);
        counters.access_reviewed(AccessOutcome::Failed);
        counters.checked(Check::Access);
        counters.checked(Check::Token);
        counters.checked(Check::Token);
        counters.refused_shut_out();
        let mut registry = Registry::default();
        counters.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "kube_fanout_token_reviews_total{outcome=\"rejected\"} 2",
            "kube_fanout_token_reviews_throttled_total{bound=\"source\"} 1",
            "kube_fanout_access_reviews_total{outcome=\"denied\"} 1",
            "kube_fanout_access_reviews_total{outcome=\"failed\"} 1",
            "kube_fanout_auth_checks_total{check=\"access\"} 1",
            "kube_fanout_auth_checks_total{check=\"token\"} 2",
            "kube_fanout_auth_refused_shut_out_total 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
    }
}

//! Bearer tokens checked with the TokenReview API, answers cached like the
//! API server's webhook token authenticator: accepted tokens for the
//! success TTL (never past the token's own `exp`), rejected ones for the
//! (shorter) failure TTL. The cache is keyed by the token's SHA-256, so no
//! token is kept in it, and none is logged.
//!
//! A token not known to be good (never accepted, or its accepted answer
//! long gone) costs a review only within the [`ReviewBudget`]; a token
//! whose accepted answer just expired is reviewed again without it, as is
//! the re-review of an open watch's token ([`Authenticator::revalidate`]):
//! those are real clients, bounded by the tokens that exist. A JWT past its
//! `exp` is refused without one.

use std::{
    net::IpAddr,
    sync::Arc,
    time::{Duration, SystemTime},
};

use tokio::time::Instant;

use crate::{
    budget::ReviewBudget,
    cache::TtlCache,
    counters::{AuthCounters, Check, Outcome},
    credential::{instant_of, jwt_expiry},
    error::{AuthError, Exceeded, fmt_time},
    identity::Identity,
    reviews::{TokenReviewer, TokenVerdict},
};

/// Most tokens cached at once.
const CACHE_CAPACITY: u64 = 16_384;

/// How long TokenReview answers are kept.
#[derive(Debug, Clone, Copy)]
pub struct TokenCacheTtl {
    /// An accepted token; also how often an open watch's token is
    /// reviewed again.
    pub success: Duration,
    /// A rejected token.
    pub failure: Duration,
}

/// Who holds a token, and until when that answer holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// The token's holder.
    pub identity: Identity,
    /// When the token must be reviewed again.
    pub expires: Instant,
}

/// Turns bearer tokens into identities.
#[derive(Debug)]
pub struct Authenticator {
    reviewer: Arc<dyn TokenReviewer>,
    audiences: Vec<String>,
    ttl: TokenCacheTtl,
    budget: ReviewBudget,
    cache: TtlCache<[u8; 32], TokenVerdict>,
    counters: AuthCounters,
}

/// Who is asking for a review: a new request from an address, or an open
/// watch whose token was accepted before.
#[derive(Debug, Clone, Copy)]
enum Asker {
    Request(Option<IpAddr>),
    Watch,
}

impl Authenticator {
    /// Reviews tokens with `reviewer` for `audiences` (empty: the API
    /// server's own), within `budget`, caching answers for `ttl`.
    pub fn new(
        reviewer: Arc<dyn TokenReviewer>,
        audiences: Vec<String>,
        ttl: TokenCacheTtl,
        budget: ReviewBudget,
    ) -> Self {
        Authenticator {
            reviewer,
            audiences,
            ttl,
            budget,
            cache: TtlCache::new(CACHE_CAPACITY),
            counters: AuthCounters::default(),
        }
    }

    /// What it counts, for the metrics registry.
    pub fn counters(&self) -> &AuthCounters {
        &self.counters
    }

    /// Who holds `token`, sent by a request from `source`.
    pub async fn authenticate(
        &self,
        token: &str,
        source: Option<IpAddr>,
    ) -> Result<Authenticated, AuthError> {
        self.review(token, Asker::Request(source)).await
    }

    /// Who holds `token` now, for a watch opened with it: the cached
    /// answer while it holds (shared with new requests), else a review
    /// outside the budget. A token no longer accepted is
    /// [`AuthError::TokenRevoked`].
    pub async fn revalidate(&self, token: &str) -> Result<Authenticated, AuthError> {
        self.review(token, Asker::Watch)
            .await
            .map_err(|err| match err {
                AuthError::InvalidToken(reason) => AuthError::TokenRevoked(reason),
                other => other,
            })
    }

    async fn review(&self, token: &str, asker: Asker) -> Result<Authenticated, AuthError> {
        self.counters.checked(Check::Token);
        // Past its own exp a token is refused without a review: the API
        // server would accept it for another minute (its JWT validation's
        // leeway), and believing that would re-review it in a loop.
        if let Some(exp) = jwt_expiry(token)
            && exp <= SystemTime::now()
        {
            return Err(AuthError::InvalidToken(format!(
                "it expired at {} (its exp claim)",
                fmt_time(exp)
            )));
        }
        let key: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
            .as_ref()
            .try_into()
            .expect("SHA-256 is 32 bytes");
        let held = self.cache.peek(&key).await;
        if let Some((verdict, expires)) = &held
            && *expires > Instant::now()
        {
            let identity = verdict.clone().map_err(AuthError::InvalidToken)?;
            return Ok(Authenticated {
                identity,
                expires: *expires,
            });
        }
        // A request the budget would refuse is refused here, before the
        // cache's per-key compute (under a flood of garbage tokens that
        // compute, for a key no one else asks for, was most of what
        // authenticating cost kube-fanout's CPU). The same check as in
        // the compute below, which still decides: this one draws nothing.
        if let Asker::Request(source) = asker
            && !matches!(held, Some((Ok(_), _)))
            && let Some(refused) = self.budget.refuses(source)
        {
            self.count_throttled(&refused);
            return Err(refused);
        }
        let (verdict, expires) = self
            .cache
            .get_or_fetch(&key, |stale| async move {
                let known_good = matches!(stale, Some(Ok(_)));
                let _admitted = match asker {
                    Asker::Request(source) if !known_good => Some(
                        self.budget
                            .admit(source)
                            .inspect_err(|err| self.count_throttled(err))?,
                    ),
                    _ => None,
                };
                let verdict = self
                    .reviewer
                    .review_token(token, &self.audiences)
                    .await
                    .inspect_err(|_| self.counters.reviewed(Outcome::Failed))?;
                self.counters.reviewed(match verdict {
                    Ok(_) => Outcome::Accepted,
                    Err(_) => Outcome::Rejected,
                });
                let ttl = match &verdict {
                    Ok(_) => self.success_ttl(token),
                    Err(_) => self.ttl.failure,
                };
                Ok::<_, AuthError>((verdict, ttl))
            })
            .await?;
        let identity = verdict.map_err(AuthError::InvalidToken)?;
        Ok(Authenticated { identity, expires })
    }

    /// Counts a refusal by the budget.
    fn count_throttled(&self, err: &AuthError) {
        if let AuthError::Throttled { exceeded, .. } = err {
            self.counters
                .throttled(matches!(exceeded, Exceeded::Source(_)));
        }
    }

    /// The success TTL, cut short at the token's `exp` if it has one.
    fn success_ttl(&self, token: &str) -> Duration {
        match jwt_expiry(token) {
            Some(exp) => (instant_of(exp) - Instant::now()).min(self.ttl.success),
            None => self.ttl.success,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{num::NonZeroU32, sync::atomic::Ordering};

    use base64::Engine;

    use super::*;
    use crate::{
        budget::{Bound, ReviewLimits},
        fakes::Tokens as Fake,
    };

    const SUCCESS_TTL: Duration = Duration::from_secs(120);

    fn authenticator(fake: Arc<Fake>, limits: ReviewLimits) -> Authenticator {
        Authenticator::new(
            fake,
            vec![],
            TokenCacheTtl {
                success: SUCCESS_TTL,
                failure: Duration::from_secs(10),
            },
            ReviewBudget::new(limits),
        )
    }

    fn tight() -> ReviewLimits {
        let n = |n| NonZeroU32::new(n).unwrap();
        let bound = Bound {
            rate: n(1),
            burst: n(3),
            concurrency: n(3),
        };
        ReviewLimits {
            per_source: bound,
            total: bound,
        }
    }

    const SOURCE: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));

    #[tokio::test(start_paused = true)]
    async fn answers_are_cached_for_their_ttl_and_then_fail_closed() {
        let fake = Arc::new(Fake::default());
        let authn = authenticator(fake.clone(), ReviewLimits::default());
        let good = authn.authenticate("good", SOURCE).await.unwrap();
        assert_eq!(good.identity.user, "alice");
        assert_eq!(good.expires, Instant::now() + SUCCESS_TTL);
        let bad = authn.authenticate("bad", SOURCE).await.unwrap_err();
        assert!(matches!(bad, AuthError::InvalidToken(_)), "{bad}");
        fake.down.store(true, Ordering::SeqCst);
        // Both answers still cached: no review while the server is down.
        authn.authenticate("good", SOURCE).await.unwrap();
        authn.authenticate("bad", SOURCE).await.unwrap_err();
        assert_eq!(fake.calls.load(Ordering::SeqCst), 2);
        // The rejection expires first; then the server is asked again and,
        // unreachable, nothing is let through.
        tokio::time::advance(Duration::from_secs(10)).await;
        let down = authn.authenticate("bad", SOURCE).await.unwrap_err();
        assert!(matches!(down, AuthError::Unavailable { .. }), "{down}");
        authn.authenticate("good", SOURCE).await.unwrap();
        tokio::time::advance(Duration::from_secs(110)).await;
        let down = authn.authenticate("good", SOURCE).await.unwrap_err();
        assert!(matches!(down, AuthError::Unavailable { .. }), "{down}");
        assert_eq!(fake.calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_garbage_tokens_costs_only_the_budget_in_reviews() {
        let fake = Arc::new(Fake::default());
        let authn = authenticator(fake.clone(), tight());
        let mut throttled = 0;
        for i in 0..1_000 {
            match authn.authenticate(&format!("garbage-{i}"), SOURCE).await {
                Err(AuthError::InvalidToken(_)) => {}
                Err(AuthError::Throttled { .. }) => throttled += 1,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(fake.calls.load(Ordering::SeqCst), 3, "the burst only");
        assert_eq!(throttled, 997);
        // A throttled answer is not cached: the same token, asked when the
        // budget allows, is reviewed.
        tokio::time::advance(Duration::from_secs(1)).await;
        authn.authenticate("garbage-999", SOURCE).await.unwrap_err();
        assert_eq!(fake.calls.load(Ordering::SeqCst), 4);
    }

    /// A request over the budget is refused at once, before the cache's
    /// per-key compute: not even a review of the same token in flight
    /// holds it up (inside the compute, it would wait for that review).
    #[tokio::test(start_paused = true)]
    async fn a_request_over_the_budget_is_refused_before_the_cache_is_asked() {
        let fake = Arc::new(Fake::default());
        *fake.takes.lock().unwrap() = Duration::from_secs(1);
        let one_at_once = Bound {
            concurrency: NonZeroU32::new(1).unwrap(),
            ..tight().total
        };
        let authn = Arc::new(authenticator(
            fake.clone(),
            ReviewLimits {
                per_source: one_at_once,
                total: one_at_once,
            },
        ));
        let in_flight = tokio::spawn({
            let authn = authn.clone();
            async move { authn.authenticate("garbage", SOURCE).await }
        });
        tokio::task::yield_now().await;
        assert_eq!(
            fake.calls.load(Ordering::SeqCst),
            1,
            "the review is in flight"
        );
        let asked = Instant::now();
        let err = authn.authenticate("garbage", SOURCE).await.unwrap_err();
        assert!(matches!(err, AuthError::Throttled { .. }), "{err}");
        assert_eq!(asked.elapsed(), Duration::ZERO, "held up by the review");
        let first = in_flight.await.unwrap().unwrap_err();
        assert!(matches!(first, AuthError::InvalidToken(_)), "{first}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_accepted_before_is_reviewed_again_outside_the_budget() {
        let fake = Arc::new(Fake::default());
        let authn = authenticator(fake.clone(), tight());
        authn.authenticate("good", SOURCE).await.unwrap();
        for i in 0..10 {
            let _ = authn.authenticate(&format!("garbage-{i}"), SOURCE).await;
        }
        tokio::time::advance(SUCCESS_TTL).await;
        for i in 10..20 {
            let _ = authn.authenticate(&format!("garbage-{i}"), SOURCE).await;
        }
        // The budget is spent, but the known token's expired answer is
        // renewed all the same.
        let before = fake.calls.load(Ordering::SeqCst);
        authn.authenticate("good", SOURCE).await.unwrap();
        assert_eq!(fake.calls.load(Ordering::SeqCst), before + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_learns_that_its_token_was_revoked_when_the_answer_expires() {
        let fake = Arc::new(Fake::default());
        let authn = authenticator(fake.clone(), tight());
        let first = authn.authenticate("good", SOURCE).await.unwrap();
        fake.revoked.store(true, Ordering::SeqCst);
        // Until the answer expires, watch and requests share it.
        assert_eq!(authn.revalidate("good").await.unwrap(), first);
        tokio::time::advance(SUCCESS_TTL).await;
        let err = authn.revalidate("good").await.unwrap_err();
        assert!(matches!(err, AuthError::TokenRevoked(_)), "{err}");
        // New requests get the same (now cached) answer without a review.
        let calls = fake.calls.load(Ordering::SeqCst);
        let err = authn.authenticate("good", SOURCE).await.unwrap_err();
        assert!(matches!(err, AuthError::InvalidToken(_)), "{err}");
        assert_eq!(fake.calls.load(Ordering::SeqCst), calls);
    }

    #[tokio::test(start_paused = true)]
    async fn an_accepted_jwt_is_believed_no_longer_than_its_exp() {
        let fake = Arc::new(Fake::default());
        let authn = authenticator(fake.clone(), ReviewLimits::default());
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let exp = std::time::SystemTime::now() + Duration::from_secs(30);
        let secs = exp
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let token = format!("good.{}.sig", b64(&format!(r#"{{"exp":{secs}}}"#)));
        let accepted = authn.authenticate(&token, SOURCE).await.unwrap();
        let held = accepted.expires - Instant::now();
        assert!(
            held <= Duration::from_secs(30) && held > Duration::from_secs(28),
            "{held:?}"
        );
        // Past it, refused without a review.
        let expired = format!("good.{}.sig", b64(r#"{"exp":1700000000}"#));
        let err = authn.revalidate(&expired).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "the bearer token this watch was opened with is no longer accepted: it expired at 1700000000s after the Unix epoch (its exp claim)"
        );
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
    }
}

//! Bearer tokens checked with the TokenReview API, answers cached like the
//! API server's webhook token authenticator: accepted tokens for the
//! success TTL, rejected ones for the (shorter) failure TTL. The cache is
//! keyed by the token's SHA-256, so no token is kept, and none is logged.

use std::{sync::Arc, time::Duration};

use super::{
    AuthError, Identity,
    cache::TtlCache,
    reviews::{TokenReviewer, TokenVerdict},
};

/// Most tokens cached at once.
const CACHE_CAPACITY: usize = 16_384;

/// How long TokenReview answers are kept.
#[derive(Debug, Clone, Copy)]
pub struct TokenCacheTtl {
    /// An accepted token.
    pub success: Duration,
    /// A rejected token.
    pub failure: Duration,
}

/// Turns bearer tokens into identities.
#[derive(Debug)]
pub struct Authenticator {
    reviewer: Arc<dyn TokenReviewer>,
    audiences: Vec<String>,
    ttl: TokenCacheTtl,
    cache: TtlCache<[u8; 32], TokenVerdict>,
}

impl Authenticator {
    /// Reviews tokens with `reviewer` for `audiences` (empty: the API
    /// server's own), caching answers for `ttl`.
    pub fn new(
        reviewer: Arc<dyn TokenReviewer>,
        audiences: Vec<String>,
        ttl: TokenCacheTtl,
    ) -> Self {
        Authenticator {
            reviewer,
            audiences,
            ttl,
            cache: TtlCache::new(CACHE_CAPACITY),
        }
    }

    /// Who holds `token`.
    pub async fn authenticate(&self, token: &str) -> Result<Identity, AuthError> {
        let key: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
            .as_ref()
            .try_into()
            .expect("SHA-256 is 32 bytes");
        let (verdict, _) = self
            .cache
            .get_or_fetch(&key, || async {
                let verdict = self.reviewer.review_token(token, &self.audiences).await?;
                let ttl = if verdict.is_ok() {
                    self.ttl.success
                } else {
                    self.ttl.failure
                };
                Ok::<_, AuthError>((verdict, ttl))
            })
            .await?;
        verdict.map_err(AuthError::InvalidToken)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use futures::future::BoxFuture;

    use super::*;

    #[derive(Debug, Default)]
    struct Fake {
        calls: AtomicU32,
        down: std::sync::atomic::AtomicBool,
    }

    impl TokenReviewer for Fake {
        fn review_token<'a>(
            &'a self,
            token: &'a str,
            _audiences: &'a [String],
        ) -> BoxFuture<'a, Result<TokenVerdict, AuthError>> {
            Box::pin(async move {
                self.calls.fetch_add(1, Ordering::SeqCst);
                if self.down.load(Ordering::SeqCst) {
                    return Err(AuthError::Unavailable {
                        review: "TokenReview",
                        message: "connection refused".into(),
                    });
                }
                Ok(if token == "good" {
                    Ok(Identity {
                        user: "alice".into(),
                        ..Identity::default()
                    })
                } else {
                    Err("invalid bearer token".into())
                })
            })
        }
    }

    fn authenticator(fake: Arc<Fake>) -> Authenticator {
        Authenticator::new(
            fake,
            vec![],
            TokenCacheTtl {
                success: Duration::from_secs(120),
                failure: Duration::from_secs(10),
            },
        )
    }

    #[tokio::test(start_paused = true)]
    async fn answers_are_cached_for_their_ttl_and_then_fail_closed() {
        let fake = Arc::new(Fake::default());
        let authn = authenticator(fake.clone());
        assert_eq!(authn.authenticate("good").await.unwrap().user, "alice");
        let bad = authn.authenticate("bad").await.unwrap_err();
        assert!(matches!(bad, AuthError::InvalidToken(_)), "{bad}");
        fake.down.store(true, Ordering::SeqCst);
        // Both answers still cached: no review while the server is down.
        authn.authenticate("good").await.unwrap();
        authn.authenticate("bad").await.unwrap_err();
        assert_eq!(fake.calls.load(Ordering::SeqCst), 2);
        // The rejection expires first; then the server is asked again and,
        // unreachable, nothing is let through.
        tokio::time::advance(Duration::from_secs(10)).await;
        let down = authn.authenticate("bad").await.unwrap_err();
        assert!(matches!(down, AuthError::Unavailable { .. }), "{down}");
        authn.authenticate("good").await.unwrap();
        tokio::time::advance(Duration::from_secs(110)).await;
        let down = authn.authenticate("good").await.unwrap_err();
        assert!(matches!(down, AuthError::Unavailable { .. }), "{down}");
        assert_eq!(fake.calls.load(Ordering::SeqCst), 4);
    }
}

//! Accesses checked with SubjectAccessReview, answers cached like the API
//! server's webhook authorizer: allowed for the allow TTL, denied for the
//! deny TTL. The allow TTL also bounds how long an open watch outlives a
//! revocation (see [`Grant::guard`](crate::access::Grant::guard)).

use std::{sync::Arc, time::Duration};

use tokio::time::Instant;

use crate::{
    attributes::Attributes,
    cache::TtlCache,
    counters::{AccessOutcome, AuthCounters, Check},
    error::AuthError,
    identity::Identity,
    reviews::{AccessReviewer, AccessVerdict, NonResourceAttributes, NonResourceReviewer},
};

/// Most decisions cached at once.
const CACHE_CAPACITY: u64 = 65_536;

/// How long SubjectAccessReview answers are kept.
#[derive(Debug, Clone, Copy)]
pub struct DecisionCacheTtl {
    /// An allowed access.
    pub allowed: Duration,
    /// A denied access.
    pub denied: Duration,
}

impl DecisionCacheTtl {
    /// How long `verdict` is kept.
    fn of(&self, verdict: &AccessVerdict) -> Duration {
        if verdict.allowed {
            self.allowed
        } else {
            self.denied
        }
    }
}

/// Decides whether an identity may do something.
#[derive(Debug)]
pub struct Authorizer {
    reviewer: Arc<dyn AccessReviewer>,
    ttl: DecisionCacheTtl,
    cache: TtlCache<(Identity, Attributes), AccessVerdict>,
    counters: AuthCounters,
}

impl Authorizer {
    /// Reviews accesses with `reviewer`, caching answers for `ttl`,
    /// counting checks and reviews in `counters` (the authenticator's).
    pub fn new(
        reviewer: Arc<dyn AccessReviewer>,
        ttl: DecisionCacheTtl,
        counters: AuthCounters,
    ) -> Self {
        Authorizer {
            reviewer,
            ttl,
            cache: TtlCache::new(CACHE_CAPACITY),
            counters,
        }
    }

    /// Ok, with the instant the permission must be checked again, if
    /// `identity` may do `attributes`.
    pub async fn authorize(
        &self,
        identity: &Identity,
        attributes: &Attributes,
    ) -> Result<Instant, AuthError> {
        self.counters.checked(Check::Access);
        let key = (identity.clone(), attributes.clone());
        let (verdict, expires) = self
            .cache
            .get_or_fetch(&key, |_| async {
                let verdict = self
                    .reviewer
                    .review_access(identity, attributes)
                    .await
                    .inspect_err(|_| self.counters.access_reviewed(AccessOutcome::Failed))?;
                self.counters.access_reviewed(if verdict.allowed {
                    AccessOutcome::Allowed
                } else {
                    AccessOutcome::Denied
                });
                let ttl = self.ttl.of(&verdict);
                Ok::<_, AuthError>((verdict, ttl))
            })
            .await?;
        if verdict.allowed {
            Ok(expires)
        } else {
            Err(AuthError::Denied {
                user: identity.user.clone(),
                attributes: Box::new(attributes.clone()),
                reason: verdict.reason,
            })
        }
    }
}

/// Most non-resource decisions cached at once: one per identity that
/// scrapes (the paths are kube-fanout's own, a handful).
const NON_RESOURCE_CACHE_CAPACITY: u64 = 4_096;

/// Decides whether an identity may get a non-resource URL (`/metrics`),
/// answers cached for the same TTLs as resource decisions.
#[derive(Debug)]
pub struct NonResourceAuthorizer {
    reviewer: Arc<dyn NonResourceReviewer>,
    ttl: DecisionCacheTtl,
    cache: TtlCache<(Identity, NonResourceAttributes), AccessVerdict>,
}

impl NonResourceAuthorizer {
    /// Reviews accesses with `reviewer`, caching answers for `ttl`.
    pub fn new(reviewer: Arc<dyn NonResourceReviewer>, ttl: DecisionCacheTtl) -> Self {
        NonResourceAuthorizer {
            reviewer,
            ttl,
            cache: TtlCache::new(NON_RESOURCE_CACHE_CAPACITY),
        }
    }

    /// Ok if `identity` may do `attributes`.
    pub async fn authorize(
        &self,
        identity: &Identity,
        attributes: NonResourceAttributes,
    ) -> Result<(), AuthError> {
        let key = (identity.clone(), attributes);
        let (verdict, _) = self
            .cache
            .get_or_fetch(&key, |_| async {
                let verdict = self
                    .reviewer
                    .review_non_resource(identity, &attributes)
                    .await?;
                let ttl = self.ttl.of(&verdict);
                Ok::<_, AuthError>((verdict, ttl))
            })
            .await?;
        if verdict.allowed {
            Ok(())
        } else {
            Err(AuthError::NonResourceDenied {
                user: identity.user.clone(),
                verb: attributes.verb,
                path: attributes.path,
                reason: verdict.reason,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use futures::StreamExt;
    use tonic::{Code, Status};

    use super::*;
    use crate::{
        access::Access,
        fakes::{self, ALLOW_TTL, Accesses as Fake, watch_configmaps},
    };

    fn access(fake: Arc<Fake>) -> Access {
        fakes::checked(Arc::default(), fake).0
    }

    fn alice() -> http::Extensions {
        let mut extensions = http::Extensions::new();
        extensions.insert(Identity {
            user: "alice".into(),
            ..Identity::default()
        });
        extensions
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_costs_no_review_per_event_and_ends_within_the_ttl_of_a_revocation() {
        let fake = Arc::new(Fake::default());
        let access = access(fake.clone());
        let grant = access
            .authorize(&alice(), watch_configmaps())
            .await
            .unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Result<u32, Status>>();
        let mut watch = grant.guard(tokio_stream::wrappers::UnboundedReceiverStream::new(rx));
        for i in 0..1_000 {
            tx.send(Ok(i)).unwrap();
            assert_eq!(watch.next().await.unwrap().unwrap(), i);
        }
        assert_eq!(
            fake.calls.load(Ordering::SeqCst),
            1,
            "one review, not one per event"
        );

        // Still allowed at expiry: one more review per TTL, the watch goes on.
        tokio::time::advance(ALLOW_TTL).await;
        tx.send(Ok(1_000)).unwrap();
        assert_eq!(watch.next().await.unwrap().unwrap(), 1_000);
        assert_eq!(fake.calls.load(Ordering::SeqCst), 2);

        // Revoked just after a review: the watch ends at the next expiry,
        // with the refusal, and delivers nothing after it.
        fake.revoked.store(true, Ordering::SeqCst);
        let revoked_at = Instant::now();
        // The next item is the refusal: no event goes out after it.
        let status = watch.next().await.expect("a status").unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied);
        assert!(
            status
                .message()
                .contains("may not watch configmaps in namespace \"a\""),
            "{}",
            status.message()
        );
        assert!(
            revoked_at.elapsed() <= ALLOW_TTL,
            "{:?}",
            revoked_at.elapsed()
        );
        tx.send(Ok(1_001)).unwrap();
        assert!(watch.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn without_an_identity_nothing_is_allowed() {
        let fake = Arc::new(Fake::default());
        let err = access(fake.clone())
            .authorize(&http::Extensions::new(), watch_configmaps())
            .await
            .unwrap_err();
        assert!(matches!(err, AuthError::MissingCredentials), "{err}");
        assert_eq!(fake.calls.load(Ordering::SeqCst), 0);
    }
}

//! Accesses checked with SubjectAccessReview, answers cached like the API
//! server's webhook authorizer: allowed for the allow TTL, denied for the
//! deny TTL. The allow TTL also bounds how long an open watch outlives a
//! revocation (see [`Grant::guard`](crate::access::Grant::guard)).

use std::{sync::Arc, time::Duration};

use tokio::time::Instant;

use crate::{
    attributes::Attributes,
    audit::{AuditLog, Decision, RequestAudit, Target},
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
    audit: AuditLog,
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
            audit: AuditLog::off(),
        }
    }

    /// Logs every review it makes to `audit`.
    pub fn with_audit(self, audit: AuditLog) -> Self {
        Authorizer { audit, ..self }
    }

    /// The audit log its reviews go to.
    pub fn audit(&self) -> &AuditLog {
        &self.audit
    }

    /// Ok, with the instant the permission must be checked again, if
    /// `identity` may do `attributes`. A review made for it (not a cached
    /// answer) is logged as `request`'s decision, if the audit log is on.
    pub async fn authorize(
        &self,
        identity: &Identity,
        attributes: &Attributes,
        request: Option<&RequestAudit>,
    ) -> Result<Instant, AuthError> {
        self.counters.checked(Check::Access);
        let key = (identity.clone(), attributes.clone());
        let (verdict, expires) = self
            .cache
            .get_or_fetch(&key, |_| async {
                let reviewed = self.reviewer.review_access(identity, attributes).await;
                if let Some(request) = request {
                    let target = Target::Resource(attributes);
                    self.audit
                        .decision(request, identity, target, decision_of(&reviewed));
                }
                let verdict = reviewed
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

/// The audit log's view of a review's outcome.
fn decision_of(reviewed: &Result<AccessVerdict, AuthError>) -> Decision<'_> {
    match reviewed {
        Ok(verdict) if verdict.allowed => Decision::Allow(&verdict.reason),
        Ok(verdict) => Decision::Deny(&verdict.reason),
        Err(err) => Decision::Error(err),
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
    audit: AuditLog,
}

impl NonResourceAuthorizer {
    /// Reviews accesses with `reviewer`, caching answers for `ttl`.
    pub fn new(reviewer: Arc<dyn NonResourceReviewer>, ttl: DecisionCacheTtl) -> Self {
        NonResourceAuthorizer {
            reviewer,
            ttl,
            cache: TtlCache::new(NON_RESOURCE_CACHE_CAPACITY),
            audit: AuditLog::off(),
        }
    }

    /// Logs every review it makes to `audit` (without a source address:
    /// the metrics listener does not pass it on).
    pub fn with_audit(self, audit: AuditLog) -> Self {
        NonResourceAuthorizer { audit, ..self }
    }

    /// Ok if `identity` may do `attributes`; a review made for it is
    /// logged.
    pub async fn authorize(
        &self,
        identity: &Identity,
        attributes: NonResourceAttributes,
    ) -> Result<(), AuthError> {
        let key = (identity.clone(), attributes);
        let (verdict, _) = self
            .cache
            .get_or_fetch(&key, |_| async {
                let reviewed = self
                    .reviewer
                    .review_non_resource(identity, &attributes)
                    .await;
                if let Some(request) = self.audit.request(None, Default::default) {
                    let target = Target::NonResource(&attributes);
                    self.audit
                        .decision(&request, identity, target, decision_of(&reviewed));
                }
                let verdict = reviewed?;
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
    use std::{num::NonZeroU32, sync::atomic::Ordering};

    use futures::StreamExt;
    use tonic::{Code, Status};

    use super::*;
    use crate::{
        access::Access,
        audit::AuditLevel,
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
            .authorize(&alice(), watch_configmaps(), Default::default)
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
            status.message().contains(
                r#"cannot watch resource "configmaps" in API group "" in the namespace "a""#
            ),
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

    /// One line per review made, whatever it answered; none for an answer
    /// from the cache, however many requests share it.
    #[tokio::test(start_paused = true)]
    async fn each_review_made_is_one_audit_line_and_a_cached_answer_none() {
        let fake = Arc::new(Fake::default());
        let (log, writer) = AuditLog::new(AuditLevel::Metadata, NonZeroU32::new(100).unwrap());
        let (access, _) = fakes::audited(
            Arc::default(),
            fake.clone(),
            fakes::TOKEN_TTL,
            ALLOW_TTL,
            log.clone(),
        );
        let alice = alice();
        let authorize = || access.authorize(&alice, watch_configmaps(), Default::default);
        let at_once = futures::future::join_all((0..50).map(|_| authorize())).await;
        assert!(at_once.iter().all(Result::is_ok));
        for _ in 0..50 {
            authorize().await.unwrap();
        }
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);

        fake.revoked.store(true, Ordering::SeqCst);
        tokio::time::advance(ALLOW_TTL).await;
        for _ in 0..3 {
            let err = authorize().await.unwrap_err();
            assert!(matches!(err, AuthError::Denied { .. }), "{err}");
        }
        assert_eq!(fake.calls.load(Ordering::SeqCst), 2, "the denial cached");

        // Failures are not cached (fail closed): each is reviewed, and
        // each review logged.
        fake.down.store(true, Ordering::SeqCst);
        tokio::time::advance(Duration::from_secs(5)).await;
        for _ in 0..2 {
            let err = authorize().await.unwrap_err();
            assert!(matches!(err, AuthError::Unavailable { .. }), "{err}");
        }
        assert_eq!(fake.calls.load(Ordering::SeqCst), 4);

        // The grants hold the authorizer, and with it the log.
        drop((at_once, access));
        let lines = fakes::audit_lines(log, writer).await;
        let decisions: Vec<_> = lines
            .iter()
            .map(|l| (l["decision"].as_str(), l["reason"].as_str()))
            .collect();
        let down = "cannot verify the request: SubjectAccessReview failed: connection refused";
        assert_eq!(
            decisions,
            [
                (Some("allow"), Some("granted")),
                (Some("deny"), Some("revoked")),
                (Some("error"), Some(down)),
                (Some("error"), Some(down)),
            ]
        );
        // Each request its own ID.
        let ids: std::collections::BTreeSet<_> =
            lines.iter().map(|l| l["auditID"].as_str()).collect();
        assert_eq!(ids.len(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn without_an_identity_nothing_is_allowed() {
        let fake = Arc::new(Fake::default());
        let err = access(fake.clone())
            .authorize(
                &http::Extensions::new(),
                watch_configmaps(),
                Default::default,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, AuthError::MissingCredentials(_)), "{err}");
        assert_eq!(fake.calls.load(Ordering::SeqCst), 0);
    }
}

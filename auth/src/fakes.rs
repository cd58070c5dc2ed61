//! Reviewers for unit tests: the API server's answers on cue, each review
//! counted.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use futures::future::BoxFuture;

use crate::{
    access::Access,
    attributes::{Attributes, Verb},
    authn::{self, Authenticator},
    authz::{self, Authorizer},
    budget,
    error::AuthError,
    identity::Identity,
    reviews::{AccessReviewer, AccessVerdict, TokenReviewer, TokenVerdict},
};

/// Accepts tokens starting with `good` (as alice) until revoked; fails
/// every review while down.
#[derive(Debug, Default)]
pub struct Tokens {
    /// Reviews made.
    pub calls: AtomicU32,
    /// The API server cannot be reached.
    pub down: AtomicBool,
    /// Good tokens are no longer accepted.
    pub revoked: AtomicBool,
    /// Each review takes this long (on tokio's clock) before it answers.
    pub takes: std::sync::Mutex<std::time::Duration>,
}

impl TokenReviewer for Tokens {
    fn review_token<'a>(
        &'a self,
        token: &'a str,
        _audiences: &'a [String],
    ) -> BoxFuture<'a, Result<TokenVerdict, AuthError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let takes = *self.takes.lock().expect("not poisoned");
            tokio::time::sleep(takes).await;
            if self.down.load(Ordering::SeqCst) {
                return Err(AuthError::Unavailable {
                    review: "TokenReview",
                    message: "connection refused".into(),
                });
            }
            Ok(
                if token.starts_with("good") && !self.revoked.load(Ordering::SeqCst) {
                    Ok(alice())
                } else {
                    Err("invalid bearer token".into())
                },
            )
        })
    }
}

/// The user good tokens name.
pub fn alice() -> Identity {
    Identity {
        user: "alice".into(),
        ..Identity::default()
    }
}

/// Allows every access until revoked; fails every review while down.
#[derive(Debug, Default)]
pub struct Accesses {
    /// Reviews made.
    pub calls: AtomicU32,
    /// Nothing is allowed any more.
    pub revoked: AtomicBool,
    /// The API server cannot be reached.
    pub down: AtomicBool,
}

impl AccessReviewer for Accesses {
    fn review_access<'a>(
        &'a self,
        _identity: &'a Identity,
        _attributes: &'a Attributes,
    ) -> BoxFuture<'a, Result<AccessVerdict, AuthError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(AuthError::Unavailable {
                    review: "SubjectAccessReview",
                    message: "connection refused".into(),
                });
            }
            let allowed = !self.revoked.load(Ordering::SeqCst);
            Ok(AccessVerdict {
                allowed,
                reason: if allowed { "granted" } else { "revoked" }.into(),
            })
        })
    }
}

/// The TTLs of [`checked`]: tokens and permissions both asked again after
/// these.
pub const TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(30);
/// See [`TOKEN_TTL`].
pub const ALLOW_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// Access checked by `accesses`, tokens by `tokens`, with [`TOKEN_TTL`]
/// and [`ALLOW_TTL`]; the authenticator too, for the layer's part.
pub fn checked(
    tokens: std::sync::Arc<Tokens>,
    accesses: std::sync::Arc<Accesses>,
) -> (Access, std::sync::Arc<Authenticator>) {
    checked_with(tokens, accesses, TOKEN_TTL, ALLOW_TTL)
}

/// [`checked`] with other TTLs.
pub fn checked_with(
    tokens: std::sync::Arc<Tokens>,
    accesses: std::sync::Arc<Accesses>,
    token_ttl: std::time::Duration,
    allow_ttl: std::time::Duration,
) -> (Access, std::sync::Arc<Authenticator>) {
    audited(tokens, accesses, token_ttl, allow_ttl, Default::default())
}

/// [`checked_with`], every review logged to `audit`.
pub fn audited(
    tokens: std::sync::Arc<Tokens>,
    accesses: std::sync::Arc<Accesses>,
    token_ttl: std::time::Duration,
    allow_ttl: std::time::Duration,
    audit: crate::audit::AuditLog,
) -> (Access, std::sync::Arc<Authenticator>) {
    use std::{sync::Arc, time::Duration};
    let authenticator = Arc::new(Authenticator::new(
        tokens,
        Vec::new(),
        authn::TokenCacheTtl {
            success: token_ttl,
            failure: Duration::from_secs(5),
        },
        budget::ReviewBudget::new(budget::ReviewLimits::default()),
    ));
    let authorizer = Arc::new(
        Authorizer::new(
            accesses,
            authz::DecisionCacheTtl {
                allowed: allow_ttl,
                denied: Duration::from_secs(5),
            },
            authenticator.counters().clone(),
        )
        .with_audit(audit),
    );
    (
        Access::checked(authorizer, authenticator.clone()),
        authenticator,
    )
}

/// A watch of configmaps in namespace `a`.
pub fn watch_configmaps() -> Attributes {
    Attributes {
        verb: Verb::Watch,
        group: String::new(),
        version: "v1".into(),
        resource: "configmaps".into(),
        namespace: "a".into(),
        name: String::new(),
    }
}

/// Every line `log` (dropped here, with every clone of it) wrote through
/// `writer`, parsed.
pub async fn audit_lines(
    log: super::audit::AuditLog,
    writer: super::audit::AuditWriter,
) -> Vec<serde_json::Value> {
    drop(log);
    let mut out = Vec::new();
    writer.run(&mut out, std::future::pending()).await;
    String::from_utf8(out)
        .expect("UTF-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

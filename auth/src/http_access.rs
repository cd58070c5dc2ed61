//! Plain HTTP requests (the metrics endpoint) authenticated and authorized
//! the way controller-runtime's secure metrics and kube-rbac-proxy do it:
//! the bearer token with TokenReview (the same [`Authenticator`], cache and
//! audiences as gRPC callers), then a SubjectAccessReview for the
//! non-resource URL, e.g. `get /metrics`, which RBAC grants with
//! `nonResourceURLs`. Refused requests get the HTTP status of the gRPC
//! code the same refusal gets (401 for no or a bad token, 403 for not
//! allowed, 503 when the API server cannot answer: fail closed).

use std::sync::Arc;

use http::{HeaderMap, StatusCode};
use tonic::{Code, Status};

use crate::{
    authn::Authenticator, authz::NonResourceAuthorizer, bearer::bearer_token, error::AuthError,
    identity::Identity, reviews::NonResourceAttributes,
};

/// Checks HTTP requests' bearer tokens and their access to a path.
#[derive(Debug, Clone)]
pub struct HttpAccess {
    authenticator: Arc<Authenticator>,
    authorizer: Arc<NonResourceAuthorizer>,
}

impl HttpAccess {
    /// Authenticates with `authenticator` and authorizes with `authorizer`.
    pub fn new(authenticator: Arc<Authenticator>, authorizer: Arc<NonResourceAuthorizer>) -> Self {
        HttpAccess {
            authenticator,
            authorizer,
        }
    }

    /// Who sent `headers`, if their bearer token is accepted and its user
    /// may do `attributes`.
    pub async fn check(
        &self,
        headers: &HeaderMap,
        attributes: NonResourceAttributes,
    ) -> Result<Identity, AuthError> {
        let token = bearer_token(headers)?.map_err(AuthError::MissingCredentials)?;
        // The scraper's address is not known here: only the total bound
        // applies to its token's review.
        let identity = self.authenticator.authenticate(token, None).await?.identity;
        self.authorizer.authorize(&identity, attributes).await?;
        Ok(identity)
    }
}

/// The HTTP status for a refusal: the one gRPC's own mapping of the same
/// code (grpc-gateway's, and the API server's for these cases) gives.
pub fn http_status(err: &AuthError) -> StatusCode {
    match Status::from(err.clone()).code() {
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::InvalidArgument => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::atomic::{AtomicU32, Ordering},
        time::Duration,
    };

    use futures::future::BoxFuture;
    use http::header::AUTHORIZATION;

    use super::*;
    use crate::{
        authn::TokenCacheTtl,
        authz::DecisionCacheTtl,
        reviews::{AccessVerdict, NonResourceReviewer, TokenReviewer, TokenVerdict},
    };

    /// Token "scraper" is user prometheus, allowed; "other" is mallory,
    /// not allowed; anything else is not a token. Counts access reviews.
    #[derive(Debug, Default)]
    struct Fake {
        access_reviews: AtomicU32,
    }

    impl TokenReviewer for Fake {
        fn review_token<'a>(
            &'a self,
            token: &'a str,
            _audiences: &'a [String],
        ) -> BoxFuture<'a, Result<TokenVerdict, AuthError>> {
            Box::pin(async move {
                Ok(match token {
                    "scraper" => Ok(Identity {
                        user: "prometheus".into(),
                        ..Identity::default()
                    }),
                    "other" => Ok(Identity {
                        user: "mallory".into(),
                        ..Identity::default()
                    }),
                    _ => Err("invalid bearer token".into()),
                })
            })
        }
    }

    impl NonResourceReviewer for Fake {
        fn review_non_resource<'a>(
            &'a self,
            identity: &'a Identity,
            attributes: &'a NonResourceAttributes,
        ) -> BoxFuture<'a, Result<AccessVerdict, AuthError>> {
            Box::pin(async move {
                self.access_reviews.fetch_add(1, Ordering::SeqCst);
                Ok(AccessVerdict {
                    allowed: identity.user == "prometheus"
                        && *attributes == METRICS
                        && attributes.verb == "get",
                    reason: String::new(),
                })
            })
        }
    }

    const METRICS: NonResourceAttributes = NonResourceAttributes {
        verb: "get",
        path: "/metrics",
    };

    fn access(fake: Arc<Fake>) -> HttpAccess {
        let ttl = TokenCacheTtl {
            success: Duration::from_secs(120),
            failure: Duration::from_secs(10),
        };
        HttpAccess::new(
            Arc::new(Authenticator::new(
                fake.clone(),
                vec![],
                ttl,
                crate::budget::ReviewBudget::new(Default::default()),
            )),
            Arc::new(NonResourceAuthorizer::new(
                fake,
                DecisionCacheTtl {
                    allowed: Duration::from_secs(60),
                    denied: Duration::from_secs(30),
                },
            )),
        )
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
        headers
    }

    #[tokio::test(start_paused = true)]
    async fn only_an_authorized_token_gets_the_path_and_decisions_are_cached() {
        let fake = Arc::new(Fake::default());
        let access = access(fake.clone());
        for _ in 0..3 {
            let who = access.check(&bearer("scraper"), METRICS).await.unwrap();
            assert_eq!(who.user, "prometheus");
        }
        assert_eq!(fake.access_reviews.load(Ordering::SeqCst), 1, "cached");

        let none = access.check(&HeaderMap::new(), METRICS).await.unwrap_err();
        assert_eq!(http_status(&none), StatusCode::UNAUTHORIZED, "{none}");
        let bad = access.check(&bearer("forged"), METRICS).await.unwrap_err();
        assert_eq!(http_status(&bad), StatusCode::UNAUTHORIZED, "{bad}");
        let denied = access.check(&bearer("other"), METRICS).await.unwrap_err();
        assert_eq!(http_status(&denied), StatusCode::FORBIDDEN, "{denied}");
        assert_eq!(
            denied.to_string(),
            r#"forbidden: User "mallory" cannot get path "/metrics""#
        );
        let unavailable = AuthError::Unavailable {
            review: "TokenReview",
            message: "connection refused".into(),
        };
        assert_eq!(http_status(&unavailable), StatusCode::SERVICE_UNAVAILABLE);
    }
}

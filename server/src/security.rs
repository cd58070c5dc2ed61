//! How callers are secured: TLS files, authentication and authorization
//! (TokenReview, client certificates, SubjectAccessReview, for gRPC and
//! for scrapes of `/metrics`), what each caller may hold, and the refusal
//! to serve without authentication beyond loopback unless told to.

use std::{net::SocketAddr, num::NonZeroU32, path::PathBuf, sync::Arc, time::Duration};

use kube_fanout_auth::{
    Access, Authenticator, Authorizer,
    audit::{AuditLevel, AuditLog},
    authn::TokenCacheTtl,
    authz::{DecisionCacheTtl, NonResourceAuthorizer},
    budget::{ReviewBudget, ReviewLimits},
    http_access::HttpAccess,
    layer::AuthenticateLayer,
    limits::CallerLimits,
    reviews::{KubeReviews, ReviewClient},
};
use kube_fanout_listener::tls::{ClientCa, TlsFiles};
use kube_fanout_service::list_budget::ListBytesLimits;
use tracing::warn;

use crate::error::ServeError;

/// How callers are secured. The default is what `--auth=none` on loopback
/// gives: plaintext, everyone allowed (for tests; the binary defaults to
/// authentication and authorization on).
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// Serve TLS from these files.
    pub tls: Option<TlsFiles>,
    /// Authenticate and authorize every request; `None` is `--auth=none`.
    pub auth: Option<AuthOptions>,
    /// Without authentication (`auth: None`, or metrics not
    /// authenticated), listen on a non-loopback address all the same
    /// (`--insecure-allow-unauthenticated`).
    pub allow_unauthenticated_remote: bool,
    /// What each caller may hold open (default: no bound).
    pub caller_limits: CallerLimits,
    /// Bytes List responses may hold, each and all together (default: no
    /// bound worth the name).
    pub list_bytes: ListBytesLimits,
    /// The audit log of access decisions and watch ends (default: off).
    pub audit: AuditOptions,
}

/// The audit log's level, destination and rate bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditOptions {
    /// How much each line says; [`AuditLevel::None`] is off.
    pub level: AuditLevel,
    /// Where lines go: a file, opened to append (created, owner-only,
    /// if missing), or `-` for standard output.
    pub path: PathBuf,
    /// The most lines written a second (bursts of as many); more are
    /// dropped and counted.
    pub max_lines_per_second: NonZeroU32,
}

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            level: AuditLevel::None,
            path: PathBuf::from("-"),
            max_lines_per_second: NonZeroU32::new(100).expect("not zero"),
        }
    }
}

/// How callers are authenticated and authorized.
#[derive(Debug, Clone)]
pub struct AuthOptions {
    /// The audiences a bearer token must be for (empty: the API server's).
    pub audiences: Vec<String>,
    /// How long TokenReview answers are cached.
    pub token_ttl: TokenCacheTtl,
    /// How long SubjectAccessReview answers are cached.
    pub decision_ttl: DecisionCacheTtl,
    /// How long one review may take before the request fails UNAVAILABLE.
    pub review_timeout: Duration,
    /// Scrapes of `/metrics` authenticated (the same tokens as gRPC
    /// callers) and authorized (`get` on the non-resource URL); false is
    /// `--metrics-auth=none`.
    pub metrics: bool,
    /// The bounds on TokenReviews for tokens not known to be good.
    pub review_limits: ReviewLimits,
    /// The API client for reviews, apart from the reflectors' (`None`: the
    /// reflectors' client is shared, as tests that do not care do).
    pub review_client: Option<ReviewClient>,
}

impl Default for AuthOptions {
    /// The API server's own webhook defaults for tokens (2 min, failures
    /// 10 s; the success TTL also bounds how long a watch outlives its
    /// token); a minute for allowed decisions, which bounds how long a
    /// watch outlives a revocation of its permission, and 30 s for denied
    /// ones.
    fn default() -> Self {
        AuthOptions {
            audiences: Vec::new(),
            token_ttl: TokenCacheTtl {
                success: Duration::from_secs(120),
                failure: Duration::from_secs(10),
            },
            decision_ttl: DecisionCacheTtl {
                allowed: Duration::from_secs(60),
                denied: Duration::from_secs(30),
            },
            review_timeout: Duration::from_secs(10),
            metrics: true,
            review_limits: ReviewLimits::default(),
            review_client: None,
        }
    }
}

/// What guards the listeners, as [`Security`] asks.
pub(crate) struct Guards {
    /// The access checks of every gRPC request.
    pub(crate) access: Access,
    /// The gRPC authentication layer, with authentication on.
    pub(crate) authenticate: Option<AuthenticateLayer>,
    /// The checks of metrics scrapes, with them authenticated.
    pub(crate) scrapes: Option<HttpAccess>,
}

/// The access checks, the authentication layer and the metrics' checks
/// `security` asks for, their reviews logged to `audit`; refuses to serve
/// unauthenticated beyond loopback unless told to.
pub(crate) fn secure(
    client: &kube::Client,
    security: &Security,
    audit: &AuditLog,
    addr: SocketAddr,
) -> Result<Guards, ServeError> {
    let Some(auth) = &security.auth else {
        refuse_unauthenticated_remote(security, addr)?;
        warn!(
            %addr,
            "authentication and authorization are off (--auth=none): every caller sees every served object"
        );
        return Ok(Guards {
            access: Access::open(),
            authenticate: None,
            scrapes: None,
        });
    };
    let review_client = match &auth.review_client {
        Some(ReviewClient(own)) => own.clone(),
        None => {
            warn!("reviews share the reflectors' API client");
            client.clone()
        }
    };
    let reviews = Arc::new(KubeReviews::new(review_client, auth.review_timeout));
    let authenticator = Arc::new(Authenticator::new(
        reviews.clone(),
        auth.audiences.clone(),
        auth.token_ttl,
        ReviewBudget::new(auth.review_limits),
    ));
    let scrapes = auth.metrics.then(|| {
        HttpAccess::new(
            authenticator.clone(),
            Arc::new(
                NonResourceAuthorizer::new(reviews.clone(), auth.decision_ttl)
                    .with_audit(audit.clone()),
            ),
        )
    });
    let authorizer = Authorizer::new(reviews, auth.decision_ttl, authenticator.counters().clone())
        .with_audit(audit.clone());
    if security.tls.is_none() {
        warn!(%addr, "bearer tokens are accepted over plaintext: serve TLS (--tls-cert-file) beyond loopback");
    }
    let mut authenticate = AuthenticateLayer::new(authenticator.clone());
    if let Some(path) = security.tls.as_ref().and_then(|t| t.client_ca.as_deref()) {
        authenticate = authenticate.with_client_ca(Arc::new(ClientCa::new(path)?));
    }
    Ok(Guards {
        access: Access::checked(Arc::new(authorizer), authenticator),
        authenticate: Some(authenticate),
        scrapes,
    })
}

/// Serving without authentication is for loopback, unless explicitly
/// allowed.
fn refuse_unauthenticated_remote(security: &Security, addr: SocketAddr) -> Result<(), ServeError> {
    if security.auth.is_none() && !addr.ip().is_loopback() && !security.allow_unauthenticated_remote
    {
        return Err(ServeError::Unauthenticated(addr));
    }
    Ok(())
}

/// The same for metrics: unauthenticated scrapes only on loopback unless
/// explicitly allowed (the counts show which types are served and how
/// busy each is).
pub(crate) fn refuse_unauthenticated_metrics(
    security: &Security,
    authenticated: bool,
    addr: SocketAddr,
) -> Result<(), ServeError> {
    if !authenticated && !addr.ip().is_loopback() && !security.allow_unauthenticated_remote {
        return Err(ServeError::UnauthenticatedMetrics(addr));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unauthenticated_serving_is_for_loopback_unless_explicitly_allowed() {
        let open = Security::default();
        // Parsed only, never bound: tests use loopback alone.
        let remote: SocketAddr = "10.1.2.3:50051".parse().unwrap();
        for loopback in ["127.0.0.1:50051", "[::1]:50051"] {
            refuse_unauthenticated_remote(&open, loopback.parse().unwrap()).unwrap();
        }
        let err = refuse_unauthenticated_remote(&open, remote).unwrap_err();
        assert!(
            err.to_string().contains("--insecure-allow-unauthenticated"),
            "{err}"
        );
        let allowed = Security {
            allow_unauthenticated_remote: true,
            ..Security::default()
        };
        refuse_unauthenticated_remote(&allowed, remote).unwrap();
        let secured = Security {
            auth: Some(AuthOptions::default()),
            ..Security::default()
        };
        refuse_unauthenticated_remote(&secured, remote).unwrap();
    }

    #[test]
    fn unauthenticated_metrics_are_for_loopback_unless_explicitly_allowed() {
        let metrics: SocketAddr = "10.1.2.3:9090".parse().unwrap();
        let secured = Security {
            auth: Some(AuthOptions::default()),
            ..Security::default()
        };
        refuse_unauthenticated_metrics(&secured, true, metrics).unwrap();
        refuse_unauthenticated_metrics(&secured, false, "127.0.0.1:9090".parse().unwrap()).unwrap();
        let err = refuse_unauthenticated_metrics(&secured, false, metrics).unwrap_err();
        assert!(
            err.to_string()
                .contains("refusing to serve metrics without authentication on 10.1.2.3:9090"),
            "{err}"
        );
        let allowed = Security {
            allow_unauthenticated_remote: true,
            ..secured
        };
        refuse_unauthenticated_metrics(&allowed, false, metrics).unwrap();
        assert!(AuthOptions::default().metrics, "on unless turned off");
    }
}

//! The tower layer in front of every gRPC service: it finds out who is
//! calling (a verified client certificate mapped as the API server maps it,
//! see [`super::x509`], else a bearer token checked with TokenReview) and
//! puts the [`Identity`] into the request's
//! extensions, where [`Access::authorize`](crate::access::Access::authorize) finds
//! it. A request it cannot authenticate never reaches a service. Health
//! checks stay open so that probes need no credentials; an authenticated
//! request marks its connection as having proved who it is, and a request
//! that fails by its caller's doing counts against its source's failure
//! budget (see [`kube_fanout_listener::conn::ConnInfo::standing`]): a
//! source that spent it has its requests on connections that never
//! authenticated refused before their credentials are looked at.

use std::{
    net::IpAddr,
    sync::Arc,
    task::{Context, Poll},
    time::SystemTime,
};

use futures::future::BoxFuture;
use http::{HeaderMap, Request, Response, header::AUTHORIZATION};
use tonic::Status;
use tower::{Layer, Service};

use crate::{
    authn::Authenticator,
    credential::{self, Credential, Presented, instant_of},
    error::AuthError,
    identity::Identity,
    x509::{CertificateUser, NoUser, certificate_user},
};
use kube_fanout_listener::conn::ConnInfo;

/// The largest authorization header looked at. Service-account tokens are
/// about 1 KiB; a header this large is no token, and reviewing it would
/// only cost the API server.
pub const MAX_AUTHORIZATION_BYTES: usize = 8 * 1024;

/// gRPC methods served without credentials: the health Check alone. A
/// Check is one unary call that ends at once; the kubelet's gRPC probe
/// and grpc-health-probe ask nothing else. The health Watch is a stream
/// that stays open for as long as its client likes, so without
/// credentials anyone who can connect could hold streams open (up to
/// `--max-concurrent-streams` on each of `--max-connections-per-ip`
/// connections, none of them ever authenticating, so uncounted by any
/// per-caller bound); it needs credentials like every other call, and its
/// connection then counts as authenticated. Counting unauthenticated
/// Watch streams per address instead would bound them too, but would be a
/// second per-source bound to tune for a call that no probe makes.
const OPEN_METHODS: &[&str] = &["/grpc.health.v1.Health/Check"];

/// Authenticates every request (except health checks).
#[derive(Debug, Clone)]
pub struct AuthenticateLayer {
    authenticator: Arc<Authenticator>,
}

impl AuthenticateLayer {
    /// Authenticates bearer tokens with `authenticator`.
    pub fn new(authenticator: Arc<Authenticator>) -> Self {
        AuthenticateLayer { authenticator }
    }

    /// What its authenticator counts, for the metrics registry.
    pub fn counters(&self) -> &super::counters::AuthCounters {
        self.authenticator.counters()
    }
}

impl<S> Layer<S> for AuthenticateLayer {
    type Service = Authenticate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Authenticate {
            inner,
            authenticator: self.authenticator.clone(),
        }
    }
}

/// The service [`AuthenticateLayer`] wraps around another.
#[derive(Debug, Clone)]
pub struct Authenticate<S> {
    inner: S,
    authenticator: Arc<Authenticator>,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Authenticate<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        // The clone that was made ready is the one to call (tower's rule).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let authenticator = self.authenticator.clone();
        Box::pin(async move {
            let path = request.uri().path();
            if OPEN_METHODS.contains(&path) {
                return inner.call(request).await;
            }
            let conn = request.extensions().get::<ConnInfo>();
            let standing = conn.map(|c| c.standing.clone());
            if let Some(out) = standing.as_ref().and_then(|s| s.refusal()) {
                authenticator.counters().refused_shut_out();
                return Ok(Status::from(AuthError::from(out)).into_http());
            }
            let source = conn.and_then(|c| c.remote_addr).map(|a| a.ip());
            let certificate = conn.and_then(|c| c.peer_certificate.as_deref());
            let headers = request.headers();
            let identity = match certificate.map(|der| (certificate_user(der), der)) {
                // As the API server: a certificate's user comes first, and a
                // certificate it cannot parse fails (there, the handshake).
                Some((Ok(CertificateUser::User(identity)), der)) => {
                    certificate_credential(credential::not_after(der))
                        .map(|presented| (identity, presented))
                }
                Some((Err(err), _)) => Err(AuthError::from(err)),
                Some((Ok(CertificateUser::NoUser(why)), _)) => {
                    token_identity(&authenticator, headers, source, Some(why)).await
                }
                None => token_identity(&authenticator, headers, source, None).await,
            };
            match identity {
                Ok((identity, presented)) => {
                    if let Some(standing) = standing {
                        standing.set_authenticated();
                    }
                    request.extensions_mut().insert::<Identity>(identity);
                    request.extensions_mut().insert::<Presented>(presented);
                    inner.call(request).await
                }
                Err(err) => {
                    tracing::debug!(path, error = %err, "request not authenticated");
                    if err.is_callers_failure()
                        && let Some(standing) = standing
                        && let Err(out) = standing.failed_authentication()
                    {
                        tracing::debug!(%out, "source shut out");
                    }
                    Ok(Status::from(err).into_http())
                }
            }
        })
    }
}

/// Who holds the request's bearer token (sent from `source`), and the
/// token to re-check an open watch with; without one, the error says why
/// the certificate (if any) named no user either.
async fn token_identity(
    authenticator: &Authenticator,
    headers: &HeaderMap,
    source: Option<IpAddr>,
    certificate: Option<NoUser>,
) -> Result<(Identity, Presented), AuthError> {
    match (bearer_token(headers), certificate) {
        (Ok(token), _) => {
            let accepted = authenticator.authenticate(token, source).await?;
            let presented = Presented {
                credential: Credential::Token(token.into()),
                expires: accepted.expires,
            };
            Ok((accepted.identity, presented))
        }
        (Err(AuthError::MissingCredentials), Some(why)) => {
            Err(AuthError::CertificateWithoutUser(why))
        }
        (Err(err), _) => Err(err),
    }
}

/// A verified certificate's credential, until its notAfter (rustls checked
/// it at the handshake; a connection outlives it, its requests do not).
fn certificate_credential(not_after: Option<SystemTime>) -> Result<Presented, AuthError> {
    let not_after = not_after.ok_or(AuthError::CertificateUnreadable)?;
    if not_after <= SystemTime::now() {
        return Err(AuthError::CertificateExpired(not_after));
    }
    Ok(Presented {
        credential: Credential::Certificate { not_after },
        expires: instant_of(not_after),
    })
}

/// The bearer token of the authorization header.
pub(super) fn bearer_token(headers: &HeaderMap) -> Result<&str, AuthError> {
    let header = headers
        .get(AUTHORIZATION)
        .ok_or(AuthError::MissingCredentials)?;
    if header.len() > MAX_AUTHORIZATION_BYTES {
        return Err(AuthError::HeaderTooLarge {
            size: header.len(),
            max: MAX_AUTHORIZATION_BYTES,
        });
    }
    let value = header.to_str().map_err(|_| AuthError::MalformedHeader)?;
    // The scheme is case-insensitive (RFC 7235), as the API server reads it.
    let (scheme, token) = value.split_once(' ').ok_or(AuthError::MalformedHeader)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(AuthError::MalformedHeader);
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, value.parse().unwrap());
        headers
    }

    #[test]
    fn a_bearer_token_is_read_and_anything_else_refused() {
        assert_eq!(bearer_token(&headers("Bearer abc")).unwrap(), "abc");
        assert_eq!(bearer_token(&headers("bearer  abc ")).unwrap(), "abc");
        for bad in ["Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "abc"] {
            let err = bearer_token(&headers(bad)).unwrap_err();
            assert!(matches!(err, AuthError::MalformedHeader), "{bad}: {err}");
        }
        let err = bearer_token(&HeaderMap::new()).unwrap_err();
        assert!(matches!(err, AuthError::MissingCredentials), "{err}");
        let huge = format!("Bearer {}", "x".repeat(MAX_AUTHORIZATION_BYTES));
        let err = bearer_token(&headers(&huge)).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("is {} bytes", MAX_AUTHORIZATION_BYTES + 7)),
            "{err}"
        );
    }
}

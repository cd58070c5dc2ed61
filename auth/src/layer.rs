//! The tower layer in front of every gRPC service: it finds out who is
//! calling (a client certificate verified and mapped as the API server
//! verifies and maps it, see [`super::x509`], else a bearer token checked
//! with TokenReview, the header read as the API server reads it, see
//! [`super::bearer`]) and
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
    time::{Duration, SystemTime},
};

use futures::future::BoxFuture;
use http::{HeaderMap, Request, Response};
use tonic::Status;
use tower::{Layer, Service};

use crate::{
    authn::Authenticator,
    bearer::bearer_token,
    credential::{Credential, Presented, instant_of},
    error::AuthError,
    identity::Identity,
    x509::{CertificateUser, NoUser, user_of},
};
use kube_fanout_listener::{conn::ConnInfo, tls::ClientCa};
use kube_fanout_x509::verify::VerifyError;

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
    client_ca: Option<Arc<ClientCa>>,
}

impl AuthenticateLayer {
    /// Authenticates bearer tokens with `authenticator` (and no client
    /// certificates).
    pub fn new(authenticator: Arc<Authenticator>) -> Self {
        AuthenticateLayer {
            authenticator,
            client_ca: None,
        }
    }

    /// Authenticates client certificates too, verified against `client_ca`.
    pub fn with_client_ca(self, client_ca: Arc<ClientCa>) -> Self {
        AuthenticateLayer {
            client_ca: Some(client_ca),
            ..self
        }
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
            client_ca: self.client_ca.clone(),
        }
    }
}

/// The service [`AuthenticateLayer`] wraps around another.
#[derive(Debug, Clone)]
pub struct Authenticate<S> {
    inner: S,
    authenticator: Arc<Authenticator>,
    client_ca: Option<Arc<ClientCa>>,
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
        let client_ca = self.client_ca.clone();
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
            let headers = request.headers();
            // As the API server's authenticators, in its order: the
            // certificate's user if it verifies and names one, else the
            // bearer token.
            let identity = match certificate_identity(conn, client_ca.as_deref()) {
                Some(Ok(found)) => Ok(found),
                Some(Err(failed)) => {
                    token_identity(&authenticator, headers, source, Some(failed)).await
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

/// Why a client certificate did not authenticate a request.
#[derive(Debug)]
enum CertificateFailure {
    /// It verified and names no user.
    NoUser(NoUser),
    /// It does not verify against the client CA.
    NotVerified(VerifyError),
}

/// The user of the client certificate of `conn`, verified now against
/// `client_ca` as the API server's x509 authenticator verifies it, and
/// its credential (until the earliest notAfter of its chain); `None`
/// without a certificate (or without a client CA, which asks for none).
fn certificate_identity(
    conn: Option<&ConnInfo>,
    client_ca: Option<&ClientCa>,
) -> Option<Result<(Identity, Presented), CertificateFailure>> {
    let certificates = conn?.client_certificates.as_ref()?;
    let chain = match certificates.verify(client_ca?, SystemTime::now()) {
        Ok(chain) => chain,
        Err(err) => return Some(Err(CertificateFailure::NotVerified(err))),
    };
    Some(match user_of(certificates.leaf()) {
        CertificateUser::User(identity) => {
            let not_after = chain.iter().map(|c| c.not_after).min().unwrap_or_default();
            let not_after = u64::try_from(not_after)
                .ok()
                .and_then(|s| SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(s)))
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let presented = Presented {
                credential: Credential::Certificate { not_after },
                expires: instant_of(not_after),
            };
            Ok((identity, presented))
        }
        CertificateUser::NoUser(why) => Err(CertificateFailure::NoUser(why)),
    })
}

/// Who holds the request's bearer token (sent from `source`), and the
/// token to re-check an open watch with; without one, the error says why
/// the certificate (if any) did not authenticate the request either.
async fn token_identity(
    authenticator: &Authenticator,
    headers: &HeaderMap,
    source: Option<IpAddr>,
    certificate: Option<CertificateFailure>,
) -> Result<(Identity, Presented), AuthError> {
    match (bearer_token(headers)?, certificate) {
        (Ok(token), _) => {
            let accepted = authenticator.authenticate(token, source).await?;
            let presented = Presented {
                credential: Credential::Token(token.into()),
                expires: accepted.expires,
            };
            Ok((accepted.identity, presented))
        }
        (Err(_), Some(CertificateFailure::NoUser(why))) => {
            Err(AuthError::CertificateWithoutUser(why))
        }
        (Err(_), Some(CertificateFailure::NotVerified(err))) => {
            Err(AuthError::CertificateNotVerified(err))
        }
        (Err(ignored), None) => Err(AuthError::MissingCredentials(ignored)),
    }
}

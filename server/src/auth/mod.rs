//! Who is calling, and may they see this: the API server's own answers.
//!
//! kube-fanout must never show a caller what the API server would not, so
//! it asks the API server, like kube-rbac-proxy and the kubelet do:
//! [`authn`] checks a bearer token with the TokenReview API, and [`x509`]
//! maps a verified client certificate to a user exactly as the API server
//! does;
//! [`authz`] asks SubjectAccessReview whether that user may get, list or
//! watch the resource in the namespace. Both cache their answers for
//! configurable times ([`cache`]). [`layer`] is the tower layer that puts
//! the caller's [`Identity`] into each request; the gRPC service calls
//! [`Access::authorize`] once per request, and [`Grant::guard`] re-asks for
//! an open watch each time its answer expires, so a revoked watch ends.
//! [`limits`] bounds what one caller may hold open. [`http_access`] does the same
//! checks for the metrics endpoint (a non-resource URL).
//!
//! Fail closed: when a review cannot be made, the request fails; only an
//! answer the API server gave (and that has not expired) lets one through.

pub mod authn;
pub mod authz;
pub mod cache;
pub mod http_access;
pub mod layer;
pub mod limits;
pub mod reviews;
pub mod x509;

use std::{
    collections::BTreeMap,
    fmt,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};

use futures::{Stream, future::BoxFuture};
use tokio::time::Instant;
use tonic::Status;

pub use authn::Authenticator;
pub use authz::Authorizer;

/// The most characters of a reviewer's message quoted back to a caller.
const QUOTE_LIMIT: usize = 100;

/// An authenticated caller, as the API server describes users.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Identity {
    /// The user name.
    pub user: String,
    /// The user's UID, if the authenticator gave one.
    pub uid: String,
    /// The groups, `system:authenticated` included.
    pub groups: Vec<String>,
    /// Extra attributes (for ServiceAccount tokens: the pod and node bound
    /// to the token), passed on to authorization as the API server does.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The group every authenticated user is in, as the API server adds it.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// `groups` with [`AUTHENTICATED_GROUP`] added as the API server's
/// authenticated-group adder does: not for `system:anonymous`, and not
/// when the groups already hold it or `system:unauthenticated`.
pub fn with_authenticated_group(user: &str, mut groups: Vec<String>) -> Vec<String> {
    let marked = groups
        .iter()
        .any(|g| g == AUTHENTICATED_GROUP || g == "system:unauthenticated");
    if user != "system:anonymous" && !marked {
        groups.push(AUTHENTICATED_GROUP.to_owned());
    }
    groups
}

/// What a request asks to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// Get one object.
    Get,
    /// List objects.
    List,
    /// Watch objects.
    Watch,
}

impl Verb {
    /// The Kubernetes verb.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
        }
    }
}

/// A request's resource attributes, as the API server would derive them
/// from the same request made to it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// The verb.
    pub verb: Verb,
    /// API group; empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name.
    pub resource: String,
    /// Namespace; empty for all namespaces (the cluster scope).
    pub namespace: String,
    /// Object name (Get), empty otherwise.
    pub name: String,
}

impl fmt::Display for Attributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb.as_str(), self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        // Quoted with a bound: the values are validated before they get
        // here, but a message never echoes a caller's input unbounded.
        if !self.name.is_empty() {
            write!(f, " {}", crate::error::quote(&self.name))?;
        }
        if self.namespace.is_empty() {
            write!(f, " at the cluster scope (all namespaces)")
        } else {
            write!(f, " in namespace {}", crate::error::quote(&self.namespace))
        }
    }
}

/// Why a caller was turned away.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuthError {
    /// No bearer token and no verified client certificate.
    #[error(
        "no credentials: send a bearer token in the authorization header (`authorization: Bearer <token>`) or a client certificate"
    )]
    MissingCredentials,
    /// A client certificate the API server would refuse (its TLS handshake
    /// fails there): refused whatever else the request carries.
    #[error("the client certificate is refused, as the API server refuses it: {0}")]
    CertificateRefused(#[from] x509::CertificateError),
    /// A client certificate that names no user, and no bearer token.
    #[error(
        "the client certificate names no user ({0}), as the API server reads it, and no bearer token was sent"
    )]
    CertificateWithoutUser(x509::NoUser),
    /// An authorization header that is not `Bearer <token>`.
    #[error("the authorization header is not of the form `Bearer <token>`")]
    MalformedHeader,
    /// An authorization header too large to be a token.
    #[error("the authorization header is {size} bytes; at most {max} are accepted")]
    HeaderTooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The API server did not accept the token.
    #[error("the bearer token was not accepted: {0}")]
    InvalidToken(String),
    /// The API server answered no.
    #[error("user {} may not {attributes}{}", crate::error::quote(.user), reason_suffix(.reason))]
    Denied {
        /// Who asked.
        user: String,
        /// What they asked.
        attributes: Box<Attributes>,
        /// The authorizer's reason, if it gave one.
        reason: String,
    },
    /// The API server answered no for a non-resource URL (`/metrics`).
    #[error("user {user:?} may not {verb} {path}{}", reason_suffix(.reason))]
    NonResourceDenied {
        /// Who asked.
        user: String,
        /// The verb (`get`).
        verb: &'static str,
        /// The path.
        path: &'static str,
        /// The authorizer's reason, if it gave one.
        reason: String,
    },
    /// A TokenReview or SubjectAccessReview could not be made, so nothing
    /// is allowed (fail closed).
    #[error("cannot verify the request: {review} failed: {message}")]
    Unavailable {
        /// Which review.
        review: &'static str,
        /// Why.
        message: String,
    },
    /// A per-caller limit was reached.
    #[error("{caller} already has {open} {what} open, the most allowed per caller")]
    LimitExceeded {
        /// Who ([`limits::Caller`], displayed with bounded quoting).
        caller: String,
        /// Watches or initial snapshots.
        what: &'static str,
        /// How many it has open.
        open: usize,
    },
}

fn reason_suffix(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(": {}", quote(reason))
    }
}

/// `text`, cut to [`QUOTE_LIMIT`] characters.
pub fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_LIMIT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// How the gRPC service checks requests: open (`--auth=none`) or through
/// the API server's SubjectAccessReview.
#[derive(Debug, Clone, Default)]
pub struct Access {
    authorizer: Option<Arc<Authorizer>>,
}

impl Access {
    /// Every request allowed: `--auth=none`.
    pub fn open() -> Self {
        Access::default()
    }

    /// Every request authorized by `authorizer`, for the identity the
    /// authentication layer put in the request.
    pub fn checked(authorizer: Arc<Authorizer>) -> Self {
        Access {
            authorizer: Some(authorizer),
        }
    }

    /// Whether requests are checked.
    pub fn is_checked(&self) -> bool {
        self.authorizer.is_some()
    }

    /// Authorizes a request whose extensions carry the caller's identity.
    /// The one place a request is let through.
    pub async fn authorize(
        &self,
        extensions: &http::Extensions,
        attributes: Attributes,
    ) -> Result<Grant, AuthError> {
        let Some(authorizer) = &self.authorizer else {
            return Ok(Grant::default());
        };
        // Without the layer there is no identity: refuse rather than guess.
        let identity = extensions
            .get::<Identity>()
            .ok_or(AuthError::MissingCredentials)?;
        let expires = authorizer.authorize(identity, &attributes).await?;
        Ok(Grant {
            recheck: Some(Recheck {
                authorizer: authorizer.clone(),
                identity: identity.clone(),
                attributes,
                expires,
            }),
        })
    }
}

/// A request let through, and what to re-check while its watch is open.
#[derive(Debug, Default)]
pub struct Grant {
    recheck: Option<Recheck>,
}

#[derive(Debug)]
struct Recheck {
    authorizer: Arc<Authorizer>,
    identity: Identity,
    attributes: Attributes,
    expires: Instant,
}

impl Recheck {
    /// Sleeps until the decision expires and asks again (one review per
    /// caller and scope per allow-TTL, whatever the event rate), until the
    /// answer is no or cannot be had.
    async fn until_refused(self) -> AuthError {
        let mut expires = self.expires;
        loop {
            tokio::time::sleep_until(expires).await;
            match self
                .authorizer
                .authorize(&self.identity, &self.attributes)
                .await
            {
                Ok(next) => expires = next,
                Err(err) => return err,
            }
        }
    }
}

impl Grant {
    /// Ends `events` with the refusal once the caller's permission is
    /// re-checked and found revoked (or cannot be re-checked), at the
    /// latest one allow-TTL after the revocation.
    pub fn guard<S, T>(self, events: S) -> Guarded<S>
    where
        S: Stream<Item = Result<T, Status>>,
    {
        Guarded {
            events: Box::pin(events),
            refused: self.recheck.map(|r| Box::pin(r.until_refused()) as _),
            done: false,
            _permit: None,
        }
    }
}

impl<S> Guarded<S> {
    /// Keeps `permit` (the caller's watch count) for as long as the stream.
    pub fn holding(self, permit: limits::Permit) -> Self {
        Guarded {
            _permit: Some(permit),
            ..self
        }
    }
}

/// A watch stream that ends when its caller's permission does.
pub struct Guarded<S> {
    events: Pin<Box<S>>,
    refused: Option<BoxFuture<'static, AuthError>>,
    done: bool,
    /// Given back when the stream is dropped.
    _permit: Option<limits::Permit>,
}

impl<S, T> Stream for Guarded<S>
where
    S: Stream<Item = Result<T, Status>>,
{
    type Item = Result<T, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        // The refusal first: once it is known, not one more event goes out.
        if let Some(refused) = &mut this.refused
            && let Poll::Ready(err) = refused.as_mut().poll(cx)
        {
            this.done = true;
            return Poll::Ready(Some(Err(err.into())));
        }
        let next = ready!(this.events.as_mut().poll_next(cx));
        this.done = next.is_none();
        Poll::Ready(next)
    }
}

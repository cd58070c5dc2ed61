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
//!
//! This crate sits on the core (for quoting input in errors) and on the
//! listener (each connection's [`kube_fanout_listener::conn::ConnInfo`]);
//! the gRPC service and the server wiring sit on it.

pub mod audit;
pub mod authn;
pub mod authz;
pub mod budget;
mod cache;
mod counters;
mod credential;
#[cfg(test)]
mod fakes;
pub mod http_access;
pub mod layer;
pub mod limits;
pub mod reviews;
mod status;
pub mod x509;

use std::{
    collections::BTreeMap,
    fmt,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
    time::{Duration, SystemTime},
};

use futures::{Stream, future::BoxFuture};
use kube_fanout_listener::conn::ConnInfo;
use tokio::time::Instant;
use tonic::Status;

pub use authn::Authenticator;
pub use authz::Authorizer;
pub use credential::{Credential, Presented};

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
            write!(f, " {}", kube_fanout_core::quote::quote(&self.name))?;
        }
        if self.namespace.is_empty() {
            write!(f, " at the cluster scope (all namespaces)")
        } else {
            write!(
                f,
                " in namespace {}",
                kube_fanout_core::quote::quote(&self.namespace)
            )
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
    /// The token a watch was opened with is no longer accepted (its
    /// ServiceAccount, pod or secret deleted, or it expired).
    #[error("the bearer token this watch was opened with is no longer accepted: {0}")]
    TokenRevoked(String),
    /// The token now names another user than the watch was opened for.
    #[error("the bearer token this watch was opened with now names another identity")]
    IdentityChanged,
    /// A verified client certificate whose notAfter cannot be read.
    #[error("the client certificate's validity (notAfter) cannot be read")]
    CertificateUnreadable,
    /// The client certificate's validity ended.
    #[error("the client certificate expired at {} (its notAfter)", fmt_time(*.0))]
    CertificateExpired(SystemTime),
    /// Too many TokenReviews asked for, from this source or in total: the
    /// request is refused without one.
    #[error(
        "too many token reviews {}: at most {limit}; retry in {retry_after:?}",
        match .exceeded { budget::Exceeded::Source(s) => format!("for unknown tokens from {s}"), budget::Exceeded::Total => "for unknown tokens in total".to_owned() }
    )]
    Throttled {
        /// The bound that was hit.
        exceeded: budget::Exceeded,
        /// The bound, in words.
        limit: String,
        /// When a retry may succeed.
        retry_after: Duration,
    },
    /// The API server answered no.
    #[error("user {} may not {attributes}{}", kube_fanout_core::quote::quote(.user), reason_suffix(.reason))]
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

/// A wall-clock time as seconds since the Unix epoch (RFC 3339 would need
/// a calendar crate for one message).
pub(crate) fn fmt_time(at: SystemTime) -> String {
    match at.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => format!("{}s after the Unix epoch", since.as_secs()),
        Err(_) => "a time before the Unix epoch".to_owned(),
    }
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
/// the API server's TokenReview and SubjectAccessReview.
#[derive(Debug, Clone, Default)]
pub struct Access {
    checked: Option<Checked>,
}

#[derive(Debug, Clone)]
struct Checked {
    authorizer: Arc<Authorizer>,
    authenticator: Arc<Authenticator>,
}

impl Access {
    /// Every request allowed: `--auth=none`.
    pub fn open() -> Self {
        Access::default()
    }

    /// Every request authorized by `authorizer`, for the identity the
    /// authentication layer put in the request; open watches' tokens are
    /// reviewed again by `authenticator` (the layer's).
    pub fn checked(authorizer: Arc<Authorizer>, authenticator: Arc<Authenticator>) -> Self {
        Access {
            checked: Some(Checked {
                authorizer,
                authenticator,
            }),
        }
    }

    /// Authorizes a request whose extensions carry the caller's identity
    /// (and its connection's address, for the audit log, which is given
    /// `options` at its `Request` level). The one place a request is let
    /// through.
    pub async fn authorize(
        &self,
        extensions: &http::Extensions,
        attributes: Attributes,
        options: impl FnOnce() -> audit::RequestOptions,
    ) -> Result<Grant, AuthError> {
        let Some(checked) = &self.checked else {
            return Ok(Grant::default());
        };
        // Without the layer there is no identity: refuse rather than guess.
        let identity = extensions
            .get::<Identity>()
            .ok_or(AuthError::MissingCredentials)?;
        let source = extensions
            .get::<ConnInfo>()
            .and_then(|c| c.remote_addr)
            .map(|a| a.ip());
        let audit = checked.authorizer.audit().request(source, options);
        let expires = checked
            .authorizer
            .authorize(identity, &attributes, audit.as_ref())
            .await?;
        let credential = extensions.get::<Presented>().cloned();
        Ok(Grant {
            recheck: Some(Recheck {
                checked: checked.clone(),
                identity: identity.clone(),
                attributes,
                expires,
                credential,
                checked_at: Instant::now(),
                audit,
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
    checked: Checked,
    identity: Identity,
    attributes: Attributes,
    /// When the permission is asked again.
    expires: Instant,
    /// The credential and when it is checked again.
    credential: Option<Presented>,
    /// When the last check was made.
    checked_at: Instant,
    /// The request's audit context, with the audit log on.
    audit: Option<audit::RequestAudit>,
}

/// The least time between two re-checks of an open watch.
const MIN_RECHECK: Duration = Duration::from_secs(1);

impl Recheck {
    /// Sleeps until the permission's or the credential's answer expires
    /// and asks again (one review per caller and scope per allow TTL, one
    /// per token per token TTL, shared with new requests, whatever the
    /// event rate), until an answer is no or cannot be had.
    async fn until_refused(mut self) -> AuthError {
        let audit = self.audit.as_ref().map(audit::RequestAudit::recheck);
        loop {
            let credential_due = self.credential.as_ref().map(|c| c.expires);
            let due = credential_due.map_or(self.expires, |c| c.min(self.expires));
            // An answer that expires at once (a TTL of 0) is asked again
            // no sooner than this after the last check, not in a tight loop.
            tokio::time::sleep_until(due.max(self.checked_at + MIN_RECHECK)).await;
            self.checked_at = Instant::now();
            if let Some(check) = self
                .credential
                .as_mut()
                .filter(|c| c.expires <= Instant::now())
            {
                match &check.credential {
                    Credential::Certificate { not_after } => {
                        return AuthError::CertificateExpired(*not_after);
                    }
                    Credential::Token(token) => {
                        match self.checked.authenticator.revalidate(token).await {
                            Ok(again) if again.identity == self.identity => {
                                check.expires = again.expires;
                            }
                            Ok(_) => return AuthError::IdentityChanged,
                            Err(err) => return err,
                        }
                    }
                }
            }
            if self.expires <= Instant::now() {
                match self
                    .checked
                    .authorizer
                    .authorize(&self.identity, &self.attributes, audit.as_ref())
                    .await
                {
                    Ok(next) => self.expires = next,
                    Err(err) => return err,
                }
            }
        }
    }
}

impl Grant {
    /// The audit of the watch this grant lets through, to be observed by
    /// its stream and logged when the stream is dropped; `None` with the
    /// audit log off (or without authorization). For watches only: Gets
    /// and Lists have their decision line and no stream end.
    pub fn stream_audit(&self) -> Option<audit::StreamAudit> {
        let recheck = self.recheck.as_ref()?;
        Some(audit::StreamAudit::new(
            recheck.checked.authorizer.audit().clone(),
            recheck.audit.clone()?,
            recheck.identity.clone(),
            recheck.attributes.clone(),
        ))
    }

    /// Ends `events` with the refusal once the caller's permission or
    /// credential is re-checked and found revoked (or cannot be
    /// re-checked): at the latest one allow TTL after a revocation of the
    /// permission, one token TTL after the token stops being accepted, at
    /// a certificate's notAfter.
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use futures::StreamExt;
    use tokio_stream::wrappers::UnboundedReceiverStream;
    use tonic::Code;

    use super::{
        fakes::{self, TOKEN_TTL, alice, watch_configmaps},
        *,
    };

    type Events = tokio::sync::mpsc::UnboundedSender<Result<u32, Status>>;

    /// A watch authorized for `extensions`, and the sender of its events.
    async fn open(
        access: &Access,
        extensions: &http::Extensions,
    ) -> (Events, Guarded<impl Stream<Item = Result<u32, Status>>>) {
        let grant = access
            .authorize(extensions, watch_configmaps(), Default::default)
            .await
            .unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (tx, grant.guard(UnboundedReceiverStream::new(rx)))
    }

    fn presented(credential: Credential, expires: Instant) -> http::Extensions {
        let mut extensions = http::Extensions::new();
        extensions.insert(alice());
        extensions.insert(Presented {
            credential,
            expires,
        });
        extensions
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_ends_unauthenticated_within_the_token_ttl_once_its_token_is_revoked() {
        let tokens = Arc::new(fakes::Tokens::default());
        let (access, authenticator) = fakes::checked(tokens.clone(), Arc::default());
        // As the layer does it: the token reviewed, then the request.
        let accepted = authenticator.authenticate("good", None).await.unwrap();
        let extensions = presented(Credential::Token("good".into()), accepted.expires);
        let (tx, mut watch) = open(&access, &extensions).await;

        // Still good at the TTL: reviewed once more, the watch goes on.
        tokio::time::advance(TOKEN_TTL).await;
        tx.send(Ok(1)).unwrap();
        assert_eq!(watch.next().await.unwrap().unwrap(), 1);
        assert_eq!(tokens.calls.load(Ordering::SeqCst), 2);

        tokens.revoked.store(true, Ordering::SeqCst);
        let revoked_at = Instant::now();
        let status = watch.next().await.expect("a status").unwrap_err();
        assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
        assert_eq!(
            status.message(),
            "the bearer token this watch was opened with is no longer accepted: invalid bearer token"
        );
        assert_eq!(revoked_at.elapsed(), TOKEN_TTL, "at the next review");
        tx.send(Ok(2)).unwrap();
        assert!(watch.next().await.is_none());
        // New requests with the token get the review the watch made.
        let calls = tokens.calls.load(Ordering::SeqCst);
        authenticator.authenticate("good", None).await.unwrap_err();
        assert_eq!(tokens.calls.load(Ordering::SeqCst), calls);
    }

    /// TTLs of 0 would re-review at every wake-up: re-checks are at least
    /// MIN_RECHECK apart.
    #[tokio::test(start_paused = true)]
    async fn ttls_of_zero_do_not_re_review_in_a_tight_loop() {
        let (tokens, accesses) = (
            Arc::new(fakes::Tokens::default()),
            Arc::new(fakes::Accesses::default()),
        );
        let (access, authenticator) = fakes::checked_with(
            tokens.clone(),
            accesses.clone(),
            Duration::ZERO,
            Duration::ZERO,
        );
        let accepted = authenticator.authenticate("good", None).await.unwrap();
        let extensions = presented(Credential::Token("good".into()), accepted.expires);
        let (tx, mut watch) = open(&access, &extensions).await;
        for i in 0..10 {
            tokio::time::advance(MIN_RECHECK).await;
            tx.send(Ok(i)).unwrap();
            assert_eq!(watch.next().await.unwrap().unwrap(), i);
        }
        // One review each at the start, then one each per MIN_RECHECK.
        assert!(tokens.calls.load(Ordering::SeqCst) <= 11, "{tokens:?}");
        assert!(accesses.calls.load(Ordering::SeqCst) <= 11, "{accesses:?}");
        assert!(tokens.calls.load(Ordering::SeqCst) >= 10, "{tokens:?}");
    }

    /// A watch's decision, each re-check of it, and its end share one
    /// audit ID; the re-check that refused it is logged before its end.
    #[tokio::test(start_paused = true)]
    async fn a_revoked_watch_logs_its_decisions_and_its_end_under_one_audit_id() {
        use audit::{AuditLevel, AuditLog};
        let accesses = Arc::new(fakes::Accesses::default());
        let (log, writer) = AuditLog::new(
            AuditLevel::Metadata,
            std::num::NonZeroU32::new(100).unwrap(),
        );
        let (access, _) = fakes::audited(
            Arc::default(),
            accesses.clone(),
            TOKEN_TTL,
            fakes::ALLOW_TTL,
            log.clone(),
        );
        let mut extensions = http::Extensions::new();
        extensions.insert(alice());
        let grant = access
            .authorize(&extensions, watch_configmaps(), Default::default)
            .await
            .unwrap();
        let mut audit = grant.stream_audit().expect("the audit log is on");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Result<u32, Status>>();
        let mut watch = Box::pin(
            grant
                .guard(UnboundedReceiverStream::new(rx))
                .map(move |item| {
                    audit.observe(&item, |_| 4);
                    item
                }),
        );
        tx.send(Ok(1)).unwrap();
        assert_eq!(watch.next().await.unwrap().unwrap(), 1);
        tokio::time::advance(fakes::ALLOW_TTL).await;
        tx.send(Ok(2)).unwrap();
        assert_eq!(watch.next().await.unwrap().unwrap(), 2);
        accesses.revoked.store(true, Ordering::SeqCst);
        let status = watch.next().await.unwrap().unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied);
        drop((watch, access));

        let lines = fakes::audit_lines(log, writer).await;
        let seen: Vec<_> = lines
            .iter()
            .map(|l| {
                (
                    l["stage"].as_str().unwrap(),
                    l["decision"]
                        .as_str()
                        .or(l["responseStatus"]["status"].as_str()),
                    l.get("recheck").is_some(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("Decision", Some("allow"), false),
                ("Decision", Some("allow"), true),
                ("Decision", Some("deny"), true),
                ("StreamEnd", Some("PERMISSION_DENIED"), false),
            ]
        );
        assert!(lines.iter().all(|l| l["auditID"] == lines[0]["auditID"]));
        assert_eq!(lines[3]["events"], 2);
        assert_eq!(lines[3]["bytes"], 8);
        assert_eq!(accesses.calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_ends_when_its_certificate_expires() {
        let (access, _) = fakes::checked(Arc::default(), Arc::default());
        let not_after = SystemTime::now() + Duration::from_secs(95);
        let extensions = presented(
            Credential::Certificate { not_after },
            credential::instant_of(not_after),
        );
        let (tx, mut watch) = open(&access, &extensions).await;
        let opened = Instant::now();
        tx.send(Ok(1)).unwrap();
        assert_eq!(watch.next().await.unwrap().unwrap(), 1);
        // The permission is re-asked every allow TTL meanwhile; the
        // certificate ends the watch at its notAfter.
        let status = watch.next().await.expect("a status").unwrap_err();
        assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
        assert!(
            status
                .message()
                .starts_with("the client certificate expired at "),
            "{status:?}"
        );
        let took = opened.elapsed();
        assert!(
            took <= Duration::from_secs(95) && took > Duration::from_secs(94),
            "{took:?}"
        );
    }
}

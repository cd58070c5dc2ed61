//! Why a caller was turned away: every refusal of this crate, with a
//! message that names the fault (service/src/error.rs maps each to a gRPC
//! status).

use std::time::{Duration, SystemTime};

use kube_fanout_x509::verify::VerifyError;

use crate::{attributes::Attributes, forbidden, x509};

/// Why a caller was turned away.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuthError {
    /// No bearer token (the header absent, or of a form the API server
    /// ignores) and no verified client certificate.
    #[error(
        "no credentials ({0}, and ignored as the API server ignores it): send a bearer token in the authorization header (`authorization: Bearer <token>`) or a client certificate"
    )]
    MissingCredentials(#[from] Ignored),
    /// A client certificate that does not verify against the client CA
    /// (as the API server's x509 authenticator verifies it), and no bearer
    /// token to fall back on.
    #[error(
        "the client certificate does not verify, as the API server verifies it ({0}), and no bearer token was sent"
    )]
    CertificateNotVerified(#[from] VerifyError),
    /// A client certificate that names no user, and no bearer token.
    #[error(
        "the client certificate names no user ({0}), as the API server reads it, and no bearer token was sent"
    )]
    CertificateWithoutUser(x509::NoUser),
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
    /// The client certificate's validity ended.
    #[error("the client certificate expired at {} (its notAfter)", fmt_time(*.0))]
    CertificateExpired(SystemTime),
    /// Too many TokenReviews asked for, from this source or in total: the
    /// request is refused without one.
    #[error(
        "too many token reviews {}: at most {limit}; retry in {retry_after:?}",
        match .exceeded { Exceeded::Source(s) => format!("for unknown tokens from {s}"), Exceeded::Total => "for unknown tokens in total".to_owned() }
    )]
    Throttled {
        /// The bound that was hit.
        exceeded: Exceeded,
        /// The bound, in words.
        limit: String,
        /// When a retry may succeed.
        retry_after: Duration,
    },
    /// The request's source failed to authenticate too often: refused
    /// without looking at its credentials (see
    /// [`kube_fanout_listener::failures`]).
    #[error("{0}")]
    ShutOut(#[from] kube_fanout_listener::failures::ShutOut),
    /// The API server answered no.
    #[error("{}", forbidden::resource(.user, .attributes, .reason))]
    Denied {
        /// Who asked.
        user: String,
        /// What they asked.
        attributes: Box<Attributes>,
        /// The authorizer's reason, if it gave one.
        reason: String,
    },
    /// The API server answered no for a non-resource URL (`/metrics`).
    #[error("{}", forbidden::path(.user, .verb, .path, .reason))]
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

impl AuthError {
    /// Whether the caller caused this failure to authenticate (credentials
    /// missing, malformed or refused, or more reviews asked for than the
    /// budget allows), so that it counts against its source's failure
    /// budget. A review that could not be made is the server's trouble,
    /// not the caller's; a refusal for being shut out already is not a
    /// new failure.
    pub fn is_callers_failure(&self) -> bool {
        match self {
            AuthError::MissingCredentials(_)
            | AuthError::CertificateNotVerified(_)
            | AuthError::CertificateWithoutUser(_)
            | AuthError::HeaderTooLarge { .. }
            | AuthError::InvalidToken(_)
            | AuthError::CertificateExpired(_)
            | AuthError::Throttled { .. } => true,
            AuthError::TokenRevoked(_)
            | AuthError::IdentityChanged
            | AuthError::ShutOut(_)
            | AuthError::Denied { .. }
            | AuthError::NonResourceDenied { .. }
            | AuthError::Unavailable { .. }
            | AuthError::LimitExceeded { .. } => false,
        }
    }
}

/// A wall-clock time as seconds since the Unix epoch (RFC 3339 would need
/// a calendar crate for one message).
pub(crate) fn fmt_time(at: SystemTime) -> String {
    match at.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => format!("{}s after the Unix epoch", since.as_secs()),
        Err(_) => "a time before the Unix epoch".to_owned(),
    }
}

/// Which bound of the review budget ([`crate::budget`]) refused a review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exceeded {
    /// The source's own (its address).
    Source(String),
    /// The total one, shared by every source.
    Total,
}

/// Why an authorization header carries no bearer token, in the API
/// server's terms: it ignores each of these as if there were no header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Ignored {
    /// No authorization header.
    #[error("no authorization header")]
    Absent,
    /// A header of white space only.
    #[error("the authorization header is empty")]
    Empty,
    /// A scheme other than `Bearer`, or no space after it.
    #[error("the authorization header is not of the form `Bearer <token>`")]
    NotBearer,
    /// More than one space between `Bearer` and the token.
    #[error("the authorization header has extra space before the bearer token")]
    SpaceBeforeToken,
}

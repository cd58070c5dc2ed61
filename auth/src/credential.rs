//! The credential a request was authenticated with, kept with an open
//! watch so that the watch ends when the credential does, and the instant
//! a JWT says it stops being valid (its `exp`).

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use base64::Engine;
use tokio::time::Instant;

/// How a request proved who it is.
#[derive(Clone)]
pub enum Credential {
    /// A bearer token, reviewed again when its cached answer expires.
    Token(Arc<str>),
    /// A verified client certificate, valid until `not_after`.
    Certificate {
        /// The certificate's notAfter.
        not_after: SystemTime,
    },
}

impl std::fmt::Debug for Credential {
    /// Never the token itself.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Token(_) => f.write_str("Token(..)"),
            Credential::Certificate { not_after } => f
                .debug_struct("Certificate")
                .field("not_after", not_after)
                .finish(),
        }
    }
}

/// The credential of a request and when it must be checked again (a
/// token's cached answer expires, a certificate's notAfter); put into the
/// request's extensions by the authentication layer next to the
/// [`Identity`](crate::identity::Identity).
#[derive(Debug, Clone)]
pub struct Presented {
    /// The credential.
    pub credential: Credential,
    /// When it is checked again.
    pub expires: Instant,
}

/// The tokio instant of a wall-clock time (now, if it has passed).
pub fn instant_of(at: SystemTime) -> Instant {
    let left = at
        .duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO);
    Instant::now() + left
}

/// The `exp` claim of a token that looks like a JWT, unverified: it only
/// ever shortens how long the API server's answer about the token is
/// believed (a token past its `exp` is reviewed again, and the API server
/// refuses it), never lets anything through.
pub fn jwt_expiry(token: &str) -> Option<SystemTime> {
    let mut parts = token.split('.');
    let (_header, payload, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    #[derive(serde::Deserialize)]
    struct Claims {
        exp: Option<u64>,
    }
    let exp = serde_json::from_slice::<Claims>(&json).ok()?.exp?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(exp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: &str) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.sig", b64(r#"{"alg":"RS256"}"#), b64(claims))
    }

    #[test]
    fn the_exp_of_a_jwt_is_read_and_anything_else_has_none() {
        assert_eq!(
            jwt_expiry(&jwt(r#"{"exp":1700000000,"sub":"x"}"#)),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        for no in [
            jwt(r#"{"sub":"x"}"#),
            jwt("not json"),
            jwt(r#"{"exp":-1}"#),
            "kube-fanout-test-alice-token".to_owned(),
            "a.b".to_owned(),
            "a.b.c.d".to_owned(),
        ] {
            assert_eq!(jwt_expiry(&no), None, "{no}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_past_time_is_now_and_a_future_one_that_far_ahead() {
        assert_eq!(instant_of(SystemTime::UNIX_EPOCH), Instant::now());
        let ahead = instant_of(SystemTime::now() + Duration::from_secs(30));
        let left = ahead - Instant::now();
        assert!(
            left <= Duration::from_secs(30) && left > Duration::from_secs(29),
            "{left:?}"
        );
    }
}

//! The credential a request was authenticated with, kept with an open
//! watch so that the watch ends when the credential does, and the instants
//! a credential says it stops being valid: a certificate's notAfter, a
//! JWT's `exp`.

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use base64::Engine;
use rustls_pki_types::CertificateDer;
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

/// A certificate's notAfter, if its DER holds one where X.509 puts it
/// (`Certificate.tbsCertificate.validity.notAfter`). Read with a few lines
/// of DER rather than a parser, because only verified certificates get
/// here: rustls checked this very field at the handshake.
pub fn not_after(der: &CertificateDer<'_>) -> Option<SystemTime> {
    let (_, certificate, _) = der_element(der.as_ref())?;
    let (_, mut tbs, _) = der_element(certificate)?;
    let mut next = || {
        let (tag, content, rest) = der_element(tbs)?;
        tbs = rest;
        Some((tag, content))
    };
    let (mut tag, _) = next()?;
    if tag == 0xa0 {
        // [0] version, then the serial number.
        (tag, _) = next()?;
    }
    if tag != 0x02 {
        return None;
    }
    let _signature = next()?;
    let _issuer = next()?;
    let (tag, validity) = next()?;
    if tag != 0x30 {
        return None;
    }
    let (_, _, rest) = der_element(validity)?; // notBefore
    let (tag, time, _) = der_element(rest)?;
    der_time(tag, std::str::from_utf8(time).ok()?)
}

/// The tag, content and what follows of the DER element at the start of
/// `der`.
fn der_element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let bytes = usize::from(first & 0x7f);
        if bytes == 0 || bytes > 4 || rest.len() < bytes {
            return None;
        }
        let len = rest[..bytes]
            .iter()
            .fold(0usize, |n, b| (n << 8) | usize::from(*b));
        (len, &rest[bytes..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// A UTCTime (`YYMMDDHHMMSSZ`, tag 0x17) or GeneralizedTime
/// (`YYYYMMDDHHMMSSZ`, tag 0x18), the two forms RFC 5280 allows.
fn der_time(tag: u8, text: &str) -> Option<SystemTime> {
    let digits = text.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 if digits.len() == 12 => {
            let yy: i64 = digits[..2].parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &digits[2..])
        }
        0x18 if digits.len() == 14 => (digits[..4].parse().ok()?, &digits[4..]),
        _ => return None,
    };
    if !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let field = |i: usize| rest[i..i + 2].parse::<i64>().ok();
    let (month, day) = (field(0)?, field(2)?);
    let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(u64::try_from(secs).ok()?))
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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

    fn epoch_secs(at: SystemTime) -> u64 {
        at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()
    }

    /// rcgen writes UTCTime up to 2049 and GeneralizedTime from 2050, as
    /// RFC 5280 says; both are read.
    #[test]
    fn a_certificates_not_after_is_read_in_both_time_forms() {
        for ((y, m, d), expected) in [
            ((2031, 1, 2), 1_925_078_400),
            ((2026, 12, 1), 1_796_083_200),
            ((2050, 3, 1), 2_529_705_600),
        ] {
            let mut params = rcgen::CertificateParams::new(vec!["x".to_owned()]).unwrap();
            params.not_after = rcgen::date_time_ymd(y, m, d);
            let cert = params
                .self_signed(&rcgen::KeyPair::generate().unwrap())
                .unwrap();
            let at = not_after(cert.der()).expect("notAfter");
            assert_eq!(epoch_secs(at), expected, "{y}-{m}-{d}");
        }
        assert_eq!(
            not_after(&CertificateDer::from(vec![0x30, 0x03, 0x02])),
            None
        );
        assert_eq!(not_after(&CertificateDer::from(Vec::new())), None);
    }

    #[test]
    fn der_times_are_read_to_the_second() {
        assert_eq!(der_time(0x17, "700101000000Z").map(epoch_secs), Some(0));
        assert_eq!(
            der_time(0x18, "20000229235959Z").map(epoch_secs),
            Some(951_868_799)
        );
        for bad in [
            "7001010000Z",
            "700101000000",
            "701301000000Z",
            "70010100000aZ",
        ] {
            assert_eq!(der_time(0x17, bad), None, "{bad}");
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

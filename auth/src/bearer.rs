//! The bearer token of a request's `authorization` header, read exactly as
//! the API server's bearer-token authenticator reads it (k8s.io/apiserver
//! `pkg/authentication/request/bearertoken`, v1.36): the header's first
//! value, trimmed of white space at both ends (Go's `strings.TrimSpace`:
//! Unicode white space, in valid UTF-8 only), split at its first two
//! spaces; the first part must be `bearer` in any case and the second is
//! the token, whatever follows a second space. So ` Bearer t` (a leading
//! space) and `BEARER t` carry `t`, `Bearer t x` carries `t`, and
//! `Bearer  t` (two spaces), `Bearer\tt`, `Bearer`, `Basic …` and an empty
//! header carry no token at all: the API server ignores the header (the
//! request is anonymous there, with a warning for the extra space) and so
//! does kube-fanout, where the request then has no credential of its own
//! (kube-fanout serves no anonymous requests).

use http::{HeaderMap, header::AUTHORIZATION};

use crate::error::AuthError;
pub use crate::error::Ignored;

/// The largest authorization header looked at. Service-account tokens are
/// about 1 KiB; a header this large is no token, and reviewing it would
/// only cost the API server.
pub const MAX_AUTHORIZATION_BYTES: usize = 8 * 1024;

/// The bearer token `headers` carry, or why they carry none (an error
/// only for a header past [`MAX_AUTHORIZATION_BYTES`], or a token that
/// is not UTF-8, which no API server authenticator issues).
pub fn bearer_token(headers: &HeaderMap) -> Result<Result<&str, Ignored>, AuthError> {
    let Some(header) = headers.get(AUTHORIZATION) else {
        return Ok(Err(Ignored::Absent));
    };
    if header.len() > MAX_AUTHORIZATION_BYTES {
        return Err(AuthError::HeaderTooLarge {
            size: header.len(),
            max: MAX_AUTHORIZATION_BYTES,
        });
    }
    let value = trim_space(header.as_bytes());
    if value.is_empty() {
        return Ok(Err(Ignored::Empty));
    }
    let mut parts = value.splitn(3, |&b| b == b' ');
    let scheme = parts.next().unwrap_or_default();
    let Some(token) = parts.next() else {
        return Ok(Err(Ignored::NotBearer));
    };
    // Go lowers Unicode; no character but ASCII lowers to these letters.
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return Ok(Err(Ignored::NotBearer));
    }
    if token.is_empty() {
        // Only a third part can follow an empty second one: "Bearer  t".
        return Ok(Err(if parts.next().is_some() {
            Ignored::SpaceBeforeToken
        } else {
            Ignored::NotBearer
        }));
    }
    std::str::from_utf8(token)
        .map(Ok)
        .map_err(|_| AuthError::InvalidToken("it is not UTF-8".to_owned()))
}

/// `value` without the white space Go's `strings.TrimSpace` removes: the
/// Unicode white space characters (Rust's and Go's sets are the same) at
/// either end, decoded as UTF-8; a byte that is not part of valid UTF-8
/// is no white space, so trimming stops at it.
fn trim_space(value: &[u8]) -> &[u8] {
    let mut start = 0;
    while let Some((c, len)) = first_char(&value[start..]) {
        if !c.is_whitespace() {
            break;
        }
        start += len;
    }
    let mut end = value.len();
    while end > start {
        let Some((c, len)) = last_char(&value[start..end]) else {
            break;
        };
        if !c.is_whitespace() {
            break;
        }
        end -= len;
    }
    &value[start..end]
}

/// The first character of `bytes` and its length, if they start with one
/// in valid UTF-8.
fn first_char(bytes: &[u8]) -> Option<(char, usize)> {
    let head = &bytes[..bytes.len().min(4)];
    let valid = match std::str::from_utf8(head) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default(),
    };
    valid.chars().next().map(|c| (c, c.len_utf8()))
}

/// The last character of `bytes` and its length, if they end with one in
/// valid UTF-8.
fn last_char(bytes: &[u8]) -> Option<(char, usize)> {
    (1..=bytes.len().min(4)).find_map(|len| {
        let tail = std::str::from_utf8(&bytes[bytes.len() - len..]).ok()?;
        let mut chars = tail.chars();
        let c = chars.next()?;
        chars.next().is_none().then_some((c, len))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(value: &[u8]) -> Result<Result<String, Ignored>, AuthError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            AUTHORIZATION,
            http::HeaderValue::from_bytes(value).expect("a header value"),
        );
        bearer_token(&headers).map(|token| token.map(str::to_owned))
    }

    fn token(value: &str) -> String {
        read(value.as_bytes()).unwrap().unwrap()
    }

    fn ignored(value: &[u8]) -> Ignored {
        read(value).unwrap().unwrap_err()
    }

    /// The forms the API server's bearer-token authenticator accepts, and
    /// the token it reads from each.
    #[test]
    fn the_forms_the_api_server_accepts_carry_its_token() {
        for (form, expected) in [
            ("Bearer abc", "abc"),
            ("bearer abc", "abc"),
            ("BeArEr abc", "abc"),
            (" Bearer abc", "abc"),
            ("\t Bearer abc \t", "abc"),
            ("Bearer abc def", "abc"),
            ("Bearer abc  ", "abc"),
            ("Bearer a\tb", "a\tb"),
        ] {
            assert_eq!(token(form), expected, "{form:?}");
        }
        // Unicode white space at the ends, as Go's TrimSpace sees it.
        assert_eq!(token("\u{a0}Bearer abc\u{3000}"), "abc");
    }

    /// The forms it ignores (anonymous there), each for its reason.
    #[test]
    fn the_forms_the_api_server_ignores_carry_no_token() {
        for (form, why) in [
            (&b"Bearer  abc"[..], Ignored::SpaceBeforeToken),
            (b"Bearer   abc", Ignored::SpaceBeforeToken),
            (b"Bearer\tabc", Ignored::NotBearer),
            (b"Bearer", Ignored::NotBearer),
            (b"Bearer ", Ignored::NotBearer),
            (b"Basic dXNlcjpwYXNz", Ignored::NotBearer),
            (b"Bearerx abc", Ignored::NotBearer),
            (b"abc", Ignored::NotBearer),
            (b"", Ignored::Empty),
            (b" \t ", Ignored::Empty),
        ] {
            assert_eq!(ignored(form), why, "{:?}", String::from_utf8_lossy(form));
        }
        assert_eq!(
            bearer_token(&HeaderMap::new()).unwrap(),
            Err(Ignored::Absent)
        );
    }

    /// Bytes that are not UTF-8 are not white space to Go: a header
    /// starting with one is no `Bearer` header, and a token of them no
    /// token any authenticator gave.
    #[test]
    fn bytes_that_are_not_utf8_are_not_trimmed() {
        assert_eq!(ignored(b"\xa0Bearer abc"), Ignored::NotBearer);
        assert_eq!(ignored(b"\xc2Bearer abc"), Ignored::NotBearer);
        let err = read(b"Bearer ab\xffc").unwrap_err();
        assert!(matches!(err, AuthError::InvalidToken(_)), "{err}");
        assert_eq!(trim_space(b"abc\xc2"), b"abc\xc2");
        assert_eq!(trim_space(b"abc\xc2\xa0"), b"abc");
    }

    #[test]
    fn a_header_past_the_bound_is_refused_with_its_size() {
        let huge = format!("Bearer {}", "x".repeat(MAX_AUTHORIZATION_BYTES));
        let err = read(huge.as_bytes()).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("is {} bytes", MAX_AUTHORIZATION_BYTES + 7)),
            "{err}"
        );
    }
}

//! A URI subject alternative name as Go's `net/url.Parse` reads it, far
//! enough to refuse what it refuses and to find the host that crypto/x509
//! checks: control characters, a scheme that is only `:`, a colon in the
//! first segment of a relative reference, a bad `%` escape, a host with a
//! character a host may not hold or an escaped ASCII byte, an IP literal
//! that is no IPv6 address, a port that is not digits, userinfo with a
//! character it may not hold.

use crate::netip;

/// The host of `uri` (Go's `URL.Host`, port and brackets included, its
/// escapes decoded), or nothing if `url.Parse` refuses it.
pub fn host(uri: &[u8]) -> Option<Vec<u8>> {
    let (reference, fragment) = match uri.iter().position(|&b| b == b'#') {
        Some(i) => (&uri[..i], Some(&uri[i + 1..])),
        None => (uri, None),
    };
    let host = parse(reference)?;
    if let Some(fragment) = fragment.filter(|f| !f.is_empty()) {
        unescape(fragment, Mode::Other)?;
    }
    Some(host)
}

/// Go's `parse(rawURL, false)`: the host, if any.
fn parse(raw: &[u8]) -> Option<Vec<u8>> {
    if raw.iter().any(|&b| b < b' ' || b == 0x7f) {
        return None;
    }
    if raw == b"*" {
        return Some(Vec::new());
    }
    let (scheme, rest) = scheme(raw)?;
    let scheme = scheme.to_ascii_lowercase();
    let rest = if rest.ends_with(b"?") && rest.iter().filter(|&&b| b == b'?').count() == 1 {
        &rest[..rest.len() - 1]
    } else {
        rest.split(|&b| b == b'?').next().unwrap_or_default()
    };
    if !rest.starts_with(b"/") {
        if !scheme.is_empty() {
            // An opaque reference ("urn:x"): no host, nothing more read.
            return Some(Vec::new());
        }
        let segment = rest.split(|&b| b == b'/').next().unwrap_or_default();
        if segment.contains(&b':') {
            return None;
        }
    }
    let mut host = Vec::new();
    let mut path = rest;
    if (!scheme.is_empty() || !rest.starts_with(b"///")) && rest.starts_with(b"//") {
        let authority_and_path = &rest[2..];
        let (authority, tail) = match authority_and_path.iter().position(|&b| b == b'/') {
            Some(i) => authority_and_path.split_at(i),
            None => (authority_and_path, &b""[..]),
        };
        host = self::authority(&scheme, authority)?;
        path = tail;
    }
    unescape(path, Mode::Other)?;
    Some(host)
}

/// The scheme and what follows it (Go's `getScheme`), or nothing for a
/// reference that starts with `:`.
fn scheme(raw: &[u8]) -> Option<(&[u8], &[u8])> {
    for (i, &c) in raw.iter().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i != 0 => {}
            b':' if i == 0 => return None,
            b':' => return Some((&raw[..i], &raw[i + 1..])),
            _ => return Some((&[], raw)),
        }
    }
    Some((&[], raw))
}

/// Go's `parseAuthority`: the host, checked with the userinfo.
fn authority(scheme: &[u8], authority: &[u8]) -> Option<Vec<u8>> {
    let Some(at) = authority.iter().rposition(|&b| b == b'@') else {
        return self::host_port(scheme, authority);
    };
    let host = host_port(scheme, &authority[at + 1..])?;
    let userinfo = &authority[..at];
    let allowed = |c: u8| c.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(&c);
    if !userinfo.iter().all(|&c| allowed(c)) {
        return None;
    }
    for part in userinfo.splitn(2, |&b| b == b':') {
        unescape(part, Mode::Other)?;
    }
    Some(host)
}

/// Go's `parseHost`: `host[:port]`, or `[ipv6]` with an optional zone and
/// port.
fn host_port(scheme: &[u8], host: &[u8]) -> Option<Vec<u8>> {
    match host.iter().rposition(|&b| b == b'[') {
        Some(i) if i > 0 => return None,
        Some(_) => {
            let close = host.iter().rposition(|&b| b == b']')?;
            let port = &host[close + 1..];
            if !valid_port(port) {
                return None;
            }
            let name = &host[1..close];
            let decoded = match find(name, b"%25") {
                Some(zone) => {
                    let mut decoded = unescape(&name[..zone], Mode::Host)?;
                    decoded.extend(unescape(&name[zone..], Mode::Zone)?);
                    decoded
                }
                None => unescape(name, Mode::Host)?,
            };
            if !matches!(netip::parse(&decoded), Some(netip::Addr::V6 { .. })) {
                return None;
            }
            let mut out = vec![b'['];
            out.extend(decoded);
            out.push(b']');
            out.extend(port);
            return Some(out);
        }
        None => {}
    }
    if let Some(first) = host.iter().position(|&b| b == b':') {
        let last = host.iter().rposition(|&b| b == b':').unwrap_or(first);
        // Colons in the host: only the last one starts the port, except
        // for http and https, whose hosts hold no colon at all.
        let port_start = if scheme == b"http" || scheme == b"https" {
            first
        } else {
            last
        };
        if !valid_port(&host[port_start..]) {
            return None;
        }
    }
    unescape(host, Mode::Host)
}

/// Empty, or `:` and digits.
fn valid_port(port: &[u8]) -> bool {
    match port.split_first() {
        None => true,
        Some((b':', digits)) => digits.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Which part of a URL a text is unescaped for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Host,
    Zone,
    /// A path, fragment or userinfo: only the escapes are checked.
    Other,
}

/// Whether a host may hold the ASCII byte `c` unescaped.
fn host_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!$&'()*+,;=:[]<>\"-_.~".contains(&c)
}

/// Go's `unescape`: the decoded bytes, or nothing for a bad escape (and,
/// in a host or zone, a byte a host may not hold).
fn unescape(s: &[u8], mode: Mode) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' => {
                if i + 2 >= s.len()
                    || !s[i + 1].is_ascii_hexdigit()
                    || !s[i + 2].is_ascii_hexdigit()
                {
                    return None;
                }
                let hex = |c: u8| {
                    (c as char)
                        .to_digit(16)
                        .map(|d| d as u8)
                        .unwrap_or_default()
                };
                let (high, low) = (hex(s[i + 1]), hex(s[i + 2]));
                let escape = &s[i..i + 3];
                if mode == Mode::Host && high < 8 && escape != b"%25" {
                    return None;
                }
                let v = high << 4 | low;
                if mode == Mode::Zone
                    && escape != b"%25"
                    && v != b' '
                    && !(v < 0x80 && host_byte(v))
                {
                    return None;
                }
                out.push(v);
                i += 3;
            }
            c => {
                if mode != Mode::Other && c < 0x80 && !host_byte(c) {
                    return None;
                }
                out.push(c);
                i += 1;
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_of(uri: &str) -> Option<String> {
        host(uri.as_bytes()).map(|h| String::from_utf8_lossy(&h).into_owned())
    }

    #[test]
    fn uris_are_read_as_go_reads_them() {
        for (uri, expected) in [
            ("spiffe://cluster.local/ns/a/sa/b", Some("cluster.local")),
            ("https://example.com:8443/x?y#z", Some("example.com:8443")),
            ("urn:uuid:1234", Some("")),
            ("mailto:a@b", Some("")),
            ("/relative/path", Some("")),
            ("", Some("")),
            ("*", Some("")),
            ("https://[::1]:80/", Some("[::1]:80")),
            ("https://[fe80::1%25en0]/", Some("[fe80::1%en0]")),
            ("https://u:p@host/", Some("host")),
            ("x://a%C3%A9b/", Some("a\u{e9}b")),
            ("db://h1:1,h2:2/", Some("h1:1,h2:2")),
            (":foo", None),
            ("a:b/c", Some("")),
            ("1a:b", None),
            ("https://exa mple.com/", None),
            ("https://host/%zz", None),
            ("https://host/%2", None),
            ("https://ho%41st/", None),
            ("https://[1.2.3.4]/", None),
            ("https://[::1/", None),
            ("https://x[::1]/", None),
            ("https://host:8x/", None),
            ("https://h:1:2/", None),
            ("https://us er@host/", None),
            ("https://host/#%zz", None),
            ("https://host/\u{7f}", None),
            ("https://ho^st/", None),
        ] {
            assert_eq!(host_of(uri).as_deref(), expected, "{uri}");
        }
    }
}

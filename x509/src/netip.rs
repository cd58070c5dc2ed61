//! IP addresses in text as Go's `net/netip.ParseAddr` reads them (which
//! crypto/x509 uses through `net.ParseIP` and net/url): dotted IPv4 with
//! no leading zeros, IPv6 with at most one `::`, groups of at most four
//! hex digits, an embedded IPv4 only in the last 32 bits, and a non-empty
//! `%zone`.

/// What kind of address a text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addr {
    /// An IPv4 address.
    V4,
    /// An IPv6 address, with a zone or not.
    V6 {
        /// Whether it has a `%zone`.
        zoned: bool,
    },
}

/// The kind of address `s` is, if `netip.ParseAddr` accepts it.
pub fn parse(s: &[u8]) -> Option<Addr> {
    for &b in s {
        match b {
            b'.' => return ipv4_fields(s).map(|_| Addr::V4),
            b':' => return ipv6(s),
            b'%' => return None,
            _ => {}
        }
    }
    None
}

/// The four octets of a dotted IPv4 address.
fn ipv4_fields(s: &[u8]) -> Option<()> {
    let (mut value, mut digits, mut fields) = (0u32, 0, 0);
    for (i, &b) in s.iter().enumerate() {
        match b {
            b'0'..=b'9' => {
                if digits == 1 && value == 0 {
                    return None;
                }
                value = value * 10 + u32::from(b - b'0');
                digits += 1;
                if value > 255 {
                    return None;
                }
            }
            b'.' => {
                if i == 0 || i == s.len() - 1 || s[i - 1] == b'.' || fields == 3 {
                    return None;
                }
                fields += 1;
                value = 0;
                digits = 0;
            }
            _ => return None,
        }
    }
    (fields == 3).then_some(())
}

fn ipv6(input: &[u8]) -> Option<Addr> {
    let (mut s, zoned) = match input.iter().position(|&b| b == b'%') {
        Some(i) if i + 1 == input.len() => return None,
        Some(i) => (&input[..i], true),
        None => (input, false),
    };
    let mut ellipsis = None;
    if s.starts_with(b"::") {
        ellipsis = Some(0);
        s = &s[2..];
        if s.is_empty() {
            return Some(Addr::V6 { zoned });
        }
    }
    let mut i = 0;
    while i < 16 {
        let mut off = 0;
        let mut acc = 0u32;
        while off < s.len() {
            let digit = match s[off] {
                c @ b'0'..=b'9' => c - b'0',
                c @ b'a'..=b'f' => c - b'a' + 10,
                c @ b'A'..=b'F' => c - b'A' + 10,
                _ => break,
            };
            acc = (acc << 4) + u32::from(digit);
            if off > 3 || acc > u32::from(u16::MAX) {
                return None;
            }
            off += 1;
        }
        if off == 0 {
            return None;
        }
        if off < s.len() && s[off] == b'.' {
            if (ellipsis.is_none() && i != 12) || i + 4 > 16 {
                return None;
            }
            ipv4_fields(s)?;
            s = &[];
            i += 4;
            break;
        }
        i += 2;
        s = &s[off..];
        if s.is_empty() {
            break;
        }
        if s[0] != b':' || s.len() == 1 {
            return None;
        }
        s = &s[1..];
        if s[0] == b':' {
            if ellipsis.is_some() {
                return None;
            }
            ellipsis = Some(i);
            s = &s[1..];
            if s.is_empty() {
                break;
            }
        }
    }
    if !s.is_empty() {
        return None;
    }
    match (i < 16, ellipsis) {
        (true, None) | (false, Some(_)) => None,
        _ => Some(Addr::V6 { zoned }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_read_as_netip_reads_them() {
        let v6 = Some(Addr::V6 { zoned: false });
        for (text, expected) in [
            ("1.2.3.4", Some(Addr::V4)),
            ("01.2.3.4", None),
            ("1.2.3", None),
            ("1.2.3.4.5", None),
            ("256.1.1.1", None),
            ("::", v6),
            ("::1", v6),
            ("fe80::1%en0", Some(Addr::V6 { zoned: true })),
            ("fe80::1%", None),
            ("::ffff:1.2.3.4", v6),
            ("1:2:3:4:5:6:1.2.3.4", v6),
            ("1:2:3:4:5:1.2.3.4", None),
            ("1:2:3:4:5:6:7:8", v6),
            ("1:2:3:4:5:6:7:8:9", None),
            ("1:2:3:4:5:6:7::8", None),
            ("1::2::3", None),
            ("12345::", None),
            ("1:", None),
            ("example.com", None),
            ("%en0", None),
            ("", None),
        ] {
            assert_eq!(parse(text.as_bytes()), expected, "{text}");
        }
    }
}

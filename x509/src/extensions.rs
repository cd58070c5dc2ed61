//! A certificate's extensions as Go's `processExtensions` reads them: each
//! extension Go knows is parsed by its rules (and a malformed one refuses
//! the certificate), an unknown one, or a known one Go cannot act on, is
//! recorded when critical (verification then refuses the certificate).

use crate::{
    der::{Der, Oid, tag},
    error::ParseError,
    netip, uri,
};

/// What Go learns from a certificate's extensions, as far as verification
/// and the API server's identity need it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extensions {
    /// Every extension: its OID's DER contents, criticality and value.
    pub all: Vec<(Vec<u8>, bool, Vec<u8>)>,
    /// The key usage bits (Go's `KeyUsage`, bit 0 digitalSignature).
    pub key_usage: u16,
    /// A basic constraints extension was present.
    pub basic_constraints_valid: bool,
    /// Its cA flag.
    pub is_ca: bool,
    /// Its pathLenConstraint, if any.
    pub max_path_len: Option<u64>,
    /// The subject key identifier (empty if none).
    pub subject_key_id: Vec<u8>,
    /// The authority key identifier's keyIdentifier (empty if none).
    pub authority_key_id: Vec<u8>,
    /// Extended key usages: whether any (known or not) were listed,
    /// whether anyExtendedKeyUsage was, and whether clientAuth was.
    pub ext_key_usage: ExtKeyUsage,
    /// The SAN extension held a DNS name, email, IP address or URI.
    pub has_san_names: bool,
    /// The certificate policies' OIDs.
    pub policies: Vec<Vec<u8>>,
    /// The policy mappings.
    pub policy_mappings: Vec<PolicyMapping>,
    /// The policy constraints' requireExplicitPolicy, if present.
    pub require_explicit_policy: Option<i64>,
    /// The OIDs (dotted) of critical extensions Go does not act on.
    pub unhandled_critical: Vec<String>,
}

/// A policy mapping: the issuer's and the subject's domain policy
/// (their OIDs' DER contents).
pub type PolicyMapping = (Vec<u8>, Vec<u8>);

/// A certificate's extended key usages, as far as client authentication
/// asks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExtKeyUsage {
    /// Any extended key usage was listed (Go's `ExtKeyUsage` or
    /// `UnknownExtKeyUsage` is not empty).
    pub listed: bool,
    /// anyExtendedKeyUsage (2.5.29.37.0) was listed.
    pub any: bool,
    /// clientAuth (1.3.6.1.5.5.7.3.2) was listed.
    pub client_auth: bool,
}

/// The DER contents of the OIDs below.
const ANY_EKU: &[u8] = &[0x55, 0x1d, 0x25, 0x00];
const CLIENT_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];
const AUTHORITY_INFO_ACCESS: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x01];
/// The prefix of the extensions of RFC 5280 (2.5.29.x).
const ID_CE: &[u8] = &[0x55, 0x1d];
/// The subject alternative name extension (2.5.29.17).
pub const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];
/// The name constraints extension (2.5.29.30).
pub const NAME_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x1e];

fn err(message: &str) -> ParseError {
    ParseError::new(message.to_owned())
}

/// Parses the contents of the `[3]` extensions field of a v3 certificate.
pub(crate) fn parse(mut extensions: Der<'_>) -> Result<Extensions, ParseError> {
    let mut list = extensions
        .read(tag::SEQUENCE)
        .ok_or_else(|| err("x509: malformed extensions"))?;
    let mut out = Extensions::default();
    while !list.is_empty() {
        let mut extension = list
            .read(tag::SEQUENCE)
            .ok_or_else(|| err("x509: malformed extension"))?;
        let oid = extension
            .read_oid()
            .ok_or_else(|| err("x509: malformed extension OID field"))?;
        let critical = if extension.peek(tag::BOOLEAN) {
            extension
                .read_bool()
                .ok_or_else(|| err("x509: malformed extension critical field"))?
        } else {
            false
        };
        let value = extension
            .read(tag::OCTET_STRING)
            .ok_or_else(|| err("x509: malformed extension value field"))?;
        if out.all.iter().any(|(seen, _, _)| seen.as_slice() == oid.0) {
            return Err(ParseError::new(format!(
                "x509: certificate contains duplicate extension with OID \"{}\"",
                oid.dotted()
            )));
        }
        out.all.push((oid.0.to_vec(), critical, value.0.to_vec()));
    }
    // Go parses every extension's syntax first, then each one's value.
    for i in 0..out.all.len() {
        let (oid, critical, value) = out.all[i].clone();
        let handled = process(&mut out, Oid(&oid), critical, Der(&value))?;
        if critical && !handled {
            out.unhandled_critical.push(Oid(&oid).dotted());
        }
    }
    Ok(out)
}

/// Reads one extension into `out`; whether Go acts on it.
fn process(
    out: &mut Extensions,
    oid: Oid<'_>,
    critical: bool,
    value: Der<'_>,
) -> Result<bool, ParseError> {
    if oid.0 == AUTHORITY_INFO_ACCESS {
        authority_info_access(critical, value)?;
        return Ok(true);
    }
    let &[a, b, number] = oid.0 else {
        return Ok(false);
    };
    if [a, b] != *ID_CE {
        return Ok(false);
    }
    match number {
        15 => out.key_usage = key_usage(value)?,
        19 => {
            let (is_ca, max_path_len) = basic_constraints(value)?;
            out.basic_constraints_valid = true;
            out.is_ca = is_ca;
            out.max_path_len = max_path_len;
        }
        17 => {
            out.has_san_names = subject_alt_names(value)?;
            // A SAN of none of the four kinds Go reads is acted on by
            // nothing: critical, it is unhandled.
            return Ok(out.has_san_names);
        }
        30 => return name_constraints(value),
        31 => crl_distribution_points(value)?,
        35 => {
            if critical {
                return Err(err(
                    "x509: authority key identifier incorrectly marked critical",
                ));
            }
            out.authority_key_id = authority_key_id(value)?;
        }
        36 => out.require_explicit_policy = policy_constraints(value)?,
        37 => out.ext_key_usage = ext_key_usage(value)?,
        14 => {
            if critical {
                return Err(err(
                    "x509: subject key identifier incorrectly marked critical",
                ));
            }
            let mut value = value;
            out.subject_key_id = value
                .read(tag::OCTET_STRING)
                .ok_or_else(|| err("x509: invalid subject key identifier"))?
                .0
                .to_vec();
        }
        32 => out.policies = certificate_policies(value)?,
        33 => out.policy_mappings = policy_mappings(value)?,
        54 => {
            let mut value = value;
            value
                .read_i64()
                .ok_or_else(|| err("x509: invalid inhibit any policy extension"))?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

fn key_usage(mut value: Der<'_>) -> Result<u16, ParseError> {
    let bits = value
        .read_bit_string()
        .ok_or_else(|| err("x509: invalid key usage"))?;
    Ok((0..9)
        .filter(|&i| bits.at(i))
        .fold(0, |usage, i| usage | 1 << i))
}

fn basic_constraints(mut value: Der<'_>) -> Result<(bool, Option<u64>), ParseError> {
    let invalid = || err("x509: invalid basic constraints");
    let mut seq = value.read(tag::SEQUENCE).ok_or_else(invalid)?;
    let is_ca = if seq.peek(tag::BOOLEAN) {
        seq.read_bool().ok_or_else(invalid)?
    } else {
        false
    };
    let max_path_len = if seq.peek(tag::INTEGER) {
        let n = seq.read_u64().ok_or_else(invalid)?;
        if n > i64::MAX as u64 {
            return Err(invalid());
        }
        Some(n)
    } else {
        None
    };
    Ok((is_ca, max_path_len))
}

/// Whether the SAN held any name Go reads.
fn subject_alt_names(mut value: Der<'_>) -> Result<bool, ParseError> {
    let mut names = value
        .read(tag::SEQUENCE)
        .ok_or_else(|| err("x509: invalid subject alternative names"))?;
    let mut any = false;
    while !names.is_empty() {
        let name = names
            .read_any()
            .ok_or_else(|| err("x509: invalid subject alternative name"))?;
        let data = name.contents;
        // Go compares the tag with its class bit flipped: only the
        // context-specific primitive tags [1], [2], [6], [7] are names.
        match name.tag ^ 0x80 {
            1 | 2 | 6 if !data.is_ascii() => {
                return Err(err(match name.tag ^ 0x80 {
                    1 => "x509: SAN rfc822Name is malformed",
                    2 => "x509: SAN dNSName is malformed",
                    _ => "x509: SAN uniformResourceIdentifier is malformed",
                }));
            }
            1 | 2 => any = true,
            6 => {
                let host = uri::host(data).ok_or_else(|| err("x509: cannot parse URI SAN"))?;
                if !host.is_empty() && !domain_name_valid(&host, false) {
                    return Err(err("x509: cannot parse URI SAN: invalid domain"));
                }
                any = true;
            }
            7 => {
                if data.len() != 4 && data.len() != 16 {
                    return Err(ParseError::new(format!(
                        "x509: cannot parse IP address of length {}",
                        data.len()
                    )));
                }
                any = true;
            }
            _ => {}
        }
    }
    Ok(any)
}

/// Whether Go acts on the name constraints (it does not on a subtree of
/// a kind it does not read), after checking each one's syntax.
fn name_constraints(value: Der<'_>) -> Result<bool, ParseError> {
    let invalid = || err("x509: invalid NameConstraints extension");
    let mut outer = value;
    let mut top = outer.read(tag::SEQUENCE).ok_or_else(invalid)?;
    if !outer.is_empty() {
        return Err(invalid());
    }
    let permitted = top
        .read_optional(tag::context_constructed(0))
        .ok_or_else(invalid)?;
    let excluded = top
        .read_optional(tag::context_constructed(1))
        .ok_or_else(invalid)?;
    if !top.is_empty() {
        return Err(invalid());
    }
    let empty = |subtrees: Option<Der<'_>>| subtrees.is_none_or(|s| s.is_empty());
    if empty(permitted) && empty(excluded) {
        return Err(err("x509: empty name constraints extension"));
    }
    let mut handled = true;
    for mut subtrees in [permitted, excluded].into_iter().flatten() {
        while !subtrees.is_empty() {
            let mut subtree = subtrees.read(tag::SEQUENCE).ok_or_else(invalid)?;
            let base = subtree.read_any().ok_or_else(invalid)?;
            let value = base.contents;
            let ia5 = || {
                value
                    .is_ascii()
                    .then_some(())
                    .ok_or_else(|| err("x509: invalid constraint value"))
            };
            match base.tag {
                // dNSName [2]
                0x82 => {
                    ia5()?;
                    if !domain_name_valid(value, true) {
                        return Err(err("x509: failed to parse dnsName constraint"));
                    }
                }
                // iPAddress [7]: an address and a mask of leading ones.
                0x87 => {
                    let mask = match value.len() {
                        8 => &value[4..],
                        32 => &value[16..],
                        n => {
                            return Err(ParseError::new(format!(
                                "x509: IP constraint contained value of length {n}"
                            )));
                        }
                    };
                    if !valid_mask(mask) {
                        return Err(err("x509: IP constraint contained invalid mask"));
                    }
                }
                // rfc822Name [1]: a mailbox, or a domain.
                0x81 => {
                    ia5()?;
                    let valid = if value.contains(&b'@') {
                        mailbox(value)
                    } else {
                        domain_name_valid(value, true)
                    };
                    if !valid {
                        return Err(err("x509: failed to parse rfc822Name constraint"));
                    }
                }
                // uniformResourceIdentifier [6]: a domain, not an address.
                0x86 => {
                    ia5()?;
                    if matches!(
                        netip::parse(value),
                        Some(netip::Addr::V4 | netip::Addr::V6 { zoned: false })
                    ) {
                        return Err(err(
                            "x509: failed to parse URI constraint: cannot be IP address",
                        ));
                    }
                    if !domain_name_valid(value, true) {
                        return Err(err("x509: failed to parse URI constraint"));
                    }
                }
                _ => handled = false,
            }
        }
    }
    Ok(handled)
}

/// Go's `isValidIPMask`: ones, then zeros.
fn valid_mask(mask: &[u8]) -> bool {
    let mut seen_zero = false;
    for &b in mask {
        if seen_zero {
            if b != 0 {
                return false;
            }
            continue;
        }
        match b {
            0x00 | 0x80 | 0xc0 | 0xe0 | 0xf0 | 0xf8 | 0xfc | 0xfe => seen_zero = true,
            0xff => {}
            _ => return false,
        }
    }
    true
}

fn crl_distribution_points(mut value: Der<'_>) -> Result<(), ParseError> {
    let mut points = value
        .read(tag::SEQUENCE)
        .ok_or_else(|| err("x509: invalid CRL distribution points"))?;
    let invalid = || err("x509: invalid CRL distribution point");
    while !points.is_empty() {
        let mut point = points.read(tag::SEQUENCE).ok_or_else(invalid)?;
        let Some(mut name) = point
            .read_optional(tag::context_constructed(0))
            .ok_or_else(invalid)?
        else {
            continue;
        };
        let mut full = name.read(tag::context_constructed(0)).ok_or_else(invalid)?;
        while !full.is_empty() && full.peek(tag::context(6)) {
            full.read(tag::context(6)).ok_or_else(invalid)?;
        }
    }
    Ok(())
}

fn authority_key_id(mut value: Der<'_>) -> Result<Vec<u8>, ParseError> {
    let invalid = || err("x509: invalid authority key identifier");
    let mut akid = value.read(tag::SEQUENCE).ok_or_else(invalid)?;
    if akid.peek(tag::context(0)) {
        return Ok(akid.read(tag::context(0)).ok_or_else(invalid)?.0.to_vec());
    }
    Ok(Vec::new())
}

fn policy_constraints(mut value: Der<'_>) -> Result<Option<i64>, ParseError> {
    let invalid = || err("x509: invalid policy constraints extension");
    let mut seq = value.read(tag::SEQUENCE).ok_or_else(invalid)?;
    let mut require = None;
    if seq.peek(tag::context(0)) {
        require = Some(seq.read_i64_with_tag(tag::context(0)).ok_or_else(invalid)?);
    }
    if seq.peek(tag::context(1)) {
        seq.read_i64_with_tag(tag::context(1)).ok_or_else(invalid)?;
    }
    Ok(require)
}

fn ext_key_usage(mut value: Der<'_>) -> Result<ExtKeyUsage, ParseError> {
    let invalid = || err("x509: invalid extended key usages");
    let mut seq = value.read(tag::SEQUENCE).ok_or_else(invalid)?;
    let mut usage = ExtKeyUsage::default();
    while !seq.is_empty() {
        let oid = seq.read_oid().ok_or_else(invalid)?;
        usage.listed = true;
        usage.any |= oid.0 == ANY_EKU;
        usage.client_auth |= oid.0 == CLIENT_AUTH;
    }
    Ok(usage)
}

fn certificate_policies(mut value: Der<'_>) -> Result<Vec<Vec<u8>>, ParseError> {
    let invalid = || err("x509: invalid certificate policies");
    let mut seq = value.read(tag::SEQUENCE).ok_or_else(invalid)?;
    let mut oids: Vec<Vec<u8>> = Vec::new();
    while !seq.is_empty() {
        let mut policy = seq.read(tag::SEQUENCE).ok_or_else(invalid)?;
        let oid = policy.read(tag::OID).ok_or_else(invalid)?.0;
        if oids.iter().any(|seen| seen == oid) || !policy_oid(oid) {
            return Err(invalid());
        }
        oids.push(oid.to_vec());
    }
    Ok(oids)
}

/// Go's `newOIDFromDER`: arcs of any size, each in its shortest form, the
/// last one complete.
fn policy_oid(der: &[u8]) -> bool {
    if der.is_empty() || der[der.len() - 1] & 0x80 != 0 {
        return false;
    }
    let mut start = true;
    for &b in der {
        if start && b == 0x80 {
            return false;
        }
        start = b & 0x80 == 0;
    }
    true
}

fn policy_mappings(mut value: Der<'_>) -> Result<Vec<PolicyMapping>, ParseError> {
    let invalid = || err("x509: invalid policy mappings extension");
    let mut seq = value.read(tag::SEQUENCE).ok_or_else(invalid)?;
    let mut mappings = Vec::new();
    while !seq.is_empty() {
        let mut mapping = seq.read(tag::SEQUENCE).ok_or_else(invalid)?;
        let issuer = mapping.read(tag::OID).ok_or_else(invalid)?.0.to_vec();
        let subject = mapping.read(tag::OID).ok_or_else(invalid)?.0.to_vec();
        mappings.push((issuer, subject));
    }
    Ok(mappings)
}

fn authority_info_access(critical: bool, mut value: Der<'_>) -> Result<(), ParseError> {
    if critical {
        return Err(err(
            "x509: authority info access incorrectly marked critical",
        ));
    }
    let invalid = || err("x509: invalid authority info access");
    let mut seq = value.read(tag::SEQUENCE).ok_or_else(invalid)?;
    while !seq.is_empty() {
        let mut access = seq.read(tag::SEQUENCE).ok_or_else(invalid)?;
        access.read_oid().ok_or_else(invalid)?;
        if access.peek(tag::context(6)) {
            access.read(tag::context(6)).ok_or_else(invalid)?;
        }
    }
    Ok(())
}

/// Go's `domainNameValid`: printable ASCII without spaces, no empty
/// label, no trailing dot; a constraint may start with a dot.
pub fn domain_name_valid(s: &[u8], constraint: bool) -> bool {
    if s.is_empty() {
        return true;
    }
    if s[s.len() - 1] == b'.' {
        return false;
    }
    let s = if constraint && s[0] == b'.' {
        &s[1..]
    } else {
        s
    };
    s.split(|&b| b == b'.')
        .all(|label| !label.is_empty() && label.iter().all(|&c| (33..=126).contains(&c)))
}

/// Go's `parseRFC2821Mailbox`: whether `s` is a mailbox.
fn mailbox(s: &[u8]) -> bool {
    let mut rest = s;
    let Some(&first) = rest.first() else {
        return false;
    };
    if first == b'"' {
        rest = &rest[1..];
        loop {
            let Some((&c, tail)) = rest.split_first() else {
                return false;
            };
            rest = tail;
            match c {
                b'"' => break,
                b'\\' => {
                    let Some((&q, tail)) = rest.split_first() else {
                        return false;
                    };
                    if !(q == 11 || q == 12 || (1..=9).contains(&q) || (14..=127).contains(&q)) {
                        return false;
                    }
                    rest = tail;
                }
                11 | 12 | 32 | 33 | 127 | 1..=8 | 14..=31 | 35..=91 | 93..=126 => {}
                _ => return false,
            }
        }
    } else {
        let mut local = Vec::new();
        while let Some(&c) = rest.first() {
            let atext = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~.".contains(&c);
            if c == b'\\' {
                rest = &rest[1..];
                let Some(&escaped) = rest.first() else {
                    return false;
                };
                local.push(escaped);
                rest = &rest[1..];
            } else if atext(c) {
                local.push(c);
                rest = &rest[1..];
            } else {
                break;
            }
        }
        if local.is_empty()
            || local[0] == b'.'
            || local[local.len() - 1] == b'.'
            || local.windows(2).any(|w| w == b"..")
        {
            return false;
        }
    }
    let Some(domain) = rest.strip_prefix(b"@") else {
        return false;
    };
    // domainToReverseLabels: no empty label, no trailing dot, printable.
    domain.is_empty()
        || (domain[domain.len() - 1] != b'.'
            && domain
                .split(|&b| b == b'.')
                .all(|label| !label.is_empty() && label.iter().all(|&c| (33..=126).contains(&c))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_and_mailboxes_are_read_as_go_reads_them() {
        assert!(domain_name_valid(b"example.com", false));
        assert!(domain_name_valid(b"", false));
        assert!(!domain_name_valid(b"example.com.", false));
        assert!(!domain_name_valid(b"a..b", false));
        assert!(!domain_name_valid(b".a", false));
        assert!(domain_name_valid(b".a", true));
        assert!(!domain_name_valid(b"a b", false));
        assert!(mailbox(b"a.b@example.com"));
        assert!(mailbox(b"\"a b\"@example.com"));
        assert!(mailbox(b"a@"));
        assert!(!mailbox(b".a@example.com"));
        assert!(!mailbox(b"a..b@example.com"));
        assert!(!mailbox(b"a@example.com."));
        assert!(!mailbox(b"@example.com"));
    }

    #[test]
    fn ip_masks_are_leading_ones() {
        assert!(valid_mask(&[0xff, 0xff, 0xf0, 0x00]));
        assert!(!valid_mask(&[0xff, 0x0f, 0x00, 0x00]));
        assert!(!valid_mask(&[0xf0, 0xff, 0x00, 0x00]));
    }

    #[test]
    fn policy_oids_are_minimal_and_complete() {
        assert!(policy_oid(&[0x2a, 0x03]));
        assert!(!policy_oid(&[0x2a, 0x83]));
        assert!(!policy_oid(&[0x2a, 0x80, 0x01]));
        assert!(!policy_oid(&[]));
    }
}

//! A verified client certificate's user, exactly as the API server derives
//! it, so that a certificate is the same user here as there.
//!
//! The API server (k8s.io/apiserver `x509.CommonNameUserConversion`, v1.36)
//! reads the subject with Go's crypto/x509: the user is the subject's
//! *last* CN (`pkix.Name.FillFromRDNSequence` overwrites it at each one,
//! over every RDN, multi-valued ones included), the groups are every O in
//! order, the UID is the one UID attribute (OID 1.3.6.1.4.1.57683.2, the
//! `AllowParsingUserUIDFromCertAuth` feature, on by default since 1.33), and
//! the extra `authentication.kubernetes.io/credential-id` is
//! `X509SHA256=<hex of the certificate's SHA-256>`. An empty CN is no user:
//! the API server goes on to other credentials (a bearer token); so it does
//! for a subject with several UIDs or an empty one. Go refuses a
//! certificate whose subject or issuer it cannot parse (an attribute value
//! that is not one of the string types it knows, or not valid in its type),
//! and the API server's TLS handshake fails: such a certificate is refused
//! here too. `system:authenticated` is added as the API server's group
//! adder does.
//!
//! The names are read here with the rules of Go's parser (cryptobyte's DER
//! reader and `parseName`), not with a Rust X.509 crate: those differ from
//! Go in what they accept (x509-parser refuses an empty RDN that Go skips;
//! none keeps Go's string rules), and any difference is a different user.
//! Only the names are read: the rest of the certificate was checked by the
//! TLS verifier (webpki) before this is called.

use std::fmt;

use crate::{
    identity::{Identity, with_authenticated_group},
    quote::quote,
};

/// The extra key the API server puts a credential's ID under.
pub const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// What a verified client certificate makes of its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateUser {
    /// The user the API server derives from it.
    User(Identity),
    /// No user: the API server's certificate authenticator passes, and the
    /// request's other credentials (a bearer token) decide.
    NoUser(NoUser),
}

/// Why a certificate names no user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoUser {
    /// No CN, or the last one is empty.
    #[error("its subject has no common name (CN), or its last one is empty")]
    NoCommonName,
    /// More than one UID attribute.
    #[error("its subject has {0} UID attributes (1.3.6.1.4.1.57683.2); at most one is accepted")]
    SeveralUids(usize),
    /// An empty UID attribute.
    #[error("its subject's UID attribute (1.3.6.1.4.1.57683.2) is empty")]
    EmptyUid,
}

/// A certificate that Go, and so the API server, cannot parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateError {
    /// Not the DER structure Go reads (up to the subject).
    #[error("its {0} is not DER as the API server reads it")]
    Malformed(Part),
    /// An attribute value Go does not accept.
    #[error("its {part} has an attribute {oid} whose value {fault}")]
    Attribute {
        /// The issuer or the subject.
        part: Part,
        /// The attribute type, dotted (quoted with a bound).
        oid: String,
        /// What is wrong with the value.
        fault: ValueFault,
    },
}

/// Where in the certificate a fault is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The outer structure, up to the names.
    Certificate,
    /// The issuer name.
    Issuer,
    /// The subject name.
    Subject,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Certificate => "structure",
            Part::Issuer => "issuer",
            Part::Subject => "subject",
        })
    }
}

/// What is wrong with an attribute value, in Go's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ValueFault {
    /// A UTF8String that is not UTF-8.
    #[error("is not valid UTF-8")]
    Utf8,
    /// A PrintableString with a character outside its set.
    #[error("is not a valid PrintableString")]
    Printable,
    /// An IA5String with a byte above 0x7f.
    #[error("is not a valid IA5String")]
    Ia5,
    /// A NumericString with a character other than a digit or space.
    #[error("is not a valid NumericString")]
    Numeric,
    /// A BMPString of odd length, or with a surrogate or noncharacter.
    #[error("is not a valid BMPString")]
    Bmp,
    /// A type that is none of the string types Go reads.
    #[error("has the unsupported type (tag {0:#04x})")]
    Unsupported(u8),
}

/// The user a verified client certificate (DER) names, as the API server
/// derives it; an error if the API server would refuse the certificate.
pub fn certificate_user(der: &[u8]) -> Result<CertificateUser, CertificateError> {
    let names = Names::of(der)?;
    // Parsed only to refuse what Go refuses.
    parse_name(names.issuer, Part::Issuer)?;
    let subject = parse_name(names.subject, Part::Subject)?;
    let mut user = None;
    let mut groups = Vec::new();
    let mut uids = Vec::new();
    for (oid, value) in subject {
        match oid {
            COMMON_NAME => user = Some(value),
            ORGANIZATION => groups.push(value),
            UID => uids.push(value),
            _ => {}
        }
    }
    let Some(user) = user.filter(|u| !u.is_empty()) else {
        return Ok(CertificateUser::NoUser(NoUser::NoCommonName));
    };
    let uid = match uids.as_slice() {
        [] => String::new(),
        [uid] if uid.is_empty() => return Ok(CertificateUser::NoUser(NoUser::EmptyUid)),
        [uid] => uid.clone(),
        several => return Ok(CertificateUser::NoUser(NoUser::SeveralUids(several.len()))),
    };
    let fingerprint = ring::digest::digest(&ring::digest::SHA256, der);
    let hex: String = fingerprint
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(CertificateUser::User(Identity {
        groups: with_authenticated_group(&user, groups),
        user,
        uid,
        extra: [(CREDENTIAL_ID.to_owned(), vec![format!("X509SHA256={hex}")])].into(),
    }))
}

/// The DER contents of an attribute type: CN (2.5.4.3), O (2.5.4.10) and
/// the Kubernetes UID (1.3.6.1.4.1.57683.2). Go compares parsed OIDs; as it
/// refuses non-minimal encodings, comparing the bytes is the same.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
const ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];
const UID: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0x83, 0xc2, 0x53, 0x02];

/// DER tags (one byte: Go refuses high tag numbers).
mod tag {
    pub const INTEGER: u8 = 0x02;
    pub const OID: u8 = 0x06;
    pub const UTF8_STRING: u8 = 0x0c;
    pub const NUMERIC_STRING: u8 = 0x12;
    pub const PRINTABLE_STRING: u8 = 0x13;
    pub const T61_STRING: u8 = 0x14;
    pub const IA5_STRING: u8 = 0x16;
    pub const BMP_STRING: u8 = 0x1e;
    pub const SEQUENCE: u8 = 0x30;
    pub const SET: u8 = 0x31;
    /// `[0] EXPLICIT`, the version.
    pub const VERSION: u8 = 0xa0;
}

/// A DER reader with the rules of Go's cryptobyte: one-byte tags, definite
/// lengths of at most four bytes in their shortest form.
#[derive(Debug, Clone, Copy)]
struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The next element's tag and contents, and the whole element.
    fn read_any(&mut self) -> Option<(u8, &'a [u8], &'a [u8])> {
        let input = self.0;
        let (&tag, rest) = input.split_first()?;
        let (&first, rest) = rest.split_first()?;
        if tag & 0x1f == 0x1f {
            return None;
        }
        let (length, rest) = if first & 0x80 == 0 {
            (usize::from(first), rest)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 || rest.len() < count || rest[0] == 0 {
                return None;
            }
            let (bytes, rest) = rest.split_at(count);
            let length = bytes
                .iter()
                .fold(0usize, |length, &b| length << 8 | usize::from(b));
            if length < 128 {
                return None;
            }
            (length, rest)
        };
        if rest.len() < length {
            return None;
        }
        let (contents, rest) = rest.split_at(length);
        let element = &input[..input.len() - rest.len()];
        self.0 = rest;
        Some((tag, contents, element))
    }

    /// The contents of the next element, which must have `tag`.
    fn read(&mut self, tag: u8) -> Option<&'a [u8]> {
        let mut ahead = *self;
        let (found, contents, _) = ahead.read_any()?;
        (found == tag).then(|| {
            *self = ahead;
            contents
        })
    }

    /// The next element if it has `tag`, else nothing (and nothing read).
    fn read_optional(&mut self, tag: u8) -> Option<&'a [u8]> {
        if self.0.first() == Some(&tag) {
            self.read(tag)
        } else {
            None
        }
    }
}

/// A certificate's issuer and subject names, each a whole `Name` element.
struct Names<'a> {
    issuer: &'a [u8],
    subject: &'a [u8],
}

impl<'a> Names<'a> {
    /// Finds the names as Go's `parseCertificate` reads up to them.
    fn of(der: &'a [u8]) -> Result<Self, CertificateError> {
        let malformed = || CertificateError::Malformed(Part::Certificate);
        let mut certificate = Der(Der(der).read(tag::SEQUENCE).ok_or_else(malformed)?);
        let mut tbs = Der(certificate.read(tag::SEQUENCE).ok_or_else(malformed)?);
        tbs.read_optional(tag::VERSION);
        tbs.read(tag::INTEGER).ok_or_else(malformed)?;
        tbs.read(tag::SEQUENCE).ok_or_else(malformed)?;
        let mut element = || -> Option<&'a [u8]> {
            let (found, _, element) = tbs.read_any()?;
            (found == tag::SEQUENCE).then_some(element)
        };
        let issuer = element().ok_or(CertificateError::Malformed(Part::Issuer))?;
        element().ok_or_else(malformed)?; // validity
        let subject = element().ok_or(CertificateError::Malformed(Part::Subject))?;
        Ok(Names { issuer, subject })
    }
}

/// A name's attributes in order (empty RDNs skipped, multi-valued ones
/// flattened), as Go's `parseName` and `FillFromRDNSequence` read them:
/// each attribute type's DER contents and its value as a string.
fn parse_name(name: &[u8], part: Part) -> Result<Vec<(&[u8], String)>, CertificateError> {
    let malformed = || CertificateError::Malformed(part);
    let mut rdns = Der(Der(name).read(tag::SEQUENCE).ok_or_else(malformed)?);
    let mut attributes = Vec::new();
    while !rdns.is_empty() {
        let mut set = Der(rdns.read(tag::SET).ok_or_else(malformed)?);
        while !set.is_empty() {
            // Anything after the value is ignored, as Go does.
            let mut attribute = Der(set.read(tag::SEQUENCE).ok_or_else(malformed)?);
            let oid = attribute.read(tag::OID).ok_or_else(malformed)?;
            let dotted = dotted_oid(oid).ok_or_else(malformed)?;
            let (value_tag, value, _) = attribute.read_any().ok_or_else(malformed)?;
            let value =
                go_string(value_tag, value).map_err(|fault| CertificateError::Attribute {
                    part,
                    oid: quote(&dotted),
                    fault,
                })?;
            attributes.push((oid, value));
        }
    }
    Ok(attributes)
}

/// An OID's dotted form, or nothing where Go's reader refuses it: empty,
/// a component in more than five bytes or not below 2³¹, a non-minimal
/// (0x80-led) component, or a truncated one.
fn dotted_oid(contents: &[u8]) -> Option<String> {
    if contents.is_empty() {
        return None;
    }
    let mut components = Vec::new();
    let mut rest = contents;
    while !rest.is_empty() {
        let mut value: u32 = 0;
        for i in 0.. {
            let (&b, tail) = rest.split_first()?;
            if i == 5 || value >= 1 << (31 - 7) || (i == 0 && b == 0x80) {
                return None;
            }
            rest = tail;
            value = value << 7 | u32::from(b & 0x7f);
            if b & 0x80 == 0 {
                break;
            }
        }
        if components.is_empty() {
            let (first, second) = if value < 80 {
                (value / 40, value % 40)
            } else {
                (2, value - 80)
            };
            components.extend([first, second]);
        } else {
            components.push(value);
        }
    }
    Some(
        components
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join("."),
    )
}

/// An attribute value as Go's `parseASN1String` reads it.
fn go_string(tag: u8, value: &[u8]) -> Result<String, ValueFault> {
    match tag {
        // T.61, read as Latin-1 as Go (and BoringSSL) do.
        tag::T61_STRING => Ok(value.iter().map(|&b| char::from(b)).collect()),
        tag::PRINTABLE_STRING if value.iter().all(|&b| printable(b)) => Ok(ascii(value)),
        tag::PRINTABLE_STRING => Err(ValueFault::Printable),
        tag::UTF8_STRING => String::from_utf8(value.to_vec()).map_err(|_| ValueFault::Utf8),
        tag::BMP_STRING => bmp(value),
        tag::IA5_STRING if value.is_ascii() => Ok(ascii(value)),
        tag::IA5_STRING => Err(ValueFault::Ia5),
        tag::NUMERIC_STRING if value.iter().all(|&b| b.is_ascii_digit() || b == b' ') => {
            Ok(ascii(value))
        }
        tag::NUMERIC_STRING => Err(ValueFault::Numeric),
        other => Err(ValueFault::Unsupported(other)),
    }
}

fn ascii(value: &[u8]) -> String {
    value.iter().map(|&b| char::from(b)).collect()
}

/// Go's PrintableString set, with `*` and `&` that it allows too.
fn printable(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"'()+,-./ :=?*&".contains(&b)
}

/// A BMPString (UCS-2, big-endian) as Go reads it: even length, one
/// trailing NUL pair dropped, no surrogates or permanent noncharacters.
fn bmp(value: &[u8]) -> Result<String, ValueFault> {
    if !value.len().is_multiple_of(2) {
        return Err(ValueFault::Bmp);
    }
    let value = value.strip_suffix(&[0, 0]).unwrap_or(value);
    value
        .chunks_exact(2)
        .map(|pair| {
            let unit = u16::from_be_bytes([pair[0], pair[1]]);
            match unit {
                0xfffe | 0xffff | 0xfdd0..=0xfdef => None,
                // Surrogates are no char: refused here.
                unit => char::from_u32(u32::from(unit)),
            }
            .ok_or(ValueFault::Bmp)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::AUTHENTICATED_GROUP;

    /// One DER element (lengths of any size, in their shortest form).
    fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let len = contents.len();
        if len < 128 {
            out.push(len as u8);
        } else {
            let bytes: Vec<u8> = len
                .to_be_bytes()
                .into_iter()
                .skip_while(|&b| b == 0)
                .collect();
            out.push(0x80 | bytes.len() as u8);
            out.extend(bytes);
        }
        out.extend_from_slice(contents);
        out
    }

    fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
        parts.concat()
    }

    /// An attribute: its type's DER contents, a value tag and bytes.
    fn attr(oid: &[u8], value_tag: u8, value: &[u8]) -> Vec<u8> {
        tlv(
            tag::SEQUENCE,
            &cat(&[tlv(tag::OID, oid), tlv(value_tag, value)]),
        )
    }

    fn cn(value: &str) -> Vec<u8> {
        attr(COMMON_NAME, tag::UTF8_STRING, value.as_bytes())
    }

    fn o(value: &str) -> Vec<u8> {
        attr(ORGANIZATION, tag::UTF8_STRING, value.as_bytes())
    }

    /// A name of RDNs, each a set of attributes.
    fn name(rdns: &[&[Vec<u8>]]) -> Vec<u8> {
        let sets: Vec<Vec<u8>> = rdns
            .iter()
            .map(|set| tlv(tag::SET, &set.concat()))
            .collect();
        tlv(tag::SEQUENCE, &sets.concat())
    }

    /// A certificate (unsigned: only the names are read) with `subject`.
    fn certificate_with(issuer: &[u8], subject: &[u8]) -> Vec<u8> {
        let algorithm = tlv(
            tag::SEQUENCE,
            &tlv(tag::OID, &[0x2a, 0x86, 0x48, 0xce, 0x3d, 4, 3, 2]),
        );
        let time = tlv(0x17, b"260101000000Z");
        let tbs = tlv(
            tag::SEQUENCE,
            &cat(&[
                tlv(tag::VERSION, &tlv(tag::INTEGER, &[2])),
                tlv(tag::INTEGER, &[1]),
                algorithm.clone(),
                issuer.to_vec(),
                tlv(tag::SEQUENCE, &cat(&[time.clone(), time])),
                subject.to_vec(),
                tlv(tag::SEQUENCE, &[]),
            ]),
        );
        tlv(tag::SEQUENCE, &cat(&[tbs, algorithm, tlv(0x03, &[0])]))
    }

    fn certificate(subject: &[u8]) -> Vec<u8> {
        certificate_with(&name(&[&[cn("ca")]]), subject)
    }

    fn user_of(subject: &[u8]) -> Identity {
        match certificate_user(&certificate(subject)) {
            Ok(CertificateUser::User(identity)) => identity,
            other => panic!("no user: {other:?}"),
        }
    }

    fn groups(names: &[&str]) -> Vec<String> {
        names
            .iter()
            .copied()
            .chain([AUTHENTICATED_GROUP])
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn the_last_cn_is_the_user_and_every_o_a_group_over_every_rdn() {
        // CN=cm-reader,CN=mallory: Go keeps the last.
        let two = user_of(&name(&[&[cn("cm-reader")], &[cn("mallory")]]));
        assert_eq!(two.user, "mallory");
        assert_eq!(two.groups, groups(&[]));
        // A multi-valued RDN is read in its encoded order, as Go does
        // (DER's sorting of SET OF is not enforced by Go either).
        let multi = user_of(&name(&[
            &[o("b"), cn("first")],
            &[cn("second"), o("a"), cn("third")],
            &[],
            &[o("c"), o("")],
        ]));
        assert_eq!(multi.user, "third");
        assert_eq!(multi.groups, groups(&["b", "a", "c", ""]));
    }

    #[test]
    fn the_credential_id_is_the_certificates_sha256_and_the_uid_is_read() {
        let der = certificate(&name(&[
            &[cn("carol")],
            &[attr(UID, tag::PRINTABLE_STRING, b"carol-uid")],
        ]));
        let Ok(CertificateUser::User(identity)) = certificate_user(&der) else {
            panic!("no user");
        };
        assert_eq!(identity.uid, "carol-uid");
        let digest = ring::digest::digest(&ring::digest::SHA256, &der);
        let id = identity.extra[CREDENTIAL_ID][0].clone();
        assert_eq!(id.len(), "X509SHA256=".len() + 64);
        assert!(id.starts_with("X509SHA256="), "{id}");
        let bytes: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&id[11 + 2 * i..13 + 2 * i], 16).unwrap())
            .collect();
        assert_eq!(bytes, digest.as_ref());
    }

    #[test]
    fn no_cn_an_empty_last_cn_or_a_bad_uid_is_no_user() {
        let no_user = |subject: &[u8]| match certificate_user(&certificate(subject)) {
            Ok(CertificateUser::NoUser(why)) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(no_user(&name(&[&[o("team")]])), NoUser::NoCommonName);
        assert_eq!(no_user(&name(&[])), NoUser::NoCommonName);
        // The first CN is not a fallback: Go's CommonName is the last one.
        assert_eq!(
            no_user(&name(&[&[cn("cm-reader")], &[cn("")]])),
            NoUser::NoCommonName
        );
        let uid = |v: &str| attr(UID, tag::UTF8_STRING, v.as_bytes());
        assert_eq!(
            no_user(&name(&[&[cn("a"), uid("1")], &[uid("2")]])),
            NoUser::SeveralUids(2)
        );
        assert_eq!(no_user(&name(&[&[cn("a"), uid("")]])), NoUser::EmptyUid);
    }

    #[test]
    fn string_types_are_read_as_go_reads_them() {
        let value = |tag: u8, bytes: &[u8]| {
            let subject = name(&[&[attr(COMMON_NAME, tag, bytes)]]);
            certificate_user(&certificate(&subject)).map(|u| match u {
                CertificateUser::User(identity) => identity.user,
                CertificateUser::NoUser(why) => panic!("{why}"),
            })
        };
        let fault = |tag: u8, bytes: &[u8]| match value(tag, bytes) {
            Err(CertificateError::Attribute { part, oid, fault }) => {
                assert_eq!((part, oid.as_str()), (Part::Subject, "2.5.4.3"));
                fault
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(value(tag::UTF8_STRING, "é☃".as_bytes()).unwrap(), "é☃");
        assert_eq!(fault(tag::UTF8_STRING, b"a\xffb"), ValueFault::Utf8);
        // An encoded surrogate is not UTF-8 to Go either.
        assert_eq!(fault(tag::UTF8_STRING, b"\xed\xa0\x80"), ValueFault::Utf8);
        assert_eq!(value(tag::PRINTABLE_STRING, b"a-b *&").unwrap(), "a-b *&");
        assert_eq!(fault(tag::PRINTABLE_STRING, b"a_b"), ValueFault::Printable);
        assert_eq!(fault(tag::PRINTABLE_STRING, b"a@b"), ValueFault::Printable);
        assert_eq!(value(tag::IA5_STRING, b"a@b_\x00").unwrap(), "a@b_\0");
        assert_eq!(fault(tag::IA5_STRING, b"\x80"), ValueFault::Ia5);
        assert_eq!(value(tag::NUMERIC_STRING, b"12 3").unwrap(), "12 3");
        assert_eq!(fault(tag::NUMERIC_STRING, b"12a"), ValueFault::Numeric);
        // T.61 as Latin-1: each byte one character.
        assert_eq!(value(tag::T61_STRING, b"caf\xe9").unwrap(), "café");
        // BMPString: UCS-2, one trailing NUL pair dropped.
        assert_eq!(
            value(tag::BMP_STRING, &[0, b'h', 0x26, 0x03, 0, 0]).unwrap(),
            "h☃"
        );
        assert_eq!(value(tag::BMP_STRING, &[0, 0, 0, 0]).unwrap(), "\0");
        for bad in [&[0, b'h', 0][..], &[0xd8, 0], &[0xff, 0xfe], &[0xfd, 0xd0]] {
            assert_eq!(fault(tag::BMP_STRING, bad), ValueFault::Bmp, "{bad:?}");
        }
        // VisibleString, UniversalString, OCTET STRING, a constructed
        // UTF8String, a context tag: none of Go's string types.
        for tag in [0x1a, 0x1c, 0x04, 0x2c, 0x80] {
            assert_eq!(fault(tag, b"x"), ValueFault::Unsupported(tag), "{tag:#x}");
        }
        // Any attribute counts, not only CN and O.
        let other = name(&[&[cn("a"), attr(&[0x55, 0x04, 0x07], 0x1a, b"x")]]);
        assert!(matches!(
            certificate_user(&certificate(&other)),
            Err(CertificateError::Attribute { ref oid, .. }) if oid == "2.5.4.7"
        ));
        // The issuer is parsed by the same rules.
        let issuer = name(&[&[attr(COMMON_NAME, tag::PRINTABLE_STRING, b"_")]]);
        assert!(matches!(
            certificate_user(&certificate_with(&issuer, &name(&[&[cn("a")]]))),
            Err(CertificateError::Attribute {
                part: Part::Issuer,
                ..
            })
        ));
    }

    #[test]
    fn der_go_refuses_is_refused() {
        let malformed = |subject: &[u8]| {
            assert_eq!(
                certificate_user(&certificate(subject)),
                Err(CertificateError::Malformed(Part::Subject)),
                "{subject:x?}"
            );
        };
        // A length in long form where the short one would do; with a
        // leading zero; indefinite.
        malformed(&[0x30, 0x81, 0x00]);
        malformed(&[0x30, 0x82, 0x00, 0x80]);
        malformed(&[0x30, 0x80, 0x00, 0x00]);
        // An RDN that is not a SET; an attribute that is not a SEQUENCE.
        malformed(&tlv(tag::SEQUENCE, &tlv(tag::SEQUENCE, &cn("a"))));
        malformed(&name(&[&[tlv(tag::SET, &[])]]));
        // OIDs: empty, non-minimal, a component of 2^31, truncated.
        for oid in [
            &[][..],
            &[0x55, 0x80, 0x04],
            &[0x55, 0x88, 0x80, 0x80, 0x80, 0x00],
            &[0x55, 0x84],
        ] {
            malformed(&name(&[&[attr(oid, tag::UTF8_STRING, b"a")]]));
        }
        // An attribute without a value; a value with a high tag number.
        malformed(&name(&[&[tlv(tag::SEQUENCE, &tlv(tag::OID, COMMON_NAME))]]));
        malformed(&name(&[&[tlv(
            tag::SEQUENCE,
            &cat(&[tlv(tag::OID, COMMON_NAME), vec![0x1f, 0x20, 0x00]]),
        )]]));
        // The largest component Go accepts, and anything after the value.
        let big = name(&[&[
            cn("a"),
            attr(
                &[0x55, 0x87, 0xff, 0xff, 0xff, 0x7f],
                tag::UTF8_STRING,
                b"x",
            ),
            tlv(
                tag::SEQUENCE,
                &cat(&[
                    tlv(tag::OID, ORGANIZATION),
                    tlv(tag::UTF8_STRING, b"g"),
                    tlv(tag::INTEGER, &[1]),
                ]),
            ),
        ]]);
        assert_eq!(user_of(&big).groups, groups(&["g"]));
        assert_eq!(
            certificate_user(b"\x30\x00"),
            Err(CertificateError::Malformed(Part::Certificate))
        );
    }

    #[test]
    fn the_uid_oid_is_the_one_kubernetes_uses() {
        assert_eq!(dotted_oid(UID).unwrap(), "1.3.6.1.4.1.57683.2");
        assert_eq!(dotted_oid(COMMON_NAME).unwrap(), "2.5.4.3");
        assert_eq!(dotted_oid(ORGANIZATION).unwrap(), "2.5.4.10");
    }

    #[test]
    fn system_authenticated_is_added_as_the_api_servers_group_adder_does() {
        let adder = |cn_value: &str, o_values: &[&str]| {
            let mut set = vec![cn(cn_value)];
            set.extend(o_values.iter().map(|g| o(g)));
            user_of(&name(&[&set])).groups
        };
        assert_eq!(adder("a", &["x"]), groups(&["x"]));
        // Not again, not for an O of system:unauthenticated, not for
        // system:anonymous.
        assert_eq!(adder("a", &[AUTHENTICATED_GROUP]), [AUTHENTICATED_GROUP]);
        assert_eq!(
            adder("a", &["system:unauthenticated"]),
            ["system:unauthenticated"]
        );
        assert_eq!(adder("system:anonymous", &["x"]), ["x"]);
    }

    /// A certificate rcgen signs (as a client CA would) maps as it did:
    /// the common shape is unchanged.
    #[test]
    fn an_rcgen_certificate_names_its_user_and_groups() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "carol");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "team-a");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let Ok(CertificateUser::User(identity)) = certificate_user(cert.der()) else {
            panic!("no user");
        };
        assert_eq!(identity.user, "carol");
        assert_eq!(identity.groups, groups(&["team-a"]));
        assert_eq!(identity.uid, "");
    }
}

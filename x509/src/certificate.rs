//! A certificate parsed as Go's `x509.ParseCertificate` parses it, every
//! refusal of Go's included (a version above 3, a negative serial number
//! since Go 1.23, inner and outer signature algorithms that differ, a
//! malformed name, time, key or extension, a duplicate extension, bytes
//! after the certificate), so that what Go cannot parse, and the API
//! server's TLS handshake refuses, is refused here too.

use crate::{
    der::{Der, tag},
    error::ParseError,
    extensions::{self, Extensions},
    key::{self, AlgorithmIdentifier, PublicKey},
    name::{self, Name},
    signature::SignatureAlgorithm,
    time::{self, Seconds},
};

/// A parsed certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    /// The whole certificate (DER).
    pub raw: Vec<u8>,
    /// The whole tbsCertificate element, which the signature covers.
    pub raw_tbs: Vec<u8>,
    /// The whole issuer `Name` element.
    pub raw_issuer: Vec<u8>,
    /// The whole subject `Name` element.
    pub raw_subject: Vec<u8>,
    /// The whole subjectPublicKeyInfo element.
    pub raw_spki: Vec<u8>,
    /// 1, 2 or 3.
    pub version: i64,
    /// The serial number's DER contents (two's complement, not negative).
    pub serial: Vec<u8>,
    /// The signature algorithm.
    pub signature_algorithm: SignatureAlgorithm,
    /// The signature, right-aligned.
    pub signature: Vec<u8>,
    /// The issuer.
    pub issuer: Name,
    /// The subject.
    pub subject: Name,
    /// The start of validity.
    pub not_before: Seconds,
    /// The end of validity.
    pub not_after: Seconds,
    /// The public key.
    pub public_key: PublicKey,
    /// The extensions (none for versions 1 and 2).
    pub extensions: Extensions,
}

fn err(message: &str) -> ParseError {
    ParseError::new(message.to_owned())
}

/// Parses `der` as Go's `x509.ParseCertificate` does.
pub fn parse(der: &[u8]) -> Result<Certificate, ParseError> {
    let mut input = Der(der);
    let whole = input
        .read_element(tag::SEQUENCE)
        .ok_or_else(|| err("x509: malformed certificate"))?;
    if whole.whole.len() != der.len() {
        return Err(err("x509: trailing data"));
    }
    let mut certificate = Der(whole.contents);
    let tbs_element = certificate
        .read_element(tag::SEQUENCE)
        .ok_or_else(|| err("x509: malformed tbs certificate"))?;
    let mut tbs = Der(tbs_element.contents);

    let version = match tbs
        .read_optional(tag::context_constructed(0))
        .ok_or_else(|| err("x509: malformed version"))?
    {
        Some(mut explicit) => {
            let v = explicit
                .read_i64()
                .ok_or_else(|| err("x509: malformed version"))?;
            if !explicit.is_empty() {
                return Err(err("x509: malformed version"));
            }
            v
        }
        None => 0,
    };
    if version < 0 {
        return Err(err("x509: malformed version"));
    }
    let version = version + 1;
    if version > 3 {
        return Err(err("x509: invalid version"));
    }

    let serial = tbs
        .read_integer_bytes()
        .ok_or_else(|| err("x509: malformed serial number"))?;
    if serial[0] & 0x80 != 0 {
        return Err(err("x509: negative serial number"));
    }

    let inner_algorithm = tbs
        .read(tag::SEQUENCE)
        .ok_or_else(|| err("x509: malformed signature algorithm identifier"))?;
    let outer_algorithm = certificate
        .read(tag::SEQUENCE)
        .ok_or_else(|| err("x509: malformed algorithm identifier"))?;
    if inner_algorithm != outer_algorithm {
        return Err(err(
            "x509: inner and outer signature algorithm identifiers don't match",
        ));
    }
    let signature_algorithm = SignatureAlgorithm::of(&AlgorithmIdentifier::parse(inner_algorithm)?);

    let raw_issuer = tbs
        .read_element(tag::SEQUENCE)
        .ok_or_else(|| err("x509: malformed issuer"))?
        .whole;
    let issuer = name::parse(raw_issuer, "issuer")?;

    let mut validity = tbs
        .read(tag::SEQUENCE)
        .ok_or_else(|| err("x509: malformed validity"))?;
    let not_before = read_time(&mut validity)?;
    let not_after = read_time(&mut validity)?;

    let raw_subject = tbs
        .read_element(tag::SEQUENCE)
        .ok_or_else(|| err("x509: malformed issuer"))?
        .whole;
    let subject = name::parse(raw_subject, "subject")?;

    let spki_element = tbs
        .read_element(tag::SEQUENCE)
        .ok_or_else(|| err("x509: malformed spki"))?;
    let mut spki = Der(spki_element.contents);
    let key_algorithm = spki
        .read(tag::SEQUENCE)
        .ok_or_else(|| err("x509: malformed public key algorithm identifier"))?;
    let key_algorithm = AlgorithmIdentifier::parse(key_algorithm)?;
    let key_bits = spki
        .read_bit_string()
        .ok_or_else(|| err("x509: malformed subjectPublicKey"))?;
    let public_key = if key::known(key_algorithm.oid) {
        key::parse(key_algorithm, key_bits)?
    } else {
        PublicKey::Unknown
    };

    let mut extensions = Extensions::default();
    if version > 1 {
        for (n, what) in [(1, "issuerUniqueID"), (2, "subjectUniqueID")] {
            if tbs.peek(tag::context(n)) && tbs.read(tag::context(n)).is_none() {
                return Err(ParseError::new(format!("x509: malformed {what}")));
            }
        }
        if version == 3
            && let Some(present) = tbs
                .read_optional(tag::context_constructed(3))
                .ok_or_else(|| err("x509: malformed extensions"))?
        {
            extensions = extensions::parse(present)?;
        }
    }

    let signature = certificate
        .read_bit_string()
        .ok_or_else(|| err("x509: malformed signature"))?
        .right_aligned();

    Ok(Certificate {
        raw: der.to_vec(),
        raw_tbs: tbs_element.whole.to_vec(),
        raw_issuer: raw_issuer.to_vec(),
        raw_subject: raw_subject.to_vec(),
        raw_spki: spki_element.whole.to_vec(),
        version,
        serial: serial.to_vec(),
        signature_algorithm,
        signature,
        issuer,
        subject,
        not_before,
        not_after,
        public_key,
        extensions,
    })
}

/// A UTCTime or GeneralizedTime, as Go's `parseTime` reads it.
fn read_time(der: &mut Der<'_>) -> Result<Seconds, ParseError> {
    let (which, tag) = if der.peek(tag::UTC_TIME) {
        ("UTCTime", tag::UTC_TIME)
    } else if der.peek(tag::GENERALIZED_TIME) {
        ("GeneralizedTime", tag::GENERALIZED_TIME)
    } else {
        return Err(err("x509: unsupported time format"));
    };
    der.read(tag)
        .and_then(|text| time::parse(tag, text.0))
        .ok_or_else(|| ParseError::new(format!("x509: malformed {which}")))
}

impl Certificate {
    /// Whether it has a subject alternative name extension.
    pub fn has_san_extension(&self) -> bool {
        self.extension(extensions::SUBJECT_ALT_NAME).is_some()
    }

    /// Whether it has a name constraints extension.
    pub fn has_name_constraints(&self) -> bool {
        self.extension(extensions::NAME_CONSTRAINTS).is_some()
    }

    /// The value of the extension `oid`, if present.
    pub fn extension(&self, oid: &[u8]) -> Option<&[u8]> {
        self.extensions
            .all
            .iter()
            .find(|(o, _, _)| o == oid)
            .map(|(_, _, value)| value.as_slice())
    }
}

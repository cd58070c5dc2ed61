//! Subject public keys as Go's `parsePublicKey` reads them: RSA (its
//! parameters exactly NULL, a positive modulus and exponent), ECDSA on
//! P-224, P-256, P-384 or P-521 (a named curve, an uncompressed point on
//! it), Ed25519 (no parameters, 32 bytes) and DSA (positive values); any
//! other algorithm is kept as unknown, which parses but signs nothing.

use num_bigint::BigUint;

use crate::{
    der::{BitString, Der, Oid, tag},
    error::ParseError,
};

const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const DSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x01];
const ECDSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const ED25519: &[u8] = &[0x2b, 0x65, 0x70];

/// The DER of ASN.1 NULL, the only parameters an RSA key may have.
const NULL: &[u8] = &[tag::NULL, 0x00];

/// A certificate's public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicKey {
    /// An RSA key: the modulus (big-endian, no leading zero) and exponent.
    Rsa {
        /// The modulus.
        n: Vec<u8>,
        /// The public exponent.
        e: i64,
    },
    /// An ECDSA key: its curve and uncompressed point.
    Ecdsa {
        /// The curve.
        curve: Curve,
        /// `04 || x || y`.
        point: Vec<u8>,
    },
    /// An Ed25519 key.
    Ed25519(Vec<u8>),
    /// A DSA key (Go parses it, and verifies nothing with it).
    Dsa,
    /// An algorithm Go does not know: no key.
    Unknown,
}

impl PublicKey {
    /// An RSA key's modulus length in bits (Go's `N.BitLen()`).
    pub fn rsa_bits(&self) -> Option<usize> {
        match self {
            PublicKey::Rsa { n, .. } => Some(bit_length(n)),
            _ => None,
        }
    }
}

/// The curves Go's x509 knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    /// NIST P-224.
    P224,
    /// NIST P-256.
    P256,
    /// NIST P-384.
    P384,
    /// NIST P-521.
    P521,
}

/// An algorithm identifier: its OID and the whole parameters element, if
/// any, as Go's `parseAI` reads it (anything after the parameters is
/// ignored).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AlgorithmIdentifier<'a> {
    pub oid: Oid<'a>,
    pub params: Option<&'a [u8]>,
}

impl<'a> AlgorithmIdentifier<'a> {
    /// Parses the contents of an AlgorithmIdentifier SEQUENCE.
    pub(crate) fn parse(mut der: Der<'a>) -> Result<Self, ParseError> {
        let oid = der
            .read_oid()
            .ok_or_else(|| ParseError::new("x509: malformed OID"))?;
        if der.is_empty() {
            return Ok(AlgorithmIdentifier { oid, params: None });
        }
        let params = der
            .read_any()
            .ok_or_else(|| ParseError::new("x509: malformed parameters"))?;
        Ok(AlgorithmIdentifier {
            oid,
            params: Some(params.whole),
        })
    }
}

/// Whether Go knows the key algorithm (`getPublicKeyAlgorithmFromOID`):
/// only those keys are parsed.
pub(crate) fn known(oid: Oid<'_>) -> bool {
    [RSA, DSA, ECDSA, ED25519].contains(&oid.0)
}

/// The key of a known algorithm (see [`known`]).
pub(crate) fn parse(
    algorithm: AlgorithmIdentifier<'_>,
    key: BitString<'_>,
) -> Result<PublicKey, ParseError> {
    let data = key.right_aligned();
    let params = algorithm.params.unwrap_or_default();
    match algorithm.oid.0 {
        RSA => rsa(params, &data),
        ECDSA => ecdsa(params, &data),
        ED25519 => {
            if !params.is_empty() {
                return Err(ParseError::new(
                    "x509: Ed25519 key encoded with illegal parameters",
                ));
            }
            if data.len() != 32 {
                return Err(ParseError::new("x509: wrong Ed25519 public key size"));
            }
            Ok(PublicKey::Ed25519(data))
        }
        DSA => dsa(params, &data),
        _ => Ok(PublicKey::Unknown),
    }
}

fn rsa(params: &[u8], data: &[u8]) -> Result<PublicKey, ParseError> {
    if params != NULL {
        return Err(ParseError::new("x509: RSA key missing NULL parameters"));
    }
    let mut der = Der(data)
        .read(tag::SEQUENCE)
        .ok_or_else(|| ParseError::new("x509: invalid RSA public key"))?;
    let n = der
        .read_integer_bytes()
        .ok_or_else(|| ParseError::new("x509: invalid RSA modulus"))?;
    let e = der
        .read_i64()
        .ok_or_else(|| ParseError::new("x509: invalid RSA public exponent"))?;
    if n[0] & 0x80 != 0 || n.iter().all(|&b| b == 0) {
        return Err(ParseError::new(
            "x509: RSA modulus is not a positive number",
        ));
    }
    if e <= 0 {
        return Err(ParseError::new(
            "x509: RSA public exponent is not a positive number",
        ));
    }
    let n = n.strip_prefix(&[0]).unwrap_or(n).to_vec();
    Ok(PublicKey::Rsa { n, e })
}

fn ecdsa(params: &[u8], data: &[u8]) -> Result<PublicKey, ParseError> {
    let curve = Der(params)
        .read_oid()
        .ok_or_else(|| ParseError::new("x509: invalid ECDSA parameters"))?;
    let curve = match curve.0 {
        [0x2b, 0x81, 0x04, 0x00, 0x21] => Curve::P224,
        [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07] => Curve::P256,
        [0x2b, 0x81, 0x04, 0x00, 0x22] => Curve::P384,
        [0x2b, 0x81, 0x04, 0x00, 0x23] => Curve::P521,
        _ => return Err(ParseError::new("x509: unsupported elliptic curve")),
    };
    if !on_curve(curve, data) {
        return Err(ParseError::new("ecdsa: invalid uncompressed public key"));
    }
    Ok(PublicKey::Ecdsa {
        curve,
        point: data.to_vec(),
    })
}

fn dsa(params: &[u8], data: &[u8]) -> Result<PublicKey, ParseError> {
    let positive = |bytes: &[u8]| bytes[0] & 0x80 == 0 && bytes.iter().any(|&b| b != 0);
    let y = Der(data)
        .read_integer_bytes()
        .ok_or_else(|| ParseError::new("x509: invalid DSA public key"))?;
    let mut values = vec![y];
    let mut der = Der(params)
        .read(tag::SEQUENCE)
        .ok_or_else(|| ParseError::new("x509: invalid DSA parameters"))?;
    for _ in 0..3 {
        values.push(
            der.read_integer_bytes()
                .ok_or_else(|| ParseError::new("x509: invalid DSA parameters"))?,
        );
    }
    if !values.iter().all(|v| positive(v)) {
        return Err(ParseError::new("x509: zero or negative DSA parameter"));
    }
    Ok(PublicKey::Dsa)
}

/// The field prime and `b` of a curve (`y² = x³ - 3x + b`), big-endian
/// hex, and the length of a coordinate in bytes.
fn parameters(curve: Curve) -> (&'static str, &'static str, usize) {
    match curve {
        Curve::P224 => (
            "ffffffffffffffffffffffffffffffff000000000000000000000001",
            "b4050a850c04b3abf54132565044b0b7d7bfd8ba270b39432355ffb4",
            28,
        ),
        Curve::P256 => (
            "ffffffff00000001000000000000000000000000ffffffffffffffffffffffff",
            "5ac635d8aa3a93e7b3ebbd55769886bc651d06b0cc53b0f63bce3c3e27d2604b",
            32,
        ),
        Curve::P384 => (
            "fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffeffffffff0000000000000000ffffffff",
            "b3312fa7e23ee7e4988e056be3f82d19181d9c6efe8141120314088f5013875ac656398d8a2ed19d2a85c8edd3ec2aef",
            48,
        ),
        Curve::P521 => (
            "01ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
            "0051953eb9618e1c9a1f929a21a0b68540eea2da725b99b315f3b8b489918ef109e156193951ec7e937b1652c0bd3bb1bf073573df883d2c34f1ef451fd46b503f00",
            66,
        ),
    }
}

/// Whether `data` is `04 || x || y` with both coordinates below the
/// field prime and the point on the curve (Go's `ParseUncompressedPublicKey`).
fn on_curve(curve: Curve, data: &[u8]) -> bool {
    let (p, b, len) = parameters(curve);
    if data.len() != 1 + 2 * len || data[0] != 4 {
        return false;
    }
    let p = BigUint::parse_bytes(p.as_bytes(), 16).expect("a curve prime");
    let b = BigUint::parse_bytes(b.as_bytes(), 16).expect("a curve constant");
    let x = BigUint::from_bytes_be(&data[1..1 + len]);
    let y = BigUint::from_bytes_be(&data[1 + len..]);
    if x >= p || y >= p {
        return false;
    }
    let three_x = (&x * 3u32) % &p;
    let x3 = (&x * &x % &p) * &x % &p;
    let rhs = (x3 + &p - three_x + b) % &p;
    y.modpow(&BigUint::from(2u32), &p) == rhs
}

/// The number of significant bits of a big-endian magnitude.
fn bit_length(bytes: &[u8]) -> usize {
    let bytes = &bytes[bytes.iter().take_while(|&&b| b == 0).count()..];
    match bytes.first() {
        Some(&first) => bytes.len() * 8 - first.leading_zeros() as usize,
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The P-256 base point, which is on the curve; a changed y is not.
    #[test]
    fn points_off_their_curve_are_refused() {
        let x = "6b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c296";
        let y = "4fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5";
        let mut point = vec![4];
        for hex in [x, y] {
            point.extend(
                BigUint::parse_bytes(hex.as_bytes(), 16)
                    .unwrap()
                    .to_bytes_be(),
            );
        }
        assert!(on_curve(Curve::P256, &point));
        let mut off = point.clone();
        off[64] ^= 1;
        assert!(!on_curve(Curve::P256, &off));
        let mut compressed = point[..33].to_vec();
        compressed[0] = 2;
        assert!(!on_curve(Curve::P256, &compressed));
        assert!(!on_curve(Curve::P384, &point), "another curve's length");
    }

    #[test]
    fn bit_lengths_ignore_leading_zeros() {
        assert_eq!(bit_length(&[0x01, 0x00]), 9);
        assert_eq!(bit_length(&[0x00, 0x80]), 8);
        assert_eq!(bit_length(&[]), 0);
    }
}

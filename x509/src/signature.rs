//! Certificate signatures as Go checks them (`getSignatureAlgorithmFromAI`,
//! `checkSignature`): the algorithm named by the signature's identifier
//! (RSA-PSS only with the hash, MGF1 hash and salt length tied together
//! as Go requires), MD5 and SHA-1 refused as insecure, the key's type
//! matching the algorithm's, RSA moduli of at least 1024 bits with an odd
//! exponent below 2³¹; the arithmetic by ring.
//!
//! ring verifies fewer combinations than Go: ECDSA with SHA-512, keys on
//! P-224 or P-521, RSA moduli above 8192 bits, and RSA-PSS or SHA-384
//! with moduli below 2048 bits are refused here although Go verifies
//! them ([`SignatureError::Unsupported`]): stricter, never more permissive.

use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey, VerificationAlgorithm};

use crate::{
    der::{Der, tag},
    key::{AlgorithmIdentifier, Curve, PublicKey},
};

/// The signature algorithms Go names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureAlgorithm {
    /// One Go does not know, or an RSA-PSS with parameters it refuses.
    Unknown,
    /// md5WithRSAEncryption.
    Md5WithRsa,
    /// sha1WithRSAEncryption (either OID).
    Sha1WithRsa,
    /// sha256WithRSAEncryption.
    Sha256WithRsa,
    /// sha384WithRSAEncryption.
    Sha384WithRsa,
    /// sha512WithRSAEncryption.
    Sha512WithRsa,
    /// RSASSA-PSS with SHA-256.
    Sha256WithRsaPss,
    /// RSASSA-PSS with SHA-384.
    Sha384WithRsaPss,
    /// RSASSA-PSS with SHA-512.
    Sha512WithRsaPss,
    /// dsa-with-sha1.
    DsaWithSha1,
    /// dsa-with-sha256.
    DsaWithSha256,
    /// ecdsa-with-SHA1.
    EcdsaWithSha1,
    /// ecdsa-with-SHA256.
    EcdsaWithSha256,
    /// ecdsa-with-SHA384.
    EcdsaWithSha384,
    /// ecdsa-with-SHA512.
    EcdsaWithSha512,
    /// Ed25519.
    Ed25519,
}

const RSA_PSS: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a];
const ED25519: &[u8] = &[0x2b, 0x65, 0x70];
const MGF1: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x08];
const SHA256: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01];
const SHA384: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02];
const SHA512: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x03];

impl SignatureAlgorithm {
    /// The algorithm of a signature's identifier, as Go names it.
    pub(crate) fn of(ai: &AlgorithmIdentifier<'_>) -> Self {
        use SignatureAlgorithm as A;
        match ai.oid.0 {
            ED25519 if ai.params.is_some() => A::Unknown,
            ED25519 => A::Ed25519,
            RSA_PSS => pss(ai.params.unwrap_or_default()),
            [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x04] => A::Md5WithRsa,
            [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05]
            | [0x2b, 0x0e, 0x03, 0x02, 0x1d] => A::Sha1WithRsa,
            [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b] => A::Sha256WithRsa,
            [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c] => A::Sha384WithRsa,
            [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d] => A::Sha512WithRsa,
            [0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x03] => A::DsaWithSha1,
            [0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x03, 0x02] => A::DsaWithSha256,
            [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01] => A::EcdsaWithSha1,
            [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02] => A::EcdsaWithSha256,
            [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03] => A::EcdsaWithSha384,
            [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04] => A::EcdsaWithSha512,
            _ => A::Unknown,
        }
    }
}

/// RSA-PSS parameters as Go reads them with encoding/asn1: `[0]` hash,
/// `[1]` MGF (MGF1 over the same hash), `[2]` salt length equal to the
/// hash's length, `[3]` trailer field 1 if present; the hash identifiers'
/// parameters absent or NULL.
fn pss(params: &[u8]) -> SignatureAlgorithm {
    let read = || -> Option<SignatureAlgorithm> {
        let mut seq = Der(params).read(tag::SEQUENCE)?;
        let hash = explicit_ai(&mut seq, 0)?;
        let mgf = explicit_ai(&mut seq, 1)?;
        let salt = seq.read(tag::context_constructed(2))?.read_i64()?;
        let trailer = match seq.read_optional(tag::context_constructed(3))? {
            Some(mut inner) => inner.read_i64()?,
            None => 1,
        };
        let mgf_hash = AlgorithmIdentifier::parse(Der(mgf.params?).read(tag::SEQUENCE)?).ok()?;
        let null_or_absent = |p: Option<&[u8]>| p.is_none_or(|p| p == [tag::NULL, 0]);
        if !null_or_absent(hash.params)
            || mgf.oid.0 != MGF1
            || mgf_hash.oid != hash.oid
            || !null_or_absent(mgf_hash.params)
            || trailer != 1
        {
            return None;
        }
        match (hash.oid.0, salt) {
            (SHA256, 32) => Some(SignatureAlgorithm::Sha256WithRsaPss),
            (SHA384, 48) => Some(SignatureAlgorithm::Sha384WithRsaPss),
            (SHA512, 64) => Some(SignatureAlgorithm::Sha512WithRsaPss),
            _ => None,
        }
    };
    read().unwrap_or(SignatureAlgorithm::Unknown)
}

fn explicit_ai<'a>(seq: &mut Der<'a>, n: u8) -> Option<AlgorithmIdentifier<'a>> {
    let mut inner = seq.read(tag::context_constructed(n))?;
    AlgorithmIdentifier::parse(inner.read(tag::SEQUENCE)?).ok()
}

/// Why a signature does not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// An algorithm Go refuses as insecure (MD5, SHA-1).
    #[error("x509: cannot verify signature: insecure algorithm {0:?}")]
    Insecure(SignatureAlgorithm),
    /// An algorithm Go does not verify, or a key of another type.
    #[error("x509: cannot verify signature: algorithm unimplemented")]
    UnsupportedByGo,
    /// A combination Go verifies and ring does not (see the module docs).
    #[error("the signature's algorithm and key ({0}) are not ones kube-fanout can verify")]
    Unsupported(&'static str),
    /// The key is of another type than the algorithm's.
    #[error("x509: signature algorithm specifies a different public key type than the key")]
    KeyMismatch,
    /// The RSA key is one Go refuses to verify with.
    #[error("crypto/rsa: {0}")]
    RsaKey(&'static str),
    /// The signature is not valid.
    #[error("x509: signature verification failure")]
    Invalid,
}

/// Checks `signature` over `signed` by `key` with `algorithm`, as Go's
/// `checkSignature` (certificates: no SHA-1).
pub fn check(
    algorithm: SignatureAlgorithm,
    signed: &[u8],
    signature: &[u8],
    key: &PublicKey,
) -> Result<(), SignatureError> {
    use SignatureAlgorithm as A;
    let verify = |alg: &'static dyn VerificationAlgorithm, key: &[u8]| {
        UnparsedPublicKey::new(alg, key)
            .verify(signed, signature)
            .map_err(|_| SignatureError::Invalid)
    };
    match algorithm {
        A::Md5WithRsa | A::Sha1WithRsa | A::DsaWithSha1 | A::EcdsaWithSha1 => {
            return Err(SignatureError::Insecure(algorithm));
        }
        A::Unknown => return Err(SignatureError::UnsupportedByGo),
        _ => {}
    }
    match (algorithm, key) {
        (_, PublicKey::Dsa | PublicKey::Unknown) => Err(SignatureError::UnsupportedByGo),
        (
            A::Sha256WithRsa
            | A::Sha384WithRsa
            | A::Sha512WithRsa
            | A::Sha256WithRsaPss
            | A::Sha384WithRsaPss
            | A::Sha512WithRsaPss,
            PublicKey::Rsa { n, e },
        ) => rsa(algorithm, n, *e, signed, signature),
        (
            A::EcdsaWithSha256 | A::EcdsaWithSha384 | A::EcdsaWithSha512,
            PublicKey::Ecdsa { curve, point },
        ) => {
            let alg: &'static dyn VerificationAlgorithm = match (curve, algorithm) {
                (Curve::P256, A::EcdsaWithSha256) => &signature::ECDSA_P256_SHA256_ASN1,
                (Curve::P256, A::EcdsaWithSha384) => &signature::ECDSA_P256_SHA384_ASN1,
                (Curve::P384, A::EcdsaWithSha256) => &signature::ECDSA_P384_SHA256_ASN1,
                (Curve::P384, A::EcdsaWithSha384) => &signature::ECDSA_P384_SHA384_ASN1,
                _ => {
                    return Err(SignatureError::Unsupported(
                        "ECDSA on this curve with this hash",
                    ));
                }
            };
            verify(alg, point)
        }
        (A::Ed25519, PublicKey::Ed25519(key)) => verify(&signature::ED25519, key),
        // A DSA signature with a key of another type, or a key of
        // another type than the algorithm's.
        _ => Err(SignatureError::KeyMismatch),
    }
}

/// Go's checks of an RSA key before verifying (`checkPublicKey`, and the
/// 1024-bit minimum of `rsa1024min`), then ring's verification.
fn rsa(
    algorithm: SignatureAlgorithm,
    n: &[u8],
    e: i64,
    signed: &[u8],
    signature: &[u8],
) -> Result<(), SignatureError> {
    use SignatureAlgorithm as A;
    if n.last().is_none_or(|&b| b & 1 == 0) {
        return Err(SignatureError::RsaKey("public modulus is even"));
    }
    if e < 2 {
        return Err(SignatureError::RsaKey(
            "public exponent too small or negative",
        ));
    }
    if e & 1 == 0 {
        return Err(SignatureError::RsaKey("public exponent is even"));
    }
    if e > (1 << 31) - 1 {
        return Err(SignatureError::RsaKey("public exponent too large"));
    }
    let bits = PublicKey::Rsa { n: n.to_vec(), e }
        .rsa_bits()
        .unwrap_or_default();
    if bits < 1024 {
        return Err(SignatureError::RsaKey(
            "1024-bit or larger RSA keys required",
        ));
    }
    if bits > 8192 {
        return Err(SignatureError::Unsupported(
            "RSA with a modulus above 8192 bits",
        ));
    }
    let legacy = bits < 2048;
    let params: &'static signature::RsaParameters = match (algorithm, legacy) {
        (A::Sha256WithRsa, false) => &signature::RSA_PKCS1_2048_8192_SHA256,
        (A::Sha384WithRsa, false) => &signature::RSA_PKCS1_2048_8192_SHA384,
        (A::Sha512WithRsa, false) => &signature::RSA_PKCS1_2048_8192_SHA512,
        (A::Sha256WithRsa, true) => &signature::RSA_PKCS1_1024_8192_SHA256_FOR_LEGACY_USE_ONLY,
        (A::Sha512WithRsa, true) => &signature::RSA_PKCS1_1024_8192_SHA512_FOR_LEGACY_USE_ONLY,
        (A::Sha256WithRsaPss, false) => &signature::RSA_PSS_2048_8192_SHA256,
        (A::Sha384WithRsaPss, false) => &signature::RSA_PSS_2048_8192_SHA384,
        (A::Sha512WithRsaPss, false) => &signature::RSA_PSS_2048_8192_SHA512,
        _ => {
            return Err(SignatureError::Unsupported(
                "RSA below 2048 bits with this hash or padding",
            ));
        }
    };
    let e = e.to_be_bytes();
    let e = &e[e.iter().take_while(|&&b| b == 0).count()..];
    RsaPublicKeyComponents { n, e }
        .verify(params, signed, signature)
        .map_err(|_| SignatureError::Invalid)
}

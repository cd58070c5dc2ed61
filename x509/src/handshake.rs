//! What the API server's TLS handshake (Go's crypto/tls, asking for
//! client certificates without requiring them) does with the certificates
//! a client sends, before anything verifies them: each must parse as Go
//! parses certificates, no RSA key may be above 8192 bits, and the leaf's
//! key must be RSA, ECDSA or Ed25519. Any other chain fails the
//! handshake; one that passes is verified later, per request, by the
//! authenticator ([`crate::verify`]), so a client certificate that does
//! not verify leaves the request to its other credentials.

use std::sync::Arc;

use crate::{
    certificate::{self, Certificate},
    error::ParseError,
    key::PublicKey,
};

/// The largest RSA key Go's TLS accepts from a peer (`tlsmaxrsasize`).
const MAX_RSA_BITS: usize = 8192;

/// Why a client's certificates fail the handshake.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// One does not parse.
    #[error("tls: failed to parse client certificate: {0}")]
    Parse(#[from] ParseError),
    /// An RSA key above the bound.
    #[error("tls: client sent certificate containing RSA key larger than {MAX_RSA_BITS} bits")]
    RsaKeyTooLarge,
    /// The leaf's key is of a type TLS cannot use.
    #[error("tls: client certificate contains an unsupported public key")]
    UnsupportedKey,
}

/// The client's certificates (leaf first), parsed, if Go's TLS server
/// takes them.
pub fn client_chain<'a>(
    chain: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<Arc<Certificate>>, HandshakeError> {
    let mut parsed = Vec::new();
    for der in chain {
        let certificate = certificate::parse(der)?;
        if certificate
            .public_key
            .rsa_bits()
            .is_some_and(|bits| bits > MAX_RSA_BITS)
        {
            return Err(HandshakeError::RsaKeyTooLarge);
        }
        parsed.push(Arc::new(certificate));
    }
    if let Some(leaf) = parsed.first()
        && !matches!(
            leaf.public_key,
            PublicKey::Rsa { .. } | PublicKey::Ecdsa { .. } | PublicKey::Ed25519(_)
        )
    {
        return Err(HandshakeError::UnsupportedKey);
    }
    Ok(parsed)
}

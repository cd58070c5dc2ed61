//! Client certificates exactly as the Kubernetes API server reads and
//! verifies them, which is as Go's crypto/x509 does (v1.26, with the
//! defaults of the API server's `godebug default=go1.26`): a port of its
//! parser's rules ([`certificate::parse`]: what it refuses, this refuses),
//! of what its TLS server does with a client's certificates
//! ([`handshake`]), and of the verification the API server's x509
//! authenticator makes ([`verify`]), so that a certificate is accepted
//! here exactly when it is accepted there, and names the same user.
//!
//! The rules are Go's, read from its source, not a Rust X.509 crate's:
//! those differ from Go in what they accept (x509-parser refuses an
//! empty RDN that Go skips; webpki refuses version 1 certificates and
//! accepts negative serial numbers), and any difference is a different
//! answer. A differential test (tests/tests/x509_differential.rs) feeds
//! the same generated certificates to this crate and to Go itself.

pub mod certificate;
mod der;
mod error;
pub mod extensions;
pub mod handshake;
pub mod key;
pub mod name;
mod netip;
pub mod pool;
pub mod signature;
#[cfg(test)]
mod test_der;
pub mod time;
mod uri;
pub mod verify;

pub use certificate::Certificate;
pub use error::ParseError;
pub use pool::Pool;

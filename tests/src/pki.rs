//! Throwaway certificate authorities for TLS tests and the demo: serving
//! certificates for loopback and client certificates (CN the user, O the
//! group, as the API server and kube-fanout read them).

use anyhow::Result;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// A CA that signs serving and client certificates.
pub struct Ca(CertifiedIssuer<'static, KeyPair>);

/// A certificate and its key, both PEM.
pub struct Pair {
    /// The certificate.
    pub cert: String,
    /// Its private key.
    pub key: String,
}

impl Ca {
    /// A new self-signed CA named `name` (distinct names keep chains apart).
    pub fn new(name: &str) -> Result<Self> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Ok(Ca(CertifiedIssuer::self_signed(
            params,
            KeyPair::generate()?,
        )?))
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.0.pem()
    }

    /// A serving certificate for `localhost` and 127.0.0.1.
    pub fn serving(&self) -> Result<Pair> {
        let key = KeyPair::generate()?;
        let cert = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?
            .signed_by(&key, &self.0)?;
        Ok(Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }

    /// A client certificate for `user` in `group`.
    pub fn client(&self, user: &str, group: &str) -> Result<Pair> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        params
            .distinguished_name
            .push(DnType::OrganizationName, group);
        let cert = params.signed_by(&key, &self.0)?;
        Ok(Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

//! kube-fanout's callers as the tests make them: a subscriber with a bearer
//! token in plaintext or over TLS (verifying the serving certificate as
//! `localhost`, presenting a client certificate if it has one), and the
//! raw rustls configuration for tests that speak HTTP themselves.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Result;
use kube_fanout_client::{Certificate, Client, ClientConfig, ClientTlsConfig};
use rustls_pki_types::{CertificateDer, pem::PemObject};
use tonic::transport::Identity;

use crate::pki::Pair;

/// The name the serving certificates of `Ca::serving` are verified as.
const SERVER_NAME: &str = "localhost";

/// A plaintext subscriber of kube-fanout at `addr` sending `token`.
pub async fn plaintext(addr: SocketAddr, token: &str) -> Result<Client> {
    Ok(ClientConfig::new([format!("http://{addr}")])
        .bearer_token(token)
        .connect()
        .await?)
}

/// A subscriber of kube-fanout at `addr` over TLS, trusting the PEM `ca`,
/// presenting `certificate` and sending `token` if given (connected by the
/// caller, which may expect the connection to be refused).
pub fn over_tls(
    addr: SocketAddr,
    ca: &str,
    certificate: Option<&Pair>,
    token: Option<&str>,
) -> ClientConfig {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name(SERVER_NAME);
    if let Some(pair) = certificate {
        tls = tls.identity(Identity::from_pem(&pair.cert, &pair.key));
    }
    let config = ClientConfig::new([format!("https://{addr}")]).tls(tls);
    match token {
        Some(token) => config.bearer_token(token),
        None => config,
    }
}

/// A rustls client configuration trusting the PEM `ca` only, offering
/// `alpn` (`h2`, `http/1.1`).
pub fn rustls_config(ca: &str, alpn: &[u8]) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}

/// A rustls client configuration trusting the PEM `ca` only, offering
/// `alpn`, that presents `pair`'s certificate as it is: rustls's own
/// client checks (and refuses) certificates of some shapes the API server
/// takes, a version 1 certificate for one, and the tests must send those.
pub fn rustls_config_presenting(
    ca: &str,
    alpn: &[u8],
    pair: &Pair,
) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(pair.key.as_bytes())?;
    let chain = CertificateDer::pem_slice_iter(pair.cert.as_bytes()).collect::<Result<_, _>>()?;
    let certified =
        rustls::sign::CertifiedKey::new(chain, provider.key_provider.load_private_key(key)?);
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_cert_resolver(Arc::new(Presenting(Arc::new(certified))));
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}

/// Presents one certificate, whatever the server asks.
#[derive(Debug)]
struct Presenting(Arc<rustls::sign::CertifiedKey>);

impl rustls::client::ResolvesClientCert for Presenting {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

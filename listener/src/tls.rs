//! TLS on the gRPC and metrics listeners: the serving certificate and the
//! client CA are read again when their files change ([`crate::reload`]:
//! checked at each handshake, so rotation needs no restart and open
//! connections are untouched, as Kubernetes components do); the optional
//! client CA verifies client certificates, which go to the gRPC layers as
//! they are (DER, in [`crate::conn::ConnInfo`]), for the auth crate to map
//! to a user (`kube_fanout_auth::x509`). The handshake itself runs in the
//! accept loop ([`crate::accept`]).

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
    client::danger::HandshakeSignatureValid,
    crypto::CryptoProvider,
    server::{
        ClientHello, ResolvesServerCert, WebPkiClientVerifier,
        danger::{ClientCertVerified, ClientCertVerifier},
    },
    sign::CertifiedKey,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime, pem::PemObject};
use tokio_rustls::TlsAcceptor;

use crate::reload::Reloading;

/// The files TLS is served from.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// PEM CA bundle that client certificates must chain to, for mTLS.
    pub client_ca: Option<PathBuf>,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or parsed as PEM.
    #[error("{}: {source}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rustls_pki_types::pem::Error,
    },
    /// A PEM file without a certificate.
    #[error("{}: no certificate in it", .0.display())]
    NoCertificate(PathBuf),
    /// The key does not fit the certificate, or is of an unsupported kind.
    #[error("{} with {}: {source}", cert.display(), key.display())]
    Key {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why.
        source: rustls::Error,
    },
    /// The client CA bundle holds no usable CA.
    #[error("client CA {}: {source}", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rustls::server::VerifierBuilderError,
    },
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |source| TlsError::Pem {
        path: path.to_owned(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(pem)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.to_owned()));
    }
    Ok(certs)
}

/// The serving certificate, read again when its files change.
#[derive(Debug)]
pub struct ReloadingCertificate(Reloading<Arc<CertifiedKey>, TlsError>);

impl ReloadingCertificate {
    /// Loads the certificate and key; fails if they cannot be used.
    pub fn new(cert: &Path, key: &Path, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let (cert, key) = (cert.to_owned(), key.to_owned());
        let files = vec![cert.clone(), key.clone()];
        Ok(ReloadingCertificate(Reloading::new(
            "serving certificate",
            files,
            move || Self::load(&cert, &key, &provider),
        )?))
    }

    fn load(
        cert: &Path,
        key: &Path,
        provider: &CryptoProvider,
    ) -> Result<Arc<CertifiedKey>, TlsError> {
        let chain = certificates(cert)?;
        let private = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsError::Pem {
            path: key.to_owned(),
            source,
        })?;
        let certified =
            CertifiedKey::from_der(chain, private, provider).map_err(|source| TlsError::Key {
                cert: cert.to_owned(),
                key: key.to_owned(),
                source,
            })?;
        Ok(Arc::new(certified))
    }

    /// The certificate to serve now, reloaded if either file changed.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.0.current()
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Verifies client certificates against the client CA bundle, read again
/// when the file changes, so a CA rotation needs no restart either. A
/// certificate is optional: a bearer token will do as well. No CA names
/// are hinted to clients (they may not match the reloaded bundle).
#[derive(Debug)]
pub struct ReloadingClientVerifier(Reloading<Arc<dyn ClientCertVerifier>, TlsError>);

impl ReloadingClientVerifier {
    /// Loads the bundle; fails if it holds no usable CA.
    pub fn new(path: &Path, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let path = path.to_owned();
        Ok(ReloadingClientVerifier(Reloading::new(
            "client CA",
            vec![path.clone()],
            move || Self::load(&path, &provider),
        )?))
    }

    fn load(
        path: &Path,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(certificates(path)?);
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .allow_unauthenticated()
            .build()
            .map_err(|source| TlsError::ClientCa {
                path: path.to_owned(),
                source,
            })
    }
}

impl ClientCertVerifier for ReloadingClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.0
            .current()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.current().supported_verify_schemes()
    }
}

/// A TLS acceptor for `files`: HTTP/2 only (gRPC), the serving certificate
/// and the client CA reloaded on change, client certificates verified
/// against the client CA if one is given (and optional, since a bearer
/// token will do as well).
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    server_config(files, files.client_ca.as_deref(), b"h2")
}

/// A TLS acceptor for the metrics endpoint (HTTP/1.1): the same serving
/// certificate, reloaded on change, and no client certificates (scrapers
/// authenticate with a bearer token).
pub fn metrics_acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    server_config(files, None, b"http/1.1")
}

fn server_config(
    files: &TlsFiles,
    client_ca: Option<&Path>,
    alpn: &[u8],
) -> Result<TlsAcceptor, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Key {
            cert: files.cert.clone(),
            key: files.key.clone(),
            source,
        })?;
    let builder = match client_ca {
        Some(path) => builder.with_client_cert_verifier(Arc::new(ReloadingClientVerifier::new(
            path,
            provider.clone(),
        )?)),
        None => builder.with_no_client_auth(),
    };
    let resolver = ReloadingCertificate::new(&files.cert, &files.key, provider)?;
    let mut config = builder.with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

//! TLS on the gRPC and metrics listeners: the serving certificate and the
//! client CA are read again when their files change ([`crate::reload`]:
//! checked at each use, so rotation needs no restart and open connections
//! are untouched, as Kubernetes components do). With a client CA, client
//! certificates are asked for as the API server asks (taken at the
//! handshake if Go would take them, verified per request against the
//! [`ClientCa`] by the auth crate, which maps them to a user,
//! `kube_fanout_auth::x509`); they go to the gRPC layers parsed, in
//! [`crate::conn::ConnInfo`]. The handshake itself runs in the accept
//! loop ([`crate::accept`]).

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use kube_fanout_x509::Pool;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme,
    client::danger::HandshakeSignatureValid,
    crypto::{CryptoProvider, WebPkiSupportedAlgorithms},
    server::{
        ClientHello, ResolvesServerCert,
        danger::{ClientCertVerified, ClientCertVerifier},
    },
    sign::CertifiedKey,
};
use rustls_pki_types::{
    CertificateDer, PrivateKeyDer, SubjectPublicKeyInfoDer, UnixTime, pem::PemObject,
};
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
    /// A certificate in the client CA bundle that Go (and so the API
    /// server) cannot parse.
    #[error("client CA {}: {source}", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// Why.
        source: kube_fanout_x509::ParseError,
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

/// The client CA bundle, read again when its file changes (a CA rotation
/// needs no restart), as the API server reads `--client-ca-file`: every
/// certificate in it must parse as Go parses certificates, and a
/// replacement that does not keeps the previous bundle in service.
#[derive(Debug)]
pub struct ClientCa(Reloading<Arc<Pool>, TlsError>);

impl ClientCa {
    /// Loads the bundle; fails if it holds no certificate or one that Go
    /// cannot parse.
    pub fn new(path: &Path) -> Result<Self, TlsError> {
        let path = path.to_owned();
        Ok(ClientCa(Reloading::new(
            "client CA",
            vec![path.clone()],
            move || Self::load(&path),
        )?))
    }

    fn load(path: &Path) -> Result<Arc<Pool>, TlsError> {
        let mut pool = Pool::default();
        for der in certificates(path)? {
            let parsed = kube_fanout_x509::certificate::parse(&der).map_err(|source| {
                TlsError::ClientCa {
                    path: path.to_owned(),
                    source,
                }
            })?;
            pool.add(Arc::new(parsed));
        }
        Ok(Arc::new(pool))
    }

    /// The bundle now, read again first if its file changed.
    pub fn current(&self) -> Arc<Pool> {
        self.0.current()
    }
}

/// Asks for client certificates without requiring them, and takes those
/// the API server's TLS handshake takes ([`kube_fanout_x509::handshake`]:
/// each parses as Go parses it, RSA keys up to 8192 bits, an RSA, ECDSA or
/// Ed25519 leaf), verified against nothing here: the authentication layer
/// verifies the chain against the [`ClientCa`] at each request, as the API
/// server's x509 authenticator does, so that a certificate that does not
/// verify (expired, from another CA) leaves the request to its bearer
/// token. The handshake's signature is checked with the leaf's key. No CA
/// names are hinted to clients.
#[derive(Debug)]
struct RequestClientCertificates {
    algorithms: WebPkiSupportedAlgorithms,
}

impl RequestClientCertificates {
    /// The leaf's public key, from a certificate that passed
    /// [`ClientCertVerifier::verify_client_cert`].
    fn leaf_key(cert: &CertificateDer<'_>) -> Result<Vec<u8>, rustls::Error> {
        kube_fanout_x509::certificate::parse(cert.as_ref())
            .map(|c| c.raw_spki)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))
    }
}

impl ClientCertVerifier for RequestClientCertificates {
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
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let chain = std::iter::once(end_entity)
            .chain(intermediates)
            .map(|c| c.as_ref());
        kube_fanout_x509::handshake::client_chain(chain)
            .map(|_| ClientCertVerified::assertion())
            .map_err(|err| {
                rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(
                    Arc::new(err),
                )))
            })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let spki = Self::leaf_key(cert)?;
        let spki = SubjectPublicKeyInfoDer::from(spki.as_slice());
        let key = webpki::RawPublicKeyEntity::try_from(&spki)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        let candidates = self
            .algorithms
            .mapping
            .iter()
            .find(|(scheme, _)| *scheme == dss.scheme)
            .map(|(_, algorithms)| *algorithms)
            .ok_or(rustls::Error::PeerMisbehaved(
                rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme,
            ))?;
        candidates
            .iter()
            .any(|algorithm| {
                key.verify_signature(*algorithm, message, dss.signature())
                    .is_ok()
            })
            .then(HandshakeSignatureValid::assertion)
            .ok_or(rustls::Error::InvalidCertificate(
                CertificateError::BadSignature,
            ))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let spki = Self::leaf_key(cert)?;
        rustls::crypto::verify_tls13_signature_with_raw_key(
            message,
            &SubjectPublicKeyInfoDer::from(spki.as_slice()),
            dss,
            &self.algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A TLS acceptor for `files`: HTTP/2 only (gRPC), the serving certificate
/// reloaded on change, client certificates asked for if a client CA is
/// given (and optional, since a bearer token will do as well; see
/// [`RequestClientCertificates`]).
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    server_config(files, files.client_ca.is_some(), b"h2")
}

/// A TLS acceptor for the metrics endpoint (HTTP/1.1): the same serving
/// certificate, reloaded on change, and no client certificates (scrapers
/// authenticate with a bearer token).
pub fn metrics_acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    server_config(files, false, b"http/1.1")
}

fn server_config(
    files: &TlsFiles,
    request_client_certificates: bool,
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
    let builder = if request_client_certificates {
        builder.with_client_cert_verifier(Arc::new(RequestClientCertificates {
            algorithms: provider.signature_verification_algorithms,
        }))
    } else {
        builder.with_no_client_auth()
    };
    let resolver = ReloadingCertificate::new(&files.cert, &files.key, provider)?;
    let mut config = builder.with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

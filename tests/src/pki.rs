//! Throwaway certificate authorities for TLS tests and the demo: serving
//! certificates for loopback and client certificates (CN the user, O the
//! group, as the API server and kube-fanout read them), also with subjects
//! of shapes rcgen cannot write (see [`subject`]).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, PublicKeyData,
    SigningKey,
};

/// A CA that signs serving and client certificates.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    /// Its subject's one CN.
    name: String,
}

/// A certificate and its key, both PEM.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The certificate.
    pub cert: String,
    /// Its private key.
    pub key: String,
}

impl Pair {
    /// Writes the certificate and key as `tls.crt` and `tls.key` in `dir`
    /// (as a `kubernetes.io/tls` Secret is mounted); their paths.
    pub fn write_to(&self, dir: &Path) -> Result<(PathBuf, PathBuf)> {
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, &self.cert)?;
        std::fs::write(&key, &self.key)?;
        Ok((cert, key))
    }
}

impl Ca {
    /// A new self-signed CA named `name` (distinct names keep chains apart).
    pub fn new(name: &str) -> Result<Self> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Ok(Ca {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate()?)?,
            name: name.to_owned(),
        })
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A serving certificate for `localhost` and 127.0.0.1.
    pub fn serving(&self) -> Result<Pair> {
        self.serving_with(&[])
    }

    /// A serving certificate for localhost, 127.0.0.1 and `more` (names
    /// or IP addresses).
    pub fn serving_with(&self, more: &[String]) -> Result<Pair> {
        let key = KeyPair::generate()?;
        let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        names.extend(more.iter().cloned());
        let cert = CertificateParams::new(names)?.signed_by(&key, &self.issuer)?;
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
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }

    /// A client certificate whose subject is `subject` (a whole DER
    /// `Name`, see [`subject`]): several CNs or O, multi-valued RDNs, any
    /// string type or bytes. rcgen writes one attribute per type, so the
    /// certificate is put together here and signed with the CA's key.
    pub fn client_with_subject(&self, subject: &[u8]) -> Result<Pair> {
        let mut serial = rand::random::<[u8; 8]>();
        serial[0] &= 0x7f;
        serial[0] |= 0x01;
        self.client_shaped(
            subject,
            &Shape {
                serial: serial.to_vec(),
                ..Shape::default()
            },
        )
    }

    /// A client certificate whose subject is `subject` and whose serial
    /// number, version and validity are `shape`'s.
    pub fn client_shaped(&self, subject: &[u8], shape: &Shape) -> Result<Pair> {
        use subject::{SEQUENCE, tlv};
        let key = KeyPair::generate()?;
        // The issuer must be the CA's subject byte for byte: rcgen writes
        // a CN as one UTF8String in one RDN (checked against its DER).
        let issuer = subject::name(&[&[subject::cn(&self.name)]]);
        let ca_der = self.issuer.der().as_ref();
        ca_der
            .windows(issuer.len())
            .position(|w| w == issuer.as_slice())
            .context("the CA's subject is not the name expected")?;
        // ecdsa-with-SHA256: rcgen's default key is ECDSA P-256.
        let algorithm = tlv(
            SEQUENCE,
            &tlv(0x06, &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02]),
        );
        let validity = [tlv(0x17, shape.not_before), tlv(0x17, shape.not_after)].concat();
        let version = match shape.version1 {
            true => Vec::new(),
            false => tlv(0xa0, &tlv(0x02, &[2])), // v3
        };
        let tbs = tlv(
            SEQUENCE,
            &[
                version,
                tlv(0x02, &shape.serial),
                algorithm.clone(),
                issuer,
                tlv(SEQUENCE, &validity),
                subject.to_vec(),
                key.subject_public_key_info(),
            ]
            .concat(),
        );
        let signature = self.issuer.key().sign(&tbs)?;
        let bits = [&[0u8][..], &signature].concat();
        let der = tlv(SEQUENCE, &[tbs, algorithm, tlv(0x03, &bits)].concat());
        let body = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = body
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).expect("base64 is ASCII"))
            .collect();
        Ok(Pair {
            cert: format!(
                "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
                lines.join("\n")
            ),
            key: key.serialize_pem(),
        })
    }
}

/// The serial number, version and validity of a certificate of
/// [`Ca::client_shaped`].
#[derive(Debug, Clone)]
pub struct Shape {
    /// The serial number's DER contents (a negative one too).
    pub serial: Vec<u8>,
    /// Version 1 (no version field; no extensions are written anyway).
    pub version1: bool,
    /// The UTCTime text of notBefore.
    pub not_before: &'static [u8],
    /// The UTCTime text of notAfter.
    pub not_after: &'static [u8],
}

impl Default for Shape {
    /// Serial 1, version 3, valid from 2020 to 2049.
    fn default() -> Self {
        Shape {
            serial: vec![1],
            version1: false,
            not_before: b"200101000000Z",
            not_after: b"491231235959Z",
        }
    }
}

/// DER pieces of certificate subjects: [`name`] of RDNs of attributes.
pub mod subject {
    /// The SEQUENCE tag.
    pub const SEQUENCE: u8 = 0x30;
    /// The UTF8String tag.
    pub const UTF8_STRING: u8 = 0x0c;
    /// The PrintableString tag.
    pub const PRINTABLE_STRING: u8 = 0x13;
    /// The T61String (TeletexString) tag.
    pub const T61_STRING: u8 = 0x14;
    /// The BMPString tag.
    pub const BMP_STRING: u8 = 0x1e;
    /// The DER contents of the CN attribute type (2.5.4.3).
    pub const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
    /// The DER contents of the O attribute type (2.5.4.10).
    pub const ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];
    /// The DER contents of the Kubernetes UID attribute type
    /// (1.3.6.1.4.1.57683.2).
    pub const UID: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0x83, 0xc2, 0x53, 0x02];

    /// One DER element, its length in the shortest form.
    pub fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
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

    /// An attribute: its type (DER contents of the OID), value tag and bytes.
    pub fn attribute(oid: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
        tlv(SEQUENCE, &[tlv(0x06, oid), tlv(tag, value)].concat())
    }

    /// A CN, UTF8String.
    pub fn cn(value: &str) -> Vec<u8> {
        attribute(COMMON_NAME, UTF8_STRING, value.as_bytes())
    }

    /// An O, UTF8String.
    pub fn o(value: &str) -> Vec<u8> {
        attribute(ORGANIZATION, UTF8_STRING, value.as_bytes())
    }

    /// A Kubernetes UID, UTF8String.
    pub fn uid(value: &str) -> Vec<u8> {
        attribute(UID, UTF8_STRING, value.as_bytes())
    }

    /// A name: each item an RDN (a SET) of the attributes in it, in order.
    pub fn name(rdns: &[&[Vec<u8>]]) -> Vec<u8> {
        let sets: Vec<Vec<u8>> = rdns.iter().map(|set| tlv(0x31, &set.concat())).collect();
        tlv(SEQUENCE, &sets.concat())
    }
}

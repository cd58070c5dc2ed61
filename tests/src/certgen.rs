//! Generated client certificate chains for the differential test of
//! kube-fanout's certificate rules against Go's (tests/tests/x509_differential.rs):
//! chains of a root, intermediates and a leaf, each certificate written
//! here DER piece by DER piece and signed with a real key (ECDSA P-256 and
//! P-384, Ed25519, RSA 2048 and 3072), and each piece, with some chance,
//! of an unusual or wrong shape: serial numbers (zero, long, negative, not
//! minimal), versions (1 without extensions, 2, out of range), signature
//! algorithm identifiers (mismatched, inner and outer apart, insecure,
//! parameters), names (every string type, valid and not, several CNs and
//! Os, UIDs, multi-valued and empty RDNs, empty subjects), validity (both
//! time forms, zone offsets, minutes only, malformed, the edges of the
//! window to the nanosecond), keys (off the curve, wrong parameters,
//! unknown, DSA), extensions (basic constraints, key usages, extended key
//! usages, key identifiers, SANs of every kind, unknown and duplicate
//! ones, criticality, malformed encodings, name constraints, policies),
//! signatures (valid, corrupted, by the wrong key) and the chain and
//! roots as sent (missing, extra, unparsable, the leaf itself a root).
//!
//! Deterministic for a seed, so that a difference found is found again.

use std::sync::Arc;

use rand::{Rng, SeedableRng, rngs::StdRng, seq::IndexedRandom};
use ring::{
    rand::SystemRandom,
    signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair},
};

use rustls_pki_types::{PrivateKeyDer, pem::PemObject};

use crate::pki::subject::{BMP_STRING, PRINTABLE_STRING, SEQUENCE, T61_STRING, UTF8_STRING, tlv};

/// One generated case: the chain a client sends, the CA bundle, and the
/// time to verify at.
#[derive(Debug, Clone)]
pub struct Case {
    /// Its number in the run.
    pub id: usize,
    /// What was done to it, for a reader of a difference.
    pub shapes: Vec<String>,
    /// Leaf first (DER).
    pub chain: Vec<Vec<u8>>,
    /// The client CA bundle (DER).
    pub roots: Vec<Vec<u8>>,
    /// Nanoseconds since the Unix epoch.
    pub now: i128,
}

/// The x509 oracle (tests/x509oracle: the API server's certificate rules
/// as a program), built on first use.
pub fn oracle() -> anyhow::Result<&'static std::path::Path> {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    if let Some(bin) = BIN.get() {
        return Ok(bin);
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("x509oracle/build.sh");
    let dir = crate::controlplane::built_by(&script)?;
    Ok(BIN.get_or_init(|| dir.join("x509oracle")))
}

/// The instant cases are verified at, by default (2026-12-01T00:00:00Z).
const NOW: i64 = 1_796_083_200;

const IA5_STRING: u8 = 0x16;
const NUMERIC_STRING: u8 = 0x12;
const OID: u8 = 0x06;
const INTEGER: u8 = 0x02;
const BOOLEAN: u8 = 0x01;
const OCTET_STRING: u8 = 0x04;
const BIT_STRING: u8 = 0x03;
const SET: u8 = 0x31;

/// OIDs' DER contents.
mod oid {
    pub const CN: &[u8] = &[0x55, 0x04, 0x03];
    pub const O: &[u8] = &[0x55, 0x04, 0x0a];
    pub const OU: &[u8] = &[0x55, 0x04, 0x0b];
    pub const UID: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0x83, 0xc2, 0x53, 0x02];
    pub const EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    pub const P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
    pub const P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
    pub const ED25519: &[u8] = &[0x2b, 0x65, 0x70];
    pub const X25519: &[u8] = &[0x2b, 0x65, 0x6e];
    pub const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
    pub const DSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x01];
    pub const ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
    pub const ECDSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
    pub const ECDSA_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01];
    pub const RSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b];
    pub const RSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c];
    pub const RSA_SHA512: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d];
    pub const RSA_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05];
    pub const RSA_MD5: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x04];
    pub const RSA_PSS: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a];
    pub const MGF1: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x08];
    pub const SHA256: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01];
    pub const SHA384: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02];
    pub const SHA512: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x03];
    pub const BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];
    pub const KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x0f];
    pub const EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];
    pub const SUBJECT_KEY_ID: &[u8] = &[0x55, 0x1d, 0x0e];
    pub const AUTHORITY_KEY_ID: &[u8] = &[0x55, 0x1d, 0x23];
    pub const SAN: &[u8] = &[0x55, 0x1d, 0x11];
    pub const NAME_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x1e];
    pub const CERTIFICATE_POLICIES: &[u8] = &[0x55, 0x1d, 0x20];
    pub const POLICY_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x24];
    pub const INHIBIT_ANY_POLICY: &[u8] = &[0x55, 0x1d, 0x36];
    pub const CRL_DP: &[u8] = &[0x55, 0x1d, 0x1f];
    pub const AIA: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x01];
    pub const CLIENT_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];
    pub const SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
    pub const ANY_EKU: &[u8] = &[0x55, 0x1d, 0x25, 0x00];
    pub const UNKNOWN: &[u8] = &[0x2a, 0x03, 0x04, 0x05];
}

/// A key that signs, of one of the kinds Go and ring both verify.
pub struct Key {
    kind: KeyKind,
    spki: Vec<u8>,
}

enum KeyKind {
    P256(EcdsaKeyPair),
    P384(EcdsaKeyPair),
    Ed25519(Ed25519KeyPair),
    Rsa(RsaKeyPair),
}

/// The RSA keys the generator signs with (ring cannot make RSA keys).
const RSA_KEYS: [&str; 2] = [
    include_str!("../fixtures/rsa-2048.pk8.pem"),
    include_str!("../fixtures/rsa-3072.pk8.pem"),
];

impl Key {
    fn p256(rng: &SystemRandom) -> Self {
        let alg = &signature::ECDSA_P256_SHA256_ASN1_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, rng).expect("a P-256 key");
        let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), rng).expect("a P-256 key");
        let spki = ec_spki(oid::P256, pair.public_key().as_ref());
        Key {
            kind: KeyKind::P256(pair),
            spki,
        }
    }

    fn p384(rng: &SystemRandom) -> Self {
        let alg = &signature::ECDSA_P384_SHA384_ASN1_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, rng).expect("a P-384 key");
        let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), rng).expect("a P-384 key");
        let spki = ec_spki(oid::P384, pair.public_key().as_ref());
        Key {
            kind: KeyKind::P384(pair),
            spki,
        }
    }

    fn ed25519(rng: &SystemRandom) -> Self {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(rng).expect("an Ed25519 key");
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("an Ed25519 key");
        let spki = spki(
            &tlv(SEQUENCE, &tlv(OID, oid::ED25519)),
            pair.public_key().as_ref(),
        );
        Key {
            kind: KeyKind::Ed25519(pair),
            spki,
        }
    }

    fn rsa(pem: &str) -> Self {
        let der = PrivateKeyDer::from_pem_slice(pem.as_bytes()).expect("a PEM key");
        let pair = RsaKeyPair::from_pkcs8(der.secret_der()).expect("an RSA key");
        let algorithm = tlv(SEQUENCE, &[tlv(OID, oid::RSA), vec![0x05, 0x00]].concat());
        let spki = spki(&algorithm, pair.public().as_ref());
        Key {
            kind: KeyKind::Rsa(pair),
            spki,
        }
    }

    /// The signature algorithm identifiers this key signs with well.
    fn algorithms(&self) -> Vec<Vec<u8>> {
        let ai = |oid: &[u8]| tlv(SEQUENCE, &tlv(OID, oid));
        let ai_null = |oid: &[u8]| tlv(SEQUENCE, &[tlv(OID, oid), vec![0x05, 0x00]].concat());
        match self.kind {
            KeyKind::P256(_) => vec![ai(oid::ECDSA_SHA256)],
            KeyKind::P384(_) => vec![ai(oid::ECDSA_SHA384)],
            KeyKind::Ed25519(_) => vec![ai(oid::ED25519)],
            KeyKind::Rsa(_) => vec![
                ai_null(oid::RSA_SHA256),
                ai_null(oid::RSA_SHA384),
                ai_null(oid::RSA_SHA512),
                pss(oid::SHA256, 32),
                pss(oid::SHA384, 48),
                pss(oid::SHA512, 64),
            ],
        }
    }

    /// Signs `tbs` with the algorithm `algorithm` names (the first of
    /// this key's algorithms if it names none of them).
    fn sign(&self, algorithm: &[u8], tbs: &[u8]) -> Vec<u8> {
        let rng = SystemRandom::new();
        match &self.kind {
            KeyKind::P256(pair) | KeyKind::P384(pair) => {
                pair.sign(&rng, tbs).expect("signed").as_ref().to_vec()
            }
            KeyKind::Ed25519(pair) => pair.sign(tbs).as_ref().to_vec(),
            KeyKind::Rsa(pair) => {
                let padding: &'static dyn signature::RsaEncoding =
                    if contains(algorithm, oid::RSA_PSS) {
                        if contains(algorithm, oid::SHA384) {
                            &signature::RSA_PSS_SHA384
                        } else if contains(algorithm, oid::SHA512) {
                            &signature::RSA_PSS_SHA512
                        } else {
                            &signature::RSA_PSS_SHA256
                        }
                    } else if contains(algorithm, oid::RSA_SHA384) {
                        &signature::RSA_PKCS1_SHA384
                    } else if contains(algorithm, oid::RSA_SHA512) {
                        &signature::RSA_PKCS1_SHA512
                    } else {
                        &signature::RSA_PKCS1_SHA256
                    };
                let mut out = vec![0; pair.public().modulus_len()];
                pair.sign(padding, &rng, tbs, &mut out).expect("signed");
                out
            }
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn spki(algorithm: &[u8], key: &[u8]) -> Vec<u8> {
    tlv(
        SEQUENCE,
        &[
            algorithm.to_vec(),
            tlv(BIT_STRING, &[&[0u8][..], key].concat()),
        ]
        .concat(),
    )
}

fn ec_spki(curve: &[u8], point: &[u8]) -> Vec<u8> {
    let algorithm = tlv(
        SEQUENCE,
        &[tlv(OID, oid::EC_PUBLIC_KEY), tlv(OID, curve)].concat(),
    );
    spki(&algorithm, point)
}

/// An RSA-PSS algorithm identifier with `hash` for the message and MGF1
/// and a salt of `salt` bytes.
fn pss(hash: &[u8], salt: u8) -> Vec<u8> {
    let hash_ai = tlv(SEQUENCE, &[tlv(OID, hash), vec![0x05, 0x00]].concat());
    let mgf = tlv(SEQUENCE, &[tlv(OID, oid::MGF1), hash_ai.clone()].concat());
    let params = tlv(
        SEQUENCE,
        &[
            tlv(0xa0, &hash_ai),
            tlv(0xa1, &mgf),
            tlv(0xa2, &tlv(INTEGER, &[salt])),
        ]
        .concat(),
    );
    tlv(SEQUENCE, &[tlv(OID, oid::RSA_PSS), params].concat())
}

/// The keys cases are signed with.
pub struct Keys(Vec<Arc<Key>>);

impl Keys {
    /// A few keys of each kind.
    pub fn new() -> Self {
        let rng = SystemRandom::new();
        let mut keys = Vec::new();
        for _ in 0..3 {
            keys.push(Key::p256(&rng));
            keys.push(Key::p384(&rng));
            keys.push(Key::ed25519(&rng));
        }
        keys.extend(RSA_KEYS.iter().map(|pem| Key::rsa(pem)));
        Keys(keys.into_iter().map(Arc::new).collect())
    }
}

impl Default for Keys {
    fn default() -> Self {
        Self::new()
    }
}

/// One certificate being made: every field as DER, changed by the
/// generator before it is put together and signed.
struct Draft {
    version: Option<Vec<u8>>,
    serial: Vec<u8>,
    /// The signature algorithm, inside and outside the TBS.
    inner_algorithm: Vec<u8>,
    outer_algorithm: Vec<u8>,
    issuer: Vec<u8>,
    validity: Vec<u8>,
    subject: Vec<u8>,
    spki: Vec<u8>,
    extensions: Vec<Vec<u8>>,
    /// Written as a v3 extensions field even without extensions.
    empty_extensions: bool,
    /// What signs it, with which algorithm.
    signer: Arc<Key>,
    sign_with: Vec<u8>,
    corrupt_signature: bool,
    trailing: bool,
}

impl Draft {
    fn der(&self) -> Vec<u8> {
        let mut tbs = Vec::new();
        if let Some(version) = &self.version {
            tbs.extend(tlv(0xa0, version));
        }
        tbs.extend(tlv(INTEGER, &self.serial));
        tbs.extend(self.inner_algorithm.clone());
        tbs.extend(self.issuer.clone());
        tbs.extend(self.validity.clone());
        tbs.extend(self.subject.clone());
        tbs.extend(self.spki.clone());
        if !self.extensions.is_empty() || self.empty_extensions {
            tbs.extend(tlv(0xa3, &tlv(SEQUENCE, &self.extensions.concat())));
        }
        let tbs = tlv(SEQUENCE, &tbs);
        let mut signature = self.signer.sign(&self.sign_with, &tbs);
        if self.corrupt_signature {
            let last = signature.len() - 1;
            signature[last / 2] ^= 0x01;
        }
        let mut der = tlv(
            SEQUENCE,
            &[
                tbs,
                self.outer_algorithm.clone(),
                tlv(BIT_STRING, &[&[0u8][..], &signature].concat()),
            ]
            .concat(),
        );
        if self.trailing {
            der.push(0);
        }
        der
    }
}

/// An extension: its OID, criticality and value.
fn extension(oid: &[u8], critical: bool, value: &[u8]) -> Vec<u8> {
    let mut contents = tlv(OID, oid);
    if critical {
        contents.extend(tlv(BOOLEAN, &[0xff]));
    }
    contents.extend(tlv(OCTET_STRING, value));
    tlv(SEQUENCE, &contents)
}

/// A certificate authority of a generated chain.
struct Authority {
    key: Arc<Key>,
    subject: Vec<u8>,
    skid: Vec<u8>,
    der: Vec<u8>,
}

/// The parts of a case the generator may give an unusual shape.
#[derive(Debug, Clone, Copy)]
enum Part {
    Roots,
    Chain,
    Authority,
    Serial,
    Version,
    Algorithm,
    Validity,
    Key,
    Subject,
    Extensions,
    Names,
    OtherExtensions,
    Signature,
}

/// How many parts there are.
const PARTS: u32 = 13;

/// Makes cases.
pub struct Generator {
    rng: StdRng,
    keys: Keys,
    next: usize,
    /// The parts that take an unusual shape in the case being made (one
    /// bit per [`Part`]): about one in a case, none in a third of them,
    /// so that each shape is seen on its own as well as with others.
    unusual: u32,
}

impl Generator {
    /// A generator of cases from `seed`.
    pub fn new(seed: u64) -> Self {
        Generator {
            rng: StdRng::seed_from_u64(seed),
            keys: Keys::new(),
            next: 0,
            unusual: 0,
        }
    }

    /// Whether `part` takes an unusual shape in this case.
    fn unusual(&self, part: Part) -> bool {
        self.unusual & (1 << part as u32) != 0
    }

    /// A number below `n` if `part` takes an unusual shape, else `n` (the
    /// usual shape of the matches below).
    fn pick(&mut self, part: Part, n: u32) -> u32 {
        if self.unusual(part) {
            self.rng.random_range(0..n)
        } else {
            n
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    fn key(&mut self) -> Arc<Key> {
        self.keys.0.choose(&mut self.rng).expect("keys").clone()
    }

    /// The next case.
    pub fn case(&mut self) -> Case {
        let id = self.next;
        self.next += 1;
        self.unusual = 0;
        if !self.chance(1.0 / 3.0) {
            while self.unusual == 0 {
                for part in 0..PARTS {
                    if self.chance(0.08) {
                        self.unusual |= 1 << part;
                    }
                }
            }
        }
        let mut shapes = Vec::new();
        let mut now = i128::from(NOW) * 1_000_000_000;
        let root = self.authority(None, &mut shapes, "root");
        let intermediates = if self.chance(0.25) {
            (0..self.rng.random_range(1..=2)).collect::<Vec<_>>()
        } else {
            Vec::new()
        };
        let mut authorities = vec![root];
        for _ in &intermediates {
            let parent = authorities.last().expect("a root");
            let ca = self.authority(Some(parent), &mut shapes, "intermediate");
            authorities.push(ca);
        }
        let constrained = authorities
            .iter()
            .any(|a| contains(&a.der, oid::NAME_CONSTRAINTS));
        let issuer = authorities.last().expect("a CA");
        let (leaf, leaf_now) = self.leaf(issuer, constrained, &mut shapes);
        if let Some(at) = leaf_now {
            now = at;
        }
        let mut chain = vec![leaf.clone()];
        chain.extend(authorities[1..].iter().rev().map(|a| a.der.clone()));
        let mut roots = vec![authorities[0].der.clone()];
        match self.pick(Part::Roots, 5) {
            0 => {
                shapes.push("roots: the leaf's own CA missing".into());
                let other = self.authority(None, &mut Vec::new(), "other root");
                roots = vec![other.der];
            }
            1 => {
                shapes.push("roots: the leaf itself in the bundle".into());
                roots.push(leaf);
            }
            2 => {
                shapes.push("roots: an unparsable certificate in the bundle".into());
                roots.push(vec![0x30, 0x03, 0x02, 0x01, 0x01]);
            }
            3 => {
                shapes.push("roots: another root too".into());
                let other = self.authority(None, &mut Vec::new(), "other root");
                roots.insert(0, other.der);
            }
            _ => {}
        }
        match self.pick(Part::Chain, 4) {
            0 if chain.len() > 1 => {
                shapes.push("chain: intermediates not sent".into());
                chain.truncate(1);
            }
            1 if chain.len() > 1 => {
                shapes.push("chain: intermediates sent in reverse".into());
                chain[1..].reverse();
            }
            2 => {
                shapes.push("chain: an unparsable certificate after the leaf".into());
                chain.push(vec![0x30, 0x00]);
            }
            3 => {
                shapes.push("chain: the root sent too".into());
                chain.push(authorities[0].der.clone());
            }
            _ => {}
        }
        Case {
            id,
            shapes,
            chain,
            roots,
            now,
        }
    }

    /// A CA: self-signed without a parent, else signed by it.
    fn authority(
        &mut self,
        parent: Option<&Authority>,
        shapes: &mut Vec<String>,
        role: &str,
    ) -> Authority {
        let key = self.key();
        let name = format!("{role} {}", self.rng.random::<u32>());
        let subject = name_of(&[&[attr(oid::CN, UTF8_STRING, name.as_bytes())]]);
        let skid: Vec<u8> = (0..20).map(|_| self.rng.random()).collect();
        let (issuer, signer, akid) = match parent {
            Some(p) => (p.subject.clone(), p.key.clone(), p.skid.clone()),
            None => (subject.clone(), key.clone(), skid.clone()),
        };
        let mut extensions = Vec::new();
        let mut version = Some(tlv(INTEGER, &[2]));
        let basic = match self.pick(Part::Authority, 12) {
            0 => {
                shapes.push(format!("{role}: no basic constraints"));
                None
            }
            1 => {
                shapes.push(format!("{role}: basic constraints cA false"));
                Some(tlv(SEQUENCE, &[]))
            }
            2 => {
                shapes.push(format!("{role}: path length 0"));
                Some(tlv(
                    SEQUENCE,
                    &[tlv(BOOLEAN, &[0xff]), tlv(INTEGER, &[0])].concat(),
                ))
            }
            3 if parent.is_none() => {
                shapes.push(format!("{role}: version 1, no extensions"));
                version = None;
                None
            }
            _ => Some(tlv(SEQUENCE, &tlv(BOOLEAN, &[0xff]))),
        };
        if let Some(basic) = basic {
            let critical = self.chance(0.7);
            extensions.push(extension(oid::BASIC_CONSTRAINTS, critical, &basic));
        }
        if version.is_some() {
            extensions.push(extension(
                oid::SUBJECT_KEY_ID,
                false,
                &tlv(OCTET_STRING, &skid),
            ));
            if parent.is_some() || self.chance(0.5) {
                let akid_value = tlv(SEQUENCE, &tlv(0x80, &akid));
                extensions.push(extension(oid::AUTHORITY_KEY_ID, false, &akid_value));
            }
            match self.rng.random_range(0..25) {
                0 if self.unusual(Part::Authority) => {
                    shapes.push(format!("{role}: key usage without keyCertSign"));
                    extensions.push(extension(
                        oid::KEY_USAGE,
                        true,
                        &tlv(BIT_STRING, &[7, 0x80]),
                    ));
                }
                0..=8 => {
                    extensions.push(extension(
                        oid::KEY_USAGE,
                        true,
                        &tlv(BIT_STRING, &[1, 0x86]),
                    ));
                }
                _ => {}
            }
            match self.pick(Part::Authority, 12) {
                0 => {
                    shapes.push(format!("{role}: extended key usage serverAuth only"));
                    let eku = tlv(SEQUENCE, &tlv(OID, oid::SERVER_AUTH));
                    extensions.push(extension(oid::EXT_KEY_USAGE, false, &eku));
                }
                1 => {
                    shapes.push(format!("{role}: extended key usage clientAuth"));
                    let eku = tlv(SEQUENCE, &tlv(OID, oid::CLIENT_AUTH));
                    extensions.push(extension(oid::EXT_KEY_USAGE, false, &eku));
                }
                2 => {
                    shapes.push(format!("{role}: an unknown critical extension"));
                    extensions.push(extension(oid::UNKNOWN, true, &[0x05, 0x00]));
                }
                3 => {
                    shapes.push(format!("{role}: name constraints (DNS)"));
                    let nc = tlv(
                        SEQUENCE,
                        &tlv(0xa0, &tlv(SEQUENCE, &tlv(0x82, b"example.com"))),
                    );
                    extensions.push(extension(oid::NAME_CONSTRAINTS, true, &nc));
                }
                4 => {
                    shapes.push(format!(
                        "{role}: name constraints of a kind Go does not read"
                    ));
                    let nc = tlv(
                        SEQUENCE,
                        &tlv(0xa0, &tlv(SEQUENCE, &tlv(0xa4, &name_of(&[])))),
                    );
                    let critical = self.chance(0.5);
                    extensions.push(extension(oid::NAME_CONSTRAINTS, critical, &nc));
                }
                5 if parent.is_none() => {
                    shapes.push(format!("{role}: policy constraints"));
                    let pc = tlv(SEQUENCE, &tlv(0x80, &[0]));
                    extensions.push(extension(oid::POLICY_CONSTRAINTS, true, &pc));
                }
                6 => {
                    shapes.push(format!("{role}: certificate policies"));
                    let policies = tlv(
                        SEQUENCE,
                        &tlv(SEQUENCE, &tlv(OID, &[0x55, 0x1d, 0x20, 0x00])),
                    );
                    extensions.push(extension(oid::CERTIFICATE_POLICIES, false, &policies));
                }
                _ => {}
            }
        }
        let validity = if self.unusual(Part::Authority) && self.chance(0.1) {
            shapes.push(format!("{role}: expired"));
            validity_of(NOW - 400 * 86_400, NOW - 86_400)
        } else {
            validity_of(NOW - 86_400 * 30, NOW + 86_400 * 3650)
        };
        let algorithm = key_algorithm(&signer, &mut self.rng);
        let draft = Draft {
            version,
            serial: positive_serial(&mut self.rng),
            inner_algorithm: algorithm.clone(),
            outer_algorithm: algorithm.clone(),
            issuer,
            validity,
            subject: subject.clone(),
            spki: key.spki.clone(),
            extensions,
            empty_extensions: false,
            signer,
            sign_with: algorithm,
            corrupt_signature: false,
            trailing: false,
        };
        Authority {
            key,
            subject,
            skid,
            der: draft.der(),
        }
    }

    /// The leaf, signed by `issuer` (under name constraints if
    /// `constrained`), and the time to verify it at if not the default.
    fn leaf(
        &mut self,
        issuer: &Authority,
        constrained: bool,
        shapes: &mut Vec<String>,
    ) -> (Vec<u8>, Option<i128>) {
        let key = self.key();
        let algorithm = key_algorithm(&issuer.key, &mut self.rng);
        let mut draft = Draft {
            version: Some(tlv(INTEGER, &[2])),
            serial: positive_serial(&mut self.rng),
            inner_algorithm: algorithm.clone(),
            outer_algorithm: algorithm.clone(),
            issuer: issuer.subject.clone(),
            validity: validity_of(NOW - 86_400, NOW + 86_400 * 365),
            subject: self.subject(shapes),
            spki: key.spki.clone(),
            extensions: Vec::new(),
            empty_extensions: false,
            signer: issuer.key.clone(),
            sign_with: algorithm,
            corrupt_signature: false,
            trailing: false,
        };
        self.serial(&mut draft, shapes);
        self.version(&mut draft, shapes);
        self.algorithm(&mut draft, shapes);
        let now = self.validity(&mut draft, shapes);
        self.key_shape(&mut draft, shapes);
        if draft.version == Some(tlv(INTEGER, &[2])) {
            self.extensions(&mut draft, issuer, constrained, shapes);
        }
        match self.pick(Part::Signature, 4) {
            0 => {
                shapes.push("leaf: signature corrupted".into());
                draft.corrupt_signature = true;
            }
            1 => {
                shapes.push("leaf: signed by another key than its issuer's".into());
                draft.signer = self.key();
                draft.sign_with = key_algorithm(&draft.signer, &mut self.rng);
            }
            2 => {
                shapes.push("leaf: a byte after the certificate".into());
                draft.trailing = true;
            }
            3 => {
                shapes.push("leaf: issued by a name that is not its CA's".into());
                draft.issuer = name_of(&[&[attr(oid::CN, UTF8_STRING, b"nobody")]]);
            }
            _ => {}
        }
        (draft.der(), now)
    }

    fn serial(&mut self, draft: &mut Draft, shapes: &mut Vec<String>) {
        let (what, serial): (&str, Vec<u8>) = match self.pick(Part::Serial, 9) {
            0 => ("zero", vec![0]),
            1 => ("negative", vec![0xff, 0x01]),
            2 => ("negative, one byte", vec![0x80]),
            3 => ("not minimal", vec![0x00, 0x01]),
            4 => ("empty", vec![]),
            5 => ("21 bytes", [&[0x01u8][..], &[0xab; 20]].concat()),
            6 => ("40 bytes", [&[0x7fu8][..], &[0xcd; 39]].concat()),
            7 => ("high bit set behind a zero", vec![0x00, 0x80, 0x01]),
            _ => return,
        };
        shapes.push(format!("leaf: serial {what}"));
        draft.serial = serial;
    }

    fn version(&mut self, draft: &mut Draft, shapes: &mut Vec<String>) {
        let (what, version) = match self.pick(Part::Version, 8) {
            0 | 1 => ("1 (no version field, no extensions)", None),
            2 => ("1 written out", Some(tlv(INTEGER, &[0]))),
            3 => ("2", Some(tlv(INTEGER, &[1]))),
            4 => ("4 (out of range)", Some(tlv(INTEGER, &[3]))),
            5 => ("-1", Some(tlv(INTEGER, &[0xff]))),
            6 => ("not minimal", Some(tlv(INTEGER, &[0, 2]))),
            7 => (
                "with bytes after it",
                Some([tlv(INTEGER, &[2]), vec![0x05, 0x00]].concat()),
            ),
            _ => return,
        };
        shapes.push(format!("leaf: version {what}"));
        draft.version = version;
    }

    fn algorithm(&mut self, draft: &mut Draft, shapes: &mut Vec<String>) {
        let ai = |oid: &[u8]| tlv(SEQUENCE, &tlv(OID, oid));
        let with =
            |oid: &[u8], params: &[u8]| tlv(SEQUENCE, &[tlv(OID, oid), params.to_vec()].concat());
        let (what, both): (&str, Option<Vec<u8>>) = match self.pick(Part::Algorithm, 11) {
            0 => {
                shapes.push("leaf: inner and outer signature algorithms differ".into());
                draft.outer_algorithm = ai(oid::ECDSA_SHA384);
                return;
            }
            1 => ("SHA-1 with RSA", Some(with(oid::RSA_SHA1, &[0x05, 0x00]))),
            2 => ("MD5 with RSA", Some(with(oid::RSA_MD5, &[0x05, 0x00]))),
            3 => ("ECDSA with SHA-1", Some(ai(oid::ECDSA_SHA1))),
            4 => ("an unknown OID", Some(ai(oid::UNKNOWN))),
            5 => (
                "Ed25519 with NULL parameters",
                Some(with(oid::ED25519, &[0x05, 0x00])),
            ),
            // Go ignores the parameters of the algorithms other than PSS.
            6 if draft.inner_algorithm == ai(oid::ECDSA_SHA256) => (
                "ECDSA with NULL parameters",
                Some(with(oid::ECDSA_SHA256, &[0x05, 0x00])),
            ),
            6 if draft.inner_algorithm == ai(oid::ECDSA_SHA384) => (
                "ECDSA with NULL parameters",
                Some(with(oid::ECDSA_SHA384, &[0x05, 0x00])),
            ),
            7 => ("RSA-PSS with a salt of 20", Some(pss(oid::SHA256, 20))),
            8 => ("another key type's", Some(ai(oid::ECDSA_SHA256))),
            9 => (
                "RSA with SHA-256",
                Some(with(oid::RSA_SHA256, &[0x05, 0x00])),
            ),
            10 => ("not an OID", Some(tlv(SEQUENCE, &tlv(INTEGER, &[1])))),
            _ => return,
        };
        if let Some(both) = both {
            shapes.push(format!("leaf: signature algorithm {what}"));
            draft.inner_algorithm = both.clone();
            draft.outer_algorithm = both;
        }
    }

    /// Validity of unusual shapes, or at the window's edges; the time to
    /// verify at, if it is not the default.
    fn validity(&mut self, draft: &mut Draft, shapes: &mut Vec<String>) -> Option<i128> {
        let nanos = |s: i64| i128::from(s) * 1_000_000_000;
        let not_after = NOW + 86_400;
        let (what, validity, now) = match self.pick(Part::Validity, 17) {
            0 => (
                "at its notAfter",
                validity_of(NOW - 86_400, not_after),
                Some(nanos(not_after)),
            ),
            1 => (
                "a nanosecond past its notAfter",
                validity_of(NOW - 86_400, not_after),
                Some(nanos(not_after) + 1),
            ),
            2 => (
                "at its notBefore",
                validity_of(NOW, not_after),
                Some(nanos(NOW)),
            ),
            3 => (
                "a nanosecond before its notBefore",
                validity_of(NOW, not_after),
                Some(nanos(NOW) - 1),
            ),
            4 => ("expired", validity_of(NOW - 2 * 86_400, NOW - 86_400), None),
            5 => (
                "not valid yet",
                validity_of(NOW + 86_400, NOW + 2 * 86_400),
                None,
            ),
            6 => (
                "GeneralizedTime",
                times(0x18, b"20261130000000Z", 0x18, b"20271130000000Z"),
                None,
            ),
            7 => (
                "a zone offset",
                times(0x17, b"261130010000+0100", 0x17, b"271130000000-0130"),
                None,
            ),
            8 => (
                "minutes only",
                times(0x17, b"2611300000Z", 0x17, b"2711300000Z"),
                None,
            ),
            9 => (
                "a +0000 offset",
                times(0x17, b"261130000000+0000", 0x17, b"271130000000Z"),
                None,
            ),
            10 => (
                "a fraction of a second",
                times(0x18, b"20261130000000.5Z", 0x18, b"20271130000000Z"),
                None,
            ),
            11 => (
                "February 30th",
                times(0x17, b"260230000000Z", 0x17, b"271130000000Z"),
                None,
            ),
            12 => (
                "no zone",
                times(0x17, b"261130000000", 0x17, b"271130000000Z"),
                None,
            ),
            13 => (
                "a year 2050 UTCTime",
                times(0x17, b"261130000000Z", 0x17, b"500101000000Z"),
                None,
            ),
            14 => (
                "a year 2050 GeneralizedTime",
                times(0x17, b"261130000000Z", 0x18, b"20500101000000Z"),
                None,
            ),
            15 => (
                "an IA5String time",
                times(IA5_STRING, b"261130000000Z", 0x17, b"271130000000Z"),
                None,
            ),
            16 => (
                "the second 60",
                times(0x17, b"261130000060Z", 0x17, b"271130000000Z"),
                None,
            ),
            _ => return None,
        };
        shapes.push(format!("leaf: validity {what}"));
        draft.validity = validity;
        now
    }

    fn key_shape(&mut self, draft: &mut Draft, shapes: &mut Vec<String>) {
        let (what, spki) = match self.pick(Part::Key, 9) {
            0 => {
                let mut spki = draft.spki.clone();
                if !contains(&spki, oid::EC_PUBLIC_KEY) {
                    return;
                }
                let last = spki.len() - 1;
                spki[last] ^= 0x01;
                ("an ECDSA point off its curve", spki)
            }
            1 => (
                "an unknown algorithm",
                spki(&tlv(SEQUENCE, &tlv(OID, oid::UNKNOWN)), &[1; 32]),
            ),
            2 => (
                "X25519",
                spki(&tlv(SEQUENCE, &tlv(OID, oid::X25519)), &[9; 32]),
            ),
            3 => (
                "Ed25519 with NULL parameters",
                spki(
                    &tlv(SEQUENCE, &[tlv(OID, oid::ED25519), vec![5, 0]].concat()),
                    &[9; 32],
                ),
            ),
            4 => (
                "Ed25519 of 31 bytes",
                spki(&tlv(SEQUENCE, &tlv(OID, oid::ED25519)), &[9; 31]),
            ),
            5 => {
                let params = tlv(
                    SEQUENCE,
                    &[tlv(INTEGER, &[23]), tlv(INTEGER, &[11]), tlv(INTEGER, &[4])].concat(),
                );
                let algorithm = tlv(SEQUENCE, &[tlv(OID, oid::DSA), params].concat());
                ("DSA", spki(&algorithm, &tlv(INTEGER, &[8])))
            }
            6 => {
                let algorithm = tlv(SEQUENCE, &tlv(OID, oid::RSA));
                let key = tlv(
                    SEQUENCE,
                    &[tlv(INTEGER, &[0x00, 0xc1, 0x01]), tlv(INTEGER, &[3])].concat(),
                );
                ("RSA without NULL parameters", spki(&algorithm, &key))
            }
            7 => {
                let algorithm = tlv(SEQUENCE, &[tlv(OID, oid::RSA), vec![5, 0]].concat());
                let key = tlv(
                    SEQUENCE,
                    &[tlv(INTEGER, &[0x81, 0x01]), tlv(INTEGER, &[3])].concat(),
                );
                ("RSA with a negative modulus", spki(&algorithm, &key))
            }
            8 => {
                let algorithm = tlv(
                    SEQUENCE,
                    &[tlv(OID, oid::EC_PUBLIC_KEY), tlv(OID, oid::UNKNOWN)].concat(),
                );
                ("ECDSA on an unknown curve", spki(&algorithm, &[4; 65]))
            }
            _ => return,
        };
        shapes.push(format!("leaf: key {what}"));
        draft.spki = spki;
    }

    fn subject(&mut self, shapes: &mut Vec<String>) -> Vec<u8> {
        let mut rdns: Vec<Vec<Vec<u8>>> = Vec::new();
        let count = self.rng.random_range(0..=4);
        for _ in 0..count {
            let size = if self.chance(0.15) {
                self.rng.random_range(0..=3)
            } else {
                1
            };
            let set = (0..size).map(|_| self.attribute(shapes)).collect();
            rdns.push(set);
        }
        if self.chance(0.5) {
            let user = format!("user-{}", self.rng.random_range(0..100));
            rdns.push(vec![attr(oid::CN, UTF8_STRING, user.as_bytes())]);
        } else if count == 0 {
            shapes.push("leaf: an empty subject".into());
        }
        let sets: Vec<Vec<u8>> = rdns.iter().map(|set| tlv(SET, &set.concat())).collect();
        tlv(SEQUENCE, &sets.concat())
    }

    fn attribute(&mut self, shapes: &mut Vec<String>) -> Vec<u8> {
        let oid = *[oid::CN, oid::CN, oid::CN, oid::O, oid::O, oid::UID, oid::OU]
            .choose(&mut self.rng)
            .expect("an OID");
        let values: &[&[u8]] = &[
            b"alice",
            b"system:masters",
            b"team-a",
            b"",
            b"caf\xc3\xa9",
            b"a_b",
            b"a b",
            b"x*&",
            b"bob",
            b"ops",
        ];
        let value = *values.choose(&mut self.rng).expect("a value");
        let (tag, bytes, what): (u8, Vec<u8>, &str) = match self.pick(Part::Subject, 12) {
            0 => (PRINTABLE_STRING, value.to_vec(), "PrintableString"),
            1 => (T61_STRING, b"caf\xe9".to_vec(), "T61String"),
            2 => (
                BMP_STRING,
                value.iter().flat_map(|&b| [0, b]).collect(),
                "BMPString",
            ),
            3 => (BMP_STRING, vec![0xd8, 0x00], "BMPString with a surrogate"),
            4 => (IA5_STRING, value.to_vec(), "IA5String"),
            5 => (UTF8_STRING, b"a\xff".to_vec(), "UTF8String not UTF-8"),
            6 => (NUMERIC_STRING, b"12 3".to_vec(), "NumericString"),
            7 => (0x1a, value.to_vec(), "VisibleString"),
            8 => (BMP_STRING, vec![0, b'a', 0], "BMPString of odd length"),
            _ => (UTF8_STRING, value.to_vec(), ""),
        };
        if !what.is_empty() {
            shapes.push(format!("leaf: subject attribute as {what}"));
        }
        attr(oid, tag, &bytes)
    }

    fn extensions(
        &mut self,
        draft: &mut Draft,
        issuer: &Authority,
        constrained: bool,
        shapes: &mut Vec<String>,
    ) {
        let mut extensions = Vec::new();
        let mut note = |s: &str| shapes.push(format!("leaf: {s}"));
        let unusual = self.unusual(Part::Extensions);
        match self.rng.random_range(0..12) {
            0 | 3 if !unusual => {}
            0 => {
                note("basic constraints cA true");
                extensions.push(extension(
                    oid::BASIC_CONSTRAINTS,
                    true,
                    &tlv(SEQUENCE, &tlv(BOOLEAN, &[0xff])),
                ));
            }
            1 | 2 => extensions.push(extension(oid::BASIC_CONSTRAINTS, true, &tlv(SEQUENCE, &[]))),
            3 => {
                note("basic constraints malformed");
                extensions.push(extension(
                    oid::BASIC_CONSTRAINTS,
                    true,
                    &tlv(SEQUENCE, &tlv(BOOLEAN, &[0x01])),
                ));
            }
            _ => {}
        }
        if self.rng.random_bool(0.5) {
            let bits: u8 = self.rng.random();
            extensions.push(extension(
                oid::KEY_USAGE,
                self.rng.random_bool(0.5),
                &tlv(BIT_STRING, &[0, bits]),
            ));
        }
        let ekus: Option<(&str, Vec<&[u8]>)> = match self.rng.random_range(0..14) {
            4..=8 if !unusual => None,
            0..=3 => Some(("", vec![oid::CLIENT_AUTH])),
            4 => Some(("extended key usage serverAuth only", vec![oid::SERVER_AUTH])),
            5 => Some(("extended key usage any", vec![oid::ANY_EKU])),
            6 => Some(("extended key usage empty", vec![])),
            7 => Some(("extended key usage unknown only", vec![oid::UNKNOWN])),
            8 => Some((
                "extended key usage serverAuth and clientAuth",
                vec![oid::SERVER_AUTH, oid::CLIENT_AUTH],
            )),
            _ => None,
        };
        if let Some((what, ekus)) = ekus {
            if !what.is_empty() {
                note(what);
            }
            let list: Vec<u8> = ekus.iter().flat_map(|o| tlv(OID, o)).collect();
            extensions.push(extension(oid::EXT_KEY_USAGE, false, &tlv(SEQUENCE, &list)));
        }
        match self.rng.random_range(0..10) {
            0 | 1 if !unusual => {}
            0 => {
                note("authority key identifier that matches no CA");
                extensions.push(extension(
                    oid::AUTHORITY_KEY_ID,
                    false,
                    &tlv(SEQUENCE, &tlv(0x80, &[1, 2, 3])),
                ));
            }
            1 => {
                note("authority key identifier critical");
                extensions.push(extension(
                    oid::AUTHORITY_KEY_ID,
                    true,
                    &tlv(SEQUENCE, &tlv(0x80, &issuer.skid)),
                ));
            }
            2..=6 => extensions.push(extension(
                oid::AUTHORITY_KEY_ID,
                false,
                &tlv(SEQUENCE, &tlv(0x80, &issuer.skid)),
            )),
            _ => {}
        }
        if self.rng.random_bool(0.3) {
            extensions.push(extension(
                oid::SUBJECT_KEY_ID,
                false,
                &tlv(OCTET_STRING, &[9; 20]),
            ));
        }
        let names_unusual = self.unusual(Part::Names);
        let san: Option<(&str, Vec<u8>, bool)> = match self.rng.random_range(0..30) {
            3 | 5..=7 | 9 if !names_unusual => None,
            0 => Some(("a DNS SAN", tlv(0x82, b"client.example.com"), false)),
            1 => Some(("an email SAN", tlv(0x81, b"alice@example.com"), false)),
            2 => Some(("an IP SAN", tlv(0x87, &[127, 0, 0, 1]), false)),
            3 => Some(("an IP SAN of 5 bytes", tlv(0x87, &[1, 2, 3, 4, 5]), false)),
            4 => Some((
                "a SPIFFE URI SAN",
                tlv(0x86, b"spiffe://cluster.local/ns/a/sa/b"),
                false,
            )),
            5 => Some((
                "a URI SAN Go cannot parse",
                tlv(0x86, b"https://host/%zz"),
                false,
            )),
            6 => Some((
                "a URI SAN with a bad host",
                tlv(0x86, b"https://exa mple/"),
                false,
            )),
            7 => Some((
                "an otherName-only SAN, critical",
                tlv(
                    0xa0,
                    &[tlv(OID, oid::UNKNOWN), tlv(0xa0, &tlv(UTF8_STRING, b"x"))].concat(),
                ),
                true,
            )),
            8 => Some((
                "an otherName-only SAN",
                tlv(
                    0xa0,
                    &[tlv(OID, oid::UNKNOWN), tlv(0xa0, &tlv(UTF8_STRING, b"x"))].concat(),
                ),
                false,
            )),
            9 => Some((
                "a DNS SAN not IA5",
                tlv(0x82, b"caf\xc3\xa9.example"),
                false,
            )),
            10 => Some((
                "a URI SAN with an IPv6 host",
                tlv(0x86, b"https://[::1]:443/x"),
                false,
            )),
            11 => Some(("a URI SAN, urn", tlv(0x86, b"urn:uuid:6e8bc430"), false)),
            _ => None,
        };
        if let Some((what, names, critical)) = san {
            // Under name constraints Go would check these names, which
            // kube-fanout does not evaluate: left out (see the unit tests).
            if !constrained {
                note(what);
                extensions.push(extension(oid::SAN, critical, &tlv(SEQUENCE, &names)));
            }
        }
        match self.pick(Part::OtherExtensions, 14) {
            0 => {
                note("an unknown critical extension");
                extensions.push(extension(oid::UNKNOWN, true, &[0x05, 0x00]));
            }
            1 => {
                note("an unknown extension");
                extensions.push(extension(oid::UNKNOWN, false, &[0x05, 0x00]));
            }
            2 => {
                note("a duplicate extension");
                extensions.push(extension(oid::UNKNOWN, false, &[0x05, 0x00]));
                extensions.push(extension(oid::UNKNOWN, false, &[0x05, 0x00]));
            }
            3 => {
                note("an extension whose criticality is 0x01");
                extensions.push(tlv(
                    SEQUENCE,
                    &[
                        tlv(OID, oid::UNKNOWN),
                        tlv(BOOLEAN, &[0x01]),
                        tlv(OCTET_STRING, &[5, 0]),
                    ]
                    .concat(),
                ));
            }
            4 => {
                note("an extension criticality FALSE written out");
                extensions.push(tlv(
                    SEQUENCE,
                    &[
                        tlv(OID, oid::UNKNOWN),
                        tlv(BOOLEAN, &[0x00]),
                        tlv(OCTET_STRING, &[5, 0]),
                    ]
                    .concat(),
                ));
            }
            5 => {
                note("an extension without a value");
                extensions.push(tlv(SEQUENCE, &tlv(OID, oid::UNKNOWN)));
            }
            6 => {
                note("certificate policies with a duplicate");
                let p = tlv(SEQUENCE, &tlv(OID, &[0x2a, 0x03]));
                extensions.push(extension(
                    oid::CERTIFICATE_POLICIES,
                    false,
                    &tlv(SEQUENCE, &[p.clone(), p].concat()),
                ));
            }
            7 => {
                note("inhibit any policy");
                extensions.push(extension(
                    oid::INHIBIT_ANY_POLICY,
                    false,
                    &tlv(INTEGER, &[1]),
                ));
            }
            8 => {
                note("an authority information access, critical");
                let aia = tlv(
                    SEQUENCE,
                    &tlv(
                        SEQUENCE,
                        &[
                            tlv(OID, &[0x2b, 6, 1, 5, 5, 7, 0x30, 1]),
                            tlv(0x86, b"http://ocsp"),
                        ]
                        .concat(),
                    ),
                );
                extensions.push(extension(oid::AIA, true, &aia));
            }
            9 => {
                note("CRL distribution points by a relative name");
                let dp = tlv(SEQUENCE, &tlv(SEQUENCE, &tlv(0xa0, &tlv(0xa1, &[]))));
                extensions.push(extension(oid::CRL_DP, false, &dp));
            }
            10 => {
                note("CRL distribution points");
                let dp = tlv(
                    SEQUENCE,
                    &tlv(SEQUENCE, &tlv(0xa0, &tlv(0xa0, &tlv(0x86, b"http://crl")))),
                );
                extensions.push(extension(oid::CRL_DP, false, &dp));
            }
            11 => {
                note("a key usage that is not a BIT STRING");
                extensions.push(extension(oid::KEY_USAGE, false, &tlv(OCTET_STRING, &[1])));
            }
            12 => {
                note("an empty extensions field");
                extensions.clear();
                draft.empty_extensions = true;
            }
            _ => {}
        }
        draft.extensions = extensions;
    }
}

/// A random positive serial of 1 to 20 bytes, minimally encoded.
fn positive_serial(rng: &mut StdRng) -> Vec<u8> {
    let len = rng.random_range(1..=19);
    let mut serial: Vec<u8> = (0..len).map(|_| rng.random()).collect();
    serial[0] = (serial[0] & 0x7f) | 0x01;
    serial
}

/// A signature algorithm `key` signs with, chosen at random.
fn key_algorithm(key: &Key, rng: &mut StdRng) -> Vec<u8> {
    key.algorithms().choose(rng).expect("an algorithm").clone()
}

/// An attribute of a name.
fn attr(oid: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
    tlv(SEQUENCE, &[tlv(OID, oid), tlv(tag, value)].concat())
}

/// A name of RDNs.
fn name_of(rdns: &[&[Vec<u8>]]) -> Vec<u8> {
    let sets: Vec<Vec<u8>> = rdns.iter().map(|set| tlv(SET, &set.concat())).collect();
    tlv(SEQUENCE, &sets.concat())
}

/// A validity of two UTCTimes (GeneralizedTime from 2050).
fn validity_of(not_before: i64, not_after: i64) -> Vec<u8> {
    let time = |at: i64| {
        let text = civil(at);
        if text.starts_with("20") && &text[..4] < "2050"
            || text.starts_with("19") && &text[..4] >= "1950"
        {
            tlv(0x17, &text.as_bytes()[2..])
        } else {
            tlv(0x18, text.as_bytes())
        }
    };
    tlv(SEQUENCE, &[time(not_before), time(not_after)].concat())
}

fn times(tag_before: u8, before: &[u8], tag_after: u8, after: &[u8]) -> Vec<u8> {
    tlv(
        SEQUENCE,
        &[tlv(tag_before, before), tlv(tag_after, after)].concat(),
    )
}

/// `YYYYMMDDhhmmssZ` of an instant (Howard Hinnant's `civil_from_days`).
fn civil(at: i64) -> String {
    let (days, secs) = (at.div_euclid(86_400), at.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}{:02}{:02}{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_are_written_as_utc_calendar_times() {
        assert_eq!(civil(0), "19700101000000Z");
        assert_eq!(civil(NOW), "20261201000000Z");
        assert_eq!(civil(951_868_799), "20000229235959Z");
    }

    /// Every generated certificate of the common shape parses as Go
    /// parses it (the generator writes what it means to).
    #[test]
    fn a_plain_case_parses() {
        let mut generator = Generator::new(7);
        let parsed = (0..50)
            .map(|_| generator.case())
            .filter(|c| c.shapes.is_empty())
            .all(|c| kube_fanout_x509::certificate::parse(&c.chain[0]).is_ok());
        assert!(parsed);
    }
}

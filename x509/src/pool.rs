//! A pool of certificates as Go's `x509.CertPool` keeps them: each one
//! once (by its bytes), found as a potential parent of a certificate by
//! its subject equal to the child's issuer, byte for byte, in the order
//! Go tries them: key identifiers that match first (both absent counts),
//! then those where only one side has one, then those that differ.

use std::sync::Arc;

use crate::certificate::Certificate;

/// Certificates, as roots or intermediates.
#[derive(Debug, Clone, Default)]
pub struct Pool {
    certificates: Vec<Arc<Certificate>>,
}

impl Pool {
    /// A pool of `certificates` (a repeated one kept once).
    pub fn new(certificates: impl IntoIterator<Item = Arc<Certificate>>) -> Self {
        let mut pool = Pool::default();
        for certificate in certificates {
            pool.add(certificate);
        }
        pool
    }

    /// Adds `certificate` unless it is in the pool already.
    pub fn add(&mut self, certificate: Arc<Certificate>) {
        if !self.contains(&certificate) {
            self.certificates.push(certificate);
        }
    }

    /// Whether `certificate` (these very bytes) is in the pool.
    pub fn contains(&self, certificate: &Certificate) -> bool {
        self.certificates.iter().any(|c| c.raw == certificate.raw)
    }

    /// How many certificates it holds.
    pub fn len(&self) -> usize {
        self.certificates.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.certificates.is_empty()
    }

    /// The certificates that may have issued `child`, in Go's order.
    pub fn potential_parents(&self, child: &Certificate) -> Vec<&Arc<Certificate>> {
        let akid = &child.extensions.authority_key_id;
        let mut matching = Vec::new();
        let mut one = Vec::new();
        let mut mismatching = Vec::new();
        for candidate in self
            .certificates
            .iter()
            .filter(|c| c.raw_subject == child.raw_issuer)
        {
            let skid = &candidate.extensions.subject_key_id;
            if skid == akid {
                matching.push(candidate);
            } else if skid.is_empty() != akid.is_empty() {
                one.push(candidate);
            } else {
                mismatching.push(candidate);
            }
        }
        matching.extend(one);
        matching.extend(mismatching);
        matching
    }
}

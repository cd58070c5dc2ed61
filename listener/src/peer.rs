//! The certificates a client presented at the handshake (taken, not yet
//! verified: see [`crate::tls`]), and their verification against the
//! client CA as the API server's x509 authenticator makes it at each
//! request ([`kube_fanout_x509::verify`]: the CA bundle and the clock of
//! the moment). A connection remembers its last answer, so that its
//! requests do not each pay the chain's signature checks: a chain that
//! verified is believed until the earliest notAfter in it or until the CA
//! bundle changes; a refusal is believed for at most [`REFUSAL_MEMORY`]
//! (a certificate not valid yet may become valid) and as long as the
//! bundle is the same.

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use kube_fanout_x509::{
    Certificate, Pool,
    verify::{self, Chain, Nanos, VerifyError},
};
use parking_lot::Mutex;

use crate::tls::ClientCa;

/// How long a connection believes that its certificates do not verify.
const REFUSAL_MEMORY: Duration = Duration::from_secs(1);

/// A client's certificates, leaf first, as parsed at the handshake.
#[derive(Debug)]
pub struct PeerCertificates {
    chain: Vec<Arc<Certificate>>,
    last: Mutex<Option<Verified>>,
}

/// The last verification: against which bundle, until when it holds, and
/// its answer.
#[derive(Debug, Clone)]
struct Verified {
    roots: Arc<Pool>,
    until: Nanos,
    answer: Result<Arc<Chain>, VerifyError>,
}

impl PeerCertificates {
    /// The certificates of a chain the handshake took.
    pub fn new(chain: Vec<Arc<Certificate>>) -> Option<Self> {
        (!chain.is_empty()).then(|| PeerCertificates {
            chain,
            last: Mutex::new(None),
        })
    }

    /// The leaf.
    pub fn leaf(&self) -> &Arc<Certificate> {
        &self.chain[0]
    }

    /// A chain from the leaf to a CA of `ca` valid at `now` for client
    /// authentication, or why there is none, as the API server's x509
    /// authenticator would answer now.
    pub fn verify(&self, ca: &ClientCa, now: SystemTime) -> Result<Arc<Chain>, VerifyError> {
        let roots = ca.current();
        let now = nanos(now);
        let mut last = self.last.lock();
        if let Some(held) = last.as_ref()
            && Arc::ptr_eq(&held.roots, &roots)
            && now <= held.until
        {
            return held.answer.clone();
        }
        let intermediates = Pool::new(self.chain[1..].iter().cloned());
        let answer = verify::verify(self.leaf(), &intermediates, &roots, now);
        let (answer, until) = match answer {
            Ok(mut chains) => {
                let chain = chains.swap_remove(0);
                let until = chain
                    .iter()
                    .map(|c| i128::from(c.not_after) * 1_000_000_000)
                    .min()
                    .unwrap_or(now);
                (Ok(Arc::new(chain)), until)
            }
            Err(err) => (Err(err), now + REFUSAL_MEMORY.as_nanos() as Nanos),
        };
        *last = Some(Verified {
            roots,
            until,
            answer: answer.clone(),
        });
        answer
    }
}

/// A wall-clock time in nanoseconds since the Unix epoch.
fn nanos(at: SystemTime) -> Nanos {
    match at.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => after.as_nanos() as Nanos,
        Err(before) => -(before.duration().as_nanos() as Nanos),
    }
}

//! Chain verification as Go's `Certificate.Verify` does it with the
//! options the API server's x509 authenticator gives (its client CA pool
//! as roots, the client's other certificates as intermediates, the
//! current time, the clientAuth key usage): every chain from the leaf to a
//! root is built, each certificate signed by the next (which must be
//! allowed to sign: a CA by its basic constraints unless it is a version 1
//! certificate, with keyCertSign if it has key usages at all), valid at
//! that time, without a critical extension Go does not act on, within the
//! path lengths its CAs allow, at most 100 signature checks in all; a
//! chain whose certificates' extended key usages exclude clientAuth is
//! dropped. A leaf that is itself in the pool is its own chain.
//!
//! Two parts of Go's rules are not evaluated here: certificate policies
//! under policy constraints or mappings to anyPolicy, and name
//! constraints over names in a subject alternative name below them. A
//! chain that would need either is refused ([`VerifyError::NotEvaluated`]):
//! stricter than the API server, never more permissive. Neither is found
//! in client CAs of Kubernetes clusters in practice.

use std::sync::Arc;

use crate::{
    certificate::Certificate,
    key::PublicKey,
    pool::Pool,
    signature::{self, SignatureError},
};

/// Nanoseconds since the Unix epoch.
pub type Nanos = i128;

/// The most signature checks one verification makes (Go's
/// `maxChainSignatureChecks`).
const MAX_SIGNATURE_CHECKS: usize = 100;

/// Go's `KeyUsageCertSign`.
const KEY_USAGE_CERT_SIGN: u16 = 1 << 5;

/// A chain from a leaf (first) to a root (last).
pub type Chain = Vec<Arc<Certificate>>;

/// Why a certificate does not verify, in Go's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// A critical extension Go does not act on.
    #[error("x509: unhandled critical extension")]
    UnhandledCriticalExtension,
    /// Outside a certificate's validity.
    #[error("x509: certificate has expired or is not yet valid: {0}")]
    Expired(String),
    /// An intermediate that is no CA.
    #[error("x509: a certificate in the chain is not authorized to sign other certificates")]
    NotAuthorizedToSign,
    /// More intermediates than a CA's path length allows.
    #[error("x509: too many intermediates for path length constraint")]
    TooManyIntermediates,
    /// No chain to a root.
    #[error("x509: certificate signed by unknown authority{}", .0.as_ref().map(|h| format!(" (possibly because of {h:?} while trying to verify candidate authority certificate)")).unwrap_or_default())]
    UnknownAuthority(Option<String>),
    /// Chains exist, but their key usages exclude client authentication.
    #[error("x509: certificate specifies an incompatible key usage")]
    IncompatibleUsage,
    /// Go's limit of signature checks was reached.
    #[error("x509: signature check attempts limit reached while verifying certificate chain")]
    SignatureLimit,
    /// A chain that needs a rule this verifier does not evaluate.
    #[error(
        "{0}: not evaluated by kube-fanout, which refuses rather than risk accepting what the API server refuses"
    )]
    NotEvaluated(&'static str),
}

/// Why a certificate cannot have signed another.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum ParentError {
    #[error("x509: invalid signature: parent certificate cannot sign this kind of certificate")]
    ConstraintViolation,
    #[error(transparent)]
    Signature(#[from] SignatureError),
}

/// Where a certificate sits in a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Leaf,
    Intermediate,
    Root,
}

/// The chains that make `leaf` valid at `now` for client authentication,
/// with `roots` trusted and `intermediates` offered.
pub fn verify(
    leaf: &Arc<Certificate>,
    intermediates: &Pool,
    roots: &Pool,
    now: Nanos,
) -> Result<Vec<Chain>, VerifyError> {
    let verifier = Verifier {
        intermediates,
        roots,
        now,
    };
    valid(leaf, Role::Leaf, &[], now)?;
    let candidates = if roots.contains(leaf) {
        vec![vec![leaf.clone()]]
    } else {
        let mut checks = 0;
        verifier.build(vec![leaf.clone()], &mut checks)?
    };
    let mut incompatible = false;
    let mut not_evaluated = None;
    let mut chains: Vec<Chain> = Vec::new();
    for chain in candidates {
        let unevaluated =
            policies_need_evaluation(&chain).or_else(|| constraints_need_evaluation(&chain));
        if !client_auth_allowed(&chain) {
            incompatible = true;
        } else if let Some(why) = unevaluated {
            not_evaluated.get_or_insert(why);
        } else {
            chains.push(chain);
        }
    }
    if !chains.is_empty() {
        return Ok(chains);
    }
    Err(match not_evaluated {
        Some(why) => VerifyError::NotEvaluated(why),
        None if incompatible => VerifyError::IncompatibleUsage,
        None => VerifyError::UnknownAuthority(None),
    })
}

struct Verifier<'a> {
    intermediates: &'a Pool,
    roots: &'a Pool,
    now: Nanos,
}

impl Verifier<'_> {
    /// Go's `buildChains`: every chain from `chain` (whose last
    /// certificate is the one to find a parent of) to a root.
    fn build(&self, chain: Chain, checks: &mut usize) -> Result<Vec<Chain>, VerifyError> {
        let child = chain.last().expect("a chain is never empty").clone();
        let mut chains = Vec::new();
        let mut failure: Option<VerifyError> = None;
        let mut hint: Option<String> = None;
        'candidates: for (role, pool) in [
            (Role::Root, self.roots),
            (Role::Intermediate, self.intermediates),
        ] {
            for candidate in pool.potential_parents(&child) {
                *checks += 1;
                if *checks > MAX_SIGNATURE_CHECKS {
                    failure = Some(VerifyError::SignatureLimit);
                    break 'candidates;
                }
                if matches!(candidate.public_key, PublicKey::Unknown)
                    || already_in(candidate, &chain)
                {
                    continue;
                }
                if let Err(e) = check_signature_from(&child, candidate) {
                    hint.get_or_insert_with(|| e.to_string());
                    continue;
                }
                if let Err(e) = valid(candidate, role, &chain, self.now) {
                    hint.get_or_insert_with(|| e.to_string());
                    continue;
                }
                let mut longer = chain.clone();
                longer.push(candidate.clone());
                match role {
                    Role::Root => chains.push(longer),
                    _ => match self.build(longer, checks) {
                        Ok(found) => chains.extend(found),
                        Err(VerifyError::SignatureLimit) => {
                            failure = Some(VerifyError::SignatureLimit);
                            break 'candidates;
                        }
                        Err(e) => failure = Some(e),
                    },
                }
            }
        }
        if !chains.is_empty() {
            return Ok(chains);
        }
        Err(failure.unwrap_or(VerifyError::UnknownAuthority(hint)))
    }
}

/// Go's `isValid` for `c` in `role`, `chain` being the certificates below
/// it.
fn valid(
    c: &Certificate,
    role: Role,
    chain: &[Arc<Certificate>],
    now: Nanos,
) -> Result<(), VerifyError> {
    if !c.extensions.unhandled_critical.is_empty() {
        return Err(VerifyError::UnhandledCriticalExtension);
    }
    let nanos = |s: i64| i128::from(s) * 1_000_000_000;
    if now < nanos(c.not_before) {
        return Err(VerifyError::Expired(format!(
            "the current time is before its notBefore ({}s after the Unix epoch)",
            c.not_before
        )));
    }
    if now > nanos(c.not_after) {
        return Err(VerifyError::Expired(format!(
            "the current time is after its notAfter ({}s after the Unix epoch)",
            c.not_after
        )));
    }
    let ext = &c.extensions;
    if role == Role::Intermediate && (!ext.basic_constraints_valid || !ext.is_ca) {
        return Err(VerifyError::NotAuthorizedToSign);
    }
    if ext.basic_constraints_valid
        && let Some(max) = ext.max_path_len
        && chain.len().saturating_sub(1) as u64 > max
    {
        return Err(VerifyError::TooManyIntermediates);
    }
    Ok(())
}

/// Go's `CheckSignatureFrom`.
fn check_signature_from(child: &Certificate, parent: &Certificate) -> Result<(), ParentError> {
    let ext = &parent.extensions;
    if (parent.version == 3 && !ext.basic_constraints_valid)
        || (ext.basic_constraints_valid && !ext.is_ca)
    {
        return Err(ParentError::ConstraintViolation);
    }
    if ext.key_usage != 0 && ext.key_usage & KEY_USAGE_CERT_SIGN == 0 {
        return Err(ParentError::ConstraintViolation);
    }
    Ok(signature::check(
        child.signature_algorithm,
        &child.raw_tbs,
        &child.signature,
        &parent.public_key,
    )?)
}

/// Go's `alreadyInChain`: the same subject, key and SAN as one in it.
fn already_in(candidate: &Certificate, chain: &[Arc<Certificate>]) -> bool {
    let san = candidate.extension(crate::extensions::SUBJECT_ALT_NAME);
    chain.iter().any(|c| {
        c.raw_subject == candidate.raw_subject
            && c.raw_spki == candidate.raw_spki
            && c.extension(crate::extensions::SUBJECT_ALT_NAME) == san
    })
}

/// Go's `checkChainForKeyUsage` for clientAuth: every certificate that
/// lists extended key usages lists clientAuth or anyExtendedKeyUsage.
fn client_auth_allowed(chain: &[Arc<Certificate>]) -> bool {
    chain.iter().all(|c| {
        let usage = c.extensions.ext_key_usage;
        !usage.listed || usage.any || usage.client_auth
    })
}

/// Why Go's policy validation could refuse `chain`, if it could: only a
/// policy constraints' requireExplicitPolicy below the root, or a
/// mapping to or from anyPolicy in an intermediate, can make it refuse
/// when, as for the API server, any policy is acceptable.
fn policies_need_evaluation(chain: &[Arc<Certificate>]) -> Option<&'static str> {
    const ANY_POLICY: &[u8] = &[0x55, 0x1d, 0x20, 0x00];
    if chain.len() < 2 {
        return None;
    }
    let below_root = &chain[..chain.len() - 1];
    if below_root
        .iter()
        .any(|c| c.extensions.require_explicit_policy.is_some())
    {
        return Some("a policy constraints extension requiring an explicit policy");
    }
    let intermediates = &below_root[1..];
    intermediates
        .iter()
        .any(|c| {
            c.extensions
                .policy_mappings
                .iter()
                .any(|(issuer, subject)| issuer == ANY_POLICY || subject == ANY_POLICY)
        })
        .then_some("a policy mapping of anyPolicy")
}

/// Why Go's name constraints could refuse `chain`, if they could: only a
/// certificate with a SAN extension below a certificate with name
/// constraints is checked against them.
fn constraints_need_evaluation(chain: &[Arc<Certificate>]) -> Option<&'static str> {
    let constrained = chain.iter().rposition(|c| c.has_name_constraints())?;
    chain[..constrained]
        .iter()
        .any(|c| c.has_san_extension())
        .then_some("name constraints over a subject alternative name")
}

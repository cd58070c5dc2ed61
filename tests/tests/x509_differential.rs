//! kube-fanout's client certificate rules against Go's: generated chains
//! ([`kube_fanout_tests::certgen`]) go to the x509 oracle (tests/x509oracle,
//! Go's crypto/x509 and the API server's own x509 authenticator) and to
//! kube-fanout's reader (`kube_fanout_x509` and the auth crate's mapping,
//! the functions the server runs), and every answer must be the same:
//! whether the CA bundle loads, whether the TLS handshake takes the chain,
//! and then the user, UID, groups and extra the chain names, or that it
//! names none, or that it does not verify.
//!
//! CI runs a bounded number of cases from a fixed seed. For longer runs:
//!
//! ```text
//! KUBE_FANOUT_X509_CASES=100000 KUBE_FANOUT_X509_SEED=random \
//!   cargo test -p kube-fanout-tests --test x509_differential -- --nocapture
//! ```

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Write},
    process::{Command, Stdio},
    sync::Arc,
};

use anyhow::{Context, Result};
use base64::Engine;
use kube_fanout_auth::x509::{CertificateUser, NoUser, user_of};
use kube_fanout_tests::certgen::{Case, Generator, oracle};
use kube_fanout_x509::{Pool, certificate, handshake, verify};
use serde::{Deserialize, Serialize};

/// Cases a run makes unless `KUBE_FANOUT_X509_CASES` says otherwise.
const CI_CASES: usize = 600;

/// The seed unless `KUBE_FANOUT_X509_SEED` says otherwise (`random`: one
/// from the clock, printed).
const CI_SEED: u64 = 20_261_207;

/// A user, as the oracle writes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
struct User {
    name: String,
    uid: String,
    groups: Option<Vec<String>>,
    extra: Option<BTreeMap<String, Vec<String>>>,
}

/// What the API server does with a case.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    /// The CA bundle does not load.
    roots_refused: bool,
    /// The handshake refuses the chain.
    handshake_refused: bool,
    /// The user the chain names.
    user: Option<User>,
    /// The authenticator failed (a chain that does not verify, a bad UID).
    failed: bool,
}

#[derive(Serialize)]
struct Request<'a> {
    id: usize,
    chain: Vec<String>,
    roots: Vec<String>,
    now: i64,
    #[serde(skip)]
    _case: Option<&'a Case>,
}

#[derive(Deserialize)]
struct Reply {
    id: usize,
    roots: String,
    handshake: String,
    user: Option<User>,
    error: String,
}

/// Go's answers to `cases`, from one run of the oracle.
fn go_answers(cases: &[Case]) -> Result<Vec<Answer>> {
    let mut child = Command::new(oracle()?)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the x509 oracle")?;
    let mut stdin = child.stdin.take().context("the oracle's stdin")?;
    let b64 = |der: &Vec<u8>| base64::engine::general_purpose::STANDARD.encode(der);
    let requests: Vec<String> = cases
        .iter()
        .map(|case| {
            serde_json::to_string(&Request {
                id: case.id,
                chain: case.chain.iter().map(b64).collect(),
                roots: case.roots.iter().map(b64).collect(),
                now: i64::try_from(case.now).expect("a time in range"),
                _case: None,
            })
        })
        .collect::<Result<_, _>>()?;
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        for line in requests {
            writeln!(stdin, "{line}")?;
        }
        Ok(())
    });
    let mut answers = Vec::with_capacity(cases.len());
    for line in BufReader::new(child.stdout.take().context("the oracle's stdout")?).lines() {
        let reply: Reply = serde_json::from_str(&line?)?;
        anyhow::ensure!(reply.id == answers.len(), "answers out of order");
        answers.push(Answer {
            roots_refused: !reply.roots.is_empty(),
            handshake_refused: !reply.handshake.is_empty(),
            user: reply.user,
            failed: !reply.error.is_empty(),
        });
    }
    writer.join().expect("the writer")?;
    anyhow::ensure!(child.wait()?.success(), "the x509 oracle failed");
    anyhow::ensure!(
        answers.len() == cases.len(),
        "the oracle answered {} of {} cases",
        answers.len(),
        cases.len()
    );
    Ok(answers)
}

/// How kube-fanout reads a chain: the handshake's rules, then the
/// authenticator's verification and mapping (at `now`).
type Reader = fn(&Case) -> Answer;

/// kube-fanout's answer, by the functions the server runs.
fn fanout_answer(case: &Case) -> Answer {
    fanout_answer_at(case, case.now)
}

fn fanout_answer_at(case: &Case, now: i128) -> Answer {
    let mut answer = Answer {
        roots_refused: false,
        handshake_refused: false,
        user: None,
        failed: false,
    };
    let roots: Result<Vec<_>, _> = case
        .roots
        .iter()
        .map(|der| certificate::parse(der).map(Arc::new))
        .collect();
    let Ok(roots) = roots else {
        answer.roots_refused = true;
        return answer;
    };
    let roots = Pool::new(roots);
    let Ok(chain) = handshake::client_chain(case.chain.iter().map(Vec::as_slice)) else {
        answer.handshake_refused = true;
        return answer;
    };
    let intermediates = Pool::new(chain[1..].iter().cloned());
    if verify::verify(&chain[0], &intermediates, &roots, now).is_err() {
        answer.failed = true;
        return answer;
    }
    match user_of(&chain[0]) {
        CertificateUser::User(identity) => {
            answer.user = Some(User {
                name: identity.user,
                uid: identity.uid,
                groups: Some(identity.groups),
                extra: Some(identity.extra),
            });
        }
        CertificateUser::NoUser(NoUser::NoCommonName) => {}
        CertificateUser::NoUser(NoUser::SeveralUids(_) | NoUser::EmptyUid) => answer.failed = true,
    }
    answer
}

/// The cases of a run: how many and from which seed, as the environment
/// says.
fn cases() -> Result<Vec<Case>> {
    let count = match std::env::var("KUBE_FANOUT_X509_CASES") {
        Ok(n) => n.parse().context("KUBE_FANOUT_X509_CASES")?,
        Err(_) => CI_CASES,
    };
    let seed = match std::env::var("KUBE_FANOUT_X509_SEED").as_deref() {
        Ok("random") => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos() as u64,
        Ok(seed) => seed.parse().context("KUBE_FANOUT_X509_SEED")?,
        Err(_) => CI_SEED,
    };
    println!("{count} cases from seed {seed}");
    let mut generator = Generator::new(seed);
    Ok((0..count).map(|_| generator.case()).collect())
}

/// Where `read` and Go answer differently, one line each.
fn differences(cases: &[Case], go: &[Answer], read: Reader) -> Vec<String> {
    cases
        .iter()
        .zip(go)
        .filter_map(|(case, theirs)| {
            let ours = read(case);
            (ours != *theirs).then(|| {
                format!(
                    "case {} ({}): Go {theirs:?}, kube-fanout {ours:?}",
                    case.id,
                    case.shapes.join("; ")
                )
            })
        })
        .collect()
}

#[test]
fn generated_chains_get_the_api_servers_answer() -> Result<()> {
    let cases = cases()?;
    let go = go_answers(&cases)?;
    let users = go.iter().filter(|a| a.user.is_some()).count();
    let handshakes = go.iter().filter(|a| a.handshake_refused).count();
    let failed = go.iter().filter(|a| a.failed).count();
    println!(
        "Go: {users} users, {failed} chains that do not verify, {handshakes} refused at the handshake, of {}",
        cases.len()
    );
    let differences = differences(&cases, &go, fanout_answer);
    assert!(
        differences.is_empty(),
        "{} differences:\n{}",
        differences.len(),
        differences.join("\n")
    );
    // Every outcome is exercised, or the run proves little.
    assert!(users * 5 >= cases.len(), "only {users} users");
    assert!(failed >= cases.len() / 20 && handshakes >= cases.len() / 20);
    Ok(())
}

/// The comparison catches a reader that departs from Go's rules: one
/// that takes the first CN for the user, and one that verifies at a time
/// within the leaf's validity (so ignores expiry).
#[test]
fn a_planted_divergence_is_caught() -> Result<()> {
    let mut generator = Generator::new(CI_SEED);
    let cases: Vec<Case> = (0..300).map(|_| generator.case()).collect();
    let go = go_answers(&cases)?;
    fn first_cn(case: &Case) -> Answer {
        let mut answer = fanout_answer(case);
        if let Some(user) = &mut answer.user
            && let Ok(leaf) = certificate::parse(&case.chain[0])
            && let Some(first) = leaf
                .subject
                .values(kube_fanout_x509::name::COMMON_NAME)
                .find(|v| !v.is_empty())
        {
            user.name = first.to_owned();
        }
        answer
    }
    fn no_expiry(case: &Case) -> Answer {
        match certificate::parse(&case.chain[0]) {
            Ok(leaf) => fanout_answer_at(case, i128::from(leaf.not_before) * 1_000_000_000),
            Err(_) => fanout_answer(case),
        }
    }
    for (what, reader) in [
        ("the first CN", first_cn as Reader),
        ("no expiry", no_expiry as Reader),
    ] {
        let found = differences(&cases, &go, reader);
        println!(
            "{what}: {} differences, e.g. {:?}",
            found.len(),
            found.first()
        );
        assert!(!found.is_empty(), "{what}: not caught");
    }
    Ok(())
}

//! A verified client certificate's user, exactly as the API server derives
//! it, so that a certificate is the same user here as there.
//!
//! The API server (k8s.io/apiserver `x509.CommonNameUserConversion`, v1.36)
//! reads the leaf's subject with Go's crypto/x509: the user is the
//! subject's *last* CN (`pkix.Name.FillFromRDNSequence` overwrites it at
//! each one, over every RDN, multi-valued ones included), the groups are
//! every O in order, the UID is the one UID attribute (OID
//! 1.3.6.1.4.1.57683.2, the `AllowParsingUserUIDFromCertAuth` feature, on
//! by default since 1.33), and the extra
//! `authentication.kubernetes.io/credential-id` is `X509SHA256=<hex of the
//! certificate's SHA-256>`. An empty CN is no user: the API server goes on
//! to other credentials (a bearer token); so it does for a subject with
//! several UIDs or an empty one. `system:authenticated` is added as the
//! API server's group adder does.
//!
//! The certificate was taken at the handshake and its chain verified (both
//! by the API server's rules: `kube_fanout_x509`) before this is asked.

use kube_fanout_x509::{
    Certificate,
    name::{ORGANIZATION, UID},
};

use crate::identity::{Identity, with_authenticated_group};

/// The extra key the API server puts a credential's ID under.
pub const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// What a verified client certificate makes of its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateUser {
    /// The user the API server derives from it.
    User(Identity),
    /// No user: the API server's certificate authenticator passes, and the
    /// request's other credentials (a bearer token) decide.
    NoUser(NoUser),
}

/// Why a certificate names no user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoUser {
    /// No CN, or the last one is empty.
    #[error("its subject has no common name (CN), or its last one is empty")]
    NoCommonName,
    /// More than one UID attribute.
    #[error("its subject has {0} UID attributes (1.3.6.1.4.1.57683.2); at most one is accepted")]
    SeveralUids(usize),
    /// An empty UID attribute.
    #[error("its subject's UID attribute (1.3.6.1.4.1.57683.2) is empty")]
    EmptyUid,
}

/// The user the leaf of a verified chain names, as the API server's
/// `CommonNameUserConversion` and group adder derive it.
pub fn user_of(leaf: &Certificate) -> CertificateUser {
    let subject = &leaf.subject;
    let user = subject.common_name();
    if user.is_empty() {
        return CertificateUser::NoUser(NoUser::NoCommonName);
    }
    let uids: Vec<&str> = subject.values(UID).collect();
    let uid = match uids.as_slice() {
        [] => "",
        [""] => return CertificateUser::NoUser(NoUser::EmptyUid),
        [uid] => uid,
        several => return CertificateUser::NoUser(NoUser::SeveralUids(several.len())),
    };
    let groups = subject.values(ORGANIZATION).map(str::to_owned).collect();
    let fingerprint = ring::digest::digest(&ring::digest::SHA256, &leaf.raw);
    let hex: String = fingerprint
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    CertificateUser::User(Identity {
        groups: with_authenticated_group(user, groups),
        user: user.to_owned(),
        uid: uid.to_owned(),
        extra: [(CREDENTIAL_ID.to_owned(), vec![format!("X509SHA256={hex}")])].into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::AUTHENTICATED_GROUP;
    use kube_fanout_x509::name::COMMON_NAME;

    /// One DER element (lengths of any size, in their shortest form).
    fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
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

    const SEQUENCE: u8 = 0x30;
    const UTF8_STRING: u8 = 0x0c;
    const PRINTABLE_STRING: u8 = 0x13;

    /// An attribute: its type's DER contents, a value tag and bytes.
    fn attr(oid: &[u8], value_tag: u8, value: &[u8]) -> Vec<u8> {
        tlv(SEQUENCE, &[tlv(0x06, oid), tlv(value_tag, value)].concat())
    }

    fn cn(value: &str) -> Vec<u8> {
        attr(COMMON_NAME, UTF8_STRING, value.as_bytes())
    }

    fn o(value: &str) -> Vec<u8> {
        attr(ORGANIZATION, UTF8_STRING, value.as_bytes())
    }

    /// A name of RDNs, each a set of attributes.
    fn name(rdns: &[&[Vec<u8>]]) -> Vec<u8> {
        let sets: Vec<Vec<u8>> = rdns.iter().map(|set| tlv(0x31, &set.concat())).collect();
        tlv(SEQUENCE, &sets.concat())
    }

    /// A parsed certificate with `subject` (unsigned: only the subject
    /// and the bytes are read here).
    fn certificate(subject: &[u8]) -> Certificate {
        let algorithm = tlv(
            SEQUENCE,
            &tlv(0x06, &[0x2a, 0x86, 0x48, 0xce, 0x3d, 4, 3, 2]),
        );
        let time = tlv(0x17, b"260101000000Z");
        let key = rcgen::KeyPair::generate().unwrap();
        let tbs = tlv(
            SEQUENCE,
            &[
                tlv(0xa0, &tlv(0x02, &[2])),
                tlv(0x02, &[1]),
                algorithm.clone(),
                name(&[&[cn("ca")]]),
                tlv(SEQUENCE, &[time.clone(), time].concat()),
                subject.to_vec(),
                rcgen::PublicKeyData::subject_public_key_info(&key),
            ]
            .concat(),
        );
        let der = tlv(SEQUENCE, &[tbs, algorithm, tlv(0x03, &[0])].concat());
        kube_fanout_x509::certificate::parse(&der).unwrap()
    }

    fn user(subject: &[u8]) -> Identity {
        match user_of(&certificate(subject)) {
            CertificateUser::User(identity) => identity,
            other => panic!("no user: {other:?}"),
        }
    }

    fn no_user(subject: &[u8]) -> NoUser {
        match user_of(&certificate(subject)) {
            CertificateUser::NoUser(why) => why,
            other => panic!("{other:?}"),
        }
    }

    fn groups(names: &[&str]) -> Vec<String> {
        names
            .iter()
            .copied()
            .chain([AUTHENTICATED_GROUP])
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn the_last_cn_is_the_user_and_every_o_a_group_over_every_rdn() {
        // CN=cm-reader,CN=mallory: Go keeps the last.
        let two = user(&name(&[&[cn("cm-reader")], &[cn("mallory")]]));
        assert_eq!(two.user, "mallory");
        assert_eq!(two.groups, groups(&[]));
        let multi = user(&name(&[
            &[o("b"), cn("first")],
            &[cn("second"), o("a"), cn("third")],
            &[],
            &[o("c"), o("")],
        ]));
        assert_eq!(multi.user, "third");
        assert_eq!(multi.groups, groups(&["b", "a", "c", ""]));
    }

    #[test]
    fn the_credential_id_is_the_certificates_sha256_and_the_uid_is_read() {
        let certificate = certificate(&name(&[
            &[cn("carol")],
            &[attr(UID, PRINTABLE_STRING, b"carol-uid")],
        ]));
        let CertificateUser::User(identity) = user_of(&certificate) else {
            panic!("no user");
        };
        assert_eq!(identity.uid, "carol-uid");
        let digest = ring::digest::digest(&ring::digest::SHA256, &certificate.raw);
        let id = identity.extra[CREDENTIAL_ID][0].clone();
        assert_eq!(id.len(), "X509SHA256=".len() + 64);
        assert!(id.starts_with("X509SHA256="), "{id}");
        let bytes: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&id[11 + 2 * i..13 + 2 * i], 16).unwrap())
            .collect();
        assert_eq!(bytes, digest.as_ref());
    }

    #[test]
    fn no_cn_an_empty_last_cn_or_a_bad_uid_is_no_user() {
        assert_eq!(no_user(&name(&[&[o("team")]])), NoUser::NoCommonName);
        assert_eq!(no_user(&name(&[])), NoUser::NoCommonName);
        // The first CN is not a fallback: Go's CommonName is the last one.
        assert_eq!(
            no_user(&name(&[&[cn("cm-reader")], &[cn("")]])),
            NoUser::NoCommonName
        );
        let uid = |v: &str| attr(UID, UTF8_STRING, v.as_bytes());
        assert_eq!(
            no_user(&name(&[&[cn("a"), uid("1")], &[uid("2")]])),
            NoUser::SeveralUids(2)
        );
        assert_eq!(no_user(&name(&[&[cn("a"), uid("")]])), NoUser::EmptyUid);
        // No CN is checked first, as Go does: no error for the UIDs then.
        assert_eq!(
            no_user(&name(&[&[uid("1"), uid("2")]])),
            NoUser::NoCommonName
        );
    }

    #[test]
    fn system_authenticated_is_added_as_the_api_servers_group_adder_does() {
        let adder = |cn_value: &str, o_values: &[&str]| {
            let mut set = vec![cn(cn_value)];
            set.extend(o_values.iter().map(|g| o(g)));
            user(&name(&[&set])).groups
        };
        assert_eq!(adder("a", &["x"]), groups(&["x"]));
        // Not again, not for an O of system:unauthenticated, not for
        // system:anonymous.
        assert_eq!(adder("a", &[AUTHENTICATED_GROUP]), [AUTHENTICATED_GROUP]);
        assert_eq!(
            adder("a", &["system:unauthenticated"]),
            ["system:unauthenticated"]
        );
        assert_eq!(adder("system:anonymous", &["x"]), ["x"]);
    }
}

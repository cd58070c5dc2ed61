//! Who a caller is, as the API server describes users, and the group
//! every authenticated one is in.

use std::collections::BTreeMap;

/// An authenticated caller, as the API server describes users.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Identity {
    /// The user name.
    pub user: String,
    /// The user's UID, if the authenticator gave one.
    pub uid: String,
    /// The groups, `system:authenticated` included.
    pub groups: Vec<String>,
    /// Extra attributes (for ServiceAccount tokens: the pod and node bound
    /// to the token), passed on to authorization as the API server does.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The group every authenticated user is in, as the API server adds it.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// `groups` with [`AUTHENTICATED_GROUP`] added as the API server's
/// authenticated-group adder does: not for `system:anonymous`, and not
/// when the groups already hold it or `system:unauthenticated`.
pub fn with_authenticated_group(user: &str, mut groups: Vec<String>) -> Vec<String> {
    let marked = groups
        .iter()
        .any(|g| g == AUTHENTICATED_GROUP || g == "system:unauthenticated");
    if user != "system:anonymous" && !marked {
        groups.push(AUTHENTICATED_GROUP.to_owned());
    }
    groups
}

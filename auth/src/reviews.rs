//! The two questions kube-fanout asks the API server: who holds this token
//! (TokenReview) and may this user do this (SubjectAccessReview). Traits so
//! the caching and re-checking above them can be tested without a server;
//! [`KubeReviews`] asks the real one.

use std::{fmt, time::Duration};

use futures::future::BoxFuture;
use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec, UserInfo},
    authorization::v1::{
        NonResourceAttributes as KubeNonResourceAttributes, ResourceAttributes,
        SubjectAccessReview, SubjectAccessReviewSpec,
    },
};
use kube::api::{Api, PostParams};

use crate::{
    attributes::Attributes,
    error::AuthError,
    identity::{Identity, with_authenticated_group},
    quote::quote,
};

/// The API server's answer about a token: who holds it, or why it is not
/// accepted.
pub type TokenVerdict = Result<Identity, String>;

/// The API server's answer about an access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessVerdict {
    /// Allowed.
    pub allowed: bool,
    /// The authorizer's reason (empty if it gave none).
    pub reason: String,
}

/// A request for a URL that is no resource, such as `/metrics`, as
/// SubjectAccessReview's `nonResourceAttributes` describe it. Both fields
/// are fixed by kube-fanout (the routes it serves), never taken from a
/// caller, so a cache keyed by them stays as small as the routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NonResourceAttributes {
    /// The HTTP verb in lower case, as RBAC's `verbs` (`get`).
    pub verb: &'static str,
    /// The URL path, as RBAC's `nonResourceURLs` (`/metrics`).
    pub path: &'static str,
}

/// Checks bearer tokens.
pub trait TokenReviewer: Send + Sync + fmt::Debug {
    /// Reviews `token` for `audiences` (none: the API server's own).
    fn review_token<'a>(
        &'a self,
        token: &'a str,
        audiences: &'a [String],
    ) -> BoxFuture<'a, Result<TokenVerdict, AuthError>>;
}

/// Checks accesses.
pub trait AccessReviewer: Send + Sync + fmt::Debug {
    /// Reviews whether `identity` may do `attributes`.
    fn review_access<'a>(
        &'a self,
        identity: &'a Identity,
        attributes: &'a Attributes,
    ) -> BoxFuture<'a, Result<AccessVerdict, AuthError>>;
}

/// Checks accesses to non-resource URLs.
pub trait NonResourceReviewer: Send + Sync + fmt::Debug {
    /// Reviews whether `identity` may do `attributes`.
    fn review_non_resource<'a>(
        &'a self,
        identity: &'a Identity,
        attributes: &'a NonResourceAttributes,
    ) -> BoxFuture<'a, Result<AccessVerdict, AuthError>>;
}

/// The API client reviews are made with: one of their own, built from the
/// same kube config as the reflectors' but with its own connection pool,
/// so that reviews (whose number callers drive) never hold up the
/// reflectors' requests, nor theirs the reviews.
#[derive(Clone)]
pub struct ReviewClient(pub kube::Client);

impl fmt::Debug for ReviewClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReviewClient(..)")
    }
}

/// Reviews made by the API server kube-fanout reflects. Its own identity
/// needs `create` on `tokenreviews` and `subjectaccessreviews`.
#[derive(Clone)]
pub struct KubeReviews {
    client: kube::Client,
    timeout: Duration,
}

impl fmt::Debug for KubeReviews {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeReviews")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl KubeReviews {
    /// Reviews through `client`, each given at most `timeout`.
    pub fn new(client: kube::Client, timeout: Duration) -> Self {
        KubeReviews { client, timeout }
    }

    async fn create<K>(&self, review: &'static str, object: &K) -> Result<K, AuthError>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::all(self.client.clone());
        let unavailable = |message: String| AuthError::Unavailable { review, message };
        match tokio::time::timeout(self.timeout, api.create(&PostParams::default(), object)).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(err)) => Err(unavailable(quote(&err.to_string()))),
            Err(_) => Err(unavailable(format!("no answer within {:?}", self.timeout))),
        }
    }
}

impl TokenReviewer for KubeReviews {
    fn review_token<'a>(
        &'a self,
        token: &'a str,
        audiences: &'a [String],
    ) -> BoxFuture<'a, Result<TokenVerdict, AuthError>> {
        Box::pin(async move {
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: token.to_owned(),
                    audiences: (!audiences.is_empty()).then(|| audiences.to_vec()),
                },
                ..TokenReview::default()
            };
            let status = self
                .create("TokenReview", &review)
                .await?
                .status
                .unwrap_or_default();
            if status.authenticated != Some(true) {
                let reason = status.error.unwrap_or_default();
                return Ok(Err(if reason.is_empty() {
                    "the API server did not authenticate it".to_owned()
                } else {
                    quote(&reason)
                }));
            }
            // The API server answers with the audiences the token is valid
            // for among those asked; none in common means another audience.
            let granted = status.audiences.unwrap_or_default();
            if !audiences.is_empty() && !granted.iter().any(|a| audiences.contains(a)) {
                return Ok(Err(format!(
                    "the token is not for any of the audiences {}",
                    quote(&audiences.join(", "))
                )));
            }
            Ok(Ok(reviewed_identity(status.user.unwrap_or_default())))
        })
    }
}

/// The identity a TokenReview reports. Its groups are the API server's
/// own, already through its authenticated-group adder; the same rule is
/// applied again (a no-op on the API server's answer) rather than adding
/// `system:authenticated` unconditionally, which would grant a token whose
/// groups say `system:unauthenticated` what authenticated users may do.
fn reviewed_identity(user: UserInfo) -> Identity {
    let name = user.username.unwrap_or_default();
    Identity {
        groups: with_authenticated_group(&name, user.groups.unwrap_or_default()),
        user: name,
        uid: user.uid.unwrap_or_default(),
        extra: user.extra.unwrap_or_default(),
    }
}

impl KubeReviews {
    /// Asks SubjectAccessReview whether `identity` may do what `what` (the
    /// review's resource or non-resource attributes) describes.
    async fn subject_access_review(
        &self,
        identity: &Identity,
        what: impl FnOnce(SubjectAccessReviewSpec) -> SubjectAccessReviewSpec,
    ) -> Result<AccessVerdict, AuthError> {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        let review = SubjectAccessReview {
            spec: what(SubjectAccessReviewSpec {
                user: some(&identity.user),
                uid: some(&identity.uid),
                groups: Some(identity.groups.clone()),
                extra: (!identity.extra.is_empty()).then(|| identity.extra.clone()),
                ..SubjectAccessReviewSpec::default()
            }),
            ..SubjectAccessReview::default()
        };
        let status = self
            .create("SubjectAccessReview", &review)
            .await?
            .status
            .unwrap_or_default();
        Ok(AccessVerdict {
            allowed: status.allowed && status.denied != Some(true),
            reason: status.reason.unwrap_or_default(),
        })
    }
}

impl AccessReviewer for KubeReviews {
    fn review_access<'a>(
        &'a self,
        identity: &'a Identity,
        attributes: &'a Attributes,
    ) -> BoxFuture<'a, Result<AccessVerdict, AuthError>> {
        Box::pin(async move {
            let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
            self.subject_access_review(identity, |spec| SubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(attributes.verb.as_str().to_owned()),
                    group: Some(attributes.group.clone()),
                    version: some(&attributes.version),
                    resource: Some(attributes.resource.clone()),
                    namespace: some(&attributes.namespace),
                    name: some(&attributes.name),
                    ..ResourceAttributes::default()
                }),
                ..spec
            })
            .await
        })
    }
}

impl NonResourceReviewer for KubeReviews {
    fn review_non_resource<'a>(
        &'a self,
        identity: &'a Identity,
        attributes: &'a NonResourceAttributes,
    ) -> BoxFuture<'a, Result<AccessVerdict, AuthError>> {
        Box::pin(
            self.subject_access_review(identity, |spec| SubjectAccessReviewSpec {
                non_resource_attributes: Some(KubeNonResourceAttributes {
                    verb: Some(attributes.verb.to_owned()),
                    path: Some(attributes.path.to_owned()),
                }),
                ..spec
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::AUTHENTICATED_GROUP;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            username: Some(name.to_owned()),
            groups: Some(groups.iter().map(|g| (*g).to_owned()).collect()),
            ..UserInfo::default()
        }
    }

    #[test]
    fn a_reviewed_token_keeps_the_api_servers_groups() {
        let sa = reviewed_identity(user(
            "system:serviceaccount:a:x",
            &["system:serviceaccounts", AUTHENTICATED_GROUP],
        ));
        assert_eq!(sa.groups, ["system:serviceaccounts", AUTHENTICATED_GROUP]);
        // A token the API server calls unauthenticated (a token file or a
        // webhook may say so) must not gain the authenticated users' rights.
        let unauthenticated = reviewed_identity(user("guest", &["system:unauthenticated"]));
        assert_eq!(unauthenticated.groups, ["system:unauthenticated"]);
        let bare = reviewed_identity(user("carol", &[]));
        assert_eq!(bare.groups, [AUTHENTICATED_GROUP]);
    }
}

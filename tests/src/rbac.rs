//! RBAC for the tests' callers: rules, subjects, and one grant (a Role or
//! ClusterRole bound to the subjects), and the wait for the API server's
//! authorizer to honour it (it learns bindings through an informer, a
//! moment after they are written).

use anyhow::Result;
use k8s_openapi::api::{
    core::v1::ConfigMap,
    rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject},
};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};

use crate::{controlplane::ControlPlane, eventually::eventually};

/// The API group of RBAC's own kinds and of User and Group subjects.
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// A rule allowing `verbs` on `resource` of the core group.
pub fn rule(verbs: &[&str], resource: &str) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec![resource.to_owned()]),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    }
}

/// The user `name` (a static token's user or a certificate's CN).
pub fn user(name: &str) -> Subject {
    named("User", name)
}

/// The group `name`.
pub fn group(name: &str) -> Subject {
    named("Group", name)
}

/// The ServiceAccount `namespace/name`.
pub fn service_account(namespace: &str, name: &str) -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: name.into(),
        namespace: Some(namespace.into()),
        ..Subject::default()
    }
}

fn named(kind: &str, name: &str) -> Subject {
    Subject {
        kind: kind.into(),
        name: name.into(),
        api_group: Some(RBAC_GROUP.into()),
        ..Subject::default()
    }
}

/// A Role named `name` in `namespace` with `rules`, bound there to
/// `subjects` by a RoleBinding of the same name; with `namespace` empty, a
/// ClusterRole bound cluster-wide by a ClusterRoleBinding.
pub async fn grant(
    admin: &kube::Client,
    namespace: &str,
    name: &str,
    rules: Vec<PolicyRule>,
    subjects: Vec<Subject>,
) -> Result<()> {
    let metadata = ObjectMeta {
        name: Some(name.into()),
        ..ObjectMeta::default()
    };
    let role_ref = |kind: &str| RoleRef {
        api_group: Some(RBAC_GROUP.into()),
        kind: kind.into(),
        name: name.into(),
    };
    if namespace.is_empty() {
        let role = ClusterRole {
            metadata: metadata.clone(),
            rules: Some(rules),
            ..ClusterRole::default()
        };
        create(Api::all(admin.clone()), &role).await?;
        let binding = ClusterRoleBinding {
            metadata,
            role_ref: role_ref("ClusterRole"),
            subjects: Some(subjects),
        };
        create(Api::all(admin.clone()), &binding).await
    } else {
        let role = Role {
            metadata: metadata.clone(),
            rules: Some(rules),
        };
        create(Api::namespaced(admin.clone(), namespace), &role).await?;
        let binding = RoleBinding {
            metadata,
            role_ref: role_ref("Role"),
            subjects: Some(subjects),
        };
        create(Api::namespaced(admin.clone(), namespace), &binding).await
    }
}

async fn create<K>(api: Api<K>, object: &K) -> Result<()>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.create(&PostParams::default(), object).await?;
    Ok(())
}

/// Waits until the API server itself lets `token` list configmaps in
/// `namespace` (`params` narrowing the list, as a grant of only some
/// names needs).
pub async fn until_api_server_lists(
    cp: &ControlPlane,
    token: &str,
    namespace: &str,
    params: &ListParams,
) -> Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(cp.client_with_token(token)?, namespace);
    eventually(format!(
        "the API server allowing the grant to list configmaps in {namespace:?}"
    ))
    .within(std::time::Duration::from_secs(20))
    .until_ok(async || api.list(params).await)
    .await?;
    Ok(())
}

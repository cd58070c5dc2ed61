//! [`Api`], the typed handle on one resource type that mirrors
//! `kube::Api`, and the naming and decoding of resource types' objects.

use kube::{Resource, core::ObjectList};
use kube_fanout_proto::GroupVersionResource;
use serde::de::DeserializeOwned;

use crate::{
    client::Client,
    error::ClientError,
    proto::{GetRequest, ListRequest, ResourceRef},
};

/// Parses `v1/configmaps` or `apps/v1/deployments`, exactly as the server
/// parses its `--resource` flags.
pub fn resource(name: &str) -> Result<ResourceRef, ClientError> {
    Ok(name.parse::<GroupVersionResource>()?.into())
}

/// One resource type served by kube-fanout, in all namespaces or in one,
/// with the constructors of `kube::Api`: switching a watcher over means
/// changing which `Api` it is given.
#[derive(Debug, Clone)]
pub struct Api<K> {
    pub(crate) client: Client,
    pub(crate) resource: ResourceRef,
    pub(crate) namespace: String,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K: Resource> Api<K>
where
    K::DynamicType: Default,
{
    /// Every object of `K`, in every namespace.
    pub fn all(client: Client) -> Self {
        Self::all_with(client, &K::DynamicType::default())
    }

    /// The objects of `K` in `namespace`.
    pub fn namespaced(client: Client, namespace: &str) -> Self {
        Self::namespaced_with(client, namespace, &K::DynamicType::default())
    }
}

impl<K: Resource> Api<K> {
    /// Every object of a type known at run time (`DynamicObject`), in every
    /// namespace.
    pub fn all_with(client: Client, dyntype: &K::DynamicType) -> Self {
        Api {
            client,
            resource: ResourceRef {
                group: K::group(dyntype).into_owned(),
                version: K::version(dyntype).into_owned(),
                resource: K::plural(dyntype).into_owned(),
            },
            namespace: String::new(),
            _kind: std::marker::PhantomData,
        }
    }

    /// The objects of a type known at run time in `namespace`.
    pub fn namespaced_with(client: Client, namespace: &str, dyntype: &K::DynamicType) -> Self {
        Api {
            namespace: namespace.to_owned(),
            ..Self::all_with(client, dyntype)
        }
    }
}

impl<K: Resource> Api<K> {
    /// The same resource type and namespace, seen as `T` (for example the
    /// `PartialObjectMeta` of `K`).
    pub(crate) fn cast<T>(self) -> Api<T> {
        Api {
            client: self.client,
            resource: self.resource,
            namespace: self.namespace,
            _kind: std::marker::PhantomData,
        }
    }
}

/// `Api<PartialObjectMeta<K>>` asks for metadata only, as `kube::Api` does
/// (kube's `Resource::metadata_api`): the server sends each object as a
/// `PartialObjectMetadata`.
impl<K: Resource + DeserializeOwned> Api<K> {
    /// One object by name, from kube-fanout's cache.
    pub async fn get(&self, name: &str) -> Result<K, ClientError> {
        let response = self
            .client
            .clone()
            .get(GetRequest {
                resource: Some(self.resource.clone()),
                namespace: self.namespace.clone(),
                name: name.to_owned(),
                metadata_only: K::metadata_api(),
            })
            .await?;
        decode(&response.object)
    }

    /// A consistent snapshot of the objects matching the selectors of
    /// `params` (label and field selectors, and `limit`/`continue` for
    /// pages of one snapshot; the resourceVersion parameters have no
    /// meaning for a cache, which always answers from its freshest state).
    pub async fn list(&self, params: &kube::api::ListParams) -> Result<ObjectList<K>, ClientError>
    where
        K: Clone,
    {
        let response = self
            .client
            .clone()
            .list(ListRequest {
                resource: Some(self.resource.clone()),
                namespace: self.namespace.clone(),
                label_selector: params.label_selector.clone().unwrap_or_default(),
                field_selector: params.field_selector.clone().unwrap_or_default(),
                limit: params.limit.unwrap_or_default(),
                r#continue: params.continue_token.clone().unwrap_or_default(),
                metadata_only: K::metadata_api(),
            })
            .await?;
        Ok(ObjectList {
            types: kube::core::TypeMeta::default(),
            metadata: kube::core::ListMeta {
                resource_version: Some(response.resource_version),
                continue_: (!response.r#continue.is_empty()).then_some(response.r#continue),
                remaining_item_count: (response.remaining_item_count > 0)
                    .then(|| i64::try_from(response.remaining_item_count).unwrap_or(i64::MAX)),
                ..Default::default()
            },
            items: response
                .objects
                .iter()
                .map(|o| decode(o))
                .collect::<Result<_, _>>()?,
        })
    }
}

/// Decodes an object the server sent as `K`.
pub(crate) fn decode<K: DeserializeOwned>(json: &str) -> Result<K, ClientError> {
    serde_json::from_str(json).map_err(|source| ClientError::Decode {
        kind: std::any::type_name::<K>(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
    use kube::{api::DynamicObject, discovery::ApiResource};

    use super::*;
    use crate::ClientConfig;

    #[test]
    fn parses_resource_names_like_api_paths() {
        assert_eq!(resource("v1/configmaps").unwrap().group, "");
        assert_eq!(resource("apps/v1/deployments").unwrap().group, "apps");
        assert!(resource("deployments").is_err());
        assert!(resource("/v1/x").is_err());
    }

    #[tokio::test]
    async fn api_names_the_resource_of_static_and_dynamic_types() {
        let client = ClientConfig::new(["127.0.0.1:1"]).build().unwrap();
        let cms = Api::<ConfigMap>::namespaced(client.clone(), "ns");
        assert_eq!(cms.resource, resource("v1/configmaps").unwrap());
        assert_eq!(cms.namespace, "ns");
        let deploys = Api::<Deployment>::all(client.clone());
        assert_eq!(deploys.resource, resource("apps/v1/deployments").unwrap());
        let ar = ApiResource::erase::<Deployment>(&());
        let dynamic = Api::<DynamicObject>::all_with(client, &ar);
        assert_eq!(dynamic.resource, deploys.resource);
    }
}

//! kube-fanout-client: subscribe to a kube-fanout server.
//!
//! A thin layer over the generated gRPC client: connect, name a resource
//! type the way kubectl's API paths do (`v1/configmaps`,
//! `apps/v1/deployments`), and stream its events.

pub use kube_fanout_proto::v1 as proto;
use proto::{
    ListResourcesRequest, ListResourcesResponse, ResourceRef, WatchEvent, WatchRequest,
    kube_fanout_client::KubeFanoutClient,
};
use tonic::{Streaming, transport::Channel};

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server address is not a URI.
    #[error("{addr:?} is not a server address such as http://127.0.0.1:50051: {source}")]
    Address {
        /// The address given.
        addr: String,
        /// Why it does not parse.
        #[source]
        source: http::uri::InvalidUri,
    },
    /// The server cannot be reached.
    #[error("cannot connect to kube-fanout at {addr}: {source}")]
    Connect {
        /// The address tried.
        addr: String,
        /// The transport error.
        #[source]
        source: tonic::transport::Error,
    },
    /// A resource type not of the form VERSION/RESOURCE or
    /// GROUP/VERSION/RESOURCE.
    #[error("resource {0:?} is not of the form VERSION/RESOURCE or GROUP/VERSION/RESOURCE")]
    Resource(String),
    /// The server answered with an error status.
    #[error("kube-fanout answered {}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
}

/// Parses `v1/configmaps` or `apps/v1/deployments`.
pub fn resource(name: &str) -> Result<ResourceRef, ClientError> {
    let parts: Vec<&str> = name.split('/').collect();
    let (group, version, resource) = match parts.as_slice() {
        [v, r] => ("", *v, *r),
        [g, v, r] if !g.is_empty() => (*g, *v, *r),
        _ => return Err(ClientError::Resource(name.to_owned())),
    };
    if version.is_empty() || resource.is_empty() {
        return Err(ClientError::Resource(name.to_owned()));
    }
    Ok(ResourceRef {
        group: group.to_owned(),
        version: version.to_owned(),
        resource: resource.to_owned(),
    })
}

/// A connection to one kube-fanout server.
#[derive(Debug, Clone)]
pub struct Client {
    inner: KubeFanoutClient<Channel>,
}

impl Client {
    /// Connects to `addr`, e.g. `http://127.0.0.1:50051`.
    pub async fn connect(addr: &str) -> Result<Self, ClientError> {
        let channel = Channel::from_shared(addr.to_owned())
            .map_err(|source| ClientError::Address {
                addr: addr.to_owned(),
                source,
            })?
            .connect()
            .await
            .map_err(|source| ClientError::Connect {
                addr: addr.to_owned(),
                source,
            })?;
        Ok(Client {
            inner: KubeFanoutClient::new(channel).max_decoding_message_size(64 * 1024 * 1024),
        })
    }

    /// Opens a watch.
    pub async fn watch(
        &mut self,
        request: WatchRequest,
    ) -> Result<Streaming<WatchEvent>, ClientError> {
        Ok(self.inner.watch(request).await?.into_inner())
    }

    /// Describes every served resource type.
    pub async fn list_resources(&mut self) -> Result<ListResourcesResponse, ClientError> {
        Ok(self
            .inner
            .list_resources(ListResourcesRequest {})
            .await?
            .into_inner())
    }

    /// The generated gRPC client, for calls this wrapper does not cover.
    pub fn grpc(&mut self) -> &mut KubeFanoutClient<Channel> {
        &mut self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_resource_names_like_api_paths() {
        assert_eq!(resource("v1/configmaps").unwrap().group, "");
        assert_eq!(resource("apps/v1/deployments").unwrap().group, "apps");
        assert!(resource("deployments").is_err());
        assert!(resource("/v1/x").is_err());
    }
}

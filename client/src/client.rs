//! The connection to kube-fanout: one server at a time out of the
//! configured list, moving to the next when one fails.

use std::sync::Arc;

use tonic::{Streaming, service::interceptor::InterceptedService, transport::Channel};

use crate::{
    config::{ClientConfig, Settings},
    error::ClientError,
    proto::{
        GetRequest, GetResponse, ListRequest, ListResourcesRequest, ListResourcesResponse,
        ListResponse, WatchEvent, WatchRequest, kube_fanout_client::KubeFanoutClient,
    },
    token::BearerToken,
};

/// The generated gRPC client, with the bearer token attached to every call.
pub type GrpcClient = KubeFanoutClient<InterceptedService<Channel, BearerToken>>;

/// Largest message accepted: one object of a big type can be megabytes.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// The gRPC client on `channel`, with the token and the limits.
fn grpc_client(settings: &Settings, channel: Channel) -> GrpcClient {
    let client = KubeFanoutClient::with_interceptor(channel, settings.token.clone())
        .max_decoding_message_size(MAX_MESSAGE);
    match settings.compression {
        Some(encoding) => client.accept_compressed(encoding),
        None => client,
    }
}

// Here rather than in config.rs, so that the settings know nothing of the
// connection made from them (config.rs is the layer below this one).
impl ClientConfig {
    /// Checks the settings and returns a client that connects on first use.
    pub fn build(self) -> Result<Client, ClientError> {
        Ok(Client::lazy(self.settings()?))
    }

    /// Connects to the first address that answers.
    pub async fn connect(self) -> Result<Client, ClientError> {
        let mut client = self.build()?;
        client.connect_first().await?;
        Ok(client)
    }
}

/// A connection to kube-fanout: one server at a time out of the configured
/// list. Cloning is cheap; clones share the settings.
#[derive(Debug, Clone)]
pub struct Client {
    shared: Arc<Settings>,
    current: usize,
    grpc: GrpcClient,
}

impl Client {
    /// A client for `settings` that connects to the first address on first
    /// use.
    fn lazy(settings: Settings) -> Self {
        let shared = Arc::new(settings);
        let grpc = grpc_client(&shared, shared.endpoints[0].connect_lazy());
        Client {
            shared,
            current: 0,
            grpc,
        }
    }

    /// Connects to the first address that answers, in the configured order.
    async fn connect_first(&mut self) -> Result<(), ClientError> {
        self.connect_from(0).await
    }

    /// Connects to one server, e.g. `http://127.0.0.1:50051`.
    pub async fn connect(addr: &str) -> Result<Self, ClientError> {
        ClientConfig::new([addr]).connect().await
    }

    /// The address in use.
    pub fn address(&self) -> String {
        self.shared.endpoints[self.current].uri().to_string()
    }

    /// Tries every address once, starting at index `first`, and keeps the
    /// first that connects.
    async fn connect_from(&mut self, first: usize) -> Result<(), ClientError> {
        let n = self.shared.endpoints.len();
        let mut last_error = None;
        for i in (first..first + n).map(|i| i % n) {
            match self.shared.endpoints[i].connect().await {
                Ok(channel) => {
                    self.current = i;
                    self.grpc = grpc_client(&self.shared, channel);
                    return Ok(());
                }
                Err(err) => {
                    tracing::debug!(address = %self.shared.endpoints[i].uri(), error = %err, "cannot connect");
                    last_error = Some(err);
                }
            }
        }
        Err(ClientError::Connect {
            addr: self
                .shared
                .endpoints
                .iter()
                .map(|e| e.uri().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            source: last_error.expect("at least one endpoint"),
        })
    }

    /// Moves to the next address that connects (the same one again when it
    /// is the only one), after the current one failed: the watcher's
    /// failover, and a tier's leaf's when its parent fails.
    pub async fn reconnect(&mut self) -> Result<(), ClientError> {
        self.connect_from(self.current + 1).await
    }

    /// Opens a new connection to the current address (falling back to the
    /// others), after the server retired the one in use. The old channel
    /// would reconnect by itself after the server's GOAWAY, but hyper's
    /// client reads the GOAWAY only when handed the next call and drops
    /// that call unsent (`CANCELLED`, "connection closed"): a resume on it
    /// would fail once and wait a backoff delay.
    pub async fn renew(&mut self) -> Result<(), ClientError> {
        self.connect_from(self.current).await
    }

    /// Opens a raw watch.
    pub async fn watch(
        &mut self,
        request: WatchRequest,
    ) -> Result<Streaming<WatchEvent>, ClientError> {
        Ok(self.grpc.watch(request).await?.into_inner())
    }

    /// A consistent snapshot of one resource type, as JSON objects.
    pub async fn list(&mut self, request: ListRequest) -> Result<ListResponse, ClientError> {
        Ok(self.grpc.list(request).await?.into_inner())
    }

    /// One object, as JSON.
    pub async fn get(&mut self, request: GetRequest) -> Result<GetResponse, ClientError> {
        Ok(self.grpc.get(request).await?.into_inner())
    }

    /// Describes every served resource type this caller may list
    /// cluster-wide.
    pub async fn list_resources(&mut self) -> Result<ListResourcesResponse, ClientError> {
        self.list_resources_in("").await
    }

    /// Describes every served resource type this caller may list in
    /// `namespace` ("" for cluster-wide).
    pub async fn list_resources_in(
        &mut self,
        namespace: &str,
    ) -> Result<ListResourcesResponse, ClientError> {
        Ok(self
            .grpc
            .list_resources(ListResourcesRequest {
                namespace: namespace.to_owned(),
                resource: None,
            })
            .await?
            .into_inner())
    }

    /// The generated gRPC client, for calls this wrapper does not cover.
    pub fn grpc(&mut self) -> &mut GrpcClient {
        &mut self.grpc
    }
}

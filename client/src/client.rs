//! Connections: one or several server addresses, plaintext or TLS, with an
//! optional bearer token; and [`Api`], the typed handle on one resource
//! type that mirrors `kube::Api`.

use std::{
    fmt,
    net::IpAddr,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use kube::{Resource, core::ObjectList};
use kube_fanout_proto::GroupVersionResource;
use serde::de::DeserializeOwned;
use tonic::{
    Request, Status, Streaming,
    codec::CompressionEncoding,
    metadata::{Ascii, MetadataValue},
    service::{Interceptor, interceptor::InterceptedService},
    transport::{Channel, ClientTlsConfig, Endpoint},
};

use crate::{
    error::ClientError,
    proto::{
        GetRequest, GetResponse, ListRequest, ListResourcesRequest, ListResourcesResponse,
        ListResponse, ResourceRef, WatchEvent, WatchRequest, kube_fanout_client::KubeFanoutClient,
    },
};

/// The generated gRPC client, with the bearer token attached to every call.
pub type GrpcClient = KubeFanoutClient<InterceptedService<Channel, BearerToken>>;

/// Largest message accepted: one object of a big type can be megabytes.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// How long one connection attempt may take before the next address is
/// tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Adds `authorization: Bearer ...` to every request when a token is set:
/// a fixed one, or one read from a file and read again whenever the file
/// changes (projected ServiceAccount tokens rotate in place).
#[derive(Clone, Default)]
pub struct BearerToken(Option<TokenSource>);

#[derive(Clone)]
enum TokenSource {
    Fixed(MetadataValue<Ascii>),
    File(Arc<TokenFile>),
}

/// A file's (modified, length): what tells that it changed.
type Stamp = Option<(SystemTime, u64)>;

/// A token file and what was last read from it.
struct TokenFile {
    path: PathBuf,
    /// The file's stamp when read, and its header value.
    read: Mutex<Option<(Stamp, MetadataValue<Ascii>)>>,
}

impl TokenFile {
    fn stamp(&self) -> Stamp {
        let meta = std::fs::metadata(&self.path).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    }

    /// The header for the file's current token, re-read if it changed.
    fn header(&self) -> Result<MetadataValue<Ascii>, ClientError> {
        let stamp = self.stamp();
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, value)) = &*read
            && *seen == stamp
            && stamp.is_some()
        {
            return Ok(value.clone());
        }
        let token =
            std::fs::read_to_string(&self.path).map_err(|source| ClientError::TokenFile {
                path: self.path.clone(),
                source,
            })?;
        let value = header(token.trim())?;
        *read = Some((stamp, value.clone()));
        Ok(value)
    }
}

fn header(token: &str) -> Result<MetadataValue<Ascii>, ClientError> {
    format!("Bearer {token}")
        .parse()
        .map_err(ClientError::Token)
}

impl BearerToken {
    /// A token sent as `authorization: Bearer TOKEN`.
    pub fn new(token: &str) -> Result<Self, ClientError> {
        Ok(BearerToken(Some(TokenSource::Fixed(header(token)?))))
    }

    /// The token in `path`, read now (so a missing file fails here) and
    /// again whenever the file changes.
    pub fn from_file(path: impl Into<PathBuf>) -> Result<Self, ClientError> {
        let file = TokenFile {
            path: path.into(),
            read: Mutex::new(None),
        };
        file.header()?;
        Ok(BearerToken(Some(TokenSource::File(Arc::new(file)))))
    }
}

// The token is a credential: never print it.
impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => f.write_str("BearerToken(None)"),
            Some(TokenSource::Fixed(_)) => f.write_str("BearerToken(<redacted>)"),
            Some(TokenSource::File(file)) => write!(f, "BearerToken(file {})", file.path.display()),
        }
    }
}

impl Interceptor for BearerToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let value = match &self.0 {
            None => return Ok(request),
            Some(TokenSource::Fixed(value)) => value.clone(),
            Some(TokenSource::File(file)) => file
                .header()
                .map_err(|e| Status::unauthenticated(e.to_string()))?,
        };
        request.metadata_mut().insert("authorization", value);
        Ok(request)
    }
}

/// Where and how to connect.
#[derive(Debug, Clone, Default)]
pub struct ClientConfig {
    addresses: Vec<String>,
    tls: Option<ClientTlsConfig>,
    token: Option<Credential>,
    insecure_plaintext_token: bool,
    compression: Option<CompressionEncoding>,
}

/// Where the bearer token comes from.
#[derive(Clone)]
enum Credential {
    Token(String),
    File(PathBuf),
}

// A token is a credential: never print it.
impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::Token(_) => f.write_str("Token(<redacted>)"),
            Credential::File(path) => write!(f, "File({})", path.display()),
        }
    }
}

impl ClientConfig {
    /// Servers to use, in order of preference: `host:port`,
    /// `http://host:port` or `https://host:port`. When one goes away the
    /// next is used.
    pub fn new<S: Into<String>>(addresses: impl IntoIterator<Item = S>) -> Self {
        ClientConfig {
            addresses: addresses.into_iter().map(Into::into).collect(),
            ..ClientConfig::default()
        }
    }

    /// Uses TLS with these settings (CA, server name) for every address.
    /// Without it, `https://` addresses use the system's root certificates
    /// and other addresses are plaintext.
    pub fn tls(mut self, tls: ClientTlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sends `authorization: Bearer TOKEN` with every request.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(Credential::Token(token.into()));
        self
    }

    /// Sends the token in `path` with every request, reading the file
    /// again whenever it changes (a projected ServiceAccount token).
    pub fn bearer_token_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.token = Some(Credential::File(path.into()));
        self
    }

    /// Sends the bearer token even over plaintext to an address that is
    /// not loopback, where anyone on the path reads it and can replay it
    /// to kube-fanout (and, for a token of the API server's own audience,
    /// to the API server). Without it, [`build`](Self::build) refuses a
    /// token with a plaintext address other than 127.0.0.0/8, ::1 or
    /// localhost.
    pub fn insecure_plaintext_token(mut self) -> Self {
        self.insecure_plaintext_token = true;
        self
    }

    /// Asks the server to compress what it sends with `encoding` (gzip or
    /// zstd), negotiated per call: worth it for large snapshots over slow
    /// links, at the CPU cost of compressing on the server and
    /// decompressing here (BENCHMARKS.md has the figures). Requests, which
    /// are small, are sent as they are. Off by default.
    pub fn accept_compressed(mut self, encoding: CompressionEncoding) -> Self {
        self.compression = Some(encoding);
        self
    }

    /// Checks the settings and returns a client that connects on first use.
    pub fn build(self) -> Result<Client, ClientError> {
        if self.addresses.is_empty() {
            return Err(ClientError::NoAddress);
        }
        let endpoints = self
            .addresses
            .iter()
            .map(|addr| endpoint(addr, self.tls.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        if self.token.is_some() && !self.insecure_plaintext_token {
            refuse_plaintext_token(&self.addresses, &endpoints)?;
        }
        let token = match &self.token {
            Some(Credential::Token(token)) => BearerToken::new(token)?,
            Some(Credential::File(path)) => BearerToken::from_file(path)?,
            None => BearerToken::default(),
        };
        let shared = Arc::new(Shared {
            endpoints,
            token,
            compression: self.compression,
        });
        let grpc = shared.client(shared.endpoints[0].connect_lazy());
        Ok(Client {
            shared,
            current: 0,
            grpc,
        })
    }

    /// Connects to the first address that answers.
    pub async fn connect(self) -> Result<Client, ClientError> {
        let mut client = self.build()?;
        client.connect_from(0).await?;
        Ok(client)
    }
}

fn endpoint(addr: &str, tls: Option<&ClientTlsConfig>) -> Result<Endpoint, ClientError> {
    let url = if addr.contains("://") {
        addr.to_owned()
    } else if tls.is_some() {
        format!("https://{addr}")
    } else {
        format!("http://{addr}")
    };
    let invalid = |source| ClientError::Address {
        addr: addr.to_owned(),
        source,
    };
    let endpoint = Endpoint::from_shared(url.clone())
        .map_err(invalid)?
        .connect_timeout(CONNECT_TIMEOUT)
        // A peer that vanished without closing the connection (a deleted
        // pod) is noticed within seconds, not at the next TCP timeout.
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true);
    let tls = match tls {
        Some(tls) => Some(tls.clone()),
        None if url.starts_with("https://") => Some(ClientTlsConfig::new().with_native_roots()),
        None => None,
    };
    match tls {
        Some(tls) => endpoint.tls_config(tls).map_err(|source| ClientError::Tls {
            addr: addr.to_owned(),
            source,
        }),
        None => Ok(endpoint),
    }
}

/// A token goes over TLS, or in plaintext only to this machine.
fn refuse_plaintext_token(addresses: &[String], endpoints: &[Endpoint]) -> Result<(), ClientError> {
    for (addr, endpoint) in addresses.iter().zip(endpoints) {
        let uri = endpoint.uri();
        if uri.scheme_str() != Some("https") && !uri.host().is_some_and(is_loopback) {
            return Err(ClientError::PlaintextToken { addr: addr.clone() });
        }
    }
    Ok(())
}

/// Whether `host` (as a URI writes it, an IPv6 address in brackets) is
/// this machine: 127.0.0.0/8, ::1 (IPv4-mapped included) or localhost.
fn is_loopback(host: &str) -> bool {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

#[derive(Debug)]
struct Shared {
    endpoints: Vec<Endpoint>,
    token: BearerToken,
    compression: Option<CompressionEncoding>,
}

impl Shared {
    fn client(&self, channel: Channel) -> GrpcClient {
        let client = KubeFanoutClient::with_interceptor(channel, self.token.clone())
            .max_decoding_message_size(MAX_MESSAGE);
        match self.compression {
            Some(encoding) => client.accept_compressed(encoding),
            None => client,
        }
    }
}

/// A connection to kube-fanout: one server at a time out of the configured
/// list. Cloning is cheap; clones share the settings.
#[derive(Debug, Clone)]
pub struct Client {
    shared: Arc<Shared>,
    current: usize,
    grpc: GrpcClient,
}

impl Client {
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
                    self.grpc = self.shared.client(channel);
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
    /// is the only one), after the current one failed.
    pub async fn reconnect(&mut self) -> Result<(), ClientError> {
        self.connect_from(self.current + 1).await
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
            })
            .await?
            .into_inner())
    }

    /// The generated gRPC client, for calls this wrapper does not cover.
    pub fn grpc(&mut self) -> &mut GrpcClient {
        &mut self.grpc
    }
}

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

pub(crate) fn decode<K: DeserializeOwned>(json: &str) -> Result<K, ClientError> {
    serde_json::from_str(json).map_err(|source| ClientError::Decode {
        kind: std::any::type_name::<K>(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(token: &mut BearerToken) -> String {
        let request = token.call(Request::new(())).unwrap();
        request
            .metadata()
            .get("authorization")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
    }

    // A runtime for connect_lazy; nothing connects.
    #[tokio::test]
    async fn a_token_goes_in_plaintext_only_to_loopback_unless_insecure() {
        let build = |addr: &str| ClientConfig::new([addr]).bearer_token("t").build();
        for local in [
            "127.0.0.1:50051",
            "127.3.4.5:1",
            "http://127.0.0.1:50051",
            "[::1]:50051",
            "http://[::1]:50051",
            "[::ffff:127.0.0.1]:1",
            "localhost:50051",
            "http://LocalHost:1",
        ] {
            build(local).unwrap_or_else(|e| panic!("{local}: {e}"));
        }
        for remote in [
            "10.0.0.1:50051",
            "http://kf.fanout.svc:50051",
            "[2001:db8::1]:50051",
            "localhost.example.com:1",
            "128.0.0.1:1",
        ] {
            let err = build(remote).unwrap_err();
            assert!(
                matches!(&err, ClientError::PlaintextToken { addr } if addr == remote),
                "{remote}: {err}"
            );
            assert!(
                err.to_string().contains("--insecure-plaintext-token"),
                "{err}"
            );
        }
        // One remote plaintext address among TLS ones is enough to refuse.
        let mixed = ClientConfig::new(["https://a:1", "b:1"])
            .bearer_token("t")
            .build()
            .unwrap_err();
        assert!(matches!(mixed, ClientError::PlaintextToken { addr } if addr == "b:1"));
        // TLS, no token, or the explicit opt-out: allowed.
        ClientConfig::new(["https://kf.fanout.svc:50051"])
            .bearer_token("t")
            .build()
            .unwrap();
        ClientConfig::new(["kf.fanout.svc:50051"])
            .tls(ClientTlsConfig::new())
            .bearer_token("t")
            .build()
            .unwrap();
        ClientConfig::new(["kf.fanout.svc:50051"]).build().unwrap();
        ClientConfig::new(["kf.fanout.svc:50051"])
            .bearer_token("t")
            .insecure_plaintext_token()
            .build()
            .unwrap();
    }

    #[test]
    fn a_token_file_is_read_again_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").unwrap();
        let mut token = BearerToken::from_file(&path).unwrap();
        assert_eq!(sent(&mut token), "Bearer first");
        std::fs::write(&path, "rotated-token").unwrap();
        assert_eq!(sent(&mut token), "Bearer rotated-token");
        assert!(
            !format!("{:?}", ClientConfig::new(["a"]).bearer_token("secret")).contains("secret")
        );
        std::fs::remove_file(&path).unwrap();
        let status = token.call(Request::new(())).unwrap_err();
        assert!(
            status
                .message()
                .contains("cannot read the bearer token file"),
            "{status:?}"
        );
        assert!(
            BearerToken::from_file(&path).is_err(),
            "a missing file fails at once"
        );
    }
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
    use kube::{api::DynamicObject, discovery::ApiResource};

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

    #[test]
    fn addresses_without_a_scheme_follow_the_tls_setting() {
        let plain = endpoint("127.0.0.1:50051", None).unwrap();
        assert_eq!(plain.uri().scheme_str(), Some("http"));
        let tls = endpoint("fanout:443", Some(&ClientTlsConfig::new())).unwrap();
        assert_eq!(tls.uri().scheme_str(), Some("https"));
        assert!(matches!(
            ClientConfig::new(Vec::<String>::new()).build(),
            Err(ClientError::NoAddress)
        ));
        assert!(matches!(
            ClientConfig::new(["http://bad host"]).build(),
            Err(ClientError::Address { .. })
        ));
    }

    #[test]
    fn the_token_travels_as_a_bearer_header_and_is_never_printed() {
        let mut token = BearerToken::new("s3cret").unwrap();
        let request = token.call(Request::new(())).unwrap();
        assert_eq!(
            request.metadata().get("authorization").unwrap(),
            "Bearer s3cret"
        );
        assert!(!format!("{token:?}").contains("s3cret"));
        assert!(matches!(
            BearerToken::new("bad\ntoken"),
            Err(ClientError::Token(_))
        ));
        let none = BearerToken::default().call(Request::new(())).unwrap();
        assert!(none.metadata().get("authorization").is_none());
    }
}

//! Small helpers the end-to-end tests share: reading a watch stream with a
//! deadline, decoding objects, and asking the API server for the truth.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kube_fanout_client::{
    proto::{EventType, ResourceRef, WatchEvent, WatchRequest},
    watcher::ends_initial_events,
};
use tonic::Streaming;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

/// How long a test waits for any single event.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(20);

/// `v1/configmaps` as a gRPC resource reference.
pub fn configmaps() -> ResourceRef {
    kube_fanout_client::resource("v1/configmaps").expect("a valid resource")
}

/// A watch-list request for configmaps in `namespace` ("" for all).
pub fn watch_list(namespace: &str) -> WatchRequest {
    WatchRequest {
        resource: Some(configmaps()),
        namespace: namespace.to_owned(),
        send_initial_events: true,
        allow_bookmarks: true,
        ..WatchRequest::default()
    }
}

/// The next event, failing the test if none comes in time.
pub async fn next_event(stream: &mut Streaming<WatchEvent>) -> Result<WatchEvent> {
    match tokio::time::timeout(EVENT_TIMEOUT, stream.message()).await {
        Ok(Ok(Some(event))) => Ok(event),
        Ok(Ok(None)) => bail!("the watch ended"),
        Ok(Err(status)) => bail!("the watch failed: {status:?}"),
        Err(_) => bail!("no event within {EVENT_TIMEOUT:?}"),
    }
}

/// The next event that is not a bookmark (unless it ends the initial events).
pub async fn next_change(stream: &mut Streaming<WatchEvent>) -> Result<WatchEvent> {
    loop {
        let event = next_event(stream).await?;
        if event.r#type() != EventType::Bookmark {
            return Ok(event);
        }
    }
}

/// Reads a watch-list snapshot: the ADDED objects by name, and the RV of
/// the bookmark that ends them.
pub async fn read_snapshot(
    stream: &mut Streaming<WatchEvent>,
) -> Result<(BTreeMap<String, ConfigMap>, String)> {
    let mut objects = BTreeMap::new();
    loop {
        let event = next_event(stream).await?;
        if ends_initial_events(&event) {
            return Ok((objects, event.resource_version));
        }
        if event.r#type() != EventType::Added {
            bail!(
                "expected ADDED during the snapshot, got {:?}",
                event.r#type()
            );
        }
        let cm = decode(&event)?;
        let name = cm.metadata.name.clone().context("unnamed object")?;
        if objects.insert(name.clone(), cm).is_some() {
            bail!("{name} was sent twice in the snapshot");
        }
    }
}

/// The `namespace/name` of an object sent as JSON, of any kind.
pub fn object_key(json: &str) -> Result<String> {
    let object: serde_json::Value = serde_json::from_str(json)?;
    let meta = &object["metadata"];
    Ok(format!(
        "{}/{}",
        meta["namespace"].as_str().unwrap_or_default(),
        meta["name"].as_str().unwrap_or_default()
    ))
}

/// The `namespace/name` of each object of a watch's initial events, up to
/// the bookmark that ends them.
pub async fn initial_keys(stream: &mut Streaming<WatchEvent>) -> Result<BTreeSet<String>> {
    let mut keys = BTreeSet::new();
    loop {
        let event = next_event(stream).await?;
        if ends_initial_events(&event) {
            return Ok(keys);
        }
        keys.insert(object_key(&event.object)?);
    }
}

/// What grpc.health.v1 on `addr` (plaintext) says of `service`, as the
/// kubelet's gRPC probe asks it.
pub async fn health(addr: std::net::SocketAddr, service: &str) -> Result<ServingStatus> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await?;
    Ok(answer.into_inner().status())
}

/// A ConfigMap's name and resourceVersion.
pub fn name_and_rv(cm: &ConfigMap) -> Result<(String, u64)> {
    let rv = cm.metadata.resource_version.as_deref().unwrap_or_default();
    Ok((
        cm.metadata.name.clone().unwrap_or_default(),
        rv.parse()
            .with_context(|| format!("resourceVersion {rv:?}"))?,
    ))
}

/// Decodes an event's ConfigMap.
pub fn decode(event: &WatchEvent) -> Result<ConfigMap> {
    serde_json::from_str(&event.object).with_context(|| format!("decoding {}", event.object))
}

/// The API server's own LIST of configmaps in `namespace` at exactly `rv`,
/// by name.
pub async fn list_at(
    client: &kube::Client,
    namespace: &str,
    rv: &str,
) -> Result<BTreeMap<String, ConfigMap>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(
            &ListParams::default()
                .at(rv)
                .matching(kube::api::VersionMatch::Exact),
        )
        .await?;
    Ok(list
        .items
        .into_iter()
        .map(|cm| (cm.metadata.name.clone().unwrap_or_default(), cm))
        .collect())
}

/// Creates a namespace.
pub async fn create_namespace(client: &kube::Client, name: &str) -> Result<()> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let mut ns = k8s_openapi::api::core::v1::Namespace::default();
    ns.metadata.name = Some(name.to_owned());
    api.create(&PostParams::default(), &ns).await?;
    Ok(())
}

/// Creates a configmap with one data entry and returns it as stored.
pub async fn create_configmap(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    value: &str,
) -> Result<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.to_owned());
    cm.data = Some([("value".to_owned(), value.to_owned())].into());
    Ok(api.create(&PostParams::default(), &cm).await?)
}

/// ConfigMaps by name, as (resourceVersion, data).
pub type Contents = BTreeMap<String, (String, Option<BTreeMap<String, String>>)>;

/// The data a ConfigMap carries, for comparing what the subscriber saw with
/// what the API server holds.
pub fn contents(objects: &BTreeMap<String, ConfigMap>) -> Contents {
    objects
        .iter()
        .map(|(name, cm)| {
            (
                name.clone(),
                (
                    cm.metadata.resource_version.clone().unwrap_or_default(),
                    cm.data.clone(),
                ),
            )
        })
        .collect()
}

/// Path to a real tool the tests drive, installed by `tests/tools/install.sh`
/// (`go install` at a pinned version, cached under `target/tools`).
pub fn tool(name: &str) -> Result<std::path::PathBuf> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/install.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(name)
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !out.status.success() {
        bail!("installing {name} failed ({})", out.status);
    }
    Ok(String::from_utf8(out.stdout)?.trim().into())
}

/// The output of a finished command.
#[derive(Debug)]
pub struct Output {
    /// Whether it exited 0.
    pub success: bool,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

/// Runs `program` with `args` to completion.
pub async fn run(program: &std::path::Path, args: &[&str]) -> Result<Output> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("running {}", program.display()))?;
    Ok(Output {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// The body of a plain HTTP/1.0 GET of `path` on `addr` (loopback).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response.split_once("\r\n\r\n").context("no HTTP header")?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        bail!("GET {path}: {head}");
    }
    Ok(body.to_owned())
}

/// An HTTP/1.1 GET of `path` over TLS to `addr` (loopback), verifying the
/// server as `server_name` against the PEM `ca`, with `authorization:
/// Bearer TOKEN` if a token is given: the status code and the body.
pub async fn https_get(
    addr: std::net::SocketAddr,
    server_name: &str,
    ca: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String)> {
    use rustls_pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let config = crate::clients::rustls_config(ca, b"http/1.1")?;
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let mut stream = tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::try_from(server_name.to_owned())?, tcp)
        .await?;
    let authorization = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    stream
        .write_all(
            format!(
                "GET {path} HTTP/1.1\r\nhost: {server_name}\r\n{authorization}connection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await?;
    let mut response = Vec::new();
    // A TLS peer may close without close_notify once it has answered.
    if let Err(err) = stream.read_to_end(&mut response).await
        && response.is_empty()
    {
        return Err(err.into());
    }
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").context("no HTTP header")?;
    let status = head.split(' ').nth(1).context("no status code")?.parse()?;
    Ok((status, body.to_owned()))
}

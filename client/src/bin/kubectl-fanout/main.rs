//! kubectl-fanout: look into a kube-fanout server the way kubectl looks
//! into an API server. Installed on `PATH` it is also `kubectl fanout`.
//!
//! Exit codes: 0 success, 1 the server refused or failed the request,
//! 2 bad usage, 3 no server reachable, 4 unknown resource type, 5 object
//! not found.

mod cli;
mod output;

use std::{
    io::Write,
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow};
use clap::Parser;
use cli::{Cli, Command, Compression};
use futures::StreamExt;
use kube::{api::DynamicObject, discovery::ApiResource};
use kube_fanout_client::{
    Api, Certificate, Client, ClientConfig, ClientError, ClientTlsConfig, CompressionEncoding,
    WatchError,
    proto::{EventType, GetRequest, ResourceStatus, WatchRequest},
    watcher::ends_initial_events,
};
use kube_runtime::watcher::{self, Event};
use output::{Format, Printer, resource_path};
use serde_json::{Value, json};

/// A TYPE the server does not serve.
#[derive(Debug, thiserror::Error)]
#[error("the server doesn't have a resource type {asked:?}; served: {served}")]
struct UnknownType {
    asked: String,
    served: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // The watcher's warnings (the server went away, when it tries again)
    // on stderr; RUST_LOG sets the level.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(exit_code(&err))
        }
    }
}

fn exit_code(err: &anyhow::Error) -> u8 {
    if err.downcast_ref::<UnknownType>().is_some() {
        return 4;
    }
    match err.downcast_ref::<ClientError>() {
        Some(e) if e.is_unreachable() => 3,
        Some(ClientError::PlaintextToken { .. }) => 2,
        Some(ClientError::Status(s)) if s.code() == tonic::Code::NotFound => 5,
        _ => 1,
    }
}

/// A bearer token, token file, or client certificate and key files.
#[derive(Default)]
struct Credentials {
    token: Option<String>,
    token_file: Option<std::path::PathBuf>,
    /// PEM certificate and key, for mTLS.
    client_cert: Option<(Vec<u8>, Vec<u8>)>,
}

fn read(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// A kubeconfig user's `*-data` (base64) or, failing that, its file.
fn data_or_file(data: Option<&str>, file: Option<&str>, what: &str) -> Result<Option<Vec<u8>>> {
    use base64::Engine;
    match (data, file) {
        (Some(data), _) => base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map(Some)
            .with_context(|| format!("the kubeconfig's {what}-data is not base64")),
        (None, Some(file)) => read(file.as_ref()).map(Some),
        (None, None) => Ok(None),
    }
}

/// The credentials the flags name, or the current kubeconfig user's.
async fn credentials(cli: &Cli) -> Result<Credentials> {
    let client_cert = match (&cli.client_cert, &cli.client_key) {
        (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
        _ => None,
    };
    let mut found = Credentials {
        token: cli.token.clone(),
        token_file: cli.token_file.clone(),
        client_cert,
    };
    if cli.kubeconfig_credentials {
        use kube::config::{KubeConfigOptions, Kubeconfig};
        let kubeconfig = Kubeconfig::read().context("reading the kubeconfig")?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .context("the kubeconfig's current context")?;
        let user = config.auth_info;
        found.token = user
            .token
            .map(|t| secrecy::ExposeSecret::expose_secret(&t).to_owned());
        found.token_file = user.token_file.map(Into::into);
        if found.client_cert.is_none() {
            let cert = data_or_file(
                user.client_certificate_data.as_deref(),
                user.client_certificate.as_deref(),
                "client-certificate",
            )?;
            let key = data_or_file(
                user.client_key_data
                    .as_ref()
                    .map(secrecy::ExposeSecret::expose_secret),
                user.client_key.as_deref(),
                "client-key",
            )?;
            found.client_cert = cert.zip(key);
        }
        if found.token.is_none() && found.token_file.is_none() && found.client_cert.is_none() {
            anyhow::bail!(
                "the kubeconfig's current user has no token, token file or client certificate and key (exec and auth-provider plugins are not run)"
            );
        }
    }
    Ok(found)
}

async fn connect(cli: &Cli) -> Result<Client> {
    let mut config = ClientConfig::new(cli.servers.iter().cloned());
    let credentials = credentials(cli).await?;
    if cli.tls
        || cli.ca_file.is_some()
        || cli.tls_server_name.is_some()
        || credentials.client_cert.is_some()
    {
        let mut tls = ClientTlsConfig::new();
        tls = match &cli.ca_file {
            Some(path) => tls.ca_certificate(Certificate::from_pem(
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
            )),
            None => tls.with_native_roots(),
        };
        if let Some(name) = &cli.tls_server_name {
            tls = tls.domain_name(name);
        }
        if let Some((cert, key)) = &credentials.client_cert {
            tls = tls.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        config = config.tls(tls);
    }
    if let Some(token) = &credentials.token {
        config = config.bearer_token(token);
    } else if let Some(path) = &credentials.token_file {
        config = config.bearer_token_file(path);
    }
    if cli.insecure_plaintext_token {
        config = config.insecure_plaintext_token();
    }
    config = match cli.compression {
        Compression::None => config,
        Compression::Gzip => config.accept_compressed(CompressionEncoding::Gzip),
        Compression::Zstd => config.accept_compressed(CompressionEncoding::Zstd),
    };
    let client = config.connect().await.map_err(|e| {
        if e.is_unreachable() {
            anyhow!(e).context("is kube-fanout running there? Set --server or KUBE_FANOUT_SERVER")
        } else {
            anyhow!(e)
        }
    })?;
    Ok(client)
}

async fn run(cli: Cli) -> Result<()> {
    let mut client = connect(&cli).await?;
    let mut out = std::io::stdout().lock();
    match cli.command {
        Command::Resources { output } => {
            let resources = client.list_resources().await?.resources;
            Printer::new(output.output).resources(&mut out, &resources)?;
        }
        Command::List {
            r#type,
            scope,
            selector,
            field_selector,
            output,
        } => {
            let served = resolve(&mut client, &r#type, scope.asked()).await?;
            let namespace = scope.namespace_for(&served);
            let (resource_version, objects) = list(
                &mut client,
                WatchRequest {
                    resource: served.resource.clone(),
                    namespace: namespace.clone(),
                    label_selector: selector,
                    field_selector,
                    send_initial_events: true,
                    allow_bookmarks: true,
                    ..WatchRequest::default()
                },
                &r#type,
            )
            .await?;
            if objects.is_empty() && output.output == Format::Table {
                match namespace.as_str() {
                    "" => eprintln!("No resources found"),
                    ns => eprintln!("No resources found in {ns} namespace."),
                }
            }
            Printer::new(output.output)
                .with_namespace(namespace.is_empty() && served.namespaced)
                .list(&mut out, &resource_version, &objects)?;
        }
        Command::Get {
            r#type,
            name,
            namespace,
            output,
        } => {
            let served = resolve(&mut client, &r#type, &namespace).await?;
            let namespace = if served.namespaced {
                namespace
            } else {
                String::new()
            };
            let object = client
                .get(GetRequest {
                    resource: served.resource.clone(),
                    namespace,
                    name,
                    metadata_only: false,
                })
                .await?;
            let object: Value = serde_json::from_str(&object.object)?;
            Printer::new(output.output).object(&mut out, &object)?;
        }
        Command::Watch {
            r#type,
            scope,
            selector,
            field_selector,
            since,
            output,
        } => {
            let served = resolve(&mut client, &r#type, scope.asked()).await?;
            let namespace = scope.namespace_for(&served);
            let mut printer = Printer::new(output.output)
                .with_namespace(namespace.is_empty() && served.namespaced);
            let config = watcher::Config {
                label_selector: (!selector.is_empty()).then_some(selector),
                field_selector: (!field_selector.is_empty()).then_some(field_selector),
                ..watcher::Config::default()
            };
            let api = dynamic_api(client, &served, &namespace);
            watch(api, config, since, &mut printer, &mut out).await?;
        }
    }
    out.flush()?;
    Ok(())
}

/// The served type as a `DynamicObject` API, in `namespace` ("" for all
/// of them).
fn dynamic_api(client: Client, served: &ResourceStatus, namespace: &str) -> Api<DynamicObject> {
    let resource = served.resource.clone().unwrap_or_default();
    let api_resource = ApiResource {
        api_version: match resource.group.as_str() {
            "" => resource.version.clone(),
            group => format!("{group}/{}", resource.version),
        },
        group: resource.group,
        version: resource.version,
        kind: served.kind.clone(),
        plural: resource.resource,
    };
    match namespace {
        "" => Api::all_with(client, &api_resource),
        ns => Api::namespaced_with(client, ns, &api_resource),
    }
}

/// Prints the changes `api` watches as they come, through the client
/// library's watcher: when the server goes away (a pod of a rollout, a
/// restart) it resumes after the last change printed on the next server
/// that answers, so nothing is missed and nothing printed twice. It ends
/// only on a refusal (unknown type, bad selector, no permission), or when
/// `since` is older than the server's history.
async fn watch(
    api: Api<DynamicObject>,
    config: watcher::Config,
    since: Option<String>,
    printer: &mut Printer,
    out: &mut impl Write,
) -> Result<()> {
    let mut changes = std::pin::pin!(kube_fanout_client::watcher::changes(
        api,
        config,
        since.clone()
    ));
    let mut first = true;
    while let Some(change) = changes.next().await {
        let change = match change {
            Ok(change) => change,
            Err(WatchError::Refused(status)) => return Err(ClientError::Status(status).into()),
            Err(err @ WatchError::Decode(_)) => {
                eprintln!("warning: {err}; skipped");
                continue;
            }
        };
        if std::mem::take(&mut first)
            && let (Some(since), Event::Init) = (&since, &change.event)
        {
            anyhow::bail!(
                "resourceVersion {since} is too old: the server no longer holds the changes after it; watch without --since for the current objects"
            );
        }
        let object = match change.event {
            Event::InitApply(object) | Event::Apply(object) | Event::Delete(object) => {
                serde_json::to_value(&object)?
            }
            // The end of a re-sync unit's replacement: it says the rows
            // before it apply together.
            Event::InitDone if change.resync => {
                json!({"metadata": {"resourceVersion": change.resource_version}})
            }
            // The start and end of a snapshot have no row.
            Event::Init | Event::InitDone => continue,
        };
        printer.event(
            out,
            change.kind,
            &change.resource_version,
            change.resync,
            &object,
        )?;
        out.flush()?;
    }
    Ok(())
}

/// Finds TYPE among the served types as kubectl would: by API path, plural
/// resource name, `resource.group`, or kind, ignoring case; among those the
/// caller may list in `namespace` ("" for cluster-wide).
async fn resolve(client: &mut Client, asked: &str, namespace: &str) -> Result<ResourceStatus> {
    let served = client.list_resources_in(namespace).await?.resources;
    let wanted = asked.to_ascii_lowercase();
    let found = served.iter().find(|s| {
        let r = s.resource.clone().unwrap_or_default();
        wanted == resource_path(s)
            || wanted == r.resource
            || wanted == format!("{}.{}", r.resource, r.group)
            || wanted == s.kind.to_ascii_lowercase()
    });
    found.cloned().ok_or_else(|| {
        UnknownType {
            asked: asked.to_owned(),
            served: served
                .iter()
                .map(resource_path)
                .collect::<Vec<_>>()
                .join(", "),
        }
        .into()
    })
}

/// How often progress is reported while a snapshot streams.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Reads a snapshot through Watch, which streams (a unary List would
/// arrive in one piece with nothing to show meanwhile), reporting progress
/// on stderr when it takes a while.
async fn list(
    client: &mut Client,
    request: WatchRequest,
    what: &str,
) -> Result<(String, Vec<Value>)> {
    let mut events = client.watch(request).await?;
    let mut objects = Vec::new();
    let started = Instant::now();
    let mut reported = started;
    while let Some(event) = events.next().await {
        let event = event.map_err(ClientError::from)?;
        if event.r#type() == EventType::Bookmark {
            if ends_initial_events(&event) {
                if reported != started {
                    eprintln!(
                        "{what}: {} objects in {:.1?}",
                        objects.len(),
                        started.elapsed()
                    );
                }
                return Ok((event.resource_version, objects));
            }
            continue;
        }
        objects.push(serde_json::from_str(&event.object)?);
        if reported.elapsed() >= PROGRESS_EVERY {
            reported = Instant::now();
            eprintln!("{what}: {} objects so far...", objects.len());
        }
    }
    Err(anyhow!(
        "the server ended the stream before the end of the snapshot"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags with `extra`, the token given and the server on 0.0.0.0
    /// (not loopback, yet a connection to it fails at once on this
    /// machine, with no network).
    fn cli(extra: &[&str]) -> Cli {
        let mut args = vec!["kubectl-fanout", "--server", "0.0.0.0:1", "--token", "t"];
        args.extend_from_slice(extra);
        args.push("resources");
        Cli::parse_from(args)
    }

    #[tokio::test]
    async fn a_token_goes_in_plaintext_to_another_machine_only_when_insecure() {
        let refused = connect(&cli(&[])).await.unwrap_err();
        assert_eq!(exit_code(&refused), 2, "{refused:#}");
        let message = format!("{refused:#}");
        assert!(
            message.contains("refusing to send the bearer token in plaintext to 0.0.0.0:1")
                && message.contains("--insecure-plaintext-token")
                && !message.contains("is kube-fanout running there"),
            "{message}"
        );
        // With the flag it is sent: the connection is attempted (and fails,
        // nothing listens there).
        let unreachable = connect(&cli(&["--insecure-plaintext-token"]))
            .await
            .unwrap_err();
        assert_eq!(exit_code(&unreachable), 3, "{unreachable:#}");
    }
}

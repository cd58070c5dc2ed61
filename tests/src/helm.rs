//! The real helm (`tests/tools/install.sh helm`) pointed at a test API
//! server, and the objects of a release's manifest.

use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use kube::{
    api::{Api, DynamicObject},
    core::GroupVersionKind,
    discovery::{Scope, pinned_kind},
};
use serde::Deserialize as _;
use tokio::process::Command;

use crate::{controlplane::ControlPlane, support::tool};

/// The real helm, pointed at the test API server, with its state in the
/// control plane's temporary directory.
pub struct Helm {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl Helm {
    /// helm for `cp`'s admin user.
    pub fn new(cp: &ControlPlane) -> Result<Self> {
        Ok(Helm {
            bin: tool("helm")?,
            kubeconfig: cp.kubeconfig.clone(),
            home: cp.dir().join("helm"),
        })
    }

    /// Runs helm; its stdout, or an error quoting its stderr.
    pub async fn run(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(&self.bin)
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .env_remove("KUBECONFIG")
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .context("running helm")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.success(), "helm {args:?} failed:\n{stderr}");
        Ok(String::from_utf8(out.stdout)?)
    }

    /// The objects of a release's current manifest.
    pub async fn manifest(&self, release: &str, namespace: &str) -> Result<Vec<DynamicObject>> {
        parse_manifest(
            &self
                .run(&["get", "manifest", release, "-n", namespace])
                .await?,
        )
    }
}

/// The objects of a multi-document YAML manifest.
pub fn parse_manifest(yaml: &str) -> Result<Vec<DynamicObject>> {
    let mut objects = Vec::new();
    for document in serde_yaml::Deserializer::from_str(yaml) {
        let value = serde_yaml::Value::deserialize(document)?;
        if value.is_null() {
            continue;
        }
        objects.push(serde_json::from_value(serde_json::to_value(value)?)?);
    }
    Ok(objects)
}

/// "Kind/name" of an object, for messages and sets.
pub fn kind_name(object: &DynamicObject) -> String {
    format!(
        "{}/{}",
        object.types.as_ref().map_or("?", |t| t.kind.as_str()),
        object.metadata.name.as_deref().unwrap_or("?")
    )
}

/// The API for `object`'s kind, found through discovery, in its namespace
/// (`namespace` if it names none).
pub async fn api_for(
    client: &kube::Client,
    object: &DynamicObject,
    namespace: &str,
) -> Result<Api<DynamicObject>> {
    let types = object.types.as_ref().context("no apiVersion/kind")?;
    let gvk = GroupVersionKind::try_from(types)?;
    let (resource, capabilities) = pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("discovering {}", kind_name(object)))?;
    Ok(match capabilities.scope {
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            object.metadata.namespace.as_deref().unwrap_or(namespace),
            &resource,
        ),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    })
}

/// Whether the API server holds `object`.
pub async fn exists(client: &kube::Client, object: &DynamicObject) -> Result<bool> {
    let name = object.metadata.name.as_deref().context("unnamed object")?;
    Ok(api_for(client, object, "default")
        .await?
        .get_opt(name)
        .await?
        .is_some())
}

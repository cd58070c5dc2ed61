//! Writers: random creates, merge patches of data and labels (so objects
//! move in and out of the subscribers' selectors) and deletes of ConfigMaps
//! across a few namespaces, through the API server that stays up.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures::FutureExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use rand::{Rng, SeedableRng, rngs::StdRng, seq::IndexedRandom};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::model::{APPS, TIERS};

/// Names per namespace: few enough that creates, patches and deletes of
/// the same objects interleave.
pub const NAMES: u32 = 24;

/// How long one write may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Failed writes in a row (other than the expected races) before a writer
/// gives up.
const MAX_FAILURES: u32 = 50;

/// Writes until `stop`.
pub async fn write(
    client: kube::Client,
    namespaces: Vec<String>,
    seed: u64,
    stop: CancellationToken,
) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = 0;
    while !stop.is_cancelled() {
        let ns = namespaces.choose(&mut rng).context("no namespace")?;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let name = format!("cm-{}", rng.random_range(0..NAMES));
        let write = match rng.random_range(0..10) {
            0..3 => {
                let mut cm = ConfigMap::default();
                cm.metadata.name = Some(name.clone());
                cm.metadata.labels = Some(
                    labels(&mut rng)
                        .as_object()
                        .into_iter()
                        .flatten()
                        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                        .collect(),
                );
                cm.data = Some([("value".to_owned(), rng.random::<u32>().to_string())].into());
                let api = api.clone();
                async move { api.create(&PostParams::default(), &cm).await.map(drop) }.boxed()
            }
            3..8 => {
                let patch = match rng.random_range(0..3) {
                    0 => json!({ "data": { "value": rng.random::<u32>().to_string() } }),
                    1 => json!({ "metadata": { "labels": labels(&mut rng) } }),
                    _ => json!({
                        "metadata": { "labels": labels(&mut rng) },
                        "data": { "value": rng.random::<u32>().to_string() },
                    }),
                };
                let (api, name) = (api.clone(), name.clone());
                async move {
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                        .await
                        .map(drop)
                }
                .boxed()
            }
            _ => async move { api.delete(&name, &DeleteParams::default()).await.map(drop) }.boxed(),
        };
        // Stopping does not wait for a write, and no write waits forever
        // (an API server whose etcd died answers slowly or never).
        let outcome = tokio::select! {
            () = stop.cancelled() => break,
            outcome = tokio::time::timeout(WRITE_TIMEOUT, write) => outcome,
        };
        let failure = match outcome {
            Ok(Ok(())) => None,
            // Races between writers: exists, not found, conflict.
            Ok(Err(kube::Error::Api(s))) if [404, 409].contains(&s.code) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!("no answer within {WRITE_TIMEOUT:?}")),
        };
        match failure {
            None => failures = 0,
            Some(e) => {
                failures += 1;
                tracing::warn!(error = %e, failures, "write failed");
                if failures >= MAX_FAILURES {
                    bail!("{failures} writes failed in a row, last: {e}");
                }
            }
        }
    }
    Ok(())
}

/// A random merge patch of the two labels: each set, removed (null) or
/// left alone.
fn labels(rng: &mut impl Rng) -> Value {
    let mut labels = serde_json::Map::new();
    for (key, values) in [("app", &APPS[..]), ("tier", &TIERS[..])] {
        match rng.random_range(0..3) {
            0 => {
                labels.insert(key.into(), Value::Null);
            }
            1 => {
                let v = values.choose(rng).copied().unwrap_or_default();
                labels.insert(key.into(), Value::String(v.into()));
            }
            _ => {}
        }
    }
    Value::Object(labels)
}

/// Creates a ConfigMap named `name`-<random> in `namespace` and returns
/// its RV: a change every replica publishes, to mark a point in time.
pub async fn mark(client: &kube::Client, namespace: &str, name: &str) -> Result<u64> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut cm = ConfigMap::default();
    cm.metadata.generate_name = Some(format!("{name}-"));
    let cm = tokio::time::timeout(WRITE_TIMEOUT, api.create(&PostParams::default(), &cm))
        .await
        .with_context(|| format!("no answer within {WRITE_TIMEOUT:?}"))??;
    let rv = cm.metadata.resource_version.unwrap_or_default();
    rv.parse()
        .with_context(|| format!("resourceVersion {rv:?}"))
}

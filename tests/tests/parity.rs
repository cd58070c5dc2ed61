//! Where kube-fanout's answers once differed from the API server's, on a
//! real kube-apiserver, each compared with the API server's own answer to
//! the same request: label selectors with `>` and `<`, the DELETED an
//! object leaving a selector arrives as, and what a type not synced yet is
//! answered (kube-fanout's side: the API server's cannot be cued). (A Table answer to the reflector's LIST is a scripted
//! reflector test: a real server sends a Table only when asked for one.)

use std::{collections::BTreeSet, time::Duration};

use anyhow::{Context, Result, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube_fanout_client::{
    ClientError,
    proto::{EventType, GetRequest, ListRequest, WatchRequest},
};
use kube_fanout_tests::{
    controlplane::{ControlPlane, user_token},
    fanout::Fanout,
    support::*,
};
use serde_json::{Value, json};
use tonic::Code;
use tonic_types::StatusExt;

const NS: &str = "parity";

/// ConfigMaps named for their label `n` (absent for `n-missing`).
const LABELS: &[(&str, Option<&str>)] = &[
    ("n-0", Some("0")),
    ("n-5", Some("5")),
    ("n-007", Some("007")),
    ("n-10", Some("10")),
    ("n-max", Some("9223372036854775807")),
    ("n-over", Some("99999999999999999999")),
    ("n-word", Some("five")),
    ("n-empty", Some("")),
    ("n-missing", None),
];

async fn create_labelled(client: &kube::Client, name: &str, n: Option<&str>) -> Result<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.to_owned());
    cm.metadata.labels = n.map(|n| [("n".to_owned(), n.to_owned())].into());
    Ok(api.create(&PostParams::default(), &cm).await?)
}

/// The names a List with `selector` returns, or the refusal (the API
/// server's 400, kube-fanout's INVALID_ARGUMENT) as `Err`.
type Answer = Result<BTreeSet<String>, String>;

async fn api_server_list(client: &kube::Client, selector: &str) -> Result<Answer> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    match api.list(&ListParams::default().labels(selector)).await {
        Ok(list) => Ok(Ok(list
            .items
            .into_iter()
            .filter_map(|cm| cm.metadata.name)
            .collect())),
        Err(kube::Error::Api(status)) if status.code == 400 => Ok(Err(status.message)),
        Err(err) => Err(err.into()),
    }
}

async fn fanout_list(client: &mut kube_fanout_client::Client, selector: &str) -> Result<Answer> {
    let request = ListRequest {
        resource: Some(configmaps()),
        namespace: NS.into(),
        label_selector: selector.into(),
        ..ListRequest::default()
    };
    match client.list(request).await {
        Ok(list) => Ok(Ok(list
            .objects
            .iter()
            .map(|o| Ok(object_key(o)?.trim_start_matches("parity/").to_owned()))
            .collect::<Result<_>>()?)),
        Err(ClientError::Status(status)) if status.code() == Code::InvalidArgument => {
            Ok(Err(status.message().to_owned()))
        }
        Err(err) => Err(err.into()),
    }
}

/// `key>N` and `key<N` select exactly what the API server's List selects:
/// the label's value read as a 64-bit integer and compared strictly, a
/// missing label, an empty one, a word or a number past 64 bits never
/// matching, spaces allowed around the operator; and what the API server
/// refuses (no integer, a sign, `>=`), kube-fanout refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greater_and_less_than_label_selectors_select_what_the_api_server_selects() -> Result<()> {
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, NS).await?;
    for (name, n) in LABELS {
        create_labelled(&cp.client, name, *n).await?;
    }
    let fanout = Fanout::start(cp.client.clone(), &["v1/configmaps"]).await?;
    fanout.wait_synced().await?;
    let mut client = fanout.client().await?;
    let mut matched = 0;
    for selector in [
        "n>4",
        "n<6",
        "n>4,n<11",
        "n > 6 , n < 1000",
        "n>6",
        "n<0",
        "n>0",
        "n<1",
        "n>9223372036854775806",
        "n<9223372036854775807",
        "n,n<5",
        "n!=5,n>1",
        "n in (5,10),n>6",
        "m<1",
        "n>",
        "n<word",
        "n>-1",
        "n>+1",
        "n>=1",
        "n>1.5",
        "n>99999999999999999999",
    ] {
        let api = api_server_list(&cp.client, selector).await?;
        let ours = fanout_list(&mut client, selector).await?;
        match (&api, &ours) {
            (Ok(expected), Ok(got)) => {
                ensure!(
                    expected == got,
                    "{selector:?}: the API server lists {expected:?}, kube-fanout {got:?}"
                );
                matched += usize::from(!expected.is_empty());
            }
            (Err(_), Err(_)) => {}
            _ => bail!("{selector:?}: the API server answers {api:?}, kube-fanout {ours:?}"),
        }
    }
    ensure!(matched >= 8, "only {matched} selectors selected anything");
    fanout.stop().await?;
    Ok(())
}

/// An object's JSON without what kube-fanout strips (managedFields).
fn comparable(mut object: Value) -> Value {
    if let Some(meta) = object["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    object
}

/// An object that stops matching a watch's selector arrives as DELETED
/// carrying exactly what the API server's own watch with that selector
/// sends: its last matching state, with metadata.resourceVersion the
/// change's. The selector is a `>`, so its dispatch index (the label's
/// presence) is exercised too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_leaving_a_selector_is_deleted_as_the_api_servers_watch_deletes_it() -> Result<()>
{
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, NS).await?;
    create_labelled(&cp.client, "leaver", Some("5")).await?;
    create_labelled(&cp.client, "stayer", Some("6")).await?;
    let fanout = Fanout::start(cp.client.clone(), &["v1/configmaps"]).await?;
    fanout.wait_synced().await?;
    let api: Api<ConfigMap> = Api::namespaced(cp.client.clone(), NS);
    let from = api
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .context("list without RV")?;
    let selector = "n>4";
    let mut theirs = api
        .watch(&WatchParams::default().labels(selector), &from)
        .await?
        .boxed();
    let mut ours = fanout
        .client()
        .await?
        .watch(WatchRequest {
            resource: Some(configmaps()),
            namespace: NS.into(),
            label_selector: selector.into(),
            resource_version: from.clone(),
            ..WatchRequest::default()
        })
        .await?;
    let patch = json!({ "metadata": { "labels": { "n": "3" } } });
    let left = api
        .patch("leaver", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let left_rv = left
        .metadata
        .resource_version
        .context("patched without RV")?;

    let deleted = loop {
        let event = tokio::time::timeout(EVENT_TIMEOUT, theirs.try_next())
            .await
            .context("no event from the API server's watch")??
            .context("the API server's watch ended")?;
        match event {
            WatchEvent::Deleted(cm) => break cm,
            WatchEvent::Bookmark(_) => {}
            other => bail!("the API server's watch sent {other:?}"),
        }
    };
    let event = next_change(&mut ours).await?;
    ensure!(
        event.r#type() == EventType::Deleted && event.resource_version == left_rv,
        "kube-fanout sent {:?} at {} for the change at {left_rv}",
        event.r#type(),
        event.resource_version
    );
    let theirs = comparable(serde_json::to_value(&deleted)?);
    let ours = comparable(serde_json::from_str(&event.object)?);
    ensure!(
        theirs["metadata"]["resourceVersion"] == left_rv.as_str()
            && theirs["metadata"]["labels"]["n"] == "5",
        "the API server's DELETED is the last matching state at the change's RV: {theirs}"
    );
    ensure!(
        theirs == ours,
        "the API server's DELETED\n{theirs}\nkube-fanout's\n{ours}"
    );
    fanout.stop().await?;
    Ok(())
}

/// A type kube-fanout cannot sync (its ServiceAccount, here user "erin",
/// may not list secrets, so its first list keeps failing) is refused with
/// a retry hint, never answered with an empty List or a NotFound: Watch,
/// List and Get end UNAVAILABLE with reason NotSynced and a RetryInfo
/// after the bounded wait for the first sync. The API server answers the
/// same state of its own cache (initialising, KEP-4568) with 429 and
/// Retry-After, which the Go client makes of this status; a real API
/// server's cache cannot be held uninitialised on cue, so that side is
/// read from its source (k8s.io/apiserver pkg/storage/cacher, cacher.go
/// Watch and GetList), not run here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_not_synced_is_refused_with_a_retry_hint_never_an_empty_answer() -> Result<()> {
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, NS).await?;
    let secrets: Api<Secret> = Api::namespaced(cp.client.clone(), NS);
    let mut secret = Secret::default();
    secret.metadata.name = Some("fine".into());
    secrets.create(&PostParams::default(), &secret).await?;
    let unprivileged = cp.client_with_token(&user_token("erin"))?;
    let fanout = Fanout::start(unprivileged, &["v1/secrets"]).await?;
    let mut client = fanout.client().await?;
    let resource = kube_fanout_client::resource("v1/secrets")?;
    let not_synced = |what: &str, err: ClientError| -> Result<Duration> {
        let ClientError::Status(status) = err else {
            bail!("{what}: {err}");
        };
        ensure!(status.code() == Code::Unavailable, "{what}: {status:?}");
        let info = status.get_details_error_info().context("no ErrorInfo")?;
        ensure!(
            info.reason == kube_fanout_proto::NOT_SYNCED,
            "{what}: {status:?}"
        );
        status
            .get_details_retry_info()
            .and_then(|r| r.retry_delay)
            .with_context(|| format!("{what}: no RetryInfo"))
    };
    let mut stream = client
        .watch(WatchRequest {
            resource: Some(resource.clone()),
            namespace: NS.into(),
            send_initial_events: true,
            allow_bookmarks: true,
            ..WatchRequest::default()
        })
        .await?;
    let ended = match tokio::time::timeout(EVENT_TIMEOUT, stream.message()).await? {
        Err(status) => ClientError::Status(status),
        Ok(event) => bail!("kube-fanout's watch of an unsynced type sent {event:?}"),
    };
    let delay = not_synced("Watch", ended)?;
    ensure!(delay >= Duration::from_secs(1), "RetryInfo {delay:?}");
    let list = client
        .list(ListRequest {
            resource: Some(resource.clone()),
            namespace: NS.into(),
            ..ListRequest::default()
        })
        .await;
    not_synced("List", refused("listed", list)?)?;
    let get = client
        .get(GetRequest {
            resource: Some(resource),
            namespace: NS.into(),
            name: "fine".into(),
            metadata_only: false,
        })
        .await;
    not_synced("Get", refused("got", get)?)?;
    fanout.stop().await?;
    Ok(())
}

/// The error of a call that should have failed.
fn refused<T: std::fmt::Debug>(what: &str, answer: Result<T, ClientError>) -> Result<ClientError> {
    match answer {
        Ok(answer) => bail!("kube-fanout {what} an unsynced type: {answer:?}"),
        Err(err) => Ok(err),
    }
}

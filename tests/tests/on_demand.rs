//! On-demand types on the real API server (issue 28): kube-fanout started
//! with no `--resource` serves a CRD installed afterwards to an
//! authorized caller, exactly as the API server's own watch does; a
//! caller who may not list it starts nothing (the API server sees no
//! list or watch of it); an idle type stops (its watch on the API server
//! ends) and starts again exactly; deleting the CRD ends its subscribers
//! with NOT_FOUND "NoLongerServed"; and the bound on types refuses the
//! next one with RESOURCE_EXHAUSTED.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context, Result, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::{
    api::{
        Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams,
        WatchEvent as KubeEvent, WatchParams,
    },
    core::GroupVersionKind,
};
use kube_fanout::security::{AuthOptions, Security};
use kube_fanout_auth::reviews::ReviewClient;
use kube_fanout_client::{
    Client,
    proto::{EventType, ListResourcesRequest, Origin, ResourceRef, WatchEvent, WatchRequest},
    watcher::ends_initial_events,
};
use kube_fanout_core::on_demand::{AllowList, OnDemandOptions};
use kube_fanout_tests::{
    clients::plaintext,
    controlplane::{ControlPlane, client_for, user_token},
    eventually::{Look, eventually},
    fanout::Fanout,
    rbac::{grant, user},
    support::{create_namespace, http_get, next_event},
};
use serde_json::{Value, json};
use tonic::{Code, Streaming};
use tonic_types::StatusExt;

const GROUP: &str = "ondemand.example.com";
const NAMESPACE: &str = "od";
/// The idle time the tests run kube-fanout with.
const IDLE: Duration = Duration::from_secs(3);

/// A CRD `PLURAL.ondemand.example.com` (namespaced, v1), served once
/// discovery lists it.
async fn install_crd(client: &kube::Client, plural: &str, kind: &str) -> Result<()> {
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                }}},
            }],
        },
    }))?;
    crds(client).create(&PostParams::default(), &crd).await?;
    eventually(format!("the {plural} CRD served by discovery"))
        .within(Duration::from_secs(30))
        .until_done(async || {
            Ok(
                match client
                    .list_api_group_resources(&format!("{GROUP}/v1"))
                    .await
                {
                    Ok(list) if list.resources.iter().any(|r| r.name == plural) => Look::Done(()),
                    other => Look::NotYet(other.map(|l| l.resources.len())),
                },
            )
        })
        .await
}

fn crds(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    )
}

/// The API server's own API for the custom resource in [`NAMESPACE`].
fn custom(client: &kube::Client, plural: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", kind), plural),
    )
}

fn resource(plural: &str) -> ResourceRef {
    ResourceRef {
        group: GROUP.into(),
        version: "v1".into(),
        resource: plural.into(),
    }
}

fn watch_request(plural: &str) -> WatchRequest {
    WatchRequest {
        resource: Some(resource(plural)),
        namespace: NAMESPACE.into(),
        send_initial_events: true,
        allow_bookmarks: true,
        ..WatchRequest::default()
    }
}

async fn create(api: &Api<DynamicObject>, kind: &str, name: &str, size: u64) -> Result<()> {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": kind,
        "metadata": {"name": name},
        "spec": {"size": size},
    }))?;
    api.create(&PostParams::default(), &object).await?;
    Ok(())
}

/// An object by name with its resourceVersion and spec: what is compared.
type State = BTreeMap<String, (String, Value)>;

fn entry(object: &Value) -> (String, (String, Value)) {
    let meta = &object["metadata"];
    (
        meta["name"].as_str().unwrap_or_default().to_owned(),
        (
            meta["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            object["spec"].clone(),
        ),
    )
}

/// Reads kube-fanout's snapshot: its objects and the RV that ends it.
async fn snapshot(stream: &mut Streaming<WatchEvent>) -> Result<(State, String)> {
    let mut state = State::new();
    loop {
        let event = next_event(stream).await?;
        if ends_initial_events(&event) {
            return Ok((state, event.resource_version));
        }
        ensure!(
            event.r#type() == EventType::Added,
            "{event:?} in the snapshot"
        );
        state.extend([entry(&serde_json::from_str(&event.object)?)]);
    }
}

/// The API server's own list at exactly `rv`.
async fn list_at(api: &Api<DynamicObject>, rv: &str) -> Result<State> {
    let list = api
        .list(
            &ListParams::default()
                .at(rv)
                .matching(kube::api::VersionMatch::Exact),
        )
        .await?;
    list.items
        .iter()
        .map(|o| Ok(entry(&serde_json::to_value(o)?)))
        .collect()
}

/// A change as both sides show it: type, name, resourceVersion, spec.
type Change = (String, String, String, Value);

/// The next `n` changes of kube-fanout's stream (bookmarks skipped).
async fn fanout_changes(stream: &mut Streaming<WatchEvent>, n: usize) -> Result<Vec<Change>> {
    let mut changes = Vec::new();
    while changes.len() < n {
        let event = next_event(stream).await?;
        let kind = match event.r#type() {
            EventType::Bookmark => continue,
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
            other => bail!("unexpected {other:?}"),
        };
        let (name, (rv, spec)) = entry(&serde_json::from_str(&event.object)?);
        ensure!(rv == event.resource_version, "{event:?}");
        changes.push((kind.to_owned(), name, rv, spec));
    }
    Ok(changes)
}

/// The next `n` changes of the API server's own watch.
async fn apiserver_changes(
    stream: &mut (impl futures::Stream<Item = kube::Result<KubeEvent<DynamicObject>>> + Unpin),
    n: usize,
) -> Result<Vec<Change>> {
    let mut changes = Vec::new();
    while changes.len() < n {
        let event = tokio::time::timeout(Duration::from_secs(20), stream.try_next())
            .await
            .context("no event from the API server's watch")??
            .context("the API server's watch ended")?;
        let (kind, object) = match event {
            KubeEvent::Added(o) => ("ADDED", o),
            KubeEvent::Modified(o) => ("MODIFIED", o),
            KubeEvent::Deleted(o) => ("DELETED", o),
            KubeEvent::Bookmark(_) => continue,
            KubeEvent::Error(e) => bail!("the API server's watch failed: {e:?}"),
        };
        let (name, (rv, spec)) = entry(&serde_json::to_value(&object)?);
        changes.push((kind.to_owned(), name, rv, spec));
    }
    Ok(changes)
}

/// Waits (up to four idle times) until one on-demand type has stopped
/// for idleness: `what` names the wait in its failure.
async fn first_idle_stop(fanout: &Fanout, what: &str) -> Result<()> {
    eventually(what)
        .within(IDLE * 4)
        .every(Duration::from_millis(100))
        .until(
            async || metric(fanout, "kube_fanout_on_demand_stops_total{reason=\"idle\"}").await,
            |stops| *stops == 1,
        )
        .await?;
    Ok(())
}

/// The watches of `resource` the API server is serving now.
async fn apiserver_watches(cp: &ControlPlane, resource: &str) -> Result<f64> {
    cp.metric_sum("apiserver_longrunning_requests", resource, "verb=\"WATCH\"")
        .await
}

/// The LISTs (and finished WATCHes) of `resource` the API server has
/// answered.
async fn apiserver_reads(cp: &ControlPlane, resource: &str) -> Result<f64> {
    let lists = cp
        .metric_sum("apiserver_request_total", resource, "verb=\"LIST\"")
        .await?;
    let watches = cp
        .metric_sum("apiserver_request_total", resource, "verb=\"WATCH\"")
        .await?;
    Ok(lists + watches)
}

/// kube-fanout's metric lines starting with `prefix`, by labels.
async fn metrics(fanout: &Fanout, prefix: &str) -> Result<BTreeMap<String, u64>> {
    let text = http_get(fanout.metrics_addr.context("metrics")?, "/metrics").await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect())
}

async fn metric(fanout: &Fanout, line: &str) -> Result<u64> {
    Ok(metrics(fanout, line).await?.get(line).copied().unwrap_or(0))
}

/// A rule allowing `verbs` on `resources` of [`GROUP`].
fn custom_rule(verbs: &[&str], resources: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![GROUP.into()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    }
}

/// kube-fanout with no configured type, on-demand types of [`GROUP`]
/// (at most `max_types`, idle after [`IDLE`]), and authorization on.
async fn start_fanout(cp: &ControlPlane, max_types: usize) -> Result<Fanout> {
    let auth = AuthOptions {
        review_client: Some(ReviewClient(client_for(&cp.kubeconfig).await?)),
        // Scraped by the test on loopback without a token.
        metrics: false,
        ..AuthOptions::default()
    };
    Fanout::start_with(cp.client.clone(), &[], |o| {
        o.security = Security {
            auth: Some(auth),
            ..Security::default()
        };
        o.on_demand = Some(OnDemandOptions {
            allow: AllowList(vec![format!("{GROUP}/*").parse().expect("a pattern")]),
            max_types,
            idle: IDLE,
        });
    })
    .await
}

/// The types ListResources shows `client` cluster-wide, with their origin.
async fn listed(client: &mut Client) -> Result<Vec<(String, Origin)>> {
    let answer = client
        .grpc()
        .list_resources(ListResourcesRequest::default())
        .await?
        .into_inner();
    Ok(answer
        .resources
        .iter()
        .map(|r| {
            let gvr = r.resource.clone().unwrap_or_default();
            (gvr.resource, r.origin())
        })
        .collect())
}

/// Waits until the API server lets `token` list `plural` of [`GROUP`].
async fn until_allowed(cp: &ControlPlane, token: &str, plural: &str, kind: &str) -> Result<()> {
    let api = custom(&cp.client_with_token(token)?, plural, kind);
    eventually(format!(
        "the API server allowing the grant to list {plural}"
    ))
    .within(Duration::from_secs(20))
    .until_ok(async || api.list(&ListParams::default()).await)
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_crd_installed_later_is_served_on_demand_stops_when_idle_and_ends_when_deleted()
-> Result<()> {
    kube_fanout_tests::init_logging();
    let cp = ControlPlane::start().await?;
    let admin = cp.client.clone();
    create_namespace(&admin, NAMESPACE).await?;
    let fanout = start_fanout(&cp, 10).await?;

    // Installed after kube-fanout started, with objects in it.
    install_crd(&admin, "widgets", "Widget").await?;
    let widgets = custom(&admin, "widgets", "Widget");
    for (name, size) in [("w1", 1), ("w2", 2), ("w3", 3)] {
        create(&widgets, "Widget", name, size).await?;
    }
    grant(
        &admin,
        "",
        "alice-reads-widgets",
        vec![custom_rule(&["get", "list", "watch"], &["widgets"])],
        vec![user("alice")],
    )
    .await?;
    until_allowed(&cp, &user_token("alice"), "widgets", "Widget").await?;

    // bob may not list widgets: PERMISSION_DENIED, and nothing starts:
    // the API server answers no list or watch of widgets meanwhile and
    // serves no watch of them, and kube-fanout holds no type.
    let reads_before = apiserver_reads(&cp, "widgets").await?;
    let mut bob = plaintext(fanout.addr, &user_token("bob")).await?;
    let denied = bob
        .grpc()
        .watch(watch_request("widgets"))
        .await
        .expect_err("bob may not watch widgets");
    ensure!(denied.code() == Code::PermissionDenied, "{denied:?}");
    let denied_list = bob
        .grpc()
        .list(kube_fanout_client::proto::ListRequest {
            resource: Some(resource("widgets")),
            namespace: NAMESPACE.into(),
            ..Default::default()
        })
        .await
        .expect_err("bob may not list widgets");
    ensure!(
        denied_list.code() == Code::PermissionDenied,
        "{denied_list:?}"
    );
    // Long enough for a reflector that had started to have listed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        apiserver_reads(&cp, "widgets").await? == reads_before,
        "the API server answered a list or watch of widgets for a denied caller"
    );
    ensure!(apiserver_watches(&cp, "widgets").await? == 0.0);
    ensure!(metric(&fanout, "kube_fanout_on_demand_starts_total").await? == 0);

    // alice may: her watch starts the type; its snapshot is the API
    // server's list at the snapshot's RV.
    let mut alice = plaintext(fanout.addr, &user_token("alice")).await?;
    let mut watch = alice
        .grpc()
        .watch(watch_request("widgets"))
        .await?
        .into_inner();
    let (state, rv) = snapshot(&mut watch).await?;
    ensure!(state.len() == 3, "{state:?}");
    ensure!(
        state == list_at(&widgets, &rv).await?,
        "the snapshot at {rv} differs from the API server's list"
    );
    ensure!(metric(&fanout, "kube_fanout_on_demand_starts_total").await? == 1);
    ensure!(metric(&fanout, "kube_fanout_on_demand_types{state=\"in_use\"}").await? == 1);
    ensure!(
        listed(&mut alice).await? == [("widgets".to_owned(), Origin::OnDemand)],
        "ListResources shows the on-demand type"
    );
    ensure!(
        apiserver_watches(&cp, "widgets").await? == 1.0,
        "kube-fanout's one watch"
    );

    // Live: the same changes, in the same order, at the same RVs, as the
    // API server's own watch from the snapshot's RV.
    let mut own = widgets.watch(&WatchParams::default(), &rv).await?.boxed();
    create(&widgets, "Widget", "w4", 4).await?;
    widgets
        .patch(
            "w1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"size": 10}})),
        )
        .await?;
    widgets.delete("w2", &DeleteParams::default()).await?;
    let through_fanout = fanout_changes(&mut watch, 3).await?;
    let from_apiserver = apiserver_changes(&mut own, 3).await?;
    ensure!(
        through_fanout == from_apiserver,
        "kube-fanout: {through_fanout:#?}\nAPI server: {from_apiserver:#?}"
    );
    drop(own);

    // Nobody uses it: idle, then stopped after the idle time, and the API
    // server's watch of widgets ends.
    drop(watch);
    eventually("the type idle")
        .within(Duration::from_secs(5))
        .every(Duration::from_millis(50))
        .until(
            async || metric(&fanout, "kube_fanout_on_demand_types{state=\"idle\"}").await,
            |idle| *idle == 1,
        )
        .await?;
    first_idle_stop(&fanout, "the idle type stopped").await?;
    eventually("the API server's watch of widgets ended")
        .within(Duration::from_secs(10))
        .every(Duration::from_millis(100))
        .until(
            async || apiserver_watches(&cp, "widgets").await,
            |w| *w == 0.0,
        )
        .await?;
    ensure!(
        listed(&mut alice).await?.is_empty(),
        "a stopped type is not listed"
    );

    // Changed while stopped; the next subscriber starts it again, from a
    // fresh snapshot that holds the change, and follows it live.
    create(&widgets, "Widget", "w5", 5).await?;
    let mut again = alice
        .grpc()
        .watch(watch_request("widgets"))
        .await?
        .into_inner();
    let (state, rv) = snapshot(&mut again).await?;
    ensure!(
        state.contains_key("w5") && !state.contains_key("w2"),
        "{state:?}"
    );
    ensure!(
        state == list_at(&widgets, &rv).await?,
        "the second snapshot at {rv} differs"
    );
    ensure!(metric(&fanout, "kube_fanout_on_demand_starts_total").await? == 2);
    let mut own = widgets.watch(&WatchParams::default(), &rv).await?.boxed();
    widgets
        .patch(
            "w5",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"size": 50}})),
        )
        .await?;
    ensure!(fanout_changes(&mut again, 1).await? == apiserver_changes(&mut own, 1).await?);
    drop(own);

    // The CRD deleted: its objects go (DELETED, as the API server's own
    // watch shows), then the watch ends NOT_FOUND, NoLongerServed.
    crds(&admin)
        .delete(&format!("widgets.{GROUP}"), &DeleteParams::default())
        .await?;
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match again.message().await {
                Ok(Some(event)) => {
                    ensure!(
                        matches!(event.r#type(), EventType::Deleted | EventType::Bookmark),
                        "{event:?} while the CRD goes"
                    );
                }
                Ok(None) => bail!("the watch ended without a status"),
                Err(status) => return Ok(status),
            }
        }
    })
    .await
    .context("the watch outlived its CRD")??;
    ensure!(ended.code() == Code::NotFound, "{ended:?}");
    ensure!(
        ended.message()
            == format!("resource {GROUP}/v1/widgets is no longer served by the API server"),
        "{ended:?}"
    );
    let info = ended.get_details_error_info().context("an ErrorInfo")?;
    ensure!(
        info.reason == kube_fanout_proto::NO_LONGER_SERVED,
        "{info:?}"
    );
    ensure!(
        metric(
            &fanout,
            "kube_fanout_on_demand_stops_total{reason=\"removed\"}"
        )
        .await?
            == 1
    );
    ensure!(listed(&mut alice).await?.is_empty());
    // A new request now is answered as for any type the API server lacks.
    let gone = alice
        .grpc()
        .watch(watch_request("widgets"))
        .await
        .expect_err("no widgets any more");
    ensure!(gone.code() == Code::NotFound, "{gone:?}");
    fanout.stop().await
}

#[tokio::test]
async fn the_bound_the_allow_list_and_unknown_types_refuse_as_documented() -> Result<()> {
    kube_fanout_tests::init_logging();
    let cp = ControlPlane::start().await?;
    let admin = cp.client.clone();
    create_namespace(&admin, NAMESPACE).await?;
    install_crd(&admin, "widgets", "Widget").await?;
    install_crd(&admin, "gadgets", "Gadget").await?;
    grant(
        &admin,
        "",
        "alice-reads-everything",
        vec![PolicyRule {
            api_groups: Some(vec!["*".into()]),
            resources: Some(vec!["*".into()]),
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            ..PolicyRule::default()
        }],
        vec![user("alice")],
    )
    .await?;
    until_allowed(&cp, &user_token("alice"), "gadgets", "Gadget").await?;
    let fanout = start_fanout(&cp, 1).await?;
    let mut alice = plaintext(fanout.addr, &user_token("alice")).await?;

    // One type held (a watch open on it)...
    let mut widgets = alice
        .grpc()
        .watch(watch_request("widgets"))
        .await?
        .into_inner();
    snapshot(&mut widgets).await?;
    // ... so the next is refused, naming the bound, with no list of it.
    let reads_before = apiserver_reads(&cp, "gadgets").await?;
    let refused = alice
        .grpc()
        .watch(watch_request("gadgets"))
        .await
        .expect_err("over the bound");
    ensure!(refused.code() == Code::ResourceExhausted, "{refused:?}");
    ensure!(
        refused.message().contains("--on-demand-max-types"),
        "{refused:?}"
    );
    ensure!(apiserver_reads(&cp, "gadgets").await? == reads_before);
    ensure!(apiserver_watches(&cp, "gadgets").await? == 0.0);
    ensure!(
        metric(
            &fanout,
            "kube_fanout_on_demand_refusals_total{reason=\"max_types\"}"
        )
        .await?
            == 1
    );

    // Outside the allow-list (configmaps): NOT_FOUND as for any type not
    // served, naming the allow-list.
    let outside = alice
        .grpc()
        .watch(WatchRequest {
            resource: Some(kube_fanout_client::resource("v1/configmaps")?),
            ..WatchRequest::default()
        })
        .await
        .expect_err("not allowed on demand");
    ensure!(outside.code() == Code::NotFound, "{outside:?}");
    ensure!(
        outside
            .message()
            .contains(&format!("--on-demand-resources={GROUP}/*")),
        "{outside:?}"
    );
    // Once the held type is freed (idle), the other one fits.
    drop(widgets);
    first_idle_stop(&fanout, "widgets freed").await?;
    // Unknown upstream (with a slot free, so discovery is asked): NOT_FOUND
    // too, and no slot kept.
    let unknown = alice
        .grpc()
        .watch(watch_request("nothings"))
        .await
        .expect_err("no such type");
    ensure!(unknown.code() == Code::NotFound, "{unknown:?}");
    ensure!(unknown.message().contains("does not serve"), "{unknown:?}");
    ensure!(
        metric(
            &fanout,
            "kube_fanout_on_demand_refusals_total{reason=\"not_found\"}"
        )
        .await?
            == 1
    );
    let mut gadgets = alice
        .grpc()
        .watch(watch_request("gadgets"))
        .await?
        .into_inner();
    snapshot(&mut gadgets).await?;
    fanout.stop().await
}

//! Field selectors on a real kube-apiserver: for every type and field the
//! test control plane serves, kube-fanout's snapshot and live stream with a
//! field selector equal the API server's own watch with the same selector
//! (same objects, same event types, transitions in and out included), and
//! a field the API server refuses is refused by kube-fanout in its words.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use anyhow::{Context, Result, bail, ensure};
use futures::{StreamExt, TryStreamExt, future::try_join_all};
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::{
    api::{
        Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams,
        WatchEvent as ApiEvent, WatchParams,
    },
    core::GroupVersionKind,
};
use kube_fanout_client::{
    Client, ClientError,
    proto::{EventType, WatchEvent, WatchRequest},
    watcher::ends_initial_events,
};
use kube_fanout_tests::{
    controlplane::{ControlPlane, Options, user_token},
    eventually::{Look, eventually},
    fanout::Fanout,
    rbac::{grant, rule, user},
    support::*,
};
use serde_json::{Value, json};
use tokio::sync::watch;
use tonic::Streaming;

/// The API server's watches end after this long; each sends a bookmark
/// 2 s before, which must be at or past the last write.
const API_WATCH_SECS: u32 = 20;

const NS: &str = "fs";

/// A served type, as kube-fanout names it and as kube-rs reaches it.
struct Type {
    fanout: &'static str,
    api: ApiResource,
    namespaced: bool,
}

fn ty(fanout: &'static str, kind: &str, namespaced: bool) -> Type {
    let (gv, plural) = fanout.rsplit_once('/').expect("group/version/resource");
    let (group, version) = gv.rsplit_once('/').unwrap_or(("", gv));
    Type {
        fanout,
        api: ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, kind),
            plural,
        ),
        namespaced,
    }
}

struct Types {
    pods: Type,
    nodes: Type,
    namespaces: Type,
    secrets: Type,
    services: Type,
    rcs: Type,
    replicasets: Type,
    jobs: Type,
    csrs: Type,
    events: Type,
    events_v1: Type,
    slices: Type,
    widgets: Type,
}

impl Types {
    fn new() -> Self {
        Types {
            pods: ty("v1/pods", "Pod", true),
            nodes: ty("v1/nodes", "Node", false),
            namespaces: ty("v1/namespaces", "Namespace", false),
            secrets: ty("v1/secrets", "Secret", true),
            services: ty("v1/services", "Service", true),
            rcs: ty("v1/replicationcontrollers", "ReplicationController", true),
            replicasets: ty("apps/v1/replicasets", "ReplicaSet", true),
            jobs: ty("batch/v1/jobs", "Job", true),
            csrs: ty(
                "certificates.k8s.io/v1/certificatesigningrequests",
                "CertificateSigningRequest",
                false,
            ),
            events: ty("v1/events", "Event", true),
            events_v1: ty("events.k8s.io/v1/events", "Event", true),
            slices: ty("resource.k8s.io/v1/resourceslices", "ResourceSlice", false),
            widgets: ty("fields.example.com/v1/widgets", "Widget", true),
        }
    }

    fn all(&self) -> [&Type; 13] {
        [
            &self.pods,
            &self.nodes,
            &self.namespaces,
            &self.secrets,
            &self.services,
            &self.rcs,
            &self.replicasets,
            &self.jobs,
            &self.csrs,
            &self.events,
            &self.events_v1,
            &self.slices,
            &self.widgets,
        ]
    }
}

/// Writes objects and remembers, per type, the RV of the last write.
struct Writer {
    client: kube::Client,
    last: BTreeMap<&'static str, u64>,
}

impl Writer {
    fn api(&self, t: &Type) -> Api<DynamicObject> {
        if t.namespaced {
            Api::namespaced_with(self.client.clone(), NS, &t.api)
        } else {
            Api::all_with(self.client.clone(), &t.api)
        }
    }

    fn note(&mut self, t: &Type, object: &DynamicObject) -> Result<()> {
        let rv: u64 = object
            .metadata
            .resource_version
            .as_deref()
            .context("written object without RV")?
            .parse()?;
        let last = self.last.entry(t.fanout).or_default();
        *last = (*last).max(rv);
        Ok(())
    }

    async fn create(&mut self, t: &Type, object: Value) -> Result<()> {
        let mut object: DynamicObject = serde_json::from_value(object)?;
        object.types = Some(kube::core::TypeMeta {
            api_version: t.api.api_version.clone(),
            kind: t.api.kind.clone(),
        });
        let name = object.metadata.name.clone().unwrap_or_default();
        let created = self
            .api(t)
            .create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating {} {name}", t.fanout))?;
        self.note(t, &created)
    }

    async fn patch(&mut self, t: &Type, name: &str, patch: Value) -> Result<()> {
        let patched = self
            .api(t)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .with_context(|| format!("patching {} {name}", t.fanout))?;
        self.note(t, &patched)
    }

    async fn patch_status(&mut self, t: &Type, name: &str, status: Value) -> Result<()> {
        let patched = self
            .api(t)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .with_context(|| format!("patching the status of {} {name}", t.fanout))?;
        self.note(t, &patched)
    }

    async fn delete(&mut self, t: &Type, name: &str) -> Result<()> {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        let deleted = self
            .api(t)
            .delete(name, &params)
            .await
            .with_context(|| format!("deleting {} {name}", t.fanout))?;
        if let Some(object) = deleted.left() {
            self.note(t, &object)?;
        }
        Ok(())
    }
}

/// What one side showed a watch with one selector: the snapshot as
/// (key, RV), then each later event as (type, key, RV) up to the last write.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    snapshot: BTreeMap<String, String>,
    events: Vec<(String, String, String)>,
}

fn key_and_rv(object: &Value) -> (String, String) {
    let meta = &object["metadata"];
    let name = meta["name"].as_str().unwrap_or_default();
    let key = match meta["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    };
    (
        key,
        meta["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

type ApiStream = futures::stream::BoxStream<'static, kube::Result<ApiEvent<DynamicObject>>>;

/// The API server's watch-list with `selector`, its snapshot read.
async fn api_watch(
    client: &kube::Client,
    t: &Type,
    selector: &str,
) -> Result<(BTreeMap<String, String>, ApiStream), kube::Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &t.api);
    let params = WatchParams::streaming_lists()
        .fields(selector)
        .timeout(API_WATCH_SECS);
    let mut stream = api.watch(&params, "").await?.boxed();
    let mut snapshot = BTreeMap::new();
    loop {
        match tokio::time::timeout(EVENT_TIMEOUT, stream.try_next()).await {
            Ok(Ok(Some(ApiEvent::Added(o)))) => {
                let (key, rv) = key_and_rv(&serde_json::to_value(&o).expect("JSON"));
                snapshot.insert(key, rv);
            }
            Ok(Ok(Some(ApiEvent::Bookmark(b))))
                if b.metadata
                    .annotations
                    .get("k8s.io/initial-events-end")
                    .is_some_and(|v| v == "true") =>
            {
                return Ok((snapshot, stream));
            }
            Ok(Ok(Some(ApiEvent::Bookmark(_)))) => {}
            other => panic!(
                "{} {selector}: unexpected {other:?} in the snapshot",
                t.fanout
            ),
        }
    }
}

/// The rest of the API server's watch, until it ends at its timeout; the
/// bookmark before the end must be at or past `last_write`.
async fn api_rest(mut stream: ApiStream, last_write: u64) -> Result<Vec<(String, String, String)>> {
    let mut events = Vec::new();
    let mut reached = 0u64;
    let wait = Duration::from_secs(u64::from(API_WATCH_SECS) + 10);
    while let Some(event) = tokio::time::timeout(wait, stream.try_next()).await?? {
        let (kind, object) = match event {
            ApiEvent::Added(o) => ("ADDED", o),
            ApiEvent::Modified(o) => ("MODIFIED", o),
            ApiEvent::Deleted(o) => ("DELETED", o),
            ApiEvent::Bookmark(b) => {
                reached = reached.max(b.metadata.resource_version.parse()?);
                continue;
            }
            ApiEvent::Error(e) => bail!("the API server's watch failed: {e}"),
        };
        let (key, rv) = key_and_rv(&serde_json::to_value(&object)?);
        if rv.parse::<u64>()? <= last_write {
            events.push((kind.to_owned(), key, rv));
        }
    }
    ensure!(
        reached >= last_write,
        "the API server's watch ended at RV {reached}, before the last write at {last_write}: raise API_WATCH_SECS"
    );
    Ok(events)
}

/// kube-fanout's watch-list with `selector`, its snapshot read.
async fn fanout_watch(
    client: &mut Client,
    t: &Type,
    selector: &str,
) -> Result<(BTreeMap<String, String>, u64, Streaming<WatchEvent>), ClientError> {
    let mut stream = client
        .watch(WatchRequest {
            resource: Some(kube_fanout_client::resource(t.fanout)?),
            field_selector: selector.to_owned(),
            send_initial_events: true,
            allow_bookmarks: true,
            ..WatchRequest::default()
        })
        .await?;
    let mut snapshot = BTreeMap::new();
    loop {
        let event = next_event(&mut stream).await.expect("a snapshot event");
        if ends_initial_events(&event) {
            let rv = event.resource_version.parse().expect("an RV");
            return Ok((snapshot, rv, stream));
        }
        assert_eq!(event.r#type(), EventType::Added, "{}", t.fanout);
        let (key, rv) = key_and_rv(&serde_json::from_str(&event.object).expect("JSON"));
        snapshot.insert(key, rv);
    }
}

/// The rest of kube-fanout's watch, until it has reached the last write:
/// by an event or a progress bookmark (every half second, once the stream
/// has read past what it sent) at or past it.
async fn fanout_rest(
    mut stream: Streaming<WatchEvent>,
    mut reached: u64,
    mut last_write: watch::Receiver<Option<u64>>,
) -> Result<Vec<(String, String, String)>> {
    let mut events = Vec::new();
    loop {
        if last_write
            .borrow_and_update()
            .is_some_and(|last| reached >= last)
        {
            return Ok(events);
        }
        tokio::select! {
            event = next_event(&mut stream) => {
                let event = event?;
                reached = reached.max(event.resource_version.parse()?);
                if event.r#type() != EventType::Bookmark {
                    // The object's own RV, as on the API server's side: a
                    // DELETED for leaving the selector carries the event's.
                    let (key, rv) = key_and_rv(&serde_json::from_str(&event.object)?);
                    let kind = event.r#type().as_str_name().to_owned();
                    events.push((kind, key, rv));
                }
            }
            changed = last_write.changed() => changed?,
        }
    }
}

/// The field selectors compared, per type: every field of every type the
/// control plane serves, with transitions into and out of each.
fn cases(t: &Types) -> Vec<(&Type, &'static str)> {
    vec![
        (&t.pods, "spec.nodeName=node-a"),
        (&t.pods, "spec.nodeName!=node-a"),
        (&t.pods, "spec.nodeName="),
        (&t.pods, "spec.host=node-a"),
        (&t.pods, "spec.restartPolicy=Never"),
        (&t.pods, "spec.restartPolicy==Always"),
        (&t.pods, "spec.schedulerName=other-scheduler"),
        (&t.pods, "spec.serviceAccountName=robot"),
        (&t.pods, "spec.serviceAccountName=legacy"),
        (&t.pods, "spec.hostNetwork=true"),
        (&t.pods, "spec.hostNetwork=false"),
        (&t.pods, "status.phase=Running"),
        (&t.pods, "status.phase!=Pending"),
        (&t.pods, "status.podIP=10.1.0.7"),
        (&t.pods, "status.podIP="),
        (&t.pods, "status.podIPs="),
        (&t.pods, "status.nominatedNodeName=node-b"),
        (&t.pods, "spec.nodeName=node-b,status.phase=Running"),
        (&t.pods, "metadata.namespace=fs,metadata.name!=pod-new"),
        (&t.nodes, "spec.unschedulable=true"),
        (&t.nodes, "spec.unschedulable=false"),
        (&t.nodes, "metadata.name=node-a"),
        (&t.namespaces, "status.phase=Active"),
        (&t.namespaces, "status.phase=Terminating"),
        (&t.secrets, "type=Opaque"),
        (&t.secrets, "type=kubernetes.io/tls"),
        (&t.secrets, "type!=Opaque,metadata.namespace=fs"),
        (&t.services, "spec.type=NodePort"),
        (&t.services, "spec.type=ClusterIP"),
        (&t.services, "spec.clusterIP=None"),
        (&t.services, "spec.clusterIP=10.0.0.50"),
        (&t.rcs, "status.replicas=2"),
        (&t.rcs, "status.replicas=0"),
        (&t.replicasets, "metadata.name=rs-1"),
        (&t.jobs, "status.successful=1"),
        (&t.jobs, "status.successful=0"),
        (&t.csrs, "spec.signerName=example.com/a"),
        (&t.events, "involvedObject.kind=Pod"),
        (&t.events, "involvedObject.namespace=fs"),
        (&t.events, "involvedObject.name=node-a"),
        (&t.events, "involvedObject.uid=u-1"),
        (&t.events, "involvedObject.apiVersion=v1"),
        (&t.events, "involvedObject.resourceVersion=42"),
        (&t.events, "involvedObject.fieldPath=spec.containers{c}"),
        (&t.events, "reason=Started"),
        (&t.events, r"reason=Back\,off\=x"),
        (&t.events, "reportingComponent=ctl"),
        (&t.events, "source=kubelet"),
        (&t.events, "source=ctl"),
        (&t.events, "type=Warning"),
        (&t.events_v1, "regarding.kind=Pod"),
        (&t.events_v1, "regarding.name=node-a"),
        (&t.events_v1, "regarding.uid=u-1"),
        (&t.events_v1, "reportingController=ctl"),
        (&t.events_v1, "reason=Started"),
        (&t.events_v1, "type=Warning"),
        (&t.slices, "spec.nodeName=node-a"),
        (&t.slices, "spec.driver=b.example.com"),
        (&t.widgets, "spec.color=red"),
        (&t.widgets, "spec.color!=red"),
        (&t.widgets, "spec.color="),
        (&t.widgets, "spec.size=3"),
        (&t.widgets, "spec.enabled=true"),
    ]
}

/// Fields indexed by `--index-field` besides every type's defaults
/// (`metadata.name`, `metadata.namespace`, a pod's or resourceslice's
/// `spec.nodeName`), so that the selectors pinning them are served
/// through the index.
const INDEX_FIELDS: [&str; 6] = [
    "v1/pods=status.phase",
    "v1/pods=spec.schedulerName",
    "v1/events=involvedObject.name",
    "events.k8s.io/v1/events=regarding.name",
    "resource.k8s.io/v1/resourceslices=spec.driver",
    "fields.example.com/v1/widgets=spec.color",
];

/// Whether `selector` requires an exact value (`=` or `==`) of one of
/// `fields`: then kube-fanout registers its watch under that value.
fn pins_one_of(selector: &str, fields: &[&str]) -> bool {
    selector.split(',').any(|term| {
        let (field, _) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .unwrap_or((term, ""));
        !field.ends_with('!') && fields.contains(&field)
    })
}

/// Waits until the metrics say that each type in `expected` has that many
/// watches registered under an indexed value.
async fn wait_indexed(fanout: &Fanout, expected: &[(&str, usize)]) -> Result<()> {
    let addr = fanout.metrics_addr.context("metrics are served")?;
    let lines: Vec<String> = expected
        .iter()
        .map(|(gvr, n)| format!("kube_fanout_indexed_subscribers{{resource=\"{gvr}\"}} {n}"))
        .collect();
    eventually(format!("the metrics saying {lines:?}"))
        .within(Duration::from_secs(10))
        .every(Duration::from_millis(50))
        .until(
            async || {
                let metrics = http_get(addr, "/metrics").await?;
                Ok(metrics
                    .lines()
                    .filter(|l| l.starts_with("kube_fanout_indexed_subscribers"))
                    .map(str::to_owned)
                    .collect::<Vec<_>>())
            },
            |got| lines.iter().all(|l| got.contains(l)),
        )
        .await?;
    Ok(())
}

/// Selectors the API server refuses for the type, with the label it names
/// (none when the selector does not parse; the words differ then).
fn refused(t: &Types) -> Vec<(&Type, &'static str, Option<&'static str>)> {
    let unparsable = [
        "spec.nodeName",
        "spec.nodeName=a=b",
        r"spec.nodeName=a\x",
        r"spec.nodeName=a\",
        "=x",
    ]
    .map(|selector| (&t.pods, selector, None));
    let unsupported = vec![
        (&t.pods, "spec.nope=x", "spec.nope"),
        (
            &t.pods,
            "metadata.name=a, spec.nodeName=b",
            " spec.nodeName",
        ),
        (&t.nodes, "metadata.namespace=x", "metadata.namespace"),
        (&t.namespaces, "name=x", "name"),
        (&t.replicasets, "status.replicas=1", "status.replicas"),
        (&t.jobs, "spec.parallelism=1", "spec.parallelism"),
        (&t.csrs, "metadata.namespace=x", "metadata.namespace"),
        (&t.events_v1, "source=kubelet", "source"),
        (&t.slices, "metadata.namespace=x", "metadata.namespace"),
        (&t.widgets, "spec.other=x", "spec.other"),
    ];
    unsupported
        .into_iter()
        .map(|(ty, selector, label)| (ty, selector, Some(label)))
        .chain(unparsable)
        .collect()
}

async fn install_widgets(client: &kube::Client) -> Result<()> {
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.fields.example.com"},
        "spec": {
            "group": "fields.example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "color": {"type": "string"},
                        "size": {"type": "integer"},
                        "enabled": {"type": "boolean"},
                    }},
                }}},
                "selectableFields": [
                    {"jsonPath": ".spec.color"},
                    {"jsonPath": ".spec.size"},
                    {"jsonPath": ".spec.enabled"},
                ],
            }],
        },
    }))?;
    crds.create(&PostParams::default(), &crd).await?;
    // Served once discovery lists it.
    eventually("the widgets CRD served by discovery")
        .within(Duration::from_secs(20))
        .until_done(async || {
            Ok(
                match client
                    .list_api_group_resources("fields.example.com/v1")
                    .await
                {
                    Ok(list) if list.resources.iter().any(|r| r.name == "widgets") => {
                        Look::Done(())
                    }
                    other => Look::NotYet(other.map(|l| l.resources.len())),
                },
            )
        })
        .await
}

fn pod(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
    json!({"metadata": {"name": name}, "spec": spec})
}

fn csr(name: &str, signer: &str) -> Result<Value> {
    let key = rcgen::KeyPair::generate()?;
    let request = rcgen::CertificateParams::new(vec![format!("{name}.example.com")])?
        .serialize_request(&key)?
        .pem()?;
    Ok(json!({
        "metadata": {"name": name},
        "spec": {
            "request": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, request),
            "signerName": signer,
            "usages": ["digital signature"],
        },
    }))
}

fn event(name: &str, fields: Value) -> Value {
    let mut e = fields;
    e["metadata"] = json!({"name": name});
    e
}

fn slice(name: &str, driver: &str, node: Option<&str>) -> Value {
    let mut spec = json!({
        "driver": driver,
        "pool": {"name": name, "generation": 0, "resourceSliceCount": 1},
    });
    match node {
        Some(node) => spec["nodeName"] = json!(node),
        None => spec["allNodes"] = json!(true),
    }
    json!({"metadata": {"name": name}, "spec": spec})
}

/// The objects every watch starts with.
async fn before(w: &mut Writer, t: &Types) -> Result<()> {
    w.create(&t.nodes, json!({"metadata": {"name": "node-a"}}))
        .await?;
    w.create(
        &t.nodes,
        json!({"metadata": {"name": "node-b"}, "spec": {"unschedulable": true}}),
    )
    .await?;
    w.create(&t.namespaces, json!({"metadata": {"name": "fs-doomed"}}))
        .await?;

    w.create(
        &t.pods,
        pod(
            "pod-bound",
            json!({"nodeName": "node-a", "restartPolicy": "Never", "hostNetwork": true,
                   "schedulerName": "other-scheduler", "serviceAccountName": "robot"}),
        ),
    )
    .await?;
    w.create(
        &t.pods,
        pod("pod-free", json!({"serviceAccount": "legacy"})),
    )
    .await?;
    w.create(&t.pods, pod("pod-running", json!({"nodeName": "node-b"})))
        .await?;
    w.patch_status(
        &t.pods,
        "pod-running",
        json!({"phase": "Running", "podIP": "10.1.0.7", "podIPs": [{"ip": "10.1.0.7"}]}),
    )
    .await?;

    w.create(&t.secrets, json!({"metadata": {"name": "s-opaque"}}))
        .await?;
    w.create(
        &t.secrets,
        json!({"metadata": {"name": "s-tls"}, "type": "kubernetes.io/tls",
               "data": {"tls.crt": "", "tls.key": ""}}),
    )
    .await?;

    let port = json!([{"port": 80}]);
    w.create(
        &t.services,
        json!({"metadata": {"name": "svc-headless"}, "spec": {"clusterIP": "None", "ports": port}}),
    )
    .await?;
    w.create(
        &t.services,
        json!({"metadata": {"name": "svc-ip"}, "spec": {"clusterIP": "10.0.0.50", "ports": port}}),
    )
    .await?;
    w.create(
        &t.services,
        json!({"metadata": {"name": "svc-change"}, "spec": {"ports": port}}),
    )
    .await?;

    let template = json!({"metadata": {"labels": {"app": "x"}},
                          "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    for name in ["rc-1", "rc-2"] {
        w.create(
            &t.rcs,
            json!({"metadata": {"name": name},
                   "spec": {"replicas": 0, "selector": {"app": "x"}, "template": template}}),
        )
        .await?;
    }
    w.patch_status(&t.rcs, "rc-1", json!({"replicas": 2}))
        .await?;
    w.create(
        &t.replicasets,
        json!({"metadata": {"name": "rs-1"},
               "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "x"}}, "template": template}}),
    )
    .await?;
    let mut job_template = template.clone();
    job_template["spec"]["restartPolicy"] = json!("Never");
    w.create(
        &t.jobs,
        json!({"metadata": {"name": "job-1"},
               "spec": {"completions": 3, "template": job_template}}),
    )
    .await?;

    w.create(&t.csrs, csr("csr-a", "example.com/a")?).await?;
    w.create(&t.csrs, csr("csr-b", "example.com/b")?).await?;

    w.create(
        &t.events,
        event(
            "ev-pod",
            json!({
                "involvedObject": {"kind": "Pod", "namespace": NS, "name": "pod-bound", "uid": "u-1",
                                   "apiVersion": "v1", "resourceVersion": "42",
                                   "fieldPath": "spec.containers{c}"},
                "reason": "Started", "source": {"component": "kubelet"}, "type": "Normal",
            }),
        ),
    )
    .await?;
    w.create(
        &t.events,
        event(
            "ev-node",
            json!({
                "involvedObject": {"kind": "Node", "namespace": NS, "name": "node-a"},
                "reason": "Back,off=x", "reportingComponent": "ctl", "reportingInstance": "ctl-1",
                "type": "Warning",
            }),
        ),
    )
    .await?;

    w.create(&t.slices, slice("slice-a", "a.example.com", Some("node-a")))
        .await?;
    w.create(&t.slices, slice("slice-b", "b.example.com", None))
        .await?;

    w.create(
        &t.widgets,
        json!({"metadata": {"name": "w-red"}, "spec": {"color": "red", "size": 3, "enabled": true}}),
    )
    .await?;
    w.create(
        &t.widgets,
        json!({"metadata": {"name": "w-plain"}, "spec": {}}),
    )
    .await?;
    Ok(())
}

/// The changes every watch then sees: objects move into and out of each
/// selector, appear and go. Each type's last write is not a deletion, so
/// its RV is known.
async fn changes(w: &mut Writer, t: &Types) -> Result<()> {
    w.patch_status(&t.pods, "pod-free", json!({"nominatedNodeName": "node-b"}))
        .await?;
    // spec.nodeName "" -> node-a, as a scheduler binds.
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "pod-free"},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"}});
    Api::<DynamicObject>::namespaced_with(w.client.clone(), NS, &t.pods.api)
        .create_subresource::<Value, Value>("binding", "pod-free", &PostParams::default(), &binding)
        .await?;
    w.patch_status(&t.pods, "pod-running", json!({"phase": "Succeeded"}))
        .await?;
    w.patch_status(
        &t.pods,
        "pod-bound",
        json!({"podIP": "10.1.0.8", "podIPs": [{"ip": "10.1.0.8"}]}),
    )
    .await?;
    w.delete(&t.pods, "pod-bound").await?;
    w.create(
        &t.pods,
        pod(
            "pod-new",
            json!({"nodeName": "node-a", "restartPolicy": "Never"}),
        ),
    )
    .await?;

    w.patch(&t.nodes, "node-a", json!({"spec": {"unschedulable": true}}))
        .await?;
    w.patch(
        &t.nodes,
        "node-b",
        json!({"spec": {"unschedulable": false}}),
    )
    .await?;

    // No namespace controller runs: a deleted namespace stays Terminating.
    let doomed = Api::<DynamicObject>::all_with(w.client.clone(), &t.namespaces.api);
    doomed.delete("fs-doomed", &DeleteParams::default()).await?;
    w.create(&t.namespaces, json!({"metadata": {"name": "fs-late"}}))
        .await?;

    w.delete(&t.secrets, "s-tls").await?;
    w.create(&t.secrets, json!({"metadata": {"name": "s-new"}}))
        .await?;

    w.delete(&t.services, "svc-ip").await?;
    w.patch(
        &t.services,
        "svc-change",
        json!({"spec": {"type": "NodePort"}}),
    )
    .await?;

    w.patch_status(&t.rcs, "rc-1", json!({"replicas": 0}))
        .await?;
    w.patch_status(&t.rcs, "rc-2", json!({"replicas": 2}))
        .await?;

    w.delete(&t.replicasets, "rs-1").await?;
    w.create(
        &t.replicasets,
        json!({"metadata": {"name": "rs-2"},
               "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "y"}},
                        "template": {"metadata": {"labels": {"app": "y"}},
                                     "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}),
    )
    .await?;

    w.patch_status(
        &t.jobs,
        "job-1",
        json!({"succeeded": 1, "startTime": "2026-01-01T00:00:00Z"}),
    )
    .await?;

    w.delete(&t.csrs, "csr-b").await?;
    w.create(&t.csrs, csr("csr-c", "example.com/a")?).await?;

    w.patch(
        &t.events,
        "ev-node",
        json!({"type": "Normal", "involvedObject": {"name": "node-b"}}),
    )
    .await?;
    w.patch(
        &t.events,
        "ev-pod",
        json!({"reason": "Killing", "source": {"component": ""}, "reportingComponent": "ctl",
               "reportingInstance": "ctl-1"}),
    )
    .await?;

    w.delete(&t.slices, "slice-b").await?;
    w.create(&t.slices, slice("slice-c", "b.example.com", Some("node-a")))
        .await?;

    w.patch(&t.widgets, "w-red", json!({"spec": {"color": "blue"}}))
        .await?;
    w.patch(
        &t.widgets,
        "w-plain",
        json!({"spec": {"color": "red", "size": 3}}),
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_selectors_select_what_the_api_server_selects() -> Result<()> {
    // Events have no watch cache by default, and a watch served from etcd
    // sends no bookmark that would show it reached the last write.
    let cp = ControlPlane::start_with(Options {
        extra_args: vec!["--watch-cache-sizes=events#1000,events.events.k8s.io#1000".into()],
        ..Options::default()
    })
    .await?;
    let client = cp.client.clone();
    create_namespace(&client, NS).await?;
    install_widgets(&client).await?;
    let t = Arc::new(Types::new());
    let mut w = Writer {
        client: client.clone(),
        last: BTreeMap::new(),
    };
    before(&mut w, &t).await?;

    let resources: Vec<&str> = t.all().iter().map(|t| t.fanout).collect();
    let fanout = Fanout::start_with(client.clone(), &resources, |o| {
        o.limits.progress_interval = Duration::from_millis(500);
        o.index_fields = INDEX_FIELDS
            .iter()
            .map(|f| f.parse().expect("a GVR=FIELD flag"))
            .collect();
    })
    .await?;
    fanout.wait_synced().await?;

    // The API server's refusals, and kube-fanout's in the same words (the
    // label quoted).
    for (ty, selector, label) in refused(&t) {
        let api_err = match api_watch(&client, ty, selector).await {
            Err(kube::Error::Api(status)) if status.code == 400 => status.message,
            Err(other) => bail!("{} {selector}: the API server answered {other}", ty.fanout),
            Ok(_) => bail!("{} {selector}: the API server accepted it", ty.fanout),
        };
        let ours = match fanout_watch(&mut fanout.client().await?, ty, selector).await {
            Err(ClientError::Status(s)) if s.code() == tonic::Code::InvalidArgument => {
                s.message().to_owned()
            }
            Err(other) => bail!("{} {selector}: kube-fanout answered {other}", ty.fanout),
            Ok(_) => bail!("{} {selector}: kube-fanout accepted it", ty.fanout),
        };
        let Some(label) = label else { continue };
        // The API server quotes some labels itself.
        let quoted = format!("{label:?}");
        let expected = if api_err.contains(&quoted) {
            api_err.clone()
        } else {
            api_err.replace(label, &quoted)
        };
        assert!(
            ours.contains(&expected),
            "{} {selector}: kube-fanout said {ours:?}, the API server {api_err:?}",
            ty.fanout
        );
    }

    // Every selector's watch on both sides, snapshots compared.
    let cases = cases(&t);
    let opened = try_join_all(cases.iter().map(|(ty, selector)| {
        let (client, addr) = (client.clone(), fanout.addr);
        async move {
            let (api_snapshot, api_stream) = api_watch(&client, ty, selector).await?;
            let mut ours = Client::connect(&format!("http://{addr}")).await?;
            let (snapshot, rv, stream) = fanout_watch(&mut ours, ty, selector).await?;
            assert_eq!(
                snapshot, api_snapshot,
                "{} {selector}: the snapshots differ",
                ty.fanout
            );
            anyhow::Ok((api_snapshot, api_stream, snapshot, rv, stream))
        }
    }))
    .await?;
    // Every watch pinning an indexed field, the flags' ones included, is
    // registered under it (counted here from the selectors themselves).
    let indexed = |ty: &Type, own: &[&str]| {
        let mut fields = vec!["metadata.name", "metadata.namespace"];
        fields.extend(own);
        fields.extend(INDEX_FIELDS.iter().filter_map(|flag| {
            let (gvr, field) = flag.split_once('=')?;
            (gvr == ty.fanout).then_some(field)
        }));
        let n = cases
            .iter()
            .filter(|(t, selector)| t.fanout == ty.fanout && pins_one_of(selector, &fields))
            .count();
        (ty.fanout, n)
    };
    wait_indexed(
        &fanout,
        &[
            indexed(&t.pods, &["spec.nodeName", "spec.host"]),
            indexed(&t.events, &[]),
            indexed(&t.events_v1, &[]),
            indexed(&t.widgets, &[]),
        ],
    )
    .await?;
    let nonempty = opened.iter().filter(|o| !o.0.is_empty()).count();
    ensure!(
        nonempty * 2 > cases.len(),
        "most snapshots should hold objects, {nonempty} of {} do",
        cases.len()
    );

    let mut tasks = Vec::new();
    let mut senders = Vec::new();
    for ((ty, selector), (api_snapshot, api_stream, snapshot, rv, stream)) in
        cases.iter().zip(opened)
    {
        let (tx, rx) = watch::channel(None);
        senders.push((ty.fanout, tx));
        let (name, selector) = (ty.fanout, *selector);
        let mut last_write = rx.clone();
        tasks.push(tokio::spawn(async move {
            let ours = async {
                fanout_rest(stream, rv, rx)
                    .await
                    .with_context(|| format!("kube-fanout's {name} {selector}"))
            };
            let theirs = async {
                let last = *last_write.wait_for(Option::is_some).await?;
                api_rest(api_stream, last.expect("set"))
                    .await
                    .with_context(|| format!("the API server's {name} {selector}"))
            };
            let (ours, theirs) = tokio::try_join!(ours, theirs)?;
            anyhow::Ok((
                name,
                selector,
                Seen {
                    snapshot,
                    events: ours,
                },
                Seen {
                    snapshot: api_snapshot,
                    events: theirs,
                },
            ))
        }));
    }

    changes(&mut w, &t).await?;
    // events.k8s.io/v1 events are the core events, in another version.
    let core_events = w.last[t.events.fanout];
    w.last.insert(t.events_v1.fanout, core_events);
    for (name, tx) in &senders {
        tx.send(Some(w.last[name]))?;
    }

    let mut transitions = 0;
    for task in tasks {
        let (name, selector, ours, theirs) = task.await??;
        assert_eq!(
            ours, theirs,
            "{name} {selector}: kube-fanout (left) and the API server (right) differ"
        );
        transitions += theirs
            .events
            .iter()
            .filter(|(kind, _, _)| kind != "MODIFIED")
            .count();
    }
    ensure!(transitions > 30, "only {transitions} ADDED/DELETED events");
    fanout.stop().await?;

    without_crd_access(&cp, &t.widgets).await
}

/// kube-fanout that may list and watch widgets but not read their CRD
/// refuses the CRD's selectable fields (it cannot know them) rather than
/// guessing, and still serves the metadata fields.
async fn without_crd_access(cp: &ControlPlane, widgets: &Type) -> Result<()> {
    grant(
        &cp.client,
        "",
        "widget-reader",
        vec![PolicyRule {
            api_groups: Some(vec!["fields.example.com".into()]),
            ..rule(&["list", "watch"], "widgets")
        }],
        vec![user("alice")],
    )
    .await?;
    let alice = cp.client_with_token(&user_token("alice"))?;
    let as_alice = Api::<DynamicObject>::all_with(alice.clone(), &widgets.api);
    eventually("the API server letting alice list widgets")
        .within(Duration::from_secs(20))
        .until_ok(async || as_alice.list(&Default::default()).await)
        .await?;

    let fanout = Fanout::start(alice, &[widgets.fanout]).await?;
    fanout.wait_synced().await?;
    let mut client = fanout.client().await?;
    match fanout_watch(&mut client, widgets, "spec.color=red").await {
        Err(ClientError::Status(s)) if s.code() == tonic::Code::InvalidArgument => assert!(
            s.message()
                .contains(r#""spec.color" is not a known field selector"#),
            "{}",
            s.message()
        ),
        Err(other) => bail!("spec.color=red: kube-fanout answered {other}"),
        Ok(_) => bail!("kube-fanout accepted spec.color=red without the CRD"),
    }
    let (snapshot, _, _) = fanout_watch(&mut client, widgets, "metadata.name=w-red").await?;
    assert_eq!(
        snapshot.keys().collect::<Vec<_>>(),
        [&format!("{NS}/w-red")]
    );
    fanout.stop().await?;
    Ok(())
}

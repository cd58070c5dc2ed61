//! kube-fanout-printers against the real API server: objects of every
//! ported type, in many states (status written through the status
//! subresources, as the control plane has no kubelet or controllers), are
//! listed and got as `as=Table` from the API server and printed from the
//! API server's own JSON of them; the Tables must be the same bytes, with
//! every option the API server takes (includeObject None, Metadata,
//! Object; noHeaders; v1beta1; pages), for custom resources with printer
//! columns of every type, and on watches.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, ensure};
use futures::{AsyncBufReadExt, StreamExt};
use http::{Request, header};
use k8s_openapi::jiff::Timestamp;
use kube_fanout_printers::{IncludeObject, TableOptions, TablePrinter, TableVersion};
use kube_fanout_tests::{
    controlplane::ControlPlane,
    eventually::eventually,
    tables::{
        KUBECTL_ACCEPT, V1BETA1_ACCEPT, compare_list, compare_object, get, instants, require_same,
        send,
    },
};
use serde_json::{Value, json};

const NS: &str = "printers";

/// The resources ported, with whether they are namespaced.
const TYPES: &[(&str, &str, &str, bool)] = &[
    ("", "v1", "pods", true),
    ("", "v1", "podtemplates", true),
    ("", "v1", "replicationcontrollers", true),
    ("", "v1", "services", true),
    ("", "v1", "endpoints", true),
    ("", "v1", "nodes", false),
    ("", "v1", "namespaces", false),
    ("", "v1", "configmaps", true),
    ("", "v1", "secrets", true),
    ("", "v1", "serviceaccounts", true),
    ("", "v1", "persistentvolumes", false),
    ("", "v1", "persistentvolumeclaims", true),
    ("", "v1", "resourcequotas", true),
    ("", "v1", "limitranges", true),
    ("", "v1", "events", true),
    ("events.k8s.io", "v1", "events", true),
    ("apps", "v1", "deployments", true),
    ("apps", "v1", "replicasets", true),
    ("apps", "v1", "statefulsets", true),
    ("apps", "v1", "daemonsets", true),
    ("apps", "v1", "controllerrevisions", true),
    ("batch", "v1", "jobs", true),
    ("batch", "v1", "cronjobs", true),
    ("autoscaling", "v2", "horizontalpodautoscalers", true),
    ("policy", "v1", "poddisruptionbudgets", true),
    ("networking.k8s.io", "v1", "ingresses", true),
    ("networking.k8s.io", "v1", "ingressclasses", false),
    ("networking.k8s.io", "v1", "networkpolicies", true),
    ("networking.k8s.io", "v1", "servicecidrs", false),
    ("networking.k8s.io", "v1", "ipaddresses", false),
    ("discovery.k8s.io", "v1", "endpointslices", true),
    ("rbac.authorization.k8s.io", "v1", "roles", true),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", false),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", true),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        false,
    ),
    ("storage.k8s.io", "v1", "storageclasses", false),
    ("storage.k8s.io", "v1", "csidrivers", false),
    ("storage.k8s.io", "v1", "csinodes", false),
    ("storage.k8s.io", "v1", "csistoragecapacities", true),
    ("storage.k8s.io", "v1", "volumeattachments", false),
    ("storage.k8s.io", "v1", "volumeattributesclasses", false),
    ("coordination.k8s.io", "v1", "leases", true),
    ("scheduling.k8s.io", "v1", "priorityclasses", false),
    ("node.k8s.io", "v1", "runtimeclasses", false),
    (
        "certificates.k8s.io",
        "v1",
        "certificatesigningrequests",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicies",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        false,
    ),
    ("flowcontrol.apiserver.k8s.io", "v1", "flowschemas", false),
    (
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "prioritylevelconfigurations",
        false,
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        false,
    ),
    ("apiregistration.k8s.io", "v1", "apiservices", false),
    ("resource.k8s.io", "v1", "deviceclasses", false),
    ("resource.k8s.io", "v1", "resourceclaims", true),
    ("resource.k8s.io", "v1", "resourceclaimtemplates", true),
    ("resource.k8s.io", "v1", "resourceslices", false),
];

/// The collection path of a resource (across namespaces for namespaced
/// ones: the list of every namespace has the API server's own objects too).
fn collection(group: &str, version: &str, resource: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}/{resource}")
    } else {
        format!("/apis/{group}/{version}/{resource}")
    }
}

/// The path of one object.
fn object_path(
    group: &str,
    version: &str,
    resource: &str,
    namespace: Option<&str>,
    name: &str,
) -> String {
    let base = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    match namespace {
        Some(ns) => format!("{base}/namespaces/{ns}/{resource}/{name}"),
        None => format!("{base}/{resource}/{name}"),
    }
}

/// Whole seconds of now, so that every timestamp the fixtures write is in
/// whole seconds (see `tables::instants`).
fn now_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// RFC 3339 of `seconds` since the epoch.
fn at(seconds: i64) -> String {
    Timestamp::from_second(seconds)
        .expect("a time in range")
        .to_string()
}

/// A MicroTime of whole `seconds`.
fn micro(seconds: i64) -> String {
    Timestamp::from_second(seconds)
        .expect("a time in range")
        .strftime("%Y-%m-%dT%H:%M:%S.000000Z")
        .to_string()
}

/// One fixture: created at `path`, then its status written, then deleted
/// when it holds a finalizer (so it stays, being deleted).
struct Fixture {
    path: String,
    body: Value,
    status: Option<Value>,
    delete: bool,
}

fn fixture(path: &str, body: Value) -> Fixture {
    Fixture {
        path: path.to_owned(),
        body,
        status: None,
        delete: false,
    }
}

impl Fixture {
    fn status(mut self, status: Value) -> Fixture {
        self.status = Some(status);
        self
    }

    fn deleted(mut self) -> Fixture {
        self.delete = true;
        self
    }

    async fn create(self, client: &kube::Client) -> Result<()> {
        let created = send(client, "POST", &self.path, &self.body).await?;
        let name = created["metadata"]["name"]
            .as_str()
            .context("a created object has a name")?;
        let path = format!("{}/{name}", self.path);
        if let Some(status) = &self.status {
            send(client, "PATCH", &format!("{path}/status"), status).await?;
        }
        if self.delete {
            let request = Request::delete(&path).body(Vec::new())?;
            client
                .request_text(request)
                .await
                .with_context(|| format!("DELETE {path}"))?;
        }
        Ok(())
    }
}

fn meta(name: &str) -> Value {
    json!({"name": name})
}

fn container(name: &str, image: &str) -> Value {
    json!({"name": name, "image": image})
}

fn template(labels: Value) -> Value {
    json!({
        "metadata": {"labels": labels},
        "spec": {"containers": [container("web", "nginx:1.27"), container("log", "busybox:1.36")]},
    })
}

fn running(name: &str, ready: bool, restarts: i64, started: i64, finished: Option<i64>) -> Value {
    let mut status = json!({
        "name": name, "image": "busybox:1.36", "imageID": "", "ready": ready, "restartCount": restarts,
        "state": {"running": {"startedAt": at(started)}},
    });
    if let Some(finished) = finished {
        status["lastState"] = json!({"terminated": {"exitCode": 1, "reason": "Error", "startedAt": at(finished - 60), "finishedAt": at(finished)}});
    }
    status
}

fn waiting(name: &str, reason: &str) -> Value {
    json!({"name": name, "image": "busybox:1.36", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": reason}}})
}

fn terminated(
    name: &str,
    exit_code: i64,
    reason: Option<&str>,
    signal: Option<i64>,
    t: i64,
) -> Value {
    let mut state = json!({"exitCode": exit_code, "startedAt": at(t - 30), "finishedAt": at(t)});
    if let Some(reason) = reason {
        state["reason"] = json!(reason);
    }
    if let Some(signal) = signal {
        state["signal"] = json!(signal);
    }
    json!({"name": name, "image": "busybox:1.36", "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": state}})
}

fn condition(kind: &str, status: &str, t: i64) -> Value {
    json!({"type": kind, "status": status, "lastTransitionTime": at(t)})
}

/// Pods in every state the printer tells apart.
fn pods(t: i64) -> Vec<Fixture> {
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    let pod = |name: &str, containers: &[&str]| {
        let containers: Vec<Value> = containers
            .iter()
            .map(|c| container(c, "busybox:1.36"))
            .collect();
        json!({"metadata": meta(name), "spec": {"containers": containers}})
    };
    let with_init = |name: &str, sidecar: bool| {
        let mut body = pod(name, &["main"]);
        let mut sidecar_container = container("sidecar", "envoy:1");
        if sidecar {
            sidecar_container["restartPolicy"] = json!("Always");
        }
        body["spec"]["initContainers"] =
            json!([container("setup", "busybox:1.36"), sidecar_container]);
        body
    };
    let mut running_pod = pod("running", &["web", "log"]);
    running_pod["spec"]["nodeName"] = json!("node-a");
    running_pod["spec"]["readinessGates"] =
        json!([{"conditionType": "example.com/lb"}, {"conditionType": "example.com/dns"}]);
    let mut held = pod("terminating", &["main"]);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let mut lost = held.clone();
    lost["metadata"]["name"] = json!("lost");
    let mut finished_held = held.clone();
    finished_held["metadata"]["name"] = json!("finished-terminating");
    vec![
        fixture(&pods, pod("pending", &["main"])),
        fixture(&pods, running_pod).status(json!({"status": {
            "phase": "Running",
            "podIP": "10.1.2.3", "podIPs": [{"ip": "10.1.2.3"}, {"ip": "fd00::3"}],
            "conditions": [condition("Initialized", "True", t - 600), condition("Ready", "True", t - 500), condition("example.com/lb", "True", t - 400)],
            "containerStatuses": [running("web", true, 3, t - 300, Some(t - 310)), running("log", true, 1, t - 7200, Some(t - 90_000))],
        }})),
        fixture(&pods, pod("crashing", &["main", "helper"])).status(json!({"status": {
            "phase": "Running",
            "containerStatuses": [
                json!({"name": "main", "image": "busybox:1.36", "imageID": "", "ready": false, "restartCount": 12,
                       "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                       "lastState": {"terminated": {"exitCode": 2, "startedAt": at(t - 200), "finishedAt": at(t - 100)}}}),
                running("helper", false, 0, t - 1000, None),
            ],
        }})),
        fixture(&pods, pod("succeeded", &["main"])).status(json!({"status": {
            "phase": "Succeeded",
            "containerStatuses": [terminated("main", 0, Some("Completed"), None, t - 50)],
        }})),
        fixture(&pods, pod("failed", &["main", "second"])).status(json!({"status": {
            "phase": "Failed",
            "containerStatuses": [terminated("main", 137, None, Some(9), t - 40), terminated("second", 3, None, None, t - 40)],
        }})),
        fixture(&pods, pod("evicted", &["main"])).status(json!({"status": {"phase": "Failed", "reason": "Evicted", "message": "out of memory"}})),
        fixture(&pods, pod("completed-running", &["main", "side"])).status(json!({"status": {
            "phase": "Running",
            "conditions": [condition("Ready", "True", t - 20)],
            "containerStatuses": [terminated("main", 0, Some("Completed"), None, t - 10), running("side", true, 0, t - 100, None)],
        }})),
        fixture(&pods, pod("completed-not-ready", &["main", "side"])).status(json!({"status": {
            "phase": "Running",
            "containerStatuses": [terminated("main", 0, Some("Completed"), None, t - 10), running("side", true, 0, t - 100, None)],
        }})),
        fixture(&pods, pod("completed-error", &["main", "side"])).status(json!({"status": {
            "phase": "Running",
            "containerStatuses": [terminated("main", 0, Some("Completed"), None, t - 10), terminated("side", 1, Some("Error"), None, t - 5)],
        }})),
        fixture(&pods, with_init("init-waiting", false)).status(json!({"status": {
            "phase": "Pending",
            "initContainerStatuses": [terminated("setup", 0, Some("Completed"), None, t - 30), waiting("sidecar", "PodInitializing")],
            "containerStatuses": [waiting("main", "PodInitializing")],
        }})),
        fixture(&pods, with_init("init-crashing", false)).status(json!({"status": {
            "phase": "Pending",
            "initContainerStatuses": [waiting("setup", "CrashLoopBackOff"), waiting("sidecar", "PodInitializing")],
        }})),
        fixture(&pods, with_init("init-failed", false)).status(json!({"status": {
            "phase": "Pending",
            "initContainerStatuses": [terminated("setup", 2, None, None, t - 30)],
        }})),
        fixture(&pods, with_init("init-signalled", false)).status(json!({"status": {
            "phase": "Pending",
            "initContainerStatuses": [terminated("setup", 1, None, Some(15), t - 30)],
        }})),
        fixture(&pods, with_init("sidecar", true)).status(json!({"status": {
            "phase": "Running",
            "conditions": [condition("Initialized", "True", t - 60), condition("Ready", "True", t - 50)],
            "initContainerStatuses": [
                terminated("setup", 0, Some("Completed"), None, t - 70),
                json!({"name": "sidecar", "image": "envoy:1", "imageID": "", "ready": true, "started": true, "restartCount": 2,
                       "state": {"running": {"startedAt": at(t - 65)}},
                       "lastState": {"terminated": {"exitCode": 1, "startedAt": at(t - 200), "finishedAt": at(t - 66)}}}),
            ],
            "containerStatuses": [running("main", true, 0, t - 60, None)],
        }})),
        fixture(&pods, pod("gated", &["main"])).status(json!({"status": {
            "phase": "Pending",
            "nominatedNodeName": "node-b",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated", "lastTransitionTime": at(t - 5)}],
        }})),
        fixture(&pods, held).deleted(),
        fixture(&pods, lost).status(json!({"status": {"phase": "Running", "reason": "NodeLost"}})).deleted(),
        fixture(&pods, finished_held).status(json!({"status": {"phase": "Succeeded"}})).deleted(),
    ]
}

/// Objects of the core group other than pods.
fn core(t: i64) -> Vec<Fixture> {
    let ns = |r: &str| format!("/api/v1/namespaces/{NS}/{r}");
    vec![
        fixture(&ns("podtemplates"), json!({"metadata": {"name": "tmpl", "annotations": {"note": "<front> & \u{2028}back"}}, "template": template(json!({"app": "web", "tier": "front"}))})),
        fixture(&ns("replicationcontrollers"), json!({"metadata": meta("rc"), "spec": {"replicas": 3, "selector": {"app": "rc"}, "template": template(json!({"app": "rc"}))}}))
            .status(json!({"status": {"replicas": 2, "readyReplicas": 1}})),
        fixture(&ns("services"), json!({"metadata": meta("cluster"), "spec": {"selector": {"app": "web", "b": "2"}, "ports": [{"port": 80, "targetPort": 8080, "name": "http"}, {"port": 53, "protocol": "UDP", "name": "dns"}]}})),
        fixture(&ns("services"), json!({"metadata": meta("headless"), "spec": {"clusterIP": "None", "ports": [{"port": 80}]}})),
        fixture(&ns("services"), json!({"metadata": meta("nodeport"), "spec": {"type": "NodePort", "externalIPs": ["192.0.2.7", "192.0.2.8"], "ports": [{"port": 443, "nodePort": 30443}]}})),
        fixture(&ns("services"), json!({"metadata": meta("lb-pending"), "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}})),
        fixture(&ns("services"), json!({"metadata": meta("lb"), "spec": {"type": "LoadBalancer", "externalIPs": ["192.0.2.9"], "ports": [{"port": 80}]}}))
            .status(json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.20"}, {"hostname": "a-very-long-load-balancer-name.example.com"}, {"ip": "203.0.113.10"}, {"ip": "203.0.113.10"}]}}})),
        fixture(&ns("services"), json!({"metadata": meta("external"), "spec": {"type": "ExternalName", "externalName": "db.example.com"}})),
        fixture(&ns("endpoints"), json!({"metadata": meta("many"), "subsets": [
            {"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]},
            {"addresses": [{"ip": "fd00::5"}], "ports": [{"port": 8080}]},
        ]})),
        fixture(&ns("endpoints"), json!({"metadata": meta("headless"), "subsets": [{"addresses": [{"ip": "10.0.0.9"}]}]})),
        fixture(&ns("endpoints"), json!({"metadata": meta("empty")})),
        fixture("/api/v1/nodes", json!({"metadata": {"name": "node-a", "labels": {"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/worker": "", "kubernetes.io/role": "edge"}}}))
            .status(json!({"status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": at(t - 10), "lastTransitionTime": at(t - 1000)}],
                "addresses": [{"type": "Hostname", "address": "node-a"}, {"type": "InternalIP", "address": "10.9.0.1"}, {"type": "ExternalIP", "address": "198.51.100.1"}],
                "nodeInfo": {"kubeletVersion": "v1.36.3", "osImage": "Debian GNU/Linux 12", "kernelVersion": "6.1.0", "architecture": "amd64", "containerRuntimeVersion": "containerd://2.0",
                             "machineID": "", "systemUUID": "", "bootID": "", "kubeProxyVersion": "", "operatingSystem": "linux"},
            }})),
        fixture("/api/v1/nodes", json!({"metadata": meta("node-b"), "spec": {"unschedulable": true}}))
            .status(json!({"status": {"conditions": [{"type": "Ready", "status": "False", "lastHeartbeatTime": at(t - 10), "lastTransitionTime": at(t - 10)}]}})),
        fixture("/api/v1/nodes", json!({"metadata": meta("node-c")})),
        fixture(&ns("configmaps"), json!({"metadata": meta("data"), "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AAE="}})),
        fixture(&ns("secrets"), json!({"metadata": meta("opaque"), "stringData": {"user": "x", "password": "y"}})),
        fixture(&ns("secrets"), json!({"metadata": meta("tls"), "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}})),
        fixture(&ns("serviceaccounts"), json!({"metadata": meta("robot")})),
        fixture("/api/v1/persistentvolumes", json!({"metadata": {"name": "pv-bound", "annotations": {"volume.beta.kubernetes.io/storage-class": "beta-class"}}, "spec": {
            "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadWriteOnce", "ReadOnlyMany"],
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "fast", "volumeMode": "Block",
            "claimRef": {"namespace": NS, "name": "claim"}, "hostPath": {"path": "/data"}}}))
            .status(json!({"status": {"phase": "Bound"}})),
        fixture("/api/v1/persistentvolumes", json!({"metadata": {"name": "pv-going", "finalizers": ["example.com/hold"]}, "spec": {
            "capacity": {"storage": "1500M"}, "accessModes": ["ReadWriteOncePod"], "hostPath": {"path": "/gone"}}}))
            .status(json!({"status": {"phase": "Failed", "reason": "Recycling failed"}}))
            .deleted(),
        fixture(&ns("persistentvolumeclaims"), json!({"metadata": meta("claim"), "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}, "volumeName": "pv-bound", "storageClassName": "fast"}}))
            .status(json!({"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce", "ReadWriteMany"], "capacity": {"storage": "10Gi"}}})),
        fixture(&ns("persistentvolumeclaims"), json!({"metadata": meta("waiting"), "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})),
        fixture(&ns("resourcequotas"), json!({"metadata": meta("quota"), "spec": {"hard": {"pods": "10", "requests.cpu": "4", "limits.memory": "8Gi", "limits.cpu": "8"}}}))
            .status(json!({"status": {"hard": {"pods": "10", "requests.cpu": "4", "limits.memory": "8Gi", "limits.cpu": "8"}, "used": {"pods": "3", "requests.cpu": "500m"}}})),
        fixture(&ns("limitranges"), json!({"metadata": meta("limits"), "spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}}]}})),
    ]
}

/// Events of both APIs, with and without series, counts and times.
fn events(t: i64) -> Vec<Fixture> {
    let core_events = format!("/api/v1/namespaces/{NS}/events");
    let new_events = format!("/apis/events.k8s.io/v1/namespaces/{NS}/events");
    vec![
        fixture(
            &core_events,
            json!({"metadata": meta("legacy"), "type": "Warning", "reason": "BackOff", "message": "  Back-off restarting <failed> container\n",
            "involvedObject": {"kind": "Pod", "name": "crashing", "namespace": NS, "fieldPath": "spec.containers{main}"},
            "source": {"component": "kubelet", "host": "node-a"}, "count": 7, "firstTimestamp": at(t - 3600), "lastTimestamp": at(t - 30)}),
        ),
        fixture(
            &core_events,
            json!({"metadata": meta("no-last"), "type": "Normal", "reason": "Scheduled", "message": "assigned",
            "involvedObject": {"kind": "ReplicaSet", "namespace": NS}, "reportingComponent": "scheduler", "reportingInstance": "scheduler-1",
            "firstTimestamp": at(t - 120)}),
        ),
        fixture(
            &new_events,
            json!({"metadata": meta("series"), "type": "Normal", "reason": "Pulled", "note": "image pulled",
            "regarding": {"kind": "Pod", "name": "running", "namespace": NS}, "action": "Pull", "reportingController": "kubelet", "reportingInstance": "node-a",
            "eventTime": micro(t - 900), "series": {"count": 4, "lastObservedTime": micro(t - 60)}}),
        ),
        fixture(
            &new_events,
            json!({"metadata": meta("single"), "type": "Warning", "reason": "Failed", "note": "it failed",
            "regarding": {"kind": "Deployment", "name": "web", "namespace": NS}, "action": "Sync", "reportingController": "example.com/ctl", "reportingInstance": "ctl-0",
            "eventTime": micro(t - 100_000)}),
        ),
    ]
}

/// Workloads of the apps and batch groups.
fn workloads(t: i64) -> Vec<Fixture> {
    let apps = |r: &str| format!("/apis/apps/v1/namespaces/{NS}/{r}");
    let batch = |r: &str| format!("/apis/batch/v1/namespaces/{NS}/{r}");
    let job_template = json!({"spec": {"restartPolicy": "Never", "containers": [container("work", "busybox:1.36")]}});
    let mut held_job = json!({"metadata": {"name": "deleting", "finalizers": ["example.com/hold"]}, "spec": {"template": job_template.clone()}});
    held_job["spec"]["suspend"] = json!(true);
    vec![
        fixture(&apps("deployments"), json!({"metadata": meta("web"), "spec": {"replicas": 3,
            "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "edge"]}, {"key": "canary", "operator": "DoesNotExist"}]},
            "template": template(json!({"app": "web", "tier": "front"}))}}))
            .status(json!({"status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 1, "availableReplicas": 2}})),
        fixture(&apps("replicasets"), json!({"metadata": meta("web-1"), "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "rs"}}, "template": template(json!({"app": "rs"}))}}))
            .status(json!({"status": {"replicas": 2, "readyReplicas": 1}})),
        fixture(&apps("statefulsets"), json!({"metadata": meta("db"), "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": template(json!({"app": "db"}))}}))
            .status(json!({"status": {"replicas": 3, "readyReplicas": 1}})),
        fixture(&apps("daemonsets"), json!({"metadata": meta("agent"), "spec": {"selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"nodeSelector": {"kubernetes.io/os": "linux", "disk": "ssd"}, "containers": [container("agent", "agent:2")]}}}}))
            .status(json!({"status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2, "updatedNumberScheduled": 1, "numberAvailable": 2, "numberMisscheduled": 0}})),
        fixture(&apps("controllerrevisions"), json!({"metadata": {"name": "db-7f", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "not-the-controller", "uid": "00000000-0000-0000-0000-000000000001"},
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "00000000-0000-0000-0000-000000000002", "controller": true}]}, "revision": 4, "data": {}})),
        fixture(&apps("controllerrevisions"), json!({"metadata": {"name": "core-owned", "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "00000000-0000-0000-0000-000000000003", "controller": true}]}, "revision": 1, "data": {}})),
        fixture(&apps("controllerrevisions"), json!({"metadata": meta("orphan"), "revision": 2, "data": {}})),
        fixture(&batch("jobs"), json!({"metadata": meta("running"), "spec": {"parallelism": 3, "completions": 6, "template": job_template.clone()}}))
            .status(json!({"status": {"startTime": at(t - 400), "active": 3, "succeeded": 2}})),
        fixture(&batch("jobs"), json!({"metadata": meta("parallel"), "spec": {"parallelism": 4, "template": job_template.clone()}}))
            .status(json!({"status": {"startTime": at(t - 30), "active": 4}})),
        fixture(&batch("jobs"), json!({"metadata": meta("complete"), "spec": {"template": job_template.clone()}}))
            .status(json!({"status": {"startTime": at(t - 7300), "completionTime": at(t - 100), "succeeded": 1,
                "conditions": [condition("SuccessCriteriaMet", "True", t - 100), condition("Complete", "True", t - 100)]}})),
        fixture(&batch("jobs"), json!({"metadata": meta("failed"), "spec": {"template": job_template.clone()}}))
            .status(json!({"status": {"startTime": at(t - 300), "failed": 1,
                "conditions": [condition("FailureTarget", "True", t - 60), condition("Failed", "True", t - 60)]}})),
        fixture(&batch("jobs"), json!({"metadata": meta("failing"), "spec": {"template": job_template.clone()}}))
            .status(json!({"status": {"startTime": at(t - 300), "failed": 1, "conditions": [condition("FailureTarget", "True", t - 60)]}})),
        fixture(&batch("jobs"), held_job).status(json!({"status": {"conditions": [condition("Suspended", "True", t - 60)]}})).deleted(),
        fixture(&batch("cronjobs"), json!({"metadata": meta("nightly"), "spec": {"schedule": "0 3 * * *", "timeZone": "Europe/Paris", "suspend": true,
            "jobTemplate": {"spec": { "template": {"metadata": {"labels": {"job": "nightly"}}, "spec": {"restartPolicy": "Never", "containers": [container("backup", "restic:0.17")]}}}}}}))
            .status(json!({"status": {"lastScheduleTime": at(t - 86_400 * 3 - 3600), "active": [{"kind": "Job", "name": "nightly-1", "namespace": NS, "apiVersion": "batch/v1"}]}})),
        fixture(&batch("cronjobs"), json!({"metadata": meta("hourly"), "spec": {"schedule": "@hourly", "jobTemplate": {"spec": {"template": job_template}}}})),
    ]
}

/// The other namespaced and cluster types.
fn cluster(t: i64, csr: &str) -> Vec<Fixture> {
    let nsd = |group: &str, r: &str| format!("/apis/{group}/namespaces/{NS}/{r}");
    let all = |group: &str, r: &str| format!("/apis/{group}/{r}");
    let target = |avg: bool, value: &str| {
        if avg {
            json!({"type": "AverageValue", "averageValue": value})
        } else {
            json!({"type": "Value", "value": value})
        }
    };
    let subjects = json!([
        {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"},
        {"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"},
        {"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"},
        {"kind": "ServiceAccount", "name": "robot", "namespace": NS},
    ]);
    vec![
        fixture(&nsd("autoscaling/v2", "horizontalpodautoscalers"), json!({"metadata": meta("many-metrics"), "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "minReplicas": 2, "maxReplicas": 10,
            "metrics": [
                {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}},
                {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "500Mi"}}},
                {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": target(true, "1k")}},
            ]}}))
            .status(json!({"status": {"currentReplicas": 3, "desiredReplicas": 3, "currentMetrics": [
                {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 61, "averageValue": "120m"}}},
            ]}})),
        fixture(&nsd("autoscaling/v2", "horizontalpodautoscalers"), json!({"metadata": meta("external"), "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"}, "maxReplicas": 4,
            "metrics": [
                {"type": "External", "external": {"metric": {"name": "queue"}, "target": target(false, "30")}},
                {"type": "Object", "object": {"metric": {"name": "hits"}, "describedObject": {"kind": "Service", "name": "cluster", "apiVersion": "v1"}, "target": target(true, "2")}},
            ]}}))
            .status(json!({"status": {"currentReplicas": 1, "desiredReplicas": 1, "currentMetrics": [
                {"type": "External", "external": {"metric": {"name": "queue"}, "current": {"value": "12"}}},
            ]}})),
        fixture(&nsd("autoscaling/v2", "horizontalpodautoscalers"), json!({"metadata": meta("none"), "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "idle"}, "maxReplicas": 1}})),
        fixture(&nsd("policy/v1", "poddisruptionbudgets"), json!({"metadata": meta("min"), "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}))
            .status(json!({"status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3, "observedGeneration": 1}})),
        fixture(&nsd("policy/v1", "poddisruptionbudgets"), json!({"metadata": meta("max"), "spec": {"maxUnavailable": "25%"}})),
        fixture(&nsd("networking.k8s.io/v1", "ingresses"), json!({"metadata": meta("many-hosts"), "spec": {"ingressClassName": "nginx",
            "tls": [{"hosts": ["a.example.com"]}],
            "rules": [{"host": "a.example.com"}, {}, {"host": "b.example.com"}, {"host": "c.example.com"}, {"host": "d.example.com"}]}}))
            .status(json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.5"}, {"hostname": "lb.example.com"}]}}})),
        fixture(&nsd("networking.k8s.io/v1", "ingresses"), json!({"metadata": meta("catch-all"), "spec": {"defaultBackend": {"service": {"name": "cluster", "port": {"number": 80}}}}})),
        fixture(&all("networking.k8s.io/v1", "ingressclasses"), json!({"metadata": {"name": "nginx", "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
            "spec": {"controller": "k8s.io/ingress-nginx", "parameters": {"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "external-lb", "scope": "Cluster"}}})),
        fixture(&all("networking.k8s.io/v1", "ingressclasses"), json!({"metadata": meta("plain"), "spec": {"controller": "example.com/ingress", "parameters": {"kind": "ConfigMap", "name": "p", "namespace": NS, "scope": "Namespace"}}})),
        fixture(&nsd("networking.k8s.io/v1", "networkpolicies"), json!({"metadata": meta("deny"), "spec": {"podSelector": {}}})),
        fixture(&nsd("networking.k8s.io/v1", "networkpolicies"), json!({"metadata": meta("web"), "spec": {"podSelector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod", "dev"]}]}}})),
        fixture(&nsd("discovery.k8s.io/v1", "endpointslices"), json!({"metadata": meta("slice"), "addressType": "IPv4",
            "ports": [{"port": 80, "name": "http"}, {"name": "named"}, {}, {"port": 9090, "name": "metrics"}],
            "endpoints": [{"addresses": ["10.0.0.1", "10.0.0.2"]}, {"addresses": ["10.0.0.3"]}, {"addresses": ["10.0.0.4"]}]})),
        fixture(&nsd("discovery.k8s.io/v1", "endpointslices"), json!({"metadata": meta("empty"), "addressType": "FQDN"})),
        fixture(&nsd("rbac.authorization.k8s.io/v1", "roles"), json!({"metadata": meta("reader"), "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})),
        fixture(&nsd("rbac.authorization.k8s.io/v1", "rolebindings"), json!({"metadata": meta("readers"), "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}, "subjects": subjects})),
        fixture(&all("rbac.authorization.k8s.io/v1", "clusterrolebindings"), json!({"metadata": meta("printers-view"), "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}, "subjects": subjects})),
        fixture(&all("storage.k8s.io/v1", "storageclasses"), json!({"metadata": {"name": "fast", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "csi.example.com", "reclaimPolicy": "Retain", "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": true})),
        fixture(&all("storage.k8s.io/v1", "storageclasses"), json!({"metadata": {"name": "beta-default", "annotations": {"storageclass.beta.kubernetes.io/is-default-class": "true"}}, "provisioner": "kubernetes.io/no-provisioner"})),
        fixture(&all("storage.k8s.io/v1", "csidrivers"), json!({"metadata": meta("csi.example.com"), "spec": {"attachRequired": false, "podInfoOnMount": true,
            "tokenRequests": [{"audience": "vault"}, {"audience": "gcp", "expirationSeconds": 3600}], "requiresRepublish": true, "volumeLifecycleModes": ["Persistent", "Ephemeral"]}})),
        fixture(&all("storage.k8s.io/v1", "csidrivers"), json!({"metadata": meta("plain.example.com"), "spec": {}})),
        fixture(&all("storage.k8s.io/v1", "csinodes"), json!({"metadata": meta("node-a"), "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "node-a"}]}})),
        fixture(&nsd("storage.k8s.io/v1", "csistoragecapacities"), json!({"metadata": meta("cap"), "storageClassName": "fast", "capacity": "100Gi"})),
        fixture(&all("storage.k8s.io/v1", "volumeattachments"), json!({"metadata": meta("attach"), "spec": {"attacher": "csi.example.com", "nodeName": "node-a", "source": {"persistentVolumeName": "pv-bound"}}}))
            .status(json!({"status": {"attached": true}})),
        fixture(&all("storage.k8s.io/v1", "volumeattributesclasses"), json!({"metadata": meta("gold"), "driverName": "csi.example.com", "parameters": {"iops": "3000"}})),
        fixture(&nsd("coordination.k8s.io/v1", "leases"), json!({"metadata": meta("leader"), "spec": {"holderIdentity": "pod-1_abc", "leaseDurationSeconds": 15}})),
        fixture(&nsd("coordination.k8s.io/v1", "leases"), json!({"metadata": meta("free"), "spec": {}})),
        fixture(&all("scheduling.k8s.io/v1", "priorityclasses"), json!({"metadata": meta("high"), "value": 100_000, "globalDefault": false, "preemptionPolicy": "Never", "description": "high"})),
        fixture(&all("node.k8s.io/v1", "runtimeclasses"), json!({"metadata": meta("gvisor"), "handler": "runsc"})),
        fixture(&all("certificates.k8s.io/v1", "certificatesigningrequests"), json!({"metadata": meta("pending"), "spec": {
            "request": csr, "signerName": "example.com/signer", "usages": ["client auth"], "expirationSeconds": 86_400 * 30}})),
        fixture(&all("certificates.k8s.io/v1", "certificatesigningrequests"), json!({"metadata": meta("denied"), "spec": {
            "request": csr, "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"]}})),
        fixture(&all("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations"), json!({"metadata": meta("mutator"), "webhooks": [
            webhook("a.example.com"), webhook("b.example.com")]})),
        fixture(&all("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations"), json!({"metadata": meta("validator"), "webhooks": [webhook("v.example.com")]})),
        fixture(&all("admissionregistration.k8s.io/v1", "validatingadmissionpolicies"), json!({"metadata": meta("policy"), "spec": {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["nothing"]}]},
            "validations": [{"expression": "true"}, {"expression": "1 == 1"}]}})),
        fixture(&all("admissionregistration.k8s.io/v1", "validatingadmissionpolicies"), json!({"metadata": meta("bare"), "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["nothing"]}]},
            "validations": [{"expression": "true"}]}})),
        fixture(&all("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings"), json!({"metadata": meta("by-name"), "spec": {
            "policyName": "policy", "validationActions": ["Deny"], "paramRef": {"name": "params", "namespace": NS, "parameterNotFoundAction": "Deny"}}})),
        fixture(&all("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings"), json!({"metadata": meta("any-namespace"), "spec": {
            "policyName": "policy", "validationActions": ["Audit"], "paramRef": {"name": "params", "parameterNotFoundAction": "Allow"}}})),
        fixture(&all("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings"), json!({"metadata": meta("by-selector"), "spec": {
            "policyName": "policy", "validationActions": ["Warn"], "paramRef": {
                "selector": {"matchLabels": {"b": "2", "a": "1"}, "matchExpressions": [{"key": "env", "operator": "In", "values": ["x", "y"]}, {"key": "gone", "operator": "DoesNotExist"}]},
                "parameterNotFoundAction": "Deny"}}})),
        fixture(&all("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings"), json!({"metadata": meta("no-param"), "spec": {"policyName": "bare", "validationActions": ["Deny"]}})),
        fixture(&all("flowcontrol.apiserver.k8s.io/v1", "flowschemas"), json!({"metadata": meta("aaa-printers"), "spec": {
            "priorityLevelConfiguration": {"name": "no-such-level"}, "matchingPrecedence": 1000, "distinguisherMethod": {"type": "ByUser"},
            "rules": [{"subjects": [{"kind": "User", "user": {"name": "nobody"}}], "resourceRules": [{"verbs": ["get"], "apiGroups": ["example.com"], "resources": ["nothing"], "namespaces": ["*"]}]}]}})),
        fixture(&all("flowcontrol.apiserver.k8s.io/v1", "prioritylevelconfigurations"), json!({"metadata": meta("printers-queued"), "spec": {
            "type": "Limited", "limited": {"nominalConcurrencyShares": 5, "limitResponse": {"type": "Queue", "queuing": {"queues": 16, "handSize": 4, "queueLengthLimit": 20}}}}})),
        fixture(&all("resource.k8s.io/v1", "deviceclasses"), json!({"metadata": meta("gpu"), "spec": {}})),
        fixture(&nsd("resource.k8s.io/v1", "resourceclaims"), json!({"metadata": meta("pending"), "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}})),
        fixture(&nsd("resource.k8s.io/v1", "resourceclaims"), json!({"metadata": {"name": "deleting", "finalizers": ["example.com/hold"]}, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}}))
            .deleted(),
        fixture(&nsd("resource.k8s.io/v1", "resourceclaimtemplates"), json!({"metadata": meta("gpu-claim"), "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}}})),
        fixture(&all("resource.k8s.io/v1", "resourceslices"), json!({"metadata": meta("node-a-gpus"), "spec": {"driver": "gpu.example.com", "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1}, "devices": [{"name": "gpu-0"}]}})),
        fixture(&all("resource.k8s.io/v1", "resourceslices"), json!({"metadata": meta("shared-gpus"), "spec": {"driver": "gpu.example.com", "allNodes": true,
            "pool": {"name": "shared", "generation": 1, "resourceSliceCount": 1}, "devices": [{"name": "gpu-1"}]}})),
        fixture(&all("apiregistration.k8s.io/v1", "apiservices"), json!({"metadata": meta("v1.example.com"), "spec": {
            "group": "example.com", "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10, "insecureSkipTLSVerify": true,
            "service": {"namespace": NS, "name": "no-such-service"}}})),
    ]
    .into_iter()
    .chain(std::iter::once(
        fixture(&all("apiregistration.k8s.io/v1", "apiservices"), json!({"metadata": meta("v2.example.com"), "spec": {
            "group": "example.com", "version": "v2", "groupPriorityMinimum": 100, "versionPriority": 9}}))
        .status(json!({"status": {"conditions": [{"type": "Available", "status": "True", "lastTransitionTime": at(t - 5)}]}})),
    ))
    .collect()
}

/// A webhook that no request reaches (it matches a resource that does
/// not exist) and would be ignored if it did.
fn webhook(name: &str) -> Value {
    json!({"name": name, "clientConfig": {"url": "https://127.0.0.1:1/hook"}, "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Ignore",
        "rules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["nothing"]}]})
}

/// A PEM certificate signing request.
fn csr_pem() -> Result<String> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "printer");
    Ok(params.serialize_request(&key)?.pem()?)
}

/// Starts a control plane and creates every fixture of the built-in types.
async fn builtins() -> Result<ControlPlane> {
    let cp = ControlPlane::start().await?;
    let client = &cp.client;
    for ns in [NS, "printers-gone"] {
        send(
            client,
            "POST",
            "/api/v1/namespaces",
            &json!({"metadata": meta(ns)}),
        )
        .await?;
    }
    let t = now_seconds();
    let csr = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(csr_pem()?)
    };
    let crd = fixture(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        widget_crd(),
    );
    let fixtures = [
        pods(t),
        core(t),
        events(t),
        workloads(t),
        cluster(t, &csr),
        vec![crd],
    ]
    .into_iter()
    .flatten();
    for fixture in fixtures {
        fixture.create(client).await?;
    }
    // A namespace being deleted stays Terminating: no namespace controller.
    client
        .request_text(Request::delete("/api/v1/namespaces/printers-gone").body(Vec::new())?)
        .await?;
    let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let approval = |kind: &str| json!({"status": {"conditions": [{"type": kind, "status": "True", "reason": "Test", "message": "by the test"}]}});
    send(
        client,
        "PATCH",
        &format!("{csrs}/pending/approval"),
        &approval("Approved"),
    )
    .await?;
    send(
        client,
        "PATCH",
        &format!("{csrs}/denied/approval"),
        &approval("Denied"),
    )
    .await?;
    Ok(cp)
}

fn printer(group: &str, version: &str, resource: &str) -> Result<TablePrinter> {
    TablePrinter::builtin(group, version, resource)
        .with_context(|| format!("no printer for {group}/{version} {resource}"))
}

/// Every ported type's LIST, as kubectl get asks for it, is the API
/// server's Table byte for byte (its column definitions, every cell, row
/// conditions, each row's PartialObjectMetadata, the list metadata).
#[tokio::test]
async fn builtin_list_tables_are_the_api_servers() -> Result<()> {
    let cp = builtins().await?;
    let options = TableOptions::default();
    let mut rows = 0;
    for &(group, version, resource, _) in TYPES {
        let printer = printer(group, version, resource)?;
        let listed = compare_list(
            &cp.client,
            &printer,
            &collection(group, version, resource),
            "",
            "",
            KUBECTL_ACCEPT,
            &options,
        )
        .await?;
        ensure!(
            listed > 0,
            "{group}/{version} {resource}: the test has no object of it"
        );
        rows += listed;
    }
    tracing::info!(types = TYPES.len(), rows, "every built-in Table equal");
    Ok(())
}

/// Rows carry no object, or the whole object, or no column definitions,
/// or come as v1beta1 Tables, exactly as the API server's do.
#[tokio::test]
async fn builtin_tables_take_every_option_as_the_api_server_does() -> Result<()> {
    let cp = builtins().await?;
    let variants: [(&str, &str, TableOptions); 4] = [
        (
            "includeObject=None",
            KUBECTL_ACCEPT,
            TableOptions {
                include_object: IncludeObject::None,
                ..TableOptions::default()
            },
        ),
        (
            "includeObject=Object",
            KUBECTL_ACCEPT,
            TableOptions {
                include_object: IncludeObject::Object,
                ..TableOptions::default()
            },
        ),
        (
            "-=true",
            KUBECTL_ACCEPT,
            TableOptions {
                no_headers: true,
                ..TableOptions::default()
            },
        ),
        (
            "",
            V1BETA1_ACCEPT,
            TableOptions {
                version: TableVersion::V1Beta1,
                ..TableOptions::default()
            },
        ),
    ];
    for &(group, version, resource, _) in TYPES {
        let printer = printer(group, version, resource)?;
        for (query, accept, options) in &variants {
            compare_list(
                &cp.client,
                &printer,
                &collection(group, version, resource),
                "",
                query,
                accept,
                options,
            )
            .await?;
        }
    }
    Ok(())
}

/// A GET of one object answers its Table, with the object's
/// resourceVersion, for every fixture the test wrote.
#[tokio::test]
async fn one_objects_table_is_the_api_servers() -> Result<()> {
    let cp = builtins().await?;
    let options = TableOptions::default();
    for &(group, version, resource, namespaced) in TYPES {
        let printer = printer(group, version, resource)?;
        let path = if namespaced {
            object_path(group, version, resource, Some(NS), "")
                .trim_end_matches('/')
                .to_owned()
        } else {
            collection(group, version, resource)
        };
        let list: Value = serde_json::from_str(
            &get(&cp.client, &format!("{path}?limit=3"), "application/json").await?,
        )?;
        let items = list["items"].as_array().context("items")?;
        ensure!(
            !items.is_empty(),
            "{group}/{version} {resource}: the test has no object of it"
        );
        for item in items {
            let name = item["metadata"]["name"].as_str().context("name")?;
            let namespace = item["metadata"]["namespace"].as_str();
            compare_object(
                &cp.client,
                &printer,
                &object_path(group, version, resource, namespace, name),
                "",
                &options,
            )
            .await?;
        }
    }
    Ok(())
}

/// A page of a LIST carries the continue token and the count of items
/// left, as the API server's page does.
#[tokio::test]
async fn paged_list_tables_carry_continue_and_remaining_items() -> Result<()> {
    let cp = builtins().await?;
    let options = TableOptions::default();
    for (group, version, resource) in [
        ("", "v1", "pods"),
        ("rbac.authorization.k8s.io", "v1", "clusterroles"),
        ("flowcontrol.apiserver.k8s.io", "v1", "flowschemas"),
    ] {
        let printer = printer(group, version, resource)?;
        let path = collection(group, version, resource);
        compare_list(
            &cp.client,
            &printer,
            &path,
            "limit=2",
            "",
            KUBECTL_ACCEPT,
            &options,
        )
        .await?;
        let page: Value = serde_json::from_str(
            &get(&cp.client, &format!("{path}?limit=2"), "application/json").await?,
        )?;
        let token = page["metadata"]["continue"]
            .as_str()
            .context("a continue token")?;
        ensure!(
            page["metadata"]["remainingItemCount"]
                .as_i64()
                .is_some_and(|n| n > 0),
            "{path}: a remaining count"
        );
        compare_list(
            &cp.client,
            &printer,
            &path,
            &format!("limit=2&continue={token}"),
            "",
            KUBECTL_ACCEPT,
            &options,
        )
        .await?;
    }
    Ok(())
}

/// The comparison catches a divergence of a single cell: the Table of a
/// pod whose restart count is changed by one in the JSON given to the
/// printer differs from the API server's at that cell, and only there.
#[tokio::test]
async fn a_divergence_in_one_cell_is_caught() -> Result<()> {
    let cp = builtins().await?;
    let printer = printer("", "v1", "pods")?;
    let path = object_path("", "v1", "pods", Some(NS), "crashing");
    let object: Value = serde_json::from_str(&get(&cp.client, &path, "application/json").await?)?;
    let before = SystemTime::now();
    let theirs = get(
        &cp.client,
        &format!("{path}?includeObject=None"),
        KUBECTL_ACCEPT,
    )
    .await?;
    let when = instants(before, SystemTime::now());
    let options = TableOptions {
        include_object: IncludeObject::None,
        ..TableOptions::default()
    };
    require_same("the pod as it is", &theirs, &when, |now| {
        printer.object_table(&object.to_string(), &options, now)
    })?;
    let mut planted = object;
    planted["status"]["containerStatuses"][0]["restartCount"] = json!(13);
    let caught = require_same("the pod with one restart more", &theirs, &when, |now| {
        printer.object_table(&planted.to_string(), &options, now)
    });
    let message = format!(
        "{:#}",
        caught.expect_err("a changed restart count must not print the same Table")
    );
    ensure!(
        message.contains(r#".rows[0].cells[3]: theirs "12 ("#),
        "the difference names the Restarts cell: {message}"
    );
    Ok(())
}

/// A watch of Tables sends column definitions with its first event only,
/// and each event's Table is the API server's (default includeObject).
#[tokio::test]
async fn watch_tables_carry_column_definitions_on_the_first_event_only() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let client = &cp.client;
    send(
        client,
        "POST",
        "/api/v1/namespaces",
        &json!({"metadata": meta(NS)}),
    )
    .await?;
    let path = format!("/api/v1/namespaces/{NS}/configmaps");
    let list: Value = serde_json::from_str(&get(client, &path, "application/json").await?)?;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .context("rv")?
        .to_owned();
    let at_rv = format!("{path}?watch=true&resourceVersion={rv}");
    let mut tables = watch_lines(client, &at_rv, KUBECTL_ACCEPT).await?;
    let mut plain = watch_lines(client, &at_rv, "application/json").await?;
    let before = SystemTime::now();
    send(
        client,
        "POST",
        &path,
        &json!({"metadata": meta("a"), "data": {"k": "<v>"}}),
    )
    .await?;
    send(client, "POST", &path, &json!({"metadata": meta("b")})).await?;
    send(
        client,
        "PATCH",
        &format!("{path}/a"),
        &json!({"data": {"k2": "v2"}}),
    )
    .await?;
    client
        .request_text(Request::delete(format!("{path}/b")).body(Vec::new())?)
        .await?;
    let printer = printer("", "v1", "configmaps")?;
    let options = TableOptions::default();
    for i in 0..4 {
        let table_line = next_line(&mut tables).await?;
        let plain_line = next_line(&mut plain).await?;
        let when = instants(before, SystemTime::now());
        let table_event: Value = serde_json::from_str(&table_line)?;
        let plain_event: Value = serde_json::from_str(&plain_line)?;
        ensure!(
            table_event["type"] == plain_event["type"],
            "event {i}: {table_line} against {plain_line}"
        );
        ensure!(
            table_event["object"]["columnDefinitions"].is_null() == (i > 0),
            "event {i}: column definitions on the first only"
        );
        let object = raw_object(&plain_line)?;
        require_same(
            &format!("watch event {i}"),
            &raw_object(&table_line)?,
            &when,
            |now| printer.watch_table(&object, &options, i == 0, now),
        )?;
    }
    Ok(())
}

/// The lines of a watch of `path` (with its query) answered as `accept`.
async fn watch_lines(
    client: &kube::Client,
    path: &str,
    accept: &str,
) -> Result<std::pin::Pin<Box<dyn futures::Stream<Item = std::io::Result<String>> + Send>>> {
    let request = Request::get(path)
        .header(header::ACCEPT, accept)
        .body(Vec::new())?;
    Ok(Box::pin(
        client
            .request_stream(request)
            .await
            .with_context(|| format!("watch {path}"))?
            .lines(),
    ))
}

/// The next line of a watch, within a bound.
async fn next_line(
    lines: &mut std::pin::Pin<Box<dyn futures::Stream<Item = std::io::Result<String>> + Send>>,
) -> Result<String> {
    Ok(tokio::time::timeout(Duration::from_secs(30), lines.next())
        .await
        .context("no watch event in 30 s")?
        .context("the watch ended")??)
}

/// The `object` of a watch line, as the API server wrote it.
fn raw_object(line: &str) -> Result<String> {
    #[derive(serde::Deserialize)]
    struct Event<'a> {
        #[serde(borrow)]
        object: &'a serde_json::value::RawValue,
    }
    Ok(serde_json::from_str::<Event<'_>>(line)?
        .object
        .get()
        .to_owned())
}

/// On a watch-list of Tables with includeObject=None, the bookmark that
/// ends the initial events still carries its metadata (the other rows
/// carry no object), and every event's Table (the initial ADDED, the
/// bookmark, a change) is the API server's.
#[tokio::test]
async fn the_initial_events_bookmark_row_carries_its_metadata_even_without_objects() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let client = &cp.client;
    send(
        client,
        "POST",
        "/api/v1/namespaces",
        &json!({"metadata": meta(NS)}),
    )
    .await?;
    let path = format!("/api/v1/namespaces/{NS}/configmaps");
    send(
        client,
        "POST",
        &path,
        &json!({"metadata": meta("first"), "data": {"a": "1"}}),
    )
    .await?;
    // The objects the API server prints, as it writes them; nothing else
    // writes this one.
    let mut object = get(client, &format!("{path}/first"), "application/json").await?;
    let before = SystemTime::now();
    let watch = format!(
        "{path}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&includeObject=None"
    );
    let mut lines = watch_lines(client, &watch, KUBECTL_ACCEPT).await?;
    let printer = printer("", "v1", "configmaps")?;
    let options = TableOptions {
        include_object: IncludeObject::None,
        ..TableOptions::default()
    };
    let mut kinds = Vec::new();
    while kinds.len() < 3 {
        let line = next_line(&mut lines).await?;
        let event: Value = serde_json::from_str(&line)?;
        let row_object = &event["object"]["rows"][0]["object"];
        let ends_initial = event["type"] == "BOOKMARK"
            && row_object["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true";
        if event["type"] == "BOOKMARK" && !ends_initial {
            continue;
        }
        let printed = if ends_initial {
            ensure!(
                row_object["kind"] == "PartialObjectMetadata",
                "the bookmark row: {line}"
            );
            // The bookmark object is its metadata.
            json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": row_object["metadata"]})
                .to_string()
        } else {
            ensure!(row_object.is_null(), "a row without its object: {line}");
            object.trim_end().to_owned()
        };
        let when = instants(before, SystemTime::now());
        let first = kinds.is_empty();
        require_same(
            &format!("watch event {} ({})", kinds.len(), event["type"]),
            &raw_object(&line)?,
            &when,
            |now| printer.watch_table(&printed, &options, first, now),
        )?;
        kinds.push(event["type"].as_str().unwrap_or("").to_owned());
        if ends_initial {
            send(
                client,
                "PATCH",
                &format!("{path}/first"),
                &json!({"data": {"b": "2"}}),
            )
            .await?;
            object = get(client, &format!("{path}/first"), "application/json").await?;
        }
    }
    ensure!(
        kinds == ["ADDED", "BOOKMARK", "MODIFIED"],
        "events {kinds:?}"
    );
    Ok(())
}

/// A CRD with printer columns of every type, priorities above 0, and
/// paths that find maps, lists, nulls, values of another type or nothing.
fn widget_crd() -> Value {
    let column = |name: &str, kind: &str, path: &str, priority: i32| json!({"name": name, "type": kind, "jsonPath": path, "priority": priority});
    json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        column("Replicas", "integer", ".spec.replicas", 0),
                        column("Ratio", "number", ".spec.ratio", 0),
                        {"name": "Color", "type": "string", "jsonPath": ".spec.color", "description": "The <color> & more", "format": "byte"},
                        column("Enabled", "boolean", ".spec.enabled", 0),
                        column("Started", "date", ".status.started", 0),
                        column("Ready", "string", ".status.conditions[?(@.type==\"Ready\")].status", 0),
                        column("Tags", "string", ".spec.tags", 1),
                        column("Labels", "string", ".metadata.labels", 1),
                        column("Second", "string", ".spec.tags[1]", 2),
                        column("Big", "number", ".spec.big", 1),
                        column("Weight", "integer", ".spec.weight", 1),
                        column("Nothing", "string", ".spec.nothing", 3),
                        column("Owner", "string", ".metadata.ownerReferences[0].name", 1),
                        column("Age", "date", ".metadata.creationTimestamp", 0),
                    ],
                },
                {
                    "name": "v2", "served": true, "storage": false,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                },
            ],
        },
    })
}

/// Custom resources' Tables (LIST with every option, GET) are the API
/// server's for a version with printer columns of every type and for a
/// version that declares none (the Age column).
#[tokio::test]
async fn custom_resource_tables_are_the_api_servers() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let client = &cp.client;
    send(
        client,
        "POST",
        "/api/v1/namespaces",
        &json!({"metadata": meta(NS)}),
    )
    .await?;
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    send(client, "POST", crds, &widget_crd()).await?;
    let widgets = format!("/apis/example.com/v1/namespaces/{NS}/widgets");
    eventually("the widgets API served")
        .until_ok(async || get(client, &widgets, "application/json").await)
        .await?;
    let t = now_seconds();
    let owner = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "00000000-0000-0000-0000-000000000009", "blockOwnerDeletion": true}]);
    for (name, spec, status) in [
        (
            "full",
            json!({"replicas": 3, "ratio": 0.25, "color": "<red>", "enabled": true, "tags": ["a", "b"], "big": 1e21, "weight": 2.9}),
            json!({"started": at(t - 4000), "conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]}),
        ),
        (
            "wrong-types",
            json!({"replicas": "three", "ratio": "x", "color": 12, "enabled": "yes", "tags": "not-a-list", "big": 12_345_678, "weight": -7}),
            json!({"started": "last tuesday", "conditions": "none"}),
        ),
        (
            "nulls",
            json!({"replicas": null, "color": null, "tags": [], "nothing": null}),
            json!({"started": ""}),
        ),
        (
            "future",
            json!({"color": {"nested": {"b": 1, "a": [true, null]}}}),
            json!({"started": at(t + 86_400)}),
        ),
        ("empty", json!({}), json!({})),
    ] {
        let mut body = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name, "labels": {"app": "w", "z": "1"}, "annotations": {"note": "<b> & c"}}, "spec": spec});
        if name == "full" {
            body["metadata"]["ownerReferences"] = owner.clone();
            body["metadata"]["finalizers"] = json!(["example.com/keep"]);
        }
        send(client, "POST", &widgets, &body).await?;
        send(
            client,
            "PATCH",
            &format!("{widgets}/{name}/status"),
            &json!({"status": status}),
        )
        .await?;
    }
    let crd = get(
        client,
        &format!("{crds}/widgets.example.com"),
        "application/json",
    )
    .await?;
    for (version, printer) in [
        ("v1", TablePrinter::for_crd(&crd, "v1")?),
        ("v2", TablePrinter::for_crd(&crd, "v2")?),
    ] {
        let path = format!("/apis/example.com/{version}/namespaces/{NS}/widgets");
        let variants: [(&str, &str, TableOptions); 5] = [
            ("", KUBECTL_ACCEPT, TableOptions::default()),
            (
                "includeObject=None",
                KUBECTL_ACCEPT,
                TableOptions {
                    include_object: IncludeObject::None,
                    ..TableOptions::default()
                },
            ),
            (
                "includeObject=Object",
                KUBECTL_ACCEPT,
                TableOptions {
                    include_object: IncludeObject::Object,
                    ..TableOptions::default()
                },
            ),
            (
                "-=1",
                KUBECTL_ACCEPT,
                TableOptions {
                    no_headers: true,
                    ..TableOptions::default()
                },
            ),
            (
                "",
                V1BETA1_ACCEPT,
                TableOptions {
                    version: TableVersion::V1Beta1,
                    ..TableOptions::default()
                },
            ),
        ];
        for (query, accept, options) in &variants {
            let listed = compare_list(client, &printer, &path, "", query, accept, options).await?;
            ensure!(listed == 5, "{version}: {listed} widgets");
        }
        compare_object(
            client,
            &printer,
            &format!("{path}/full"),
            "",
            &TableOptions::default(),
        )
        .await?;
    }
    // And the CRDs' own Table (the default convertor).
    compare_list(
        client,
        &printer("apiextensions.k8s.io", "v1", "customresourcedefinitions")?,
        crds,
        "",
        "",
        KUBECTL_ACCEPT,
        &TableOptions::default(),
    )
    .await?;
    Ok(())
}

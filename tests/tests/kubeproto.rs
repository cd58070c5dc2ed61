//! kube-fanout-kubeproto against the real API server: for every resource
//! the API server lists (the objects it makes itself, and one or more of
//! each kind this test creates), the protobuf kube-fanout encodes from the
//! JSON it serves is the very protobuf it serves for the same object at the
//! same resourceVersion: as one object, as PartialObjectMetadata, and as a
//! list.

use anyhow::{Context, Result, bail, ensure};
use http_body_util::BodyExt;
use kube::discovery::{Discovery, Scope};
use kube_fanout_kubeproto::{KubeProtobuf, ListMeta};
use kube_fanout_tests::controlplane::ControlPlane;
use serde_json::Value;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const METADATA_PROTOBUF: &str =
    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// Objects of many kinds, with the forms the encoder treats apart: quantities,
/// int-or-strings, times and microtimes, base64, raw JSON, inlined structs,
/// the JSONSchemaProps unions. Each is its path, its `apiVersion kind` and
/// its body; nothing writes them again (no controllers run), so each is
/// compared.
const FIXTURES: &[(&str, &str, &str)] = &[
    (
        "/api/v1/namespaces/kp/configmaps",
        "v1 ConfigMap",
        r#"{"metadata":{"name":"c","labels":{"b":"2","a":"1"}},"data":{"k":"v","u":"é 🚀 日本"},"binaryData":{"bin":"AAEC/w=="}}"#,
    ),
    (
        "/api/v1/namespaces/kp/secrets",
        "v1 Secret",
        r#"{"metadata":{"name":"s"},"type":"Opaque","data":{"password":"c2VjcmV0"}}"#,
    ),
    (
        "/api/v1/namespaces/kp/pods",
        "v1 Pod",
        r#"{"metadata":{"name":"p","annotations":{"x":"y"}},"spec":{"volumes":[{"name":"c","configMap":{"name":"c"}},{"name":"e","emptyDir":{"sizeLimit":"1Gi"}}],
          "containers":[{"name":"a","image":"busybox","args":["sleep","1d"],"ports":[{"name":"http","containerPort":8080}],
            "livenessProbe":{"httpGet":{"port":"http","path":"/"}},"readinessProbe":{"tcpSocket":{"port":8080}},
            "resources":{"limits":{"cpu":"1500m","memory":"1Gi"},"requests":{"cpu":"250m","memory":"64Mi"}},
            "volumeMounts":[{"name":"c","mountPath":"/c"}]}],
          "securityContext":{"supplementalGroups":[1,2]},"tolerations":[{"key":"k","operator":"Exists","effect":"NoExecute","tolerationSeconds":5}]}}"#,
    ),
    (
        "/apis/apps/v1/namespaces/kp/deployments",
        "apps/v1 Deployment",
        r#"{"metadata":{"name":"d"},"spec":{"replicas":2,"strategy":{"rollingUpdate":{"maxSurge":"25%","maxUnavailable":1}},"selector":{"matchLabels":{"app":"d"}},"template":{"metadata":{"labels":{"app":"d"}},"spec":{"containers":[{"name":"a","image":"busybox"}]}}}}"#,
    ),
    (
        "/apis/apps/v1/namespaces/kp/statefulsets",
        "apps/v1 StatefulSet",
        r#"{"metadata":{"name":"s"},"spec":{"serviceName":"s","selector":{"matchLabels":{"app":"s"}},"template":{"metadata":{"labels":{"app":"s"}},"spec":{"containers":[{"name":"a","image":"busybox"}]}},"volumeClaimTemplates":[{"metadata":{"name":"data"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}]}}"#,
    ),
    (
        "/apis/batch/v1/namespaces/kp/cronjobs",
        "batch/v1 CronJob",
        r#"{"metadata":{"name":"j"},"spec":{"schedule":"*/5 * * * *","jobTemplate":{"spec":{"backoffLimit":0,"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"a","image":"busybox"}]}}}}}}"#,
    ),
    (
        "/api/v1/namespaces/kp/services",
        "v1 Service",
        r#"{"metadata":{"name":"svc"},"spec":{"selector":{"app":"d"},"ports":[{"name":"http","port":80,"targetPort":"http"},{"name":"m","port":9090,"targetPort":9090}]}}"#,
    ),
    (
        "/apis/networking.k8s.io/v1/namespaces/kp/ingresses",
        "networking.k8s.io/v1 Ingress",
        r#"{"metadata":{"name":"i"},"spec":{"rules":[{"host":"a.example.com","http":{"paths":[{"path":"/","pathType":"Prefix","backend":{"service":{"name":"svc","port":{"number":80}}}}]}}]}}"#,
    ),
    (
        "/apis/networking.k8s.io/v1/namespaces/kp/networkpolicies",
        "networking.k8s.io/v1 NetworkPolicy",
        r#"{"metadata":{"name":"n"},"spec":{"podSelector":{},"ingress":[{"ports":[{"port":"http"},{"port":53,"protocol":"UDP"}]}]}}"#,
    ),
    (
        "/apis/autoscaling/v2/namespaces/kp/horizontalpodautoscalers",
        "autoscaling/v2 HorizontalPodAutoscaler",
        r#"{"metadata":{"name":"h"},"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"d"},"minReplicas":1,"maxReplicas":5,"metrics":[{"type":"Resource","resource":{"name":"cpu","target":{"type":"AverageValue","averageValue":"500m"}}}]}}"#,
    ),
    (
        "/apis/policy/v1/namespaces/kp/poddisruptionbudgets",
        "policy/v1 PodDisruptionBudget",
        r#"{"metadata":{"name":"b"},"spec":{"maxUnavailable":"50%","selector":{"matchLabels":{"app":"d"}}}}"#,
    ),
    (
        "/apis/coordination.k8s.io/v1/namespaces/kp/leases",
        "coordination.k8s.io/v1 Lease",
        r#"{"metadata":{"name":"l"},"spec":{"holderIdentity":"h","leaseDurationSeconds":15,"acquireTime":"2026-12-01T10:00:00.123456Z","renewTime":"2026-12-01T10:00:05.654321Z"}}"#,
    ),
    (
        "/apis/events.k8s.io/v1/namespaces/kp/events",
        "events.k8s.io/v1 Event",
        r#"{"metadata":{"name":"e"},"eventTime":"2026-12-01T10:00:00.000001Z","reportingController":"kp/test","reportingInstance":"i","action":"Test","reason":"Tested","type":"Normal","regarding":{"kind":"Pod","namespace":"kp","name":"p"},"note":"n"}"#,
    ),
    (
        "/api/v1/namespaces/kp/resourcequotas",
        "v1 ResourceQuota",
        r#"{"metadata":{"name":"q"},"spec":{"hard":{"cpu":"10","memory":"20Gi","pods":"100","requests.storage":"1Ti"}}}"#,
    ),
    (
        "/api/v1/namespaces/kp/limitranges",
        "v1 LimitRange",
        r#"{"metadata":{"name":"r"},"spec":{"limits":[{"type":"Container","default":{"cpu":"500m"},"max":{"memory":"2Gi"}}]}}"#,
    ),
    (
        "/api/v1/persistentvolumes",
        "v1 PersistentVolume",
        r#"{"metadata":{"name":"pv-kp"},"spec":{"capacity":{"storage":"5Gi"},"accessModes":["ReadWriteOnce"],"hostPath":{"path":"/tmp/kp"},"persistentVolumeReclaimPolicy":"Retain"}}"#,
    ),
    (
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        "scheduling.k8s.io/v1 PriorityClass",
        r#"{"metadata":{"name":"kp-high"},"value":1000000,"description":"d"}"#,
    ),
    (
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "apiextensions.k8s.io/v1 CustomResourceDefinition",
        r#"{"metadata":{"name":"things.kp.example.com"},"spec":{"group":"kp.example.com","names":{"plural":"things","kind":"Thing"},"scope":"Namespaced",
          "versions":[{"name":"v1","served":true,"storage":true,"additionalPrinterColumns":[{"name":"Size","type":"integer","jsonPath":".spec.size"}],
            "schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","required":["size"],
              "properties":{"size":{"type":"integer","minimum":0,"maximum":100,"default":3},"ratio":{"type":"number","maximum":0.75},"tags":{"type":"array","items":{"type":"string","enum":["a","b"]}},
                "labels":{"type":"object","additionalProperties":{"type":"string"}},"free":{"type":"object","x-kubernetes-preserve-unknown-fields":true},
                "port":{"x-kubernetes-int-or-string":true,"anyOf":[{"type":"integer"},{"type":"string"}]}}}}}}}]}}"#,
    ),
    (
        "/api/v1/namespaces/kp/endpoints",
        "v1 Endpoints",
        r#"{"metadata":{"name":"ep"},"subsets":[{"addresses":[{"ip":"10.0.0.1","targetRef":{"kind":"Pod","namespace":"kp","name":"p"}}],"ports":[{"name":"http","port":8080,"protocol":"TCP"}]}]}"#,
    ),
    (
        "/apis/discovery.k8s.io/v1/namespaces/kp/endpointslices",
        "discovery.k8s.io/v1 EndpointSlice",
        r#"{"metadata":{"name":"ep-1","labels":{"kubernetes.io/service-name":"ep"}},"addressType":"IPv4","endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":true,"serving":true,"terminating":false},"nodeName":"n"}],"ports":[{"name":"http","port":8080,"protocol":"TCP"}]}"#,
    ),
    (
        "/api/v1/namespaces/kp/serviceaccounts",
        "v1 ServiceAccount",
        r#"{"metadata":{"name":"sa"},"automountServiceAccountToken":false,"secrets":[{"name":"s"}]}"#,
    ),
    (
        "/apis/batch/v1/namespaces/kp/jobs",
        "batch/v1 Job",
        r#"{"metadata":{"name":"job"},"spec":{"parallelism":2,"completions":4,"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"a","image":"busybox"}]}}}}"#,
    ),
];

/// One GET's body, asked in `accept`.
async fn get(client: &kube::Client, path: &str, accept: &str) -> Result<Vec<u8>> {
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, accept)
        .body(kube::client::Body::from(Vec::new()))?;
    let response = client
        .send(request)
        .await
        .with_context(|| format!("GET {path}"))?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes().to_vec();
    ensure!(
        status.is_success(),
        "GET {path} ({accept}): {status}: {}",
        String::from_utf8_lossy(&body)
    );
    Ok(body)
}

fn json(body: &[u8]) -> Result<Value> {
    Ok(serde_json::from_slice(body)?)
}

/// The list at `path` as JSON and in protobuf at one resourceVersion (the
/// two GETs are retried until no write fell between them).
async fn list_both(client: &kube::Client, path: &str) -> Result<Option<(Value, Vec<u8>)>> {
    for _ in 0..20 {
        let first = json(&get(client, path, "application/json").await?)?;
        let proto = get(client, path, PROTOBUF).await?;
        let again = json(&get(client, path, "application/json").await?)?;
        // componentstatuses are probed per request, at no resourceVersion:
        // two answers need not agree, so they are not compared.
        if first["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
        {
            return Ok(None);
        }
        if first["metadata"]["resourceVersion"] == again["metadata"]["resourceVersion"] {
            return Ok(Some((first, proto)));
        }
    }
    bail!("{path}: no two lists at one resourceVersion in 20 tries")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_from_the_api_servers_json_is_the_protobuf_it_serves() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let client = cp.client.clone();
    kube_fanout_tests::support::create_namespace(&client, "kp").await?;
    for (path, _, body) in FIXTURES {
        let request = http::Request::post(*path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.as_bytes().to_vec())?;
        client
            .request_text(request)
            .await
            .with_context(|| format!("POST {path}"))?;
    }
    let kp = KubeProtobuf::new();
    let discovery = Discovery::new(client.clone()).run().await?;
    let (mut resources, mut objects, mut kinds) = (0, 0, std::collections::BTreeSet::new());
    let mut failures = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if !caps.supports_operation(kube::discovery::verbs::LIST)
                || !kp.supports(&ar.api_version, &ar.kind)
            {
                continue;
            }
            let base = if ar.group.is_empty() {
                format!("/api/{}", ar.version)
            } else {
                format!("/apis/{}/{}", ar.group, ar.version)
            };
            let Some((list, proto)) = list_both(&client, &format!("{base}/{}", ar.plural)).await?
            else {
                continue;
            };
            resources += 1;
            let items = list["items"].as_array().cloned().unwrap_or_default();
            let texts: Vec<String> = items.iter().map(|i| i.to_string()).collect();
            let meta = ListMeta {
                resource_version: list["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                continue_token: list["metadata"]["continue"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                remaining_item_count: list["metadata"]["remainingItemCount"].as_i64(),
            };
            let ours = kp.list(
                &ar.api_version,
                &format!("{}List", ar.kind),
                &meta,
                texts.iter().map(|t| t.as_bytes()),
            )?;
            if ours != proto {
                failures.push(format!(
                    "{} {}List: {} bytes, the API server's {}",
                    ar.api_version,
                    ar.kind,
                    ours.len(),
                    proto.len()
                ));
            }
            for item in items.iter().take(5) {
                let name = item["metadata"]["name"].as_str().context("a name")?;
                let path = match (
                    matches!(caps.scope, Scope::Namespaced),
                    item["metadata"]["namespace"].as_str(),
                ) {
                    (true, Some(ns)) => format!("{base}/namespaces/{ns}/{}/{name}", ar.plural),
                    _ => format!("{base}/{}/{name}", ar.plural),
                };
                // The object in JSON and protobuf at one resourceVersion.
                let text = get(&client, &path, "application/json").await?;
                let (proto, metadata) = (
                    get(&client, &path, PROTOBUF).await?,
                    get(&client, &path, METADATA_PROTOBUF).await?,
                );
                if json(&get(&client, &path, "application/json").await?)?["metadata"]["resourceVersion"]
                    != json(&text)?["metadata"]["resourceVersion"]
                {
                    continue; // written meanwhile (a lease renewed): the lists above cover the kind
                }
                objects += 1;
                kinds.insert(format!("{} {}", ar.api_version, ar.kind));
                if kp.object(&ar.api_version, &ar.kind, &text)? != proto {
                    failures.push(format!("{path}: object differs"));
                }
                if kp.object("meta.k8s.io/v1", "PartialObjectMetadata", &text)? != metadata {
                    failures.push(format!("{path}: PartialObjectMetadata differs"));
                }
            }
        }
    }
    eprintln!(
        "{resources} resources listed, {objects} objects of {} kinds compared",
        kinds.len()
    );
    ensure!(
        failures.is_empty(),
        "{} differences from the API server:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let missing: Vec<&str> = FIXTURES
        .iter()
        .map(|(_, kind, _)| *kind)
        .filter(|kind| !kinds.contains(*kind))
        .collect();
    ensure!(
        missing.is_empty(),
        "kinds created but not compared: {missing:?}"
    );
    // The API server's own objects (namespaces, RBAC roles, flow control,
    // APIServices, the kubernetes Service's IP) add kinds of their own.
    ensure!(
        kinds.len() >= 30,
        "objects of only {} kinds: {kinds:?}",
        kinds.len()
    );
    Ok(())
}

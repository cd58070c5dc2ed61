//! The differential test against Go itself: the oracle (kubeproto/oracle,
//! on k8s.io/apimachinery's own serializers) makes random objects of every
//! kind with a protobuf form, as JSON; this crate encodes them; the oracle
//! then requires that Go decodes the bytes to an object semantically equal
//! (apimachinery's `equality.Semantic`) to its decoding of the JSON, and
//! that they are the very bytes its serializer writes for that object.
//!
//! Bounded for CI (one seed, two objects a kind: ~2,200 cases in a few
//! seconds). Longer, with a seed of your own:
//! `KUBEPROTO_FUZZ_SEED=$RANDOM KUBEPROTO_FUZZ_COUNT=50 cargo test -p kube-fanout-kubeproto --test differential`.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kube_fanout_kubeproto::{KubeProtobuf, ListMeta};
use serde::{Deserialize, Serialize};

/// One case, as the oracle writes and reads it (oracle/fuzz.go).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Case {
    mode: String,
    api_version: String,
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    json: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    event_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    list_meta: Option<CaseListMeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    items: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ours: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CaseListMeta {
    resource_version: String,
    #[serde(rename = "continue")]
    continue_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    remaining_item_count: Option<i64>,
}

/// The oracle's answer to one case (oracle/check.go).
#[derive(Debug, Deserialize)]
struct Verdict {
    equal: bool,
    identical: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    want: Option<String>,
}

fn oracle() -> PathBuf {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/oracle/build.sh");
    let out = Command::new("bash")
        .arg(script)
        .stderr(Stdio::inherit())
        .output()
        .expect("run oracle/build.sh");
    assert!(out.status.success(), "building the oracle failed");
    PathBuf::from(String::from_utf8(out.stdout).expect("a path").trim())
}

fn fuzz(seed: u64, count: usize) -> Vec<Case> {
    let out = Command::new(oracle())
        .args(["fuzz", &seed.to_string(), &count.to_string()])
        .output()
        .expect("run the oracle");
    assert!(
        out.status.success(),
        "oracle fuzz: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(&l.expect("a line")).expect("a case"))
        .collect()
}

/// This crate's encoding of the case, or why it has none.
fn encode(kp: &KubeProtobuf, case: &Case) -> Result<Vec<u8>, String> {
    let json = || case.json.as_deref().unwrap_or_default().as_bytes();
    let got = match case.mode.as_str() {
        "object" => kp.object(&case.api_version, &case.kind, json()),
        "watch" => kp.watch_event(
            case.event_type.as_deref().unwrap_or_default(),
            &case.api_version,
            &case.kind,
            json(),
        ),
        "list" => {
            let m = case.list_meta.as_ref().expect("a list's meta");
            let meta = ListMeta {
                resource_version: m.resource_version.clone(),
                continue_token: m.continue_token.clone(),
                remaining_item_count: m.remaining_item_count,
            };
            let items = case.items.as_deref().unwrap_or_default();
            kp.list(
                &case.api_version,
                &case.kind,
                &meta,
                items.iter().map(|i| i.as_bytes()),
            )
        }
        mode => panic!("mode {mode}"),
    };
    got.map_err(|e| e.to_string())
}

/// Asks the oracle about each case with its `ours` filled in.
fn check(cases: &[Case]) -> Vec<Verdict> {
    let mut child = Command::new(oracle())
        .arg("check")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the oracle");
    let mut stdin = child.stdin.take().expect("stdin");
    let lines: Vec<String> = cases
        .iter()
        .map(|c| serde_json::to_string(c).expect("a case"))
        .collect();
    let writer = std::thread::spawn(move || {
        for l in lines {
            writeln!(stdin, "{l}").expect("write a case");
        }
    });
    let verdicts: Vec<Verdict> = BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .map(|l| serde_json::from_str(&l.expect("a line")).expect("a verdict"))
        .collect();
    writer.join().expect("writer");
    assert!(
        child.wait().expect("oracle").success(),
        "oracle check failed"
    );
    assert_eq!(verdicts.len(), cases.len(), "a verdict per case");
    verdicts
}

/// Encodes every case and has the oracle judge it; returns the cases with
/// their verdicts and this crate's errors.
fn judge(kp: &KubeProtobuf, mut cases: Vec<Case>) -> Vec<(Case, Verdict, Option<String>)> {
    let errors: Vec<Option<String>> = cases
        .iter_mut()
        .map(|c| match encode(kp, c) {
            Ok(bytes) => {
                c.ours = Some(STANDARD.encode(bytes));
                None
            }
            Err(e) => Some(e),
        })
        .collect();
    let verdicts = check(&cases);
    cases
        .into_iter()
        .zip(verdicts)
        .zip(errors)
        .map(|((c, v), e)| (c, v, e))
        .collect()
}

/// Where two encodings first differ, for a failure message.
fn first_difference(ours: &[u8], want: &[u8]) -> String {
    let at = ours
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(ours.len().min(want.len()));
    let show = |b: &[u8]| {
        b[at.saturating_sub(8)..(at + 16).min(b.len())]
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect::<String>()
    };
    format!(
        "at byte {at} of {} (Go's {}): ours …{}…, Go's …{}…",
        ours.len(),
        want.len(),
        show(ours),
        show(want)
    )
}

fn describe(case: &Case, v: &Verdict, error: &Option<String>) -> String {
    let ours = case
        .ours
        .as_deref()
        .map(|o| STANDARD.decode(o).expect("base64"))
        .unwrap_or_default();
    let want = v
        .want
        .as_deref()
        .map(|w| STANDARD.decode(w).expect("base64"))
        .unwrap_or_default();
    let input = case
        .json
        .clone()
        .or_else(|| case.items.as_ref().map(|i| i.join(",")))
        .unwrap_or_default();
    format!(
        "{} {} {}: equal={} identical={} ours: {:?} Go: {:?} {}\n  input: {:.600}",
        case.mode,
        case.api_version,
        case.kind,
        v.equal,
        v.identical,
        error,
        v.error,
        first_difference(&ours, &want),
        input
    )
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name}: a number")))
        .unwrap_or(default)
}

#[test]
fn random_objects_of_every_kind_encode_to_the_bytes_go_writes() {
    let seed = env_or("KUBEPROTO_FUZZ_SEED", 1);
    let count = env_or("KUBEPROTO_FUZZ_COUNT", 2) as usize;
    let kp = KubeProtobuf::new();
    let judged = judge(&kp, fuzz(seed, count));
    let kinds: std::collections::BTreeSet<_> = judged
        .iter()
        .map(|(c, _, _)| (&c.api_version, &c.kind))
        .collect();
    let failed: Vec<String> = judged
        .iter()
        .filter(|(_, v, _)| !(v.equal && v.identical))
        .map(|(c, v, e)| describe(c, v, e))
        .collect();
    eprintln!(
        "seed {seed}: {} cases over {} kinds, {} failed",
        judged.len(),
        kinds.len(),
        failed.len()
    );
    let schema = include_str!("../schema/kubernetes.schema");
    let schema_kinds = schema.lines().filter(|l| l.starts_with("kind ")).count();
    assert_eq!(
        kinds.len(),
        schema_kinds,
        "a case for every kind the schema has"
    );
    assert!(
        failed.is_empty(),
        "seed {seed}: {} of {} cases differ from Go; the first:\n{}",
        failed.len(),
        judged.len(),
        failed[..failed.len().min(5)].join("\n")
    );
}

fn object_case(api_version: &str, kind: &str, json: &str) -> Case {
    Case {
        mode: "object".into(),
        api_version: api_version.into(),
        kind: kind.into(),
        json: Some(json.into()),
        event_type: None,
        list_meta: None,
        items: None,
        ours: None,
    }
}

/// JSON the random objects do not reach: Kubernetes' special forms in the
/// spellings Go reads but does not write (fractions and offsets of times,
/// a bare number for a quantity), nulls where Go keeps a zero value, keys
/// out of the numbers' order, escapes, unknown keys, the JSONSchemaProps
/// unions. The bool says whether the bytes can be Go's: only where Go
/// would rewrite the text (a quantity to its canonical form) they cannot.
fn edge_cases() -> Vec<(Case, bool)> {
    let pod = r#"{"kind":"Pod","apiVersion":"v1","status":{"phase":"Running","startTime":"2024-05-06T07:08:09.999999999+02:00"},
        "metadata":{"labels":{"z":"1","a":null,"\u00e9t\u00e9":"\ud83d\ude80"},"name":"p","creationTimestamp":"2024-05-06T07:08:09.5Z","deletionTimestamp":null,"unknown":{"deep":[1,2]}},
        "spec":{"volumes":[{"name":"v","configMap":{"name":"c","defaultMode":420}},{"name":"e","emptyDir":{"sizeLimit":"1Gi"}},null],
          "containers":[{"name":"a","image":"i","args":["x",null,""],"ports":[{"containerPort":8080,"name":"http"}],
            "livenessProbe":{"httpGet":{"port":"http","path":"/"},"periodSeconds":-1},"readinessProbe":{"tcpSocket":{"port":8080}},
            "resources":{"limits":{"cpu":"500m","memory":"1Gi"},"requests":{"cpu":"2"}}}],
          "initContainers":[{"name":"i","image":"i"}],"ephemeralContainers":[{"name":"d","image":"busybox","targetContainerName":"a","stdin":true}],
          "securityContext":{"supplementalGroups":[0,-1,4294967296],"runAsUser":0},"nodeSelector":{},"tolerations":[]}}"#;
    let crd = r##"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"things.example.com"},
        "spec":{"group":"example.com","names":{"plural":"things","kind":"Thing"},"scope":"Namespaced","versions":[{"name":"v1","served":true,"storage":true,
          "schema":{"openAPIV3Schema":{"type":"object","$schema":"s","$ref":"#/r","x-kubernetes-preserve-unknown-fields":true,"default":{"a":[1, 2.5e3, null]},
            "enum":[1,"x",null,{"k":"v"}],"maximum":1.7976931348623157e308,"minimum":-0.1,"multipleOf":3,
            "properties":{"spec":{"type":"object","additionalProperties":{"type":"string"},"x-kubernetes-list-type":"map"},"b":{"additionalProperties":false},"c":{"additionalProperties":true}},
            "items":[{"type":"string"},{}],"additionalItems":true,
            "dependencies":{"a":["b","c"],"d":{"required":["e"]},"f":null},
            "patternProperties":{"^x":{"items":{"type":"integer","format":"int64"}}}}},
          "additionalPrinterColumns":[{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}]}]}}"##;
    let cases = [
        (object_case("v1", "Pod", pod), true),
        (
            object_case("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd),
            true,
        ),
        (
            object_case(
                "v1",
                "ConfigMap",
                r#"{"data":{"b":"2","a":"1","":"empty key","\"q\"":"\u0000\t"},"binaryData":{"x":"AAEC/w==","y":"","z":null},"immutable":false,"metadata":{"name":"c","namespace":"n","uid":"u-1","generation":0,"annotations":null}}"#,
            ),
            true,
        ),
        (
            object_case(
                "events.k8s.io/v1",
                "Event",
                r#"{"metadata":{"name":"e"},"eventTime":"2024-05-06T07:08:09.123456+05:30","series":{"count":2,"lastObservedTime":"2024-05-06T07:08:09.000001Z"},"regarding":{"kind":"Pod","name":"p","uid":"u"},"deprecatedFirstTimestamp":"1969-12-31T23:59:59Z","deprecatedLastTimestamp":"0001-01-01T00:00:00Z"}"#,
            ),
            true,
        ),
        (
            object_case(
                "coordination.k8s.io/v1",
                "Lease",
                r#"{"metadata":{"name":"l"},"spec":{"holderIdentity":"h","leaseDurationSeconds":15,"acquireTime":"2024-05-06T07:08:09.654321Z","renewTime":null,"leaseTransitions":0}}"#,
            ),
            true,
        ),
        (
            object_case(
                "apps/v1",
                "Deployment",
                r#"{"metadata":{"name":"d"},"spec":{"replicas":0,"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":"25%","maxUnavailable":1}},"selector":{"matchLabels":{"app":"a"}},"template":{"metadata":{"labels":{"app":"a"}},"spec":{"containers":[{"name":"a","image":"i"}]}}}}"#,
            ),
            true,
        ),
        (
            object_case(
                "v1",
                "Secret",
                r#"{"metadata":{"name":"s"},"type":"Opaque","data":{"k":"c2VjcmV0"},"stringData":{"ignored":"x"}}"#,
            ),
            true,
        ),
        (
            object_case(
                "apps/v1",
                "ControllerRevision",
                r#"{"metadata":{"name":"r"},"revision":3,"data":{ "spec" : {"a": 1}, "b":[ true ] }}"#,
            ),
            true,
        ),
        (
            object_case(
                "v1",
                "Status",
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410,"details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"m"}],"retryAfterSeconds":1}}"#,
            ),
            true,
        ),
        // Go writes a quantity in its canonical form ("500m", "1k"); the
        // API server's JSON has it so already, other text keeps its value.
        (
            object_case(
                "v1",
                "ResourceQuota",
                r#"{"metadata":{"name":"q"},"spec":{"hard":{"cpu":"0.5","memory":1000,"pods":" 10 "}}}"#,
            ),
            false,
        ),
    ];
    cases.into_iter().collect()
}

#[test]
fn edge_forms_of_json_encode_as_go_reads_them() {
    let kp = KubeProtobuf::new();
    let (cases, canonical): (Vec<Case>, Vec<bool>) = edge_cases().into_iter().unzip();
    let judged = judge(&kp, cases);
    let failed: Vec<String> = judged
        .iter()
        .zip(&canonical)
        .filter(|((_, v, _), canonical)| !(v.equal && (v.identical || !**canonical)))
        .map(|((c, v, e), _)| describe(c, v, e))
        .collect();
    for (c, v, e) in &judged {
        eprintln!(
            "{} {}: equal={} identical={} ours: {e:?} Go: {:?}",
            c.api_version, c.kind, v.equal, v.identical, v.error
        );
    }
    assert!(
        failed.is_empty(),
        "{} of {} edge cases differ from Go:\n{}",
        failed.len(),
        judged.len(),
        failed.join("\n")
    );
}

#[test]
fn the_oracle_finds_a_time_one_second_off() {
    let kp = KubeProtobuf::new();
    let json = r#"{"metadata":{"name":"c","creationTimestamp":"2024-05-06T07:08:09Z"}}"#;
    let off = r#"{"metadata":{"name":"c","creationTimestamp":"2024-05-06T07:08:10Z"}}"#;
    let mut case = object_case("v1", "ConfigMap", json);
    case.ours = Some(
        STANDARD.encode(
            kp.object("v1", "ConfigMap", off.as_bytes())
                .expect("encodes"),
        ),
    );
    let v = check(std::slice::from_ref(&case)).pop().expect("a verdict");
    assert!(
        !v.equal && !v.identical,
        "the oracle took a changed creationTimestamp for the same object: {v:?}"
    );
}

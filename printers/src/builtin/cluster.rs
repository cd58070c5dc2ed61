//! Rows of the remaining cluster types: autoscaling, policy, RBAC
//! bindings, leases, scheduling, admission, flow control, certificates,
//! API services and dynamic resource allocation.

use super::{
    cells::{age, name},
    core::or_none,
};
use crate::{
    error::PrinterError,
    object::Field,
    table::{Cell, Row},
    time::{Clock, human_duration},
};

/// A `*resource.Quantity`'s `String()`: "<nil>" when unset.
fn quantity_ptr(field: Field<'_>) -> String {
    if field.is_set() {
        field.quantity()
    } else {
        "<nil>".to_owned()
    }
}

/// One HPA metric of `formatHPAMetrics`: "current/target", with the
/// resource's name for resource metrics.
fn hpa_metric(spec: Field<'_>, status: Option<Field<'_>>) -> Result<String, PrinterError> {
    let missing = || PrinterError::Unprintable("an HPA metric without the source its type names");
    // The status of the same source type, if the status list has one at
    // this index and it names this source.
    let current = |source: &str| status.map(|s| s.at(&[source])).filter(|s| s.is_set());
    let unknown = || "<unknown>".to_owned();
    Ok(match spec.at(&["type"]).str() {
        kind @ ("External" | "Object") => {
            let source = if kind == "External" {
                "external"
            } else {
                "object"
            };
            let target = spec.at(&[source]);
            if !target.is_set() {
                return Err(missing());
            }
            let target = target.at(&["target"]);
            if target.at(&["averageValue"]).is_set() {
                let now = current(source)
                    .filter(|c| c.at(&["current", "averageValue"]).is_set())
                    .map_or_else(unknown, |c| c.at(&["current", "averageValue"]).quantity());
                format!("{now}/{} (avg)", target.at(&["averageValue"]).quantity())
            } else {
                let now = current(source)
                    .map_or_else(unknown, |c| quantity_ptr(c.at(&["current", "value"])));
                format!("{now}/{}", quantity_ptr(target.at(&["value"])))
            }
        }
        "Pods" => {
            let pods = spec.at(&["pods"]);
            if !pods.is_set() {
                return Err(missing());
            }
            let now = current("pods").map_or_else(unknown, |c| {
                quantity_ptr(c.at(&["current", "averageValue"]))
            });
            format!(
                "{now}/{}",
                quantity_ptr(pods.at(&["target", "averageValue"]))
            )
        }
        kind @ ("Resource" | "ContainerResource") => {
            let source = if kind == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let resource = spec.at(&[source]);
            if !resource.is_set() {
                return Err(missing());
            }
            let resource_name = resource.at(&["name"]).str();
            let target = resource.at(&["target"]);
            if target.at(&["averageValue"]).is_set() {
                let now = current(source).map_or_else(unknown, |c| {
                    quantity_ptr(c.at(&["current", "averageValue"]))
                });
                format!(
                    "{resource_name}: {now}/{}",
                    target.at(&["averageValue"]).quantity()
                )
            } else {
                let now = current(source)
                    .and_then(|c| c.at(&["current", "averageUtilization"]).opt_int())
                    .map_or_else(unknown, |u| format!("{u}%"));
                let goal = target
                    .at(&["averageUtilization"])
                    .opt_int()
                    .map_or_else(|| "<auto>".to_owned(), |u| format!("{u}%"));
                format!("{resource_name}: {now}/{goal}")
            }
        }
        _ => "<unknown type>".to_owned(),
    })
}

pub(super) fn horizontal_pod_autoscaler(
    object: Field<'_>,
    clock: Clock,
) -> Result<Row, PrinterError> {
    let (spec, status) = (object.at(&["spec"]), object.at(&["status"]));
    let reference = spec.at(&["scaleTargetRef"]);
    let specs: Vec<Field<'_>> = spec.at(&["metrics"]).items().collect();
    let statuses: Vec<Field<'_>> = status.at(&["currentMetrics"]).items().collect();
    let targets = if specs.is_empty() {
        "<none>".to_owned()
    } else {
        const MAX: usize = 2;
        let list: Vec<String> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| hpa_metric(*s, statuses.get(i).copied()))
            .collect::<Result<_, _>>()?;
        if list.len() > MAX {
            format!("{} + {} more...", list[..MAX].join(", "), list.len() - MAX)
        } else {
            list.join(", ")
        }
    };
    Ok(Row::new(vec![
        name(object),
        format!(
            "{}/{}",
            reference.at(&["kind"]).str(),
            reference.at(&["name"]).str()
        )
        .into(),
        targets.into(),
        spec.at(&["minReplicas"])
            .opt_int()
            .map_or_else(|| "<unset>".to_owned(), |m| m.to_string())
            .into(),
        spec.at(&["maxReplicas"]).int().into(),
        status.at(&["currentReplicas"]).int().into(),
        age(object, clock)?,
    ]))
}

pub(super) fn pod_disruption_budget(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let spec = object.at(&["spec"]);
    let bound = |f: Field<'_>| {
        if f.is_set() {
            f.int_or_string()
        } else {
            "N/A".to_owned()
        }
    };
    Ok(Row::new(vec![
        name(object),
        bound(spec.at(&["minAvailable"])).into(),
        bound(spec.at(&["maxUnavailable"])).into(),
        object.at(&["status", "disruptionsAllowed"]).int().into(),
        age(object, clock)?,
    ]))
}

/// A RoleBinding's or ClusterRoleBinding's row: the role, and at wide
/// priority its users, groups and service accounts (`rbac.SubjectsStrings`).
pub(super) fn role_binding(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let role = object.at(&["roleRef"]);
    let (mut users, mut groups, mut accounts) = (Vec::new(), Vec::new(), Vec::new());
    for subject in object.at(&["subjects"]).items() {
        let name = subject.at(&["name"]).str();
        match subject.at(&["kind"]).str() {
            "ServiceAccount" => {
                accounts.push(format!("{}/{name}", subject.at(&["namespace"]).str()))
            }
            "User" => users.push(name.to_owned()),
            "Group" => groups.push(name.to_owned()),
            _ => {}
        }
    }
    Ok(Row::new(vec![
        name(object),
        format!("{}/{}", role.at(&["kind"]).str(), role.at(&["name"]).str()).into(),
        age(object, clock)?,
        users.join(", ").into(),
        groups.join(", ").into(),
        accounts.join(", ").into(),
    ]))
}

pub(super) fn lease(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    Ok(Row::new(vec![
        name(object),
        object.at(&["spec", "holderIdentity"]).str().into(),
        age(object, clock)?,
    ]))
}

pub(super) fn priority_class(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    Ok(Row::new(vec![
        name(object),
        object.at(&["value"]).int().into(),
        object.at(&["globalDefault"]).bool().into(),
        age(object, clock)?,
        object.at(&["preemptionPolicy"]).str().into(),
    ]))
}

pub(super) fn runtime_class(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    Ok(Row::new(vec![
        name(object),
        object.at(&["handler"]).str().into(),
        age(object, clock)?,
    ]))
}

/// `extractCSRStatus`: Denied, Approved or Pending, then Failed and Issued.
fn csr_condition(status: Field<'_>) -> String {
    let has = |kind: &str| {
        status
            .at(&["conditions"])
            .items()
            .any(|c| c.at(&["type"]).str() == kind)
    };
    let mut s = if has("Denied") {
        "Denied"
    } else if has("Approved") {
        "Approved"
    } else {
        "Pending"
    }
    .to_owned();
    if has("Failed") {
        s.push_str(",Failed");
    }
    if !status.at(&["certificate"]).str().is_empty() {
        s.push_str(",Issued");
    }
    s
}

pub(super) fn certificate_signing_request(
    object: Field<'_>,
    clock: Clock,
) -> Result<Row, PrinterError> {
    let spec = object.at(&["spec"]);
    let duration = spec.at(&["expirationSeconds"]).opt_int().map_or_else(
        || "<none>".to_owned(),
        |s| human_duration(s.saturating_mul(1_000_000_000)),
    );
    Ok(Row::new(vec![
        name(object),
        age(object, clock)?,
        or_none(spec.at(&["signerName"]).str()).into(),
        spec.at(&["username"]).str().into(),
        duration.into(),
        csr_condition(object.at(&["status"])).into(),
    ]))
}

pub(super) fn webhook_configuration(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    Ok(Row::new(vec![
        name(object),
        (object.at(&["webhooks"]).len() as i64).into(),
        age(object, clock)?,
    ]))
}

pub(super) fn validating_admission_policy(
    object: Field<'_>,
    clock: Clock,
) -> Result<Row, PrinterError> {
    let spec = object.at(&["spec"]);
    let kind = spec.at(&["paramKind"]);
    let param_kind = if kind.is_set() {
        format!(
            "{}/{}",
            kind.at(&["apiVersion"]).str(),
            kind.at(&["kind"]).str()
        )
    } else {
        "<unset>".to_owned()
    };
    Ok(Row::new(vec![
        name(object),
        (spec.at(&["validations"]).len() as i64).into(),
        param_kind.into(),
        age(object, clock)?,
    ]))
}

/// A `*metav1.LabelSelector`'s (protobuf-generated) `String()`, which the
/// binding printer shows for a parameter chosen by selector.
fn label_selector_go_string(selector: Field<'_>) -> String {
    let mut labels: Vec<(&str, &str)> = selector.at(&["matchLabels"]).string_map();
    labels.sort_unstable();
    let labels: String = labels.iter().map(|(k, v)| format!("{k}: {v},")).collect();
    let expressions: String = selector
        .at(&["matchExpressions"])
        .items()
        .map(|e| {
            let values: Vec<&str> = e.at(&["values"]).items().map(Field::str).collect();
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                e.at(&["key"]).str(),
                e.at(&["operator"]).str(),
                values.join(" ")
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{expressions}}},}}"
    )
}

pub(super) fn admission_policy_binding(
    object: Field<'_>,
    clock: Clock,
) -> Result<Row, PrinterError> {
    let spec = object.at(&["spec"]);
    let param = spec.at(&["paramRef"]);
    let param_name = if !param.is_set() {
        "<unset>".to_owned()
    } else if !param.at(&["name"]).str().is_empty() {
        let (namespace, name) = (param.at(&["namespace"]).str(), param.at(&["name"]).str());
        // The printer cannot tell a cluster-scoped parameter from one in
        // every namespace.
        if namespace.is_empty() {
            format!("*/{name}")
        } else {
            format!("{namespace}/{name}")
        }
    } else if param.at(&["selector"]).is_set() {
        label_selector_go_string(param.at(&["selector"]))
    } else {
        "<unset>".to_owned()
    };
    Ok(Row::new(vec![
        name(object),
        spec.at(&["policyName"]).str().into(),
        param_name.into(),
        age(object, clock)?,
    ]))
}

pub(super) fn flow_schema(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let spec = object.at(&["spec"]);
    let dangling = object
        .at(&["status", "conditions"])
        .items()
        .find(|c| c.at(&["type"]).str() == "Dangling")
        .map_or("?", |c| c.at(&["status"]).str());
    Ok(Row::new(vec![
        name(object),
        spec.at(&["priorityLevelConfiguration", "name"])
            .str()
            .into(),
        spec.at(&["matchingPrecedence"]).int().into(),
        if spec.at(&["distinguisherMethod"]).is_set() {
            spec.at(&["distinguisherMethod", "type"]).str()
        } else {
            "<none>"
        }
        .into(),
        age(object, clock)?,
        dangling.into(),
    ]))
}

pub(super) fn priority_level_configuration(
    object: Field<'_>,
    clock: Clock,
) -> Result<Row, PrinterError> {
    let spec = object.at(&["spec"]);
    let limited = spec.at(&["limited"]);
    let none = || Cell::from("<none>");
    let (mut shares, mut queues, mut hand_size, mut queue_length) =
        (none(), none(), none(), none());
    if limited.is_set() {
        shares = limited.at(&["nominalConcurrencyShares"]).int().into();
        let queuing = limited.at(&["limitResponse", "queuing"]);
        if queuing.is_set() {
            queues = queuing.at(&["queues"]).int().into();
            hand_size = queuing.at(&["handSize"]).int().into();
            queue_length = queuing.at(&["queueLengthLimit"]).int().into();
        }
    }
    Ok(Row::new(vec![
        name(object),
        spec.at(&["type"]).str().into(),
        shares,
        queues,
        hand_size,
        queue_length,
        age(object, clock)?,
    ]))
}

/// The APIService convertor's row: the service it is served by (or Local)
/// and its Available condition.
pub(super) fn api_service(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let service = object.at(&["spec", "service"]);
    let service = if service.is_set() {
        format!(
            "{}/{}",
            service.at(&["namespace"]).str(),
            service.at(&["name"]).str()
        )
    } else {
        "Local".to_owned()
    };
    let available = object
        .at(&["status", "conditions"])
        .items()
        .find(|c| c.at(&["type"]).str() == "Available")
        .map_or_else(
            || "Unknown".to_owned(),
            |c| {
                let (status, reason) = (c.at(&["status"]).str(), c.at(&["reason"]).str());
                if status != "True" && !reason.is_empty() {
                    format!("{status} ({reason})")
                } else {
                    status.to_owned()
                }
            },
        );
    Ok(Row::new(vec![
        name(object),
        service.into(),
        available.into(),
        age(object, clock)?,
    ]))
}

pub(super) fn resource_claim(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let deleted = object.at(&["metadata", "deletionTimestamp"]).is_set();
    let status = object.at(&["status"]);
    let mut states = Vec::new();
    if deleted {
        states.push("deleted");
    }
    if !status.at(&["allocation"]).is_set() {
        if !deleted {
            states.push("pending");
        }
    } else {
        states.push("allocated");
        if status.at(&["reservedFor"]).len() > 0 {
            states.push("reserved");
        }
    }
    Ok(Row::new(vec![
        name(object),
        states.join(",").into(),
        age(object, clock)?,
    ]))
}

pub(super) fn resource_slice(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let spec = object.at(&["spec"]);
    Ok(Row::new(vec![
        name(object),
        spec.at(&["nodeName"]).str().into(),
        spec.at(&["driver"]).str().into(),
        spec.at(&["pool", "name"]).str().into(),
        age(object, clock)?,
    ]))
}

//! A Pod's row (`printPod`): readiness, the aggregate status with its
//! reasons (init containers, waiting and terminated containers,
//! terminating, scheduling gates), restarts with the age of the last one,
//! and at wide priority the IP, node, nominated node and readiness gates.

use super::cells::{age, name};
use crate::{
    error::PrinterError,
    object::Field,
    table::{Cell, Row},
    time::{Clock, Instant},
};

/// The conditions of a pod that has succeeded.
const SUCCEEDED: &str = r#"[{"type":"Completed","status":"True","reason":"Succeeded","message":"The pod has completed successfully."}]"#;
/// The conditions of a pod that has failed.
const FAILED: &str =
    r#"[{"type":"Completed","status":"True","reason":"Failed","message":"The pod failed."}]"#;

/// `podutil.IsRestartableInitContainer`: a sidecar.
fn restartable(container: Option<Field<'_>>) -> bool {
    container.is_some_and(|c| c.at(&["restartPolicy"]).str() == "Always")
}

/// The finish time of a container's last termination, if it has one
/// (Go's zero time when the termination has none).
fn last_termination(status: Field<'_>) -> Result<Option<Instant>, PrinterError> {
    let terminated = status.at(&["lastState", "terminated"]);
    if !terminated.is_set() {
        return Ok(None);
    }
    Ok(Some(
        terminated
            .at(&["finishedAt"])
            .time()?
            .unwrap_or(Instant::ZERO),
    ))
}

/// The first condition of `kind`, if any, is "True".
fn condition_true(conditions: Field<'_>, kind: &str) -> bool {
    conditions
        .items()
        .find(|c| c.at(&["type"]).str() == kind)
        .is_some_and(|c| c.at(&["status"]).str() == "True")
}

/// A terminated container's reason, or its signal or exit code.
fn terminated_reason(terminated: Field<'_>, prefix: &str) -> String {
    let reason = terminated.at(&["reason"]).str();
    if !reason.is_empty() {
        return format!("{prefix}{reason}");
    }
    let signal = terminated.at(&["signal"]).int();
    if signal != 0 {
        return format!("{prefix}Signal:{signal}");
    }
    format!("{prefix}ExitCode:{}", terminated.at(&["exitCode"]).int())
}

pub(super) fn pod(pod: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let spec = pod.at(&["spec"]);
    let status = pod.at(&["status"]);
    let conditions = status.at(&["conditions"]);
    let mut restarts = 0;
    let mut restartable_init_restarts = 0;
    let mut total = spec.at(&["containers"]).len();
    let mut ready = 0;
    let mut last_restart = Instant::ZERO;
    let mut last_restartable_init_restart = Instant::ZERO;

    let phase = status.at(&["phase"]).str();
    let mut reason = phase.to_owned();
    if !status.at(&["reason"]).str().is_empty() {
        reason = status.at(&["reason"]).str().to_owned();
    }
    for condition in conditions.items() {
        if condition.at(&["type"]).str() == "PodScheduled"
            && condition.at(&["reason"]).str() == "SchedulingGated"
        {
            reason = "SchedulingGated".to_owned();
        }
    }
    let row_conditions = match phase {
        "Succeeded" => SUCCEEDED,
        "Failed" => FAILED,
        _ => "",
    };

    let init_containers = spec.at(&["initContainers"]);
    let init_container = |name: &str| {
        init_containers
            .items()
            .find(|c| c.at(&["name"]).str() == name)
    };
    total += init_containers
        .items()
        .filter(|c| restartable(Some(*c)))
        .count();

    let mut initializing = false;
    for (i, container) in status.at(&["initContainerStatuses"]).items().enumerate() {
        let sidecar = restartable(init_container(container.at(&["name"]).str()));
        restarts += container.at(&["restartCount"]).int();
        if let Some(finished) = last_termination(container)? {
            last_restart = last_restart.max(finished);
            if sidecar {
                last_restartable_init_restart = last_restartable_init_restart.max(finished);
            }
        }
        if sidecar {
            restartable_init_restarts += container.at(&["restartCount"]).int();
        }
        let state = container.at(&["state"]);
        let terminated = state.at(&["terminated"]);
        let waiting_reason = state
            .at(&["waiting"])
            .is_set()
            .then(|| state.at(&["waiting", "reason"]).str());
        if terminated.is_set() && terminated.at(&["exitCode"]).int() == 0 {
            continue;
        }
        if sidecar && container.at(&["started"]).bool() {
            if container.at(&["ready"]).bool() {
                ready += 1;
            }
            continue;
        }
        if terminated.is_set() {
            reason = terminated_reason(terminated, "Init:");
        } else if let Some(waiting) =
            waiting_reason.filter(|r| !r.is_empty() && *r != "PodInitializing")
        {
            reason = format!("Init:{waiting}");
        } else {
            reason = format!("Init:{i}/{}", init_containers.len());
        }
        initializing = true;
        break;
    }

    if !initializing || condition_true(conditions, "Initialized") {
        restarts = restartable_init_restarts;
        last_restart = last_restartable_init_restart;
        let mut has_running = false;
        let mut error_reason = None;
        let statuses: Vec<Field<'_>> = status.at(&["containerStatuses"]).items().collect();
        for container in statuses.into_iter().rev() {
            restarts += container.at(&["restartCount"]).int();
            if let Some(finished) = last_termination(container)? {
                last_restart = last_restart.max(finished);
            }
            let state = container.at(&["state"]);
            let terminated = state.at(&["terminated"]);
            if state.at(&["waiting"]).is_set() && !state.at(&["waiting", "reason"]).str().is_empty()
            {
                reason = state.at(&["waiting", "reason"]).str().to_owned();
            } else if terminated.is_set() {
                reason = terminated_reason(terminated, "");
                if terminated.at(&["exitCode"]).int() != 0 {
                    error_reason = Some(reason.clone());
                }
            } else if container.at(&["ready"]).bool() && state.at(&["running"]).is_set() {
                has_running = true;
                ready += 1;
            }
        }
        // A pod with a container still running is not "Completed".
        if reason == "Completed" {
            if has_running && condition_true_anywhere(conditions, "Ready") {
                reason = "Running".to_owned();
            } else if let Some(error_reason) = error_reason {
                reason = error_reason;
            } else if has_running {
                reason = "NotReady".to_owned();
            }
        }
    }

    let deleting = pod.at(&["metadata", "deletionTimestamp"]).is_set();
    if deleting && status.at(&["reason"]).str() == "NodeLost" {
        reason = "Unknown".to_owned();
    } else if deleting && phase != "Failed" && phase != "Succeeded" {
        reason = "Terminating".to_owned();
    }

    let restarts = if restarts != 0 && !last_restart.is_zero() {
        format!("{restarts} ({} ago)", clock.since(last_restart))
    } else {
        restarts.to_string()
    };

    // v1's podIP wins over podIPs[0] when both are set and differ (the
    // conversion to the internal type the API server prints from).
    let pod_ip = match status.at(&["podIP"]).str() {
        "" => status
            .at(&["podIPs"])
            .items()
            .next()
            .map_or("", |ip| ip.at(&["ip"]).str()),
        ip => ip,
    };
    let or_none = |s: &str| {
        if s.is_empty() {
            "<none>".to_owned()
        } else {
            s.to_owned()
        }
    };
    let gates = spec.at(&["readinessGates"]);
    let readiness_gates = if gates.len() == 0 {
        "<none>".to_owned()
    } else {
        let met = gates
            .items()
            .filter(|gate| {
                let kind = gate.at(&["conditionType"]).str();
                conditions
                    .items()
                    .find(|c| c.at(&["type"]).str() == kind)
                    .is_some_and(|c| c.at(&["status"]).str() == "True")
            })
            .count();
        format!("{met}/{}", gates.len())
    };

    let cells: Vec<Cell> = vec![
        name(pod),
        format!("{ready}/{total}").into(),
        reason.into(),
        restarts.into(),
        age(pod, clock)?,
        or_none(pod_ip).into(),
        or_none(spec.at(&["nodeName"]).str()).into(),
        or_none(status.at(&["nominatedNodeName"]).str()).into(),
        readiness_gates.into(),
    ];
    Ok(Row {
        cells,
        conditions: row_conditions,
    })
}

/// `hasPodReadyCondition`: any condition of `kind` is "True".
fn condition_true_anywhere(conditions: Field<'_>, kind: &str) -> bool {
    conditions
        .items()
        .any(|c| c.at(&["type"]).str() == kind && c.at(&["status"]).str() == "True")
}

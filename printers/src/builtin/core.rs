//! Rows of the core group's types other than pods, events and volumes.

use super::cells::{age, containers, name};
use crate::{error::PrinterError, labels::format_labels, object::Field, table::Row, time::Clock};

/// "" as "<none>".
pub(super) fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".to_owned()
    } else {
        s.to_owned()
    }
}

pub(super) fn pod_template(object: Field<'_>, _: Clock) -> Result<Row, PrinterError> {
    let template = object.at(&["template"]);
    let [names, images] = containers(template.at(&["spec", "containers"]));
    Ok(Row::new(vec![
        name(object),
        names,
        images,
        format_labels(template.at(&["metadata", "labels"])).into(),
    ]))
}

pub(super) fn replication_controller(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let spec = object.at(&["spec"]);
    let status = object.at(&["status"]);
    let [names, images] = containers(spec.at(&["template", "spec", "containers"]));
    Ok(Row::new(vec![
        name(object),
        spec.at(&["replicas"]).int().into(),
        status.at(&["replicas"]).int().into(),
        status.at(&["readyReplicas"]).int().into(),
        age(object, clock)?,
        names,
        images,
        format_labels(spec.at(&["selector"])).into(),
    ]))
}

/// `loadBalancerStatusStringer` at wide width (the API server always
/// prints wide): the ingress points' IPs, else hostnames, sorted and
/// deduplicated.
pub(super) fn load_balancer_ingress(ingress: Field<'_>) -> String {
    let mut points: Vec<&str> = ingress
        .items()
        .filter_map(|point| {
            let ip = point.at(&["ip"]).str();
            let hostname = point.at(&["hostname"]).str();
            if !ip.is_empty() {
                Some(ip)
            } else if !hostname.is_empty() {
                Some(hostname)
            } else {
                None
            }
        })
        .collect();
    points.sort_unstable();
    points.dedup();
    points.join(",")
}

/// `getServiceExternalIP`.
fn service_external_ip(spec: Field<'_>, status: Field<'_>) -> String {
    let external_ips: Vec<&str> = spec.at(&["externalIPs"]).items().map(Field::str).collect();
    match spec.at(&["type"]).str() {
        "ClusterIP" | "NodePort" => {
            if external_ips.is_empty() {
                "<none>".to_owned()
            } else {
                external_ips.join(",")
            }
        }
        "LoadBalancer" => {
            let lb = load_balancer_ingress(status.at(&["loadBalancer", "ingress"]));
            if !external_ips.is_empty() {
                let mut all: Vec<&str> = if lb.is_empty() {
                    Vec::new()
                } else {
                    lb.split(',').collect()
                };
                all.extend(external_ips);
                return all.join(",");
            }
            if lb.is_empty() {
                "<pending>".to_owned()
            } else {
                lb
            }
        }
        "ExternalName" => spec.at(&["externalName"]).str().to_owned(),
        _ => "<unknown>".to_owned(),
    }
}

pub(super) fn service(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let spec = object.at(&["spec"]);
    let cluster_ip = spec
        .at(&["clusterIPs"])
        .items()
        .next()
        .map_or("<none>", Field::str);
    let ports: Vec<String> = spec
        .at(&["ports"])
        .items()
        .map(|p| {
            let (port, node_port, protocol) = (
                p.at(&["port"]).int(),
                p.at(&["nodePort"]).int(),
                p.at(&["protocol"]).str(),
            );
            if node_port > 0 {
                format!("{port}:{node_port}/{protocol}")
            } else {
                format!("{port}/{protocol}")
            }
        })
        .collect();
    Ok(Row::new(vec![
        name(object),
        spec.at(&["type"]).str().into(),
        cluster_ip.into(),
        service_external_ip(spec, object.at(&["status"])).into(),
        or_none(&ports.join(",")).into(),
        age(object, clock)?,
        format_labels(spec.at(&["selector"])).into(),
    ]))
}

/// Go's `net.JoinHostPort`: a host with a colon is bracketed.
fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `formatEndpoints(endpoints, nil)`: up to three addresses (with each
/// port), "+ N more..." past them, "<none>" without subsets.
fn format_endpoints(subsets: Field<'_>) -> String {
    if subsets.len() == 0 {
        return "<none>".to_owned();
    }
    const MAX: usize = 3;
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0;
    for subset in subsets.items() {
        let addresses: Vec<&str> = subset
            .at(&["addresses"])
            .items()
            .map(|a| a.at(&["ip"]).str())
            .collect();
        let ports = subset.at(&["ports"]);
        if ports.len() == 0 {
            // Headless services without ports.
            count += addresses.len();
            for ip in &addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push((*ip).to_owned());
            }
            continue;
        }
        for port in ports.items() {
            count += addresses.len();
            for ip in &addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(join_host_port(ip, port.at(&["port"]).int()));
            }
        }
    }
    let joined = list.join(",");
    if more {
        format!("{joined} + {} more...", count - MAX)
    } else {
        joined
    }
}

pub(super) fn endpoints(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    Ok(Row::new(vec![
        name(object),
        format_endpoints(object.at(&["subsets"])).into(),
        age(object, clock)?,
    ]))
}

/// `findNodeRoles`: `node-role.kubernetes.io/<role>` labels and the
/// `kubernetes.io/role` label's value, sorted and deduplicated.
fn node_roles(labels: Field<'_>) -> String {
    let mut roles: Vec<&str> = labels
        .string_map()
        .into_iter()
        .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
            Some(role) => Some(role).filter(|r| !r.is_empty()),
            None => Some(v).filter(|v| k == "kubernetes.io/role" && !v.is_empty()),
        })
        .collect();
    roles.sort_unstable();
    roles.dedup();
    or_none(&roles.join(","))
}

pub(super) fn node(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let status = object.at(&["status"]);
    // The last Ready condition counts (a map of conditions by type).
    let ready = status
        .at(&["conditions"])
        .items()
        .filter(|c| c.at(&["type"]).str() == "Ready")
        .last();
    let mut state: Vec<&str> = match ready {
        Some(c) if c.at(&["status"]).str() == "True" => vec!["Ready"],
        Some(_) => vec!["NotReady"],
        None => vec!["Unknown"],
    };
    if object.at(&["spec", "unschedulable"]).bool() {
        state.push("SchedulingDisabled");
    }
    let info = status.at(&["nodeInfo"]);
    let unknown = |s: &str| {
        if s.is_empty() {
            "<unknown>".to_owned()
        } else {
            s.to_owned()
        }
    };
    let mut kernel = unknown(info.at(&["kernelVersion"]).str());
    let arch = info.at(&["architecture"]).str();
    if !arch.is_empty() {
        kernel = format!("{kernel} ({arch})");
    }
    let address = |kind: &str| {
        status
            .at(&["addresses"])
            .items()
            .find(|a| a.at(&["type"]).str() == kind)
            .map_or_else(
                || "<none>".to_owned(),
                |a| a.at(&["address"]).str().to_owned(),
            )
    };
    Ok(Row::new(vec![
        name(object),
        state.join(",").into(),
        node_roles(object.at(&["metadata", "labels"])).into(),
        age(object, clock)?,
        info.at(&["kubeletVersion"]).str().into(),
        address("InternalIP").into(),
        address("ExternalIP").into(),
        unknown(info.at(&["osImage"]).str()).into(),
        kernel.into(),
        unknown(info.at(&["containerRuntimeVersion"]).str()).into(),
    ]))
}

pub(super) fn namespace(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    Ok(Row::new(vec![
        name(object),
        object.at(&["status", "phase"]).str().into(),
        age(object, clock)?,
    ]))
}

pub(super) fn config_map(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let keys = object.at(&["data"]).len() + object.at(&["binaryData"]).len();
    Ok(Row::new(vec![
        name(object),
        (keys as i64).into(),
        age(object, clock)?,
    ]))
}

pub(super) fn secret(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    // stringData is write-only: the API server merges it into data.
    Ok(Row::new(vec![
        name(object),
        object.at(&["type"]).str().into(),
        (object.at(&["data"]).len() as i64).into(),
        age(object, clock)?,
    ]))
}

pub(super) fn service_account(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    Ok(Row::new(vec![name(object), age(object, clock)?]))
}

pub(super) fn resource_quota(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let hard = object.at(&["status", "hard"]);
    let used = object.at(&["status", "used"]);
    let mut resources: Vec<&str> = hard
        .map()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    resources.sort_unstable();
    let (mut requests, mut limits) = (String::new(), String::new());
    for resource in resources {
        let pieces: Vec<&str> = resource.split('.').collect();
        let column = if pieces.len() > 1 && pieces[0] == "limits" {
            &mut limits
        } else {
            &mut requests
        };
        column.push_str(&format!(
            "{resource}: {}/{}, ",
            used.at(&[resource]).quantity(),
            hard.at(&[resource]).quantity()
        ));
    }
    let trim = |s: &str| s.strip_suffix(", ").unwrap_or(s).to_owned();
    Ok(Row::new(vec![
        name(object),
        trim(&requests).into(),
        trim(&limits).into(),
        age(object, clock)?,
    ]))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn endpoints_show_three_addresses_with_ports_and_count_the_rest() {
        let subsets = json!([
            {"addresses": [{"ip": "10.0.0.1"}, {"ip": "fd00::2"}], "ports": [{"port": 80}, {"port": 443}]},
            {"addresses": [{"ip": "10.0.0.3"}]},
        ]);
        assert_eq!(
            format_endpoints(Field::of(&subsets)),
            "10.0.0.1:80,[fd00::2]:80,10.0.0.1:443 + 2 more..."
        );
        assert_eq!(format_endpoints(Field::of(&json!([]))), "<none>");
    }

    #[test]
    fn node_roles_come_from_both_label_forms_sorted() {
        let labels = json!({
            "node-role.kubernetes.io/worker": "",
            "node-role.kubernetes.io/control-plane": "",
            "node-role.kubernetes.io/": "",
            "kubernetes.io/role": "worker",
            "other": "x",
        });
        assert_eq!(node_roles(Field::of(&labels)), "control-plane,worker");
        assert_eq!(node_roles(Field::of(&json!({}))), "<none>");
    }
}

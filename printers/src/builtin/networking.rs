//! Rows of the networking and discovery groups' types.

use super::{
    cells::{age, go_to_lower, list_with_more, name},
    core::load_balancer_ingress,
};
use crate::{
    error::PrinterError, labels::format_label_selector, object::Field, table::Row, time::Clock,
};

/// `formatHosts`: up to three rules' hosts, "+ N more..." (counting rules)
/// past them, "*" when none has a host.
fn format_hosts(rules: Field<'_>) -> String {
    const MAX: usize = 3;
    let mut list: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in rules.items() {
        if list.len() == MAX {
            more = true;
        }
        let host = rule.at(&["host"]).str();
        if !more && !host.is_empty() {
            list.push(host);
        }
    }
    if list.is_empty() {
        return "*".to_owned();
    }
    let joined = list.join(",");
    if more {
        format!("{joined} + {} more...", rules.len() - MAX)
    } else {
        joined
    }
}

pub(super) fn ingress(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let spec = object.at(&["spec"]);
    let ports = if spec.at(&["tls"]).len() != 0 {
        "80, 443"
    } else {
        "80"
    };
    Ok(Row::new(vec![
        name(object),
        spec.at(&["ingressClassName"])
            .opt_str()
            .unwrap_or("<none>")
            .into(),
        format_hosts(spec.at(&["rules"])).into(),
        load_balancer_ingress(object.at(&["status", "loadBalancer", "ingress"])).into(),
        ports.into(),
        age(object, clock)?,
    ]))
}

pub(super) fn ingress_class(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let mut class = object.at(&["metadata", "name"]).str().to_owned();
    if object
        .at(&["metadata", "annotations"])
        .entry("ingressclass.kubernetes.io/is-default-class")
        == Some("true")
    {
        class.push_str(" (default)");
    }
    let spec = object.at(&["spec"]);
    let parameters = spec.at(&["parameters"]);
    let parameters = if parameters.is_set() {
        let mut p = parameters.at(&["kind"]).str().to_owned();
        if let Some(group) = parameters.at(&["apiGroup"]).opt_str() {
            p = format!("{p}.{group}");
        }
        format!("{p}/{}", parameters.at(&["name"]).str())
    } else {
        "<none>".to_owned()
    };
    Ok(Row::new(vec![
        class.into(),
        spec.at(&["controller"]).str().into(),
        parameters.into(),
        age(object, clock)?,
    ]))
}

pub(super) fn network_policy(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    Ok(Row::new(vec![
        name(object),
        format_label_selector(object.at(&["spec", "podSelector"])).into(),
        age(object, clock)?,
    ]))
}

pub(super) fn service_cidr(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let cidrs: Vec<&str> = object
        .at(&["spec", "cidrs"])
        .items()
        .map(Field::str)
        .collect();
    Ok(Row::new(vec![
        name(object),
        cidrs.join(",").into(),
        age(object, clock)?,
    ]))
}

pub(super) fn ip_address(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let parent = object.at(&["spec", "parentRef"]);
    let parent = if parent.is_set() {
        // strings.ToLower of the GroupResource's String(): "resource" or
        // "resource.group".
        let (group, resource) = (parent.at(&["group"]).str(), parent.at(&["resource"]).str());
        let mut name = go_to_lower(&if group.is_empty() {
            resource.to_owned()
        } else {
            format!("{resource}.{group}")
        });
        let namespace = parent.at(&["namespace"]).str();
        if !namespace.is_empty() {
            name = format!("{name}/{namespace}");
        }
        format!("{name}/{}", parent.at(&["name"]).str())
    } else {
        "<none>".to_owned()
    };
    // Three cells for two column definitions, as the API server prints.
    Ok(Row::new(vec![
        name(object),
        parent.into(),
        age(object, clock)?,
    ]))
}

pub(super) fn endpoint_slice(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let ports: Vec<String> = object
        .at(&["ports"])
        .items()
        .map(
            |p| match (p.at(&["port"]).opt_int(), p.at(&["name"]).opt_str()) {
                (Some(port), _) => port.to_string(),
                (None, Some(name)) => name.to_owned(),
                (None, None) => "*".to_owned(),
            },
        )
        .collect();
    let addresses: Vec<String> = object
        .at(&["endpoints"])
        .items()
        .flat_map(|e| {
            e.at(&["addresses"])
                .items()
                .map(|a| a.str().to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    Ok(Row::new(vec![
        name(object),
        object.at(&["addressType"]).str().into(),
        list_with_more(&ports, 3).into(),
        list_with_more(&addresses, 3).into(),
        age(object, clock)?,
    ]))
}

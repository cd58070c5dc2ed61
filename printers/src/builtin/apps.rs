//! Rows of the apps group's types.

use super::cells::{age, containers, go_to_lower, name};
use crate::{
    error::PrinterError,
    labels::{Selector, format_label_selector, format_labels, selector},
    metadata::Annotations,
    object::Field,
    table::Row,
    time::Clock,
};

pub(super) fn deployment(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let (spec, status) = (object.at(&["spec"]), object.at(&["status"]));
    let [names, images] = containers(spec.at(&["template", "spec", "containers"]));
    // printDeployment prints the selector itself: "<invalid>" where
    // FormatLabelSelector says "<error>", and "" rather than "<none>".
    let selector = match selector(spec.at(&["selector"])) {
        Selector::Valid(s) => s,
        Selector::Invalid => "<invalid>".to_owned(),
    };
    Ok(Row::new(vec![
        name(object),
        format!(
            "{}/{}",
            status.at(&["readyReplicas"]).int(),
            spec.at(&["replicas"]).int()
        )
        .into(),
        status.at(&["updatedReplicas"]).int().into(),
        status.at(&["availableReplicas"]).int().into(),
        age(object, clock)?,
        names,
        images,
        selector.into(),
    ]))
}

pub(super) fn replica_set(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let (spec, status) = (object.at(&["spec"]), object.at(&["status"]));
    let [names, images] = containers(spec.at(&["template", "spec", "containers"]));
    Ok(Row::new(vec![
        name(object),
        spec.at(&["replicas"]).int().into(),
        status.at(&["replicas"]).int().into(),
        status.at(&["readyReplicas"]).int().into(),
        age(object, clock)?,
        names,
        images,
        format_label_selector(spec.at(&["selector"])).into(),
    ]))
}

pub(super) fn stateful_set(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let spec = object.at(&["spec"]);
    let [names, images] = containers(spec.at(&["template", "spec", "containers"]));
    Ok(Row::new(vec![
        name(object),
        format!(
            "{}/{}",
            object.at(&["status", "readyReplicas"]).int(),
            spec.at(&["replicas"]).int()
        )
        .into(),
        age(object, clock)?,
        names,
        images,
    ]))
}

pub(super) fn daemon_set(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let (spec, status) = (object.at(&["spec"]), object.at(&["status"]));
    let [names, images] = containers(spec.at(&["template", "spec", "containers"]));
    Ok(Row::new(vec![
        name(object),
        status.at(&["desiredNumberScheduled"]).int().into(),
        status.at(&["currentNumberScheduled"]).int().into(),
        status.at(&["numberReady"]).int().into(),
        status.at(&["updatedNumberScheduled"]).int().into(),
        status.at(&["numberAvailable"]).int().into(),
        format_labels(spec.at(&["template", "spec", "nodeSelector"])).into(),
        age(object, clock)?,
        names,
        images,
        format_label_selector(spec.at(&["selector"])).into(),
    ]))
}

/// A Deployment's rollback annotation is the internal type's
/// `spec.rollbackTo` (apps/v1 conversion), when set; one that is not a
/// number fails the conversion.
pub(super) fn deployment_annotations(annotations: &mut Annotations) -> Result<(), PrinterError> {
    const KEY: &str = "deprecated.deployment.rollback.to";
    match annotations.get(KEY).map(String::as_str) {
        None | Some("") => Ok(()),
        Some(revision) if revision.parse::<i64>().is_ok() => {
            annotations.remove(KEY);
            Ok(())
        }
        Some(_) => Err(PrinterError::Unprintable(
            "a rollback annotation that is not a number",
        )),
    }
}

/// A DaemonSet's template generation annotation is the internal type's
/// `spec.templateGeneration` (apps/v1 conversion); one that is not a
/// number fails the conversion.
pub(super) fn daemon_set_annotations(annotations: &mut Annotations) -> Result<(), PrinterError> {
    const KEY: &str = "deprecated.daemonset.template.generation";
    match annotations.get(KEY) {
        None => Ok(()),
        Some(generation) if generation.parse::<i64>().is_ok() => {
            annotations.remove(KEY);
            Ok(())
        }
        Some(_) => Err(PrinterError::Unprintable(
            "a template generation annotation that is not a number",
        )),
    }
}

/// `metav1.GetControllerOf`: the first owner reference with
/// `controller: true`.
pub(super) fn controller_of(object: Field<'_>) -> Option<Field<'_>> {
    object
        .at(&["metadata", "ownerReferences"])
        .items()
        .find(|o| o.at(&["controller"]).bool())
}

/// `schema.ParseGroupVersion(apiVersion)`'s group, or None where it fails
/// (more than one slash).
fn group_of(api_version: &str) -> Option<&str> {
    if api_version.is_empty() || api_version == "/" {
        return Some("");
    }
    match api_version.matches('/').count() {
        0 => Some(""),
        1 => api_version.split_once('/').map(|(group, _)| group),
        _ => None,
    }
}

pub(super) fn controller_revision(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let controller = match controller_of(object) {
        None => "<none>".to_owned(),
        Some(owner) => {
            let group =
                group_of(owner.at(&["apiVersion"]).str()).ok_or(PrinterError::Unprintable(
                    "an owner reference's apiVersion has more than one slash",
                ))?;
            let kind = owner.at(&["kind"]).str();
            let name = owner.at(&["name"]).str();
            // formatResourceName with the GroupKind's String(): "Kind" or
            // "Kind.group", lowercased; just the name for an empty one.
            match (kind, group) {
                ("", "") => name.to_owned(),
                (kind, "") => format!("{}/{name}", go_to_lower(kind)),
                (kind, group) => format!("{}/{name}", go_to_lower(&format!("{kind}.{group}"))),
            }
        }
    };
    Ok(Row::new(vec![
        name(object),
        controller.into(),
        object.at(&["revision"]).int().into(),
        age(object, clock)?,
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_versions_parse_as_apimachinery_parses_them() {
        assert_eq!(group_of(""), Some(""));
        assert_eq!(group_of("v1"), Some(""));
        assert_eq!(group_of("apps/v1"), Some("apps"));
        assert_eq!(group_of("/"), Some(""));
        assert_eq!(group_of("a/b/c"), None);
    }
}

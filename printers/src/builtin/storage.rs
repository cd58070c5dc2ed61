//! Rows of volumes, claims and the storage group's types.

use super::cells::{age, name};
use crate::{error::PrinterError, object::Field, table::Row, time::Clock};

/// `helper.GetAccessModesAsString`: RWO, ROX, RWX, RWOP, in that order.
fn access_modes(modes: Field<'_>) -> String {
    let modes: Vec<&str> = modes.items().map(Field::str).collect();
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .into_iter()
    .filter(|(mode, _)| modes.contains(mode))
    .map(|(_, short)| short)
    .collect::<Vec<_>>()
    .join(",")
}

/// The storage class of a volume or claim: the beta annotation when the
/// object has it (even empty), else the field.
fn storage_class<'a>(object: Field<'a>, field: Option<&'a str>) -> &'a str {
    object
        .at(&["metadata", "annotations"])
        .entry("volume.beta.kubernetes.io/storage-class")
        .or(field)
        .unwrap_or("")
}

/// The phase, or "Terminating" once the object is being deleted.
fn phase(object: Field<'_>) -> &str {
    if object.at(&["metadata", "deletionTimestamp"]).is_set() {
        "Terminating"
    } else {
        object.at(&["status", "phase"]).str()
    }
}

pub(super) fn persistent_volume(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let spec = object.at(&["spec"]);
    let claim = spec.at(&["claimRef"]);
    let claim = if claim.is_set() {
        format!(
            "{}/{}",
            claim.at(&["namespace"]).str(),
            claim.at(&["name"]).str()
        )
    } else {
        String::new()
    };
    Ok(Row::new(vec![
        name(object),
        spec.at(&["capacity", "storage"]).quantity().into(),
        access_modes(spec.at(&["accessModes"])).into(),
        spec.at(&["persistentVolumeReclaimPolicy"]).str().into(),
        phase(object).into(),
        claim.into(),
        storage_class(object, Some(spec.at(&["storageClassName"]).str())).into(),
        spec.at(&["volumeAttributesClassName"])
            .opt_str()
            .unwrap_or("<unset>")
            .into(),
        object.at(&["status", "reason"]).str().into(),
        age(object, clock)?,
        spec.at(&["volumeMode"])
            .opt_str()
            .unwrap_or("<unset>")
            .into(),
    ]))
}

pub(super) fn persistent_volume_claim(
    object: Field<'_>,
    clock: Clock,
) -> Result<Row, PrinterError> {
    let (spec, status) = (object.at(&["spec"]), object.at(&["status"]));
    let volume = spec.at(&["volumeName"]).str();
    // Capacity and access modes are the bound volume's, shown once bound.
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            status.at(&["capacity", "storage"]).quantity(),
            access_modes(status.at(&["accessModes"])),
        )
    };
    Ok(Row::new(vec![
        name(object),
        phase(object).into(),
        volume.into(),
        capacity.into(),
        modes.into(),
        storage_class(object, spec.at(&["storageClassName"]).opt_str()).into(),
        spec.at(&["volumeAttributesClassName"])
            .opt_str()
            .unwrap_or("<unset>")
            .into(),
        age(object, clock)?,
        spec.at(&["volumeMode"])
            .opt_str()
            .unwrap_or("<unset>")
            .into(),
    ]))
}

pub(super) fn storage_class_row(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let annotations = object.at(&["metadata", "annotations"]);
    let mut class = object.at(&["metadata", "name"]).str().to_owned();
    if annotations.entry("storageclass.kubernetes.io/is-default-class") == Some("true")
        || annotations.entry("storageclass.beta.kubernetes.io/is-default-class") == Some("true")
    {
        class.push_str(" (default)");
    }
    Ok(Row::new(vec![
        class.into(),
        object.at(&["provisioner"]).str().into(),
        object
            .at(&["reclaimPolicy"])
            .opt_str()
            .unwrap_or("Delete")
            .into(),
        object
            .at(&["volumeBindingMode"])
            .opt_str()
            .unwrap_or("Immediate")
            .into(),
        object.at(&["allowVolumeExpansion"]).bool().into(),
        age(object, clock)?,
    ]))
}

pub(super) fn csi_driver(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let spec = object.at(&["spec"]);
    let tokens = spec.at(&["tokenRequests"]);
    let token_requests = if tokens.is_set() {
        tokens
            .items()
            .map(|t| t.at(&["audience"]).str())
            .collect::<Vec<_>>()
            .join(",")
    } else {
        "<unset>".to_owned()
    };
    let modes: Vec<&str> = spec
        .at(&["volumeLifecycleModes"])
        .items()
        .map(Field::str)
        .collect();
    let modes = if modes.is_empty() {
        "<none>".to_owned()
    } else {
        modes.join(",")
    };
    Ok(Row::new(vec![
        name(object),
        spec.at(&["attachRequired"])
            .opt_bool()
            .unwrap_or(true)
            .into(),
        spec.at(&["podInfoOnMount"]).bool().into(),
        spec.at(&["storageCapacity"]).bool().into(),
        token_requests.into(),
        spec.at(&["requiresRepublish"]).bool().into(),
        modes.into(),
        age(object, clock)?,
    ]))
}

pub(super) fn csi_node(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    Ok(Row::new(vec![
        name(object),
        (object.at(&["spec", "drivers"]).len() as i64).into(),
        age(object, clock)?,
    ]))
}

pub(super) fn volume_attachment(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let spec = object.at(&["spec"]);
    Ok(Row::new(vec![
        name(object),
        spec.at(&["attacher"]).str().into(),
        spec.at(&["source", "persistentVolumeName"]).str().into(),
        spec.at(&["nodeName"]).str().into(),
        object.at(&["status", "attached"]).bool().into(),
        age(object, clock)?,
    ]))
}

pub(super) fn volume_attributes_class(
    object: Field<'_>,
    clock: Clock,
) -> Result<Row, PrinterError> {
    Ok(Row::new(vec![
        name(object),
        object.at(&["driverName"]).str().into(),
        age(object, clock)?,
    ]))
}

//! Rows of Jobs and CronJobs.

use super::cells::{age, containers, name};
use crate::{
    error::PrinterError,
    labels::format_label_selector,
    object::Field,
    table::Row,
    time::{Clock, human_duration},
};

/// `hasJobCondition`: the first condition of `kind` is "True".
fn has_condition(conditions: Field<'_>, kind: &str) -> bool {
    conditions
        .items()
        .find(|c| c.at(&["type"]).str() == kind)
        .is_some_and(|c| c.at(&["status"]).str() == "True")
}

pub(super) fn job(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let (spec, status) = (object.at(&["spec"]), object.at(&["status"]));
    let succeeded = status.at(&["succeeded"]).int();
    let completions = match spec.at(&["completions"]).opt_int() {
        Some(completions) => format!("{succeeded}/{completions}"),
        None => match spec.at(&["parallelism"]).int() {
            parallelism if parallelism > 1 => format!("{succeeded}/1 of {parallelism}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let duration = match (
        status.at(&["startTime"]).time()?,
        status.at(&["completionTime"]).time()?,
    ) {
        (None, _) => String::new(),
        (Some(start), None) => clock.since(start),
        (Some(start), Some(end)) => human_duration(end.sub(start)),
    };
    let conditions = status.at(&["conditions"]);
    let state = if has_condition(conditions, "Complete") {
        "Complete"
    } else if has_condition(conditions, "Failed") {
        "Failed"
    } else if object.at(&["metadata", "deletionTimestamp"]).is_set() {
        "Terminating"
    } else if has_condition(conditions, "Suspended") {
        "Suspended"
    } else if has_condition(conditions, "FailureTarget") {
        "FailureTarget"
    } else if has_condition(conditions, "SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    let [names, images] = containers(spec.at(&["template", "spec", "containers"]));
    Ok(Row::new(vec![
        name(object),
        state.into(),
        completions.into(),
        duration.into(),
        age(object, clock)?,
        names,
        images,
        format_label_selector(spec.at(&["selector"])).into(),
    ]))
}

/// `printBoolPtr`: "True", "False", or "<unset>".
pub(super) fn bool_ptr(value: Field<'_>) -> String {
    match value.opt_bool() {
        Some(true) => "True".to_owned(),
        Some(false) => "False".to_owned(),
        None => "<unset>".to_owned(),
    }
}

pub(super) fn cron_job(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    let spec = object.at(&["spec"]);
    let last_schedule = match object.at(&["status", "lastScheduleTime"]).time()? {
        None => "<none>".to_owned(),
        some => clock.age(some),
    };
    let job_spec = spec.at(&["jobTemplate", "spec"]);
    let [names, images] = containers(job_spec.at(&["template", "spec", "containers"]));
    Ok(Row::new(vec![
        name(object),
        spec.at(&["schedule"]).str().into(),
        spec.at(&["timeZone"]).opt_str().unwrap_or("<none>").into(),
        bool_ptr(spec.at(&["suspend"])).into(),
        (object.at(&["status", "active"]).len() as i64).into(),
        last_schedule.into(),
        age(object, clock)?,
        names,
        images,
        format_label_selector(job_spec.at(&["selector"])).into(),
    ]))
}

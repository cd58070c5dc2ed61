//! An Event's row (`printEvent`), from a core/v1 Event or an
//! events.k8s.io/v1 one: both convert to the internal core Event the API
//! server prints, events.k8s.io's fields renamed (`note` is the message,
//! `regarding` the involved object, `deprecated*` the legacy counters).

use super::cells::{go_to_lower, name};
use crate::{
    error::PrinterError,
    object::Field,
    table::{Cell, Row},
    time::Clock,
};

/// The internal Event's fields the printer reads, by their JSON names in
/// one version.
struct Names {
    involved_object: &'static str,
    message: &'static str,
    source: &'static str,
    first_timestamp: &'static str,
    last_timestamp: &'static str,
    count: &'static str,
    reporting_controller: &'static str,
}

const CORE: Names = Names {
    involved_object: "involvedObject",
    message: "message",
    source: "source",
    first_timestamp: "firstTimestamp",
    last_timestamp: "lastTimestamp",
    count: "count",
    reporting_controller: "reportingComponent",
};

const EVENTS: Names = Names {
    involved_object: "regarding",
    message: "note",
    source: "deprecatedSource",
    first_timestamp: "deprecatedFirstTimestamp",
    last_timestamp: "deprecatedLastTimestamp",
    count: "deprecatedCount",
    reporting_controller: "reportingController",
};

pub(super) fn core_event(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    event(object, clock, &CORE)
}

pub(super) fn events_event(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    event(object, clock, &EVENTS)
}

fn event(object: Field<'_>, clock: Clock, names: &Names) -> Result<Row, PrinterError> {
    let first = object
        .at(&[names.first_timestamp])
        .time()?
        .filter(|t| !t.is_zero());
    let first_timestamp = match first {
        Some(t) => clock.since(t),
        None => clock.age(object.at(&["eventTime"]).time()?),
    };
    let last = object
        .at(&[names.last_timestamp])
        .time()?
        .filter(|t| !t.is_zero());
    let mut last_timestamp = match last {
        Some(t) => clock.since(t),
        None => first_timestamp.clone(),
    };
    let mut count = object.at(&[names.count]).int();
    let series = object.at(&["series"]);
    if series.is_set() {
        last_timestamp = clock.age(series.at(&["lastObservedTime"]).time()?);
        count = series.at(&["count"]).int();
    } else if count == 0 {
        // Singleton events of the events.k8s.io API have no count.
        count = 1;
    }

    let involved = object.at(&[names.involved_object]);
    let kind = go_to_lower(involved.at(&["kind"]).str());
    let target = match involved.at(&["name"]).str() {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    // formatEventSource: the component (else the reporting controller),
    // and the host (else the reporting instance) after a comma.
    let first_non_empty = |a: &str, b: &str| {
        if a.is_empty() {
            b.to_owned()
        } else {
            a.to_owned()
        }
    };
    let component = first_non_empty(
        object.at(&[names.source, "component"]).str(),
        object.at(&[names.reporting_controller]).str(),
    );
    let instance = first_non_empty(
        object.at(&[names.source, "host"]).str(),
        object.at(&["reportingInstance"]).str(),
    );
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };

    let cells: Vec<Cell> = vec![
        last_timestamp.into(),
        object.at(&["type"]).str().into(),
        object.at(&["reason"]).str().into(),
        target.into(),
        involved.at(&["fieldPath"]).str().into(),
        source.into(),
        go_trim_space(object.at(&[names.message]).str()).into(),
        first_timestamp.into(),
        count.into(),
        name(object),
    ];
    Ok(Row::new(cells))
}

/// Go's `strings.TrimSpace`: Unicode white space at both ends.
fn go_trim_space(s: &str) -> &str {
    // Go's unicode.IsSpace: '\t', '\n', '\v', '\f', '\r', ' ', U+0085,
    // U+00A0 and the Unicode White_Space property, which is what Rust's
    // char::is_whitespace tests.
    s.trim_matches(char::is_whitespace)
}

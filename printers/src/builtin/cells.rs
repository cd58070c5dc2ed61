//! Cells that several printers fill the same way, below every printer so
//! that each imports them and none imports its parent.

use crate::{error::PrinterError, object::Field, table::Cell, time::Clock};

/// The name of the object.
pub(crate) fn name(object: Field<'_>) -> Cell {
    object.at(&["metadata", "name"]).str().into()
}

/// The printers' `translateTimestampSince(obj.CreationTimestamp)`.
pub(crate) fn age(object: Field<'_>, clock: Clock) -> Result<Cell, PrinterError> {
    Ok(clock
        .age(object.at(&["metadata", "creationTimestamp"]).time()?)
        .into())
}

/// `layoutContainerCells`: the containers' names, and their images, each
/// joined by commas.
pub(crate) fn containers(containers: Field<'_>) -> [Cell; 2] {
    let names: Vec<&str> = containers.items().map(|c| c.at(&["name"]).str()).collect();
    let images: Vec<&str> = containers.items().map(|c| c.at(&["image"]).str()).collect();
    [names.join(",").into(), images.join(",").into()]
}

/// Go's `strings.ToLower`: each character's simple lowercase mapping (one
/// character for one: U+0130 becomes "i", not "i" and a combining dot).
pub(crate) fn go_to_lower(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let lower: Vec<char> = if c == '\u{130}' {
                vec!['i']
            } else {
                c.to_lowercase().collect()
            };
            lower
        })
        .collect()
}

/// `listWithMoreString`: the first `max` entries, "+ N more..." past them,
/// "<unset>" for none.
pub(crate) fn list_with_more(list: &[String], max: usize) -> String {
    if list.len() > max {
        return format!("{} + {} more...", list[..max].join(","), list.len() - max);
    }
    if list.is_empty() {
        return "<unset>".to_owned();
    }
    list.join(",")
}

//! What a watching client printed (kubectl-fanout's `watch -o json`, one
//! event a line), checked against the changes written: each arrived, in
//! order, none twice.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, ensure};
use serde_json::Value;

/// One change of an object: its name and the resourceVersion it was
/// written at.
pub type Change = (String, u64);

/// The changes in `output`'s JSON event lines, in the order printed; other
/// lines (a log line on stderr, a partial last line) are skipped.
pub fn printed(output: &str) -> Vec<Change> {
    output
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|event| {
            let metadata = &event["object"]["metadata"];
            let name = metadata["name"].as_str()?.to_owned();
            let rv = metadata["resourceVersion"].as_str()?.parse().ok()?;
            Some((name, rv))
        })
        .collect()
}

/// Checks that `printed` has every one of `written`, that no change is in
/// it twice, and that each object's changes are in increasing
/// resourceVersions: what a client that resumes without loss prints. The
/// error names what is missing, repeated or out of order.
pub fn check_each_once_in_order(printed: &[Change], written: &[Change]) -> Result<()> {
    let mut seen = BTreeSet::new();
    let mut repeated = Vec::new();
    let mut last: BTreeMap<&str, u64> = BTreeMap::new();
    let mut out_of_order = Vec::new();
    for change in printed {
        if !seen.insert(change) {
            repeated.push(change);
        }
        let (name, rv) = change;
        if let Some(before) = last.insert(name, *rv)
            && before >= *rv
        {
            out_of_order.push(format!("{name}@{rv} after @{before}"));
        }
    }
    let missing: Vec<&Change> = written.iter().filter(|c| !seen.contains(c)).collect();
    ensure!(
        missing.is_empty() && repeated.is_empty() && out_of_order.is_empty(),
        "of {} changes written the client printed {} changes; missing {}: {missing:?}; printed twice: {repeated:?}; out of order: {out_of_order:?}",
        written.len(),
        printed.len(),
        missing.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, rv: u64) -> Change {
        (name.to_owned(), rv)
    }

    #[test]
    fn a_lost_a_repeated_and_a_reordered_change_are_each_named() {
        let written = [c("a", 1), c("b", 2), c("a", 3)];
        check_each_once_in_order(&written, &written).unwrap();
        let lost = check_each_once_in_order(&[c("a", 1), c("a", 3)], &written).unwrap_err();
        assert!(
            lost.to_string().contains(r#"missing 1: [("b", 2)]"#),
            "{lost}"
        );
        let twice = [c("a", 1), c("b", 2), c("a", 1), c("a", 3)];
        let twice = check_each_once_in_order(&twice, &written).unwrap_err();
        assert!(
            twice.to_string().contains(r#"printed twice: [("a", 1)]"#),
            "{twice}"
        );
        let reordered = [c("a", 3), c("b", 2), c("a", 1)];
        let reordered = check_each_once_in_order(&reordered, &written).unwrap_err();
        assert!(
            reordered.to_string().contains("a@1 after @3"),
            "{reordered}"
        );
    }

    #[test]
    fn json_event_lines_are_read_and_other_lines_skipped() {
        let output = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"7\"}}}\n\
                      2026-01-01T00:00:00Z WARN watch interrupted\n\
                      {\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"9\"}}}\n\
                      {\"type\":\"MOD";
        assert_eq!(printed(output), [c("a", 7), c("a", 9)]);
    }
}

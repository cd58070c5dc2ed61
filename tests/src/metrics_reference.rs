//! The metrics reference, docs/metrics.md, rendered from what running
//! servers export: every family of their OpenMetrics expositions with its
//! type, help and the label names its samples carry. The monitoring test
//! compares the committed page with it (and writes it for
//! `scripts/docs-reference`).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result, bail, ensure};

/// One metric family as expositions describe it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Family {
    /// `counter`, `gauge`, ...
    pub kind: String,
    /// The help text, unescaped.
    pub help: String,
    /// The label names of its samples (none when it had no sample).
    pub labels: BTreeSet<String>,
}

/// The families of an OpenMetrics exposition, by the name their samples
/// carry (a counter's `NAME_total`), from its `# TYPE` and `# HELP` lines
/// (so families with no sample yet count too) and its samples' labels.
pub fn families(scrape: &str) -> Result<BTreeMap<String, Family>> {
    let mut by_family: BTreeMap<String, Family> = BTreeMap::new();
    for line in scrape.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').context(line.to_owned())?;
            by_family.entry(name.to_owned()).or_default().kind = kind.to_owned();
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            by_family.entry(name.to_owned()).or_default().help = unescape(help);
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).context(line.to_owned())?;
            let sample = &line[..end];
            let family = [sample.strip_suffix("_total"), Some(sample)]
                .into_iter()
                .flatten()
                .find(|name| by_family.contains_key(*name))
                .with_context(|| format!("a sample of no family: {line}"))?
                .to_owned();
            if line[end..].starts_with('{') {
                let labels = label_names(&line[end + 1..])
                    .with_context(|| format!("the labels of {line}"))?;
                by_family
                    .get_mut(&family)
                    .context("the family just found")?
                    .labels
                    .extend(labels);
            }
        }
    }
    Ok(by_family
        .into_iter()
        .map(|(name, family)| {
            let sample = match family.kind.as_str() {
                "counter" => format!("{name}_total"),
                _ => name,
            };
            (sample, family)
        })
        .collect())
}

/// The label names of a sample, given what follows its `{`: `k="v",...}`,
/// values escaped as OpenMetrics escapes them (`\\`, `\"`, `\n`).
fn label_names(mut rest: &str) -> Result<Vec<String>> {
    let mut names = Vec::new();
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            ensure!(after.starts_with(' '), "no value after the labels");
            return Ok(names);
        }
        let (name, value) = rest.split_once("=\"").context("a label without a value")?;
        names.push(name.to_owned());
        let mut chars = value.char_indices();
        let close = loop {
            match chars.next() {
                Some((_, '\\')) => {
                    chars.next();
                }
                Some((i, '"')) => break i,
                Some(_) => {}
                None => bail!("a label value that does not end"),
            }
        };
        rest = &value[close + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// A help text as OpenMetrics escapes it, unescaped.
fn unescape(help: &str) -> String {
    let mut out = String::with_capacity(help.len());
    let mut chars = help.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// Every family of `every` (several servers' expositions merged: a
/// server with every optional part on, a tier's leaf), in sections by the
/// label that scopes it; those not in `always` (a server with none of the
/// optional parts) are marked as exported only with them.
pub fn render(
    always: &BTreeMap<String, Family>,
    every: &[BTreeMap<String, Family>],
) -> Result<String> {
    let mut merged: BTreeMap<String, Family> = BTreeMap::new();
    for families in every {
        for (name, family) in families {
            let entry = merged.entry(name.clone()).or_insert_with(|| Family {
                labels: BTreeSet::new(),
                ..family.clone()
            });
            ensure!(
                entry.kind == family.kind && entry.help == family.help,
                "{name} is described two ways: {entry:?} and {family:?}"
            );
            entry.labels.extend(family.labels.iter().cloned());
        }
    }
    let missing: Vec<_> = always.keys().filter(|n| !merged.contains_key(*n)).collect();
    ensure!(
        missing.is_empty(),
        "families of the plain server missing from the others: {missing:?}"
    );

    let sections = [
        (
            "resource",
            "Per resource type (label `resource`, as `v1/configmaps`)",
        ),
        (
            "listener",
            "Per listener (label `listener`: `grpc`, `health`, `metrics`)",
        ),
        ("", "For the whole server"),
    ];
    let mut page = String::from(HEADER);
    for (scope, title) in sections {
        page.push_str(&format!(
            "\n## {title}\n\n| metric | type | labels | what |\n|---|---|---|---|\n"
        ));
        for (name, family) in &merged {
            let first = family
                .labels
                .contains("resource")
                .then_some("resource")
                .or_else(|| family.labels.contains("listener").then_some("listener"));
            if first.unwrap_or("") != scope {
                continue;
            }
            let labels: Vec<String> = family
                .labels
                .iter()
                .filter(|l| l.as_str() != scope)
                .map(|l| format!("`{l}`"))
                .collect();
            let only = if always.contains_key(name) {
                ""
            } else {
                " Only with an optional part on (above)."
            };
            page.push_str(&format!(
                "| `{name}` | {} | {} | {}{only} |\n",
                family.kind,
                labels.join(", "),
                cell(&family.help),
            ));
        }
    }
    Ok(page)
}

/// A help text as one Markdown table cell, ending with one full stop
/// (prometheus-client's registry adds one to the help it is given).
fn cell(help: &str) -> String {
    format!("{}.", help.trim_end_matches('.'))
        .replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace('<', "&lt;")
        .replace('*', "\\*")
        .replace('\n', " ")
}

/// The page's opening, above the generated tables.
const HEADER: &str = "# Metrics

<!-- Generated by scripts/docs-reference from what running servers export; do not edit. -->

Every metric family kube-fanout exports on `/metrics` (OpenMetrics text; with
`--auth=kubernetes` a scrape needs a token allowed to `get` the non-resource
URL `/metrics`: [operations/deploy.md](operations/deploy.md#metrics-and-dashboards)).
Per-type and per-listener families are read from the cache when scraped, so
nothing on the event path counts them, except wake-ups and deliveries (one
relaxed atomic add each) and each watch's lag position (two relaxed stores per
event it reads). Some families exist only with an optional part on:
the authenticator's (`kube_fanout_token_reviews_total`,
`kube_fanout_token_reviews_throttled_total`, `kube_fanout_access_reviews_total`,
`kube_fanout_auth_checks_total`, `kube_fanout_auth_refused_shut_out_total`)
with `--auth=kubernetes`, `kube_fanout_audit_lines_total` with
`--audit-level`, and `kube_fanout_on_demand_*` with `--on-demand-resources`;
`kube_fanout_upstream_lag_seconds` has samples on a tier's leaf only. The
alerts that read them: [operations/runbooks.md](operations/runbooks.md).
";

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = "# HELP kube_fanout_objects Objects in the cache.
# TYPE kube_fanout_objects gauge
kube_fanout_objects{resource=\"v1/configmaps\"} 3
# HELP kube_fanout_watch_errors Watches that ended, by \\\"reason\\\".
# TYPE kube_fanout_watch_errors counter
kube_fanout_watch_errors_total{resource=\"v1/configmaps\",reason=\"a,b=\\\"c}\"} 1
# HELP kube_fanout_max_lag_events The bound.
# TYPE kube_fanout_max_lag_events gauge
kube_fanout_max_lag_events 7
# HELP kube_fanout_upstream_lag_seconds For a leaf.
# TYPE kube_fanout_upstream_lag_seconds gauge
# EOF
";

    #[test]
    fn families_carry_their_type_help_and_label_names() {
        let families = families(SCRAPE).expect("parsed");
        let names: Vec<_> = families.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "kube_fanout_max_lag_events",
                "kube_fanout_objects",
                "kube_fanout_upstream_lag_seconds",
                "kube_fanout_watch_errors_total"
            ]
        );
        let errors = &families["kube_fanout_watch_errors_total"];
        assert_eq!(errors.kind, "counter");
        assert_eq!(errors.help, "Watches that ended, by \"reason\".");
        assert_eq!(
            errors.labels.iter().map(String::as_str).collect::<Vec<_>>(),
            ["reason", "resource"]
        );
        assert!(families["kube_fanout_max_lag_events"].labels.is_empty());
        assert!(
            families["kube_fanout_upstream_lag_seconds"]
                .labels
                .is_empty()
        );
    }

    #[test]
    fn a_sample_of_no_family_is_refused() {
        let err = families("kube_fanout_stray 1\n").expect_err("a stray sample");
        assert!(err.to_string().contains("kube_fanout_stray"), "{err}");
    }

    #[test]
    fn the_page_puts_each_family_in_its_scope_and_marks_the_optional_ones() {
        let every = families(SCRAPE).expect("parsed");
        let mut always = every.clone();
        always.remove("kube_fanout_max_lag_events");
        let page = render(&always, &[every]).expect("rendered");
        let per_type = page.find("## Per resource type").expect("per type");
        let whole = page.find("## For the whole server").expect("whole server");
        let objects = page
            .find("| `kube_fanout_objects` | gauge |  |")
            .expect("objects");
        let errors = page
            .find("| `kube_fanout_watch_errors_total` | counter | `reason` |")
            .expect("errors");
        let lag = page
            .find("| `kube_fanout_max_lag_events` | gauge |  | The bound. Only with an optional part on")
            .expect("the optional family marked");
        assert!(per_type < objects && objects < whole && per_type < errors && errors < whole);
        assert!(whole < lag);
    }

    #[test]
    fn a_family_of_the_plain_server_missing_elsewhere_is_refused() {
        let every = families(SCRAPE).expect("parsed");
        let mut fewer = every.clone();
        fewer.remove("kube_fanout_objects");
        let err = render(&every, &[fewer]).expect_err("a family missing");
        assert!(err.to_string().contains("kube_fanout_objects"), "{err}");
    }
}

//! Printing like kubectl: aligned tables by default, or JSON or YAML.

use std::io::Write;

use anyhow::Result;
use k8s_openapi::jiff::Timestamp;
use kube_fanout_client::{
    GroupVersionResource,
    proto::{EventType, ResourceStatus, SyncState},
};
use serde_json::{Value, json};

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns.
    Table,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// Prints in one format.
pub struct Printer {
    format: Format,
    namespace_column: bool,
    /// For watch tables: whether the header is out.
    header_done: bool,
}

impl Printer {
    /// A printer in `format`.
    pub fn new(format: Format) -> Self {
        Printer {
            format,
            namespace_column: false,
            header_done: false,
        }
    }

    /// Adds a NAMESPACE column to tables (when listing every namespace).
    pub fn with_namespace(mut self, on: bool) -> Self {
        self.namespace_column = on;
        self
    }

    fn value(&self, out: &mut impl Write, value: &Value) -> Result<()> {
        match self.format {
            Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(value)?)?,
            Format::Yaml => write!(out, "{}", serde_yaml::to_string(value)?)?,
            Format::Table => unreachable!("tables are printed by the callers"),
        }
        Ok(())
    }

    /// The served resource types.
    pub fn resources(&self, out: &mut impl Write, resources: &[ResourceStatus]) -> Result<()> {
        if self.format != Format::Table {
            let items: Vec<Value> = resources.iter().map(resource_json).collect();
            return self.value(out, &json!({ "resources": items }));
        }
        let mut rows = vec![row([
            "RESOURCE",
            "KIND",
            "SYNC",
            "RESOURCEVERSION",
            "OBJECTS",
            "SUBSCRIBERS",
            "REFLECTOR",
            "UPSTREAM",
            "LAG",
        ])];
        for r in resources {
            rows.push(vec![
                resource_path(r),
                r.kind.clone(),
                sync_state(r).to_owned(),
                r.resource_version.clone(),
                r.objects.to_string(),
                r.subscribers.to_string(),
                r.reflector_phase.clone(),
                upstream(r).to_owned(),
                lag(r),
            ]);
        }
        table(out, &rows)
    }

    /// A snapshot of objects.
    pub fn list(
        &self,
        out: &mut impl Write,
        resource_version: &str,
        objects: &[Value],
    ) -> Result<()> {
        if self.format != Format::Table {
            return self.value(
                out,
                &json!({
                    "apiVersion": "v1",
                    "kind": "List",
                    "metadata": {"resourceVersion": resource_version},
                    "items": objects,
                }),
            );
        }
        if objects.is_empty() {
            return Ok(());
        }
        let mut rows = vec![self.object_header()];
        rows.extend(objects.iter().map(|o| self.object_row(o)));
        table(out, &rows)
    }

    /// One object.
    pub fn object(&self, out: &mut impl Write, object: &Value) -> Result<()> {
        if self.format != Format::Table {
            return self.value(out, object);
        }
        table(out, &[self.object_header(), self.object_row(object)])
    }

    /// One watch event of type `kind` at `resource_version`; in a table
    /// each is a row, the header printed once. The rows of a re-sync
    /// unit's new state are marked (`"resync": true`, or `yes` in the
    /// RESYNC column), and so is the bookmark that closes it, the only
    /// bookmark printed.
    pub fn event(
        &mut self,
        out: &mut impl Write,
        kind: EventType,
        resource_version: &str,
        resync: bool,
        object: &Value,
    ) -> Result<()> {
        let kind_name = kind.as_str_name();
        let mut doc = json!({"type": kind_name, "object": object});
        if resync {
            doc["resync"] = json!(true);
        }
        match self.format {
            Format::Json => writeln!(out, "{doc}")?,
            Format::Yaml => write!(out, "---\n{}", serde_yaml::to_string(&doc)?)?,
            Format::Table => {
                // Rows stream, so columns cannot be measured: fixed widths.
                if !self.header_done {
                    self.header_done = true;
                    writeln!(out, "{:<10} {:<12} {:<6} NAME", "EVENT", "RV", "RESYNC")?;
                }
                let (resync, name) = match (resync, kind) {
                    (true, EventType::Bookmark) => ("end", "(re-sync unit complete)".to_owned()),
                    (true, _) => ("yes", qualified_name(object)),
                    (false, _) => ("-", qualified_name(object)),
                };
                writeln!(
                    out,
                    "{kind_name:<10} {resource_version:<12} {resync:<6} {name}"
                )?;
            }
        }
        Ok(())
    }

    fn object_header(&self) -> Vec<String> {
        let mut header = row(["NAME", "RESOURCEVERSION", "AGE"]);
        if self.namespace_column {
            header.insert(0, "NAMESPACE".into());
        }
        header
    }

    fn object_row(&self, object: &Value) -> Vec<String> {
        let meta = &object["metadata"];
        let mut cells = vec![
            text(&meta["name"]),
            text(&meta["resourceVersion"]),
            age(&meta["creationTimestamp"]),
        ];
        if self.namespace_column {
            cells.insert(0, text(&meta["namespace"]));
        }
        cells
    }
}

fn row<const N: usize>(cells: [&str; N]) -> Vec<String> {
    cells.iter().map(|c| (*c).to_owned()).collect()
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or("").to_owned()
}

fn qualified_name(object: &Value) -> String {
    let meta = &object["metadata"];
    match meta["namespace"].as_str() {
        Some(ns) => format!("{ns}/{}", text(&meta["name"])),
        None => text(&meta["name"]),
    }
}

/// The served type's API path, `v1/configmaps` or `apps/v1/deployments`.
pub fn resource_path(r: &ResourceStatus) -> String {
    GroupVersionResource::from(r.resource.clone().unwrap_or_default()).to_string()
}

fn sync_state(r: &ResourceStatus) -> &'static str {
    match r.sync_state() {
        SyncState::Synced => "Synced",
        SyncState::Syncing => "Syncing",
        SyncState::Unspecified => "Unknown",
    }
}

/// The parent a tier's leaf follows, from the status's "kube-fanout
/// ADDRESS"; None for a type the API server feeds.
fn parent(r: &ResourceStatus) -> Option<&str> {
    r.upstream.strip_prefix("kube-fanout ")
}

/// Where a type is fed from, in one cell: "api-server", or the address of
/// the parent a tier's leaf follows; "<unknown>" from a server too old to
/// say.
fn upstream(r: &ResourceStatus) -> &str {
    match parent(r) {
        Some(parent) => parent,
        None if r.upstream.is_empty() => "<unknown>",
        None => &r.upstream,
    }
}

/// A leaf's lag behind its parent ("0s" when it keeps up); "-" for a type
/// the API server feeds, which has no parent to be behind.
fn lag(r: &ResourceStatus) -> String {
    match parent(r) {
        Some(_) => format!("{}s", r.upstream_lag_seconds),
        None => "-".into(),
    }
}

fn resource_json(r: &ResourceStatus) -> Value {
    json!({
        "resource": resource_path(r),
        "kind": r.kind,
        "namespaced": r.namespaced,
        "syncState": sync_state(r),
        "resourceVersion": r.resource_version,
        "objects": r.objects,
        "subscribers": r.subscribers,
        "reflectorPhase": r.reflector_phase,
        "lastError": r.last_error,
        "oldestResumableResourceVersion": r.oldest_resumable_resource_version,
        "relists": r.relists,
        "upstream": r.upstream,
        "bootstrappedFrom": r.bootstrapped_from,
        "upstreamResourceVersion": r.upstream_resource_version,
        "upstreamLagSeconds": r.upstream_lag_seconds,
    })
}

/// kubectl's short ages: 42s, 7m, 3h, 12d.
fn age(created: &Value) -> String {
    let Some(created) = created.as_str().and_then(|t| t.parse::<Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let secs = (Timestamp::now().as_second() - created.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// Left-aligned columns three spaces apart, as kubectl prints them.
fn table(out: &mut impl Write, rows: &[Vec<String>]) -> Result<()> {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        writeln!(out, "{}", line.join("   ").trim_end())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_like_kubectl() {
        let mut out = Vec::new();
        table(
            &mut out,
            &[
                row(["NAME", "AGE"]),
                row(["a-long-name", "5s"]),
                row(["b", "12d"]),
            ],
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "NAME          AGE\na-long-name   5s\nb             12d\n"
        );
    }

    #[test]
    fn re_sync_events_and_the_bookmark_closing_their_unit_are_marked() {
        let cm = json!({"metadata": {"name": "a", "namespace": "ns"}});
        let mut out = Vec::new();
        let mut table = Printer::new(Format::Table);
        table
            .event(&mut out, EventType::Modified, "20", false, &cm)
            .unwrap();
        table
            .event(&mut out, EventType::Added, "20", true, &cm)
            .unwrap();
        table
            .event(&mut out, EventType::Bookmark, "20", true, &json!({}))
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "EVENT      RV           RESYNC NAME\n\
             MODIFIED   20           -      ns/a\n\
             ADDED      20           yes    ns/a\n\
             BOOKMARK   20           end    (re-sync unit complete)\n"
        );
        let mut out = Vec::new();
        let mut json = Printer::new(Format::Json);
        json.event(&mut out, EventType::Added, "20", true, &cm)
            .unwrap();
        json.event(&mut out, EventType::Added, "21", false, &cm)
            .unwrap();
        let docs: Vec<Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(docs[0]["resync"], true);
        assert_eq!(docs[1].get("resync"), None, "live events stay as they were");
    }

    #[test]
    fn ages_are_short() {
        let ago = |s: i64| {
            json!(
                Timestamp::from_second(Timestamp::now().as_second() - s)
                    .unwrap()
                    .to_string()
            )
        };
        assert_eq!(age(&ago(42)), "42s");
        assert_eq!(age(&ago(7 * 60)), "7m");
        assert_eq!(age(&ago(3 * 3600)), "3h");
        assert_eq!(age(&ago(12 * 86400)), "12d");
        assert_eq!(age(&Value::Null), "<unknown>");
    }
}

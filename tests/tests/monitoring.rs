//! The monitoring kit of deploy/monitoring/ against a real scrape: every
//! query of the Grafana dashboard (panels and template variables) and of
//! the alerting rules parses as PromQL and names only metrics a running
//! kube-fanout on the real API server exports, or the few cAdvisor series
//! named below; and every family it exports is on the dashboard. Families
//! with labels appear once something was counted, so the server is made to
//! review tokens (accepted, rejected, and refused at the per-source bound)
//! and an access first. `promtool check rules` and `promtool test rules` run in
//! scripts/test.

use std::{collections::BTreeSet, num::NonZeroU32, path::Path};

use anyhow::{Context, Result, ensure};
use kube_fanout::security::{AuditOptions, AuthOptions, Security};
use kube_fanout_auth::{
    audit::AuditLevel,
    budget::{Bound, ReviewLimits},
    reviews::ReviewClient,
};
use kube_fanout_client::proto::{ListRequest, kube_fanout_client::KubeFanoutClient};
use kube_fanout_tests::{
    controlplane::{ControlPlane, client_for, user_token},
    fanout::Fanout,
    support::http_get,
};
use promql_parser::{
    parser::{self, Expr},
    util::{ExprVisitor, walk_expr},
};

/// deploy/monitoring/, where the dashboard and the rules are.
fn monitoring() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/monitoring")
}

/// Series the memory panel and alert read from the kubelet's cAdvisor:
/// the container's working set and limit, what the OOM killer goes by.
const CADVISOR: &[&str] = &[
    "container_memory_working_set_bytes",
    "container_spec_memory_limit_bytes",
];

/// The sample names of every family in an OpenMetrics exposition, from its
/// `# TYPE` lines (so families with no sample yet count too): a counter's
/// samples are NAME_total.
fn exported(scrape: &str) -> Result<BTreeSet<String>> {
    scrape
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|line| {
            let (name, kind) = line.split_once(' ').context(line.to_owned())?;
            Ok(match kind {
                "counter" => format!("{name}_total"),
                _ => name.to_owned(),
            })
        })
        .collect()
}

/// Collects the metric names an expression selects.
#[derive(Default)]
struct Names(BTreeSet<String>);

impl ExprVisitor for Names {
    type Error = anyhow::Error;

    fn pre_visit(&mut self, expr: &Expr) -> Result<bool> {
        let selector = match expr {
            Expr::VectorSelector(vs) => vs,
            Expr::MatrixSelector(ms) => &ms.vs,
            _ => return Ok(true),
        };
        let name = selector
            .name
            .clone()
            .with_context(|| format!("a selector without a metric name: {expr}"))?;
        self.0.insert(name);
        Ok(true)
    }
}

/// The metric names `query` selects, with Grafana's interval variable
/// replaced by a duration (its other variables are inside label matchers'
/// strings, which PromQL takes as they are).
fn names_in(query: &str) -> Result<BTreeSet<String>> {
    let promql = query.replace("$__rate_interval", "5m");
    let expr = parser::parse(&promql).map_err(|e| anyhow::anyhow!("{query}: {e}"))?;
    let mut names = Names::default();
    walk_expr(&mut names, &expr)?;
    ensure!(!names.0.is_empty(), "{query} names no metric");
    Ok(names.0)
}

/// Every query of the dashboard, by where it is: each panel's targets
/// (every panel but a row has at least one) and the series selector of
/// each `label_values(SELECTOR, LABEL)` template variable.
fn dashboard_queries(dashboard: &serde_json::Value) -> Result<Vec<(String, String)>> {
    let mut queries = Vec::new();
    let panels = dashboard["panels"].as_array().context("no panels")?;
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        let title = panel["title"].as_str().context("a panel without a title")?;
        let targets = panel["targets"].as_array().map_or(&[][..], Vec::as_slice);
        ensure!(!targets.is_empty(), "panel {title:?} has no query");
        for target in targets {
            let expr = target["expr"].as_str().context(title.to_owned())?;
            queries.push((format!("panel {title:?}"), expr.to_owned()));
        }
    }
    let variables = dashboard["templating"]["list"]
        .as_array()
        .context("no template variables")?;
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let name = variable["name"].as_str().context("a nameless variable")?;
        let query = variable["query"]["query"]
            .as_str()
            .context(name.to_owned())?;
        let selector = query
            .strip_prefix("label_values(")
            .and_then(|q| q.rsplit_once(','))
            .map(|(selector, _label)| selector)
            .with_context(|| {
                format!("variable {name}: not label_values(SELECTOR, LABEL): {query}")
            })?;
        queries.push((format!("variable {name}"), selector.to_owned()));
    }
    Ok(queries)
}

/// Every alert's expression in the rules file, by alert name.
fn rule_queries(rules: &serde_yaml::Value) -> Result<Vec<(String, String)>> {
    let mut queries = Vec::new();
    for group in rules["groups"].as_sequence().context("no rule groups")? {
        for rule in group["rules"]
            .as_sequence()
            .context("a group without rules")?
        {
            let alert = rule["alert"].as_str().context("a rule that is no alert")?;
            let expr = rule["expr"].as_str().context(alert.to_owned())?;
            queries.push((format!("alert {alert}"), expr.to_owned()));
        }
    }
    Ok(queries)
}

/// Fails naming each query that selects a metric `exported` lacks (or a
/// cAdvisor series for anything but memory).
fn check(queries: &[(String, String)], exported: &BTreeSet<String>) -> Result<usize> {
    let mut missing = Vec::new();
    for (place, query) in queries {
        for name in names_in(query).with_context(|| place.clone())? {
            if !exported.contains(&name) && !CADVISOR.contains(&name.as_str()) {
                missing.push(format!("{place}: {name}"));
            }
        }
    }
    ensure!(
        missing.is_empty(),
        "queries name metrics kube-fanout does not export:\n{}",
        missing.join("\n")
    );
    Ok(queries.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alert_queries_name_only_metrics_a_running_server_exports() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let one = NonZeroU32::MIN;
    let auth = AuthOptions {
        review_client: Some(ReviewClient(client_for(&cp.kubeconfig).await?)),
        // Scraped by the test on loopback without a token.
        metrics: false,
        // One review a second from one source, so the third token below
        // is refused at the per-source bound.
        review_limits: ReviewLimits {
            per_source: Bound {
                rate: one,
                burst: NonZeroU32::new(2).context("2")?,
                concurrency: one,
            },
            ..ReviewLimits::default()
        },
        ..AuthOptions::default()
    };
    // The audit log on, so that its counters are exported too.
    let audit_dir = tempfile::tempdir()?;
    let audit = AuditOptions {
        level: AuditLevel::Metadata,
        path: audit_dir.path().join("audit.jsonl"),
        ..AuditOptions::default()
    };
    let fanout = Fanout::start_with(cp.client.clone(), &["v1/configmaps"], |o| {
        o.security = Security {
            auth: Some(auth),
            audit,
            ..Security::default()
        };
    })
    .await?;
    fanout.wait_synced().await?;
    let mut client = KubeFanoutClient::connect(format!("http://{}", fanout.addr)).await?;
    for token in [
        user_token("alice"),
        "no-such-token".into(),
        "another".into(),
    ] {
        let mut request = tonic::Request::new(ListRequest {
            resource: Some(kube_fanout_client::resource("v1/configmaps")?),
            namespace: "default".into(),
            ..ListRequest::default()
        });
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse()?);
        // Refused or not, each is counted.
        let _ = client.list(request).await;
    }
    let scrape = http_get(fanout.metrics_addr.context("metrics")?, "/metrics").await?;
    let exported = exported(&scrape)?;
    // The scrape is the whole exposition: per type, per listener and the
    // authenticator's families alike.
    for family in [
        "kube_fanout_synced",
        "kube_fanout_connections",
        "kube_fanout_token_reviews_total",
        "kube_fanout_token_reviews_throttled_total",
        "kube_fanout_access_reviews_total",
        "kube_fanout_auth_checks_total",
        "kube_fanout_audit_lines_total",
    ] {
        ensure!(exported.contains(family), "{family} missing from\n{scrape}");
    }

    let dir = monitoring();
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        dir.join("kube-fanout-dashboard.json"),
    )?)?;
    let rules: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(
        dir.join("kube-fanout.rules.yaml"),
    )?)?;
    let panels = check(&dashboard_queries(&dashboard)?, &exported)?;
    let alerts = check(&rule_queries(&rules)?, &exported)?;
    println!(
        "{panels} dashboard queries and {alerts} alert expressions name only the {} metrics kube-fanout exports",
        exported.len()
    );
    // Every family the server exports is on the dashboard.
    let mut unused: BTreeSet<&String> = exported.iter().collect();
    for (_, query) in dashboard_queries(&dashboard)? {
        for name in names_in(&query)? {
            unused.remove(&name);
        }
    }
    ensure!(
        unused.is_empty(),
        "metrics on no dashboard panel: {unused:?}"
    );
    fanout.stop().await?;
    Ok(())
}

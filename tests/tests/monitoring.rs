//! The monitoring kit of deploy/monitoring/ against a real scrape: every
//! query of the Grafana dashboard (panels and template variables) and of
//! the alerting rules parses as PromQL and names only metrics a running
//! kube-fanout on the real API server exports, or the few cAdvisor series
//! named below; every family it exports is on the dashboard, whose panels
//! have ids of their own and do not overlap; and the per-delivery counters
//! count what subscribers were actually sent; and docs/metrics.md lists
//! exactly the families running servers export. Families
//! with labels appear once something was counted, so the server is made to
//! review tokens (accepted, rejected, and refused at the per-source bound)
//! and an access first. `promtool check rules` and `promtool test rules` run in
//! scripts/test.

use std::{collections::BTreeSet, num::NonZeroU32, path::Path};

use anyhow::{Context, Result, ensure};
use kube_fanout::{
    options::ServerOptions,
    security::{AuditOptions, AuthOptions, Security},
};
use kube_fanout_auth::{
    audit::AuditLevel,
    budget::{Bound, ReviewLimits},
    reviews::ReviewClient,
};
use kube_fanout_client::proto::{ListRequest, WatchRequest, kube_fanout_client::KubeFanoutClient};
use kube_fanout_core::on_demand::{AllowList, OnDemandOptions};
use kube_fanout_tests::{
    controlplane::{ADMIN_TOKEN, ControlPlane, client_for, user_token},
    eventually::{Look, eventually},
    fanout::Fanout,
    metrics_reference,
    support::{configmaps, create_configmap, create_namespace, http_get, next_event},
};
use promql_parser::{
    parser::{self, Expr},
    util::{ExprVisitor, walk_expr},
};
use prost::Message;

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

/// kube-fanout on the real API server with authentication (one review a
/// second from one source, so that [`review_three_tokens`]' third token is
/// refused at the per-source bound) and the audit log on, so that their
/// families are exported too; `adjust` changes the rest. The audit log's
/// directory lives as long as the handle returned with the server.
async fn authenticating_fanout(
    cp: &ControlPlane,
    adjust: impl FnOnce(&mut ServerOptions),
) -> Result<(Fanout, tempfile::TempDir)> {
    let one = NonZeroU32::MIN;
    let auth = AuthOptions {
        review_client: Some(ReviewClient(client_for(&cp.kubeconfig).await?)),
        // Scraped by the test on loopback without a token.
        metrics: false,
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
        adjust(o);
    })
    .await?;
    fanout.wait_synced().await?;
    Ok((fanout, audit_dir))
}

/// A List with each of three tokens: one the API server accepts, one it
/// rejects, and one refused at [`authenticating_fanout`]'s per-source
/// bound. Refused or not, each is counted.
async fn review_three_tokens(fanout: &Fanout) -> Result<()> {
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
        let _ = client.list(request).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alert_queries_name_only_metrics_a_running_server_exports() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let (fanout, _audit) = authenticating_fanout(&cp, |_| {}).await?;
    review_three_tokens(&fanout).await?;
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
    check_layout(&dashboard)?;
    fanout.stop().await?;
    Ok(())
}

/// Grafana keys panels by id (a repeated one makes the second panel's
/// links and edits land on the first) and stacks panels whose grid cells
/// overlap: every id once, no two panels on one cell.
fn check_layout(dashboard: &serde_json::Value) -> Result<()> {
    let panels = dashboard["panels"].as_array().context("no panels")?;
    let mut ids = BTreeSet::new();
    let mut cells = std::collections::BTreeMap::new();
    for panel in panels {
        let title = panel["title"].as_str().context("a panel without a title")?;
        let id = panel["id"].as_u64().context(title.to_owned())?;
        ensure!(ids.insert(id), "panel {title:?} repeats id {id}");
        let grid = &panel["gridPos"];
        let at = |key: &str| {
            grid[key]
                .as_u64()
                .with_context(|| format!("{title}: {key}"))
        };
        let (x, y, w, h) = (at("x")?, at("y")?, at("w")?, at("h")?);
        for cell in (x..x + w).flat_map(|x| (y..y + h).map(move |y| (x, y))) {
            if let Some(other) = cells.insert(cell, title) {
                anyhow::bail!("panels {other:?} and {title:?} overlap at {cell:?}");
            }
        }
    }
    Ok(())
}

/// The value of the sample `series` (name and labels, as exposed) in a
/// scrape.
fn sample(scrape: &str, series: &str) -> Result<u64> {
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .with_context(|| format!("no sample {series} in\n{scrape}"))?
        .trim()
        .parse()
        .with_context(|| format!("{series} is not an integer"))
}

/// The value of family `name`'s sample for v1/configmaps in a scrape.
fn configmaps_sample(scrape: &str, name: &str) -> Result<u64> {
    sample(scrape, &format!(r#"{name}{{resource="v1/configmaps"}}"#))
}

/// A watch of `namespace`'s configmaps from the cache's resourceVersion
/// now: no snapshot and no bookmarks, so it is sent exactly the changes
/// written after this returns.
async fn watch_from_now(
    client: &mut KubeFanoutClient<tonic::transport::Channel>,
    namespace: &str,
) -> Result<WatchRequest> {
    let at = client
        .list(ListRequest {
            resource: Some(configmaps()),
            namespace: namespace.into(),
            ..ListRequest::default()
        })
        .await?
        .into_inner()
        .resource_version;
    Ok(WatchRequest {
        resource: Some(configmaps()),
        namespace: namespace.into(),
        resource_version: at,
        ..WatchRequest::default()
    })
}

/// The per-delivery counters the dashboard's Deliveries and Bytes
/// delivered panels read move by one per event each subscriber is sent,
/// and by the bytes it receives: 3 subscribers of 5 changes are 15
/// deliveries (where kube_fanout_events_total moves by 5), their bytes
/// the encoded WatchEvents the clients got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_count_each_event_once_per_subscriber_it_reaches() -> Result<()> {
    const SUBSCRIBERS: usize = 3;
    const EVENTS: usize = 5;
    let cp = ControlPlane::start().await?;
    let fanout = Fanout::start(cp.client.clone(), &["v1/configmaps"]).await?;
    fanout.wait_synced().await?;
    create_namespace(&cp.client, "deliveries").await?;
    let mut client = KubeFanoutClient::connect(format!("http://{}", fanout.addr)).await?;
    let request = watch_from_now(&mut client, "deliveries").await?;
    let mut streams = Vec::new();
    for _ in 0..SUBSCRIBERS {
        streams.push(client.watch(request.clone()).await?.into_inner());
    }
    let metrics = fanout.metrics_addr.context("metrics")?;
    let counts = async || -> Result<(u64, u64, u64)> {
        let scrape = http_get(metrics, "/metrics").await?;
        Ok((
            configmaps_sample(&scrape, "kube_fanout_deliveries_total")?,
            configmaps_sample(&scrape, "kube_fanout_delivered_bytes_total")?,
            configmaps_sample(&scrape, "kube_fanout_events_total")?,
        ))
    };
    let before = counts().await?;
    for i in 0..EVENTS {
        create_configmap(&cp.client, "deliveries", &format!("cm-{i}"), "v").await?;
    }
    let mut received_bytes = 0u64;
    for stream in &mut streams {
        for _ in 0..EVENTS {
            received_bytes += next_event(stream).await?.encoded_len() as u64;
        }
    }
    // Counted before tonic writes them, so settled once every client has
    // read its events; nothing else is sent to these streams.
    let after = counts().await?;
    let moved = (after.0 - before.0, after.1 - before.1, after.2 - before.2);
    ensure!(
        moved == ((SUBSCRIBERS * EVENTS) as u64, received_bytes, EVENTS as u64),
        "{SUBSCRIBERS} subscribers of {EVENTS} events: (deliveries, delivered bytes, events) moved by {moved:?}, expected ({}, {received_bytes} bytes received, {EVENTS})",
        SUBSCRIBERS * EVENTS,
    );
    println!(
        "{SUBSCRIBERS} subscribers x {EVENTS} events: {} deliveries, {} bytes",
        moved.0, moved.1
    );
    fanout.stop().await?;
    Ok(())
}

/// The dashboard's Subscriber lag panel: a subscriber that stops reading
/// (its stream's HTTP/2 windows and socket buffers full) shows as behind
/// by the events and bytes written after it stopped, graphed against the
/// cut-off's bounds, and as caught up once it has read them; another
/// subscriber reading along never makes the gauge move on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stops_reading_is_shown_behind_until_it_reads_on() -> Result<()> {
    // Enough to fill what HTTP/2 and loopback sockets buffer (a few MiB),
    // well within the bounds set below.
    const OBJECTS: usize = 48;
    const VALUE: usize = 512 * 1024;
    const MAX_EVENTS: u64 = 5000;
    const MAX_BYTES: u64 = 1 << 30;
    let cp = ControlPlane::start().await?;
    let fanout = Fanout::start_with(cp.client.clone(), &["v1/configmaps"], |o| {
        o.limits.max_lag_events = MAX_EVENTS;
        o.limits.max_lag_bytes = MAX_BYTES;
    })
    .await?;
    fanout.wait_synced().await?;
    create_namespace(&cp.client, "lag").await?;
    let mut client = KubeFanoutClient::connect(format!("http://{}", fanout.addr)).await?;
    let request = watch_from_now(&mut client, "lag").await?;
    // Each on a connection of its own, as clients connect.
    let mut stalled = client.watch(request.clone()).await?.into_inner();
    let mut reading = KubeFanoutClient::connect(format!("http://{}", fanout.addr))
        .await?
        .watch(request)
        .await?
        .into_inner();
    let metrics = fanout.metrics_addr.context("metrics")?;
    let lag = async || -> Result<(u64, u64)> {
        let scrape = http_get(metrics, "/metrics").await?;
        for (name, bound) in [
            ("kube_fanout_max_lag_events", MAX_EVENTS),
            ("kube_fanout_max_lag_bytes", MAX_BYTES),
        ] {
            ensure!(sample(&scrape, name)? == bound, "{name} is not {bound}");
        }
        Ok((
            configmaps_sample(&scrape, "kube_fanout_subscriber_lag_events")?,
            configmaps_sample(&scrape, "kube_fanout_subscriber_lag_bytes")?,
        ))
    };
    ensure!(lag().await? == (0, 0), "behind before anything was written");
    let value = "x".repeat(VALUE);
    let mut last = String::new();
    for i in 0..OBJECTS {
        let cm = create_configmap(&cp.client, "lag", &format!("cm-{i}"), &value).await?;
        last = cm.metadata.resource_version.context("no resourceVersion")?;
    }
    for _ in 0..OBJECTS {
        next_event(&mut reading).await?;
    }
    let written = (OBJECTS * VALUE) as u64;
    let behind = eventually("the stalled subscriber shown behind")
        .until_done(async || {
            let (events, bytes) = lag().await?;
            Ok(if events > 0 {
                Look::Done((events, bytes))
            } else {
                Look::NotYet((events, bytes))
            })
        })
        .await?;
    // What it has not read is some of what was written after it stopped:
    // at least one object, and no more than all of them (bookmarks add
    // events but no object bytes).
    ensure!(
        behind.1 >= VALUE as u64 && behind.1 <= written + written / 10,
        "behind by {behind:?}: {OBJECTS} objects of {VALUE} bytes were written"
    );
    println!("a subscriber that stopped reading: {behind:?} (events, bytes) behind");
    // Once it reads what it was sent, it is behind by nothing.
    loop {
        let event = next_event(&mut stalled).await?;
        if event.resource_version == last {
            break;
        }
    }
    eventually("the stalled subscriber caught up")
        .until_done(async || {
            let seen = lag().await?;
            Ok(if seen == (0, 0) {
                Look::Done(())
            } else {
                Look::NotYet(seen)
            })
        })
        .await?;
    fanout.stop().await?;
    Ok(())
}

/// docs/metrics.md, the metrics reference.
fn metrics_doc() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md")
}

/// The lines of `a` that `b` lacks, and those of `b` that `a` lacks, for a
/// failure message that shows what changed.
fn line_diff(a: &str, b: &str) -> String {
    let (a_lines, b_lines): (BTreeSet<&str>, BTreeSet<&str>) =
        (a.lines().collect(), b.lines().collect());
    let gone = a_lines.difference(&b_lines).map(|l| format!("- {l}"));
    let new = b_lines.difference(&a_lines).map(|l| format!("+ {l}"));
    gone.chain(new).collect::<Vec<_>>().join("\n")
}

/// docs/metrics.md lists exactly the families running servers export, with
/// their types, help and labels: one with every optional part on
/// (authentication, the audit log, on-demand types), made to count a
/// review of each outcome and a watch error so that those families carry
/// their labels; one with none (what every server exports); and a tier's
/// leaf of it (its lag behind the parent). With
/// KUBE_FANOUT_WRITE_METRICS_DOC set it writes the page instead
/// (scripts/docs-reference).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_reference_lists_every_family_a_running_server_exports() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let allow = AllowList(vec!["apps/*".parse().context("a pattern")?]);
    let (full, _audit) = authenticating_fanout(&cp, |o| {
        o.on_demand = Some(OnDemandOptions {
            allow,
            max_types: 1,
            idle: std::time::Duration::from_secs(60),
        });
    })
    .await?;
    // A resume from before the history: a watch that ends Expired (first,
    // while the source's review budget still has room for its token).
    let mut client = KubeFanoutClient::connect(format!("http://{}", full.addr)).await?;
    let mut request = tonic::Request::new(WatchRequest {
        resource: Some(configmaps()),
        namespace: "default".into(),
        resource_version: "1".into(),
        ..WatchRequest::default()
    });
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {ADMIN_TOKEN}").parse()?);
    let ended = match client.watch(request).await {
        Ok(stream) => stream.into_inner().message().await.err(),
        Err(status) => Some(status),
    };
    ensure!(
        ended.as_ref().map(tonic::Status::code) == Some(tonic::Code::OutOfRange),
        "a watch from resourceVersion 1 ended {ended:?}"
    );
    review_three_tokens(&full).await?;
    let full_scrape = http_get(full.metrics_addr.context("metrics")?, "/metrics").await?;
    ensure!(
        full_scrape.contains("kube_fanout_watch_errors_total{"),
        "the Expired watch is not counted:\n{full_scrape}"
    );

    let plain = Fanout::start(cp.client.clone(), &["v1/configmaps"]).await?;
    plain.wait_synced().await?;
    let leaf = Fanout::start_leaf(cp.client.clone(), &["v1/configmaps"], &[plain.addr]).await?;
    let leaf_metrics = leaf.metrics_addr.context("metrics")?;
    let leaf_scrape = eventually("the leaf's lag behind its parent exported")
        .until(
            async || http_get(leaf_metrics, "/metrics").await,
            |scrape| scrape.contains("kube_fanout_upstream_lag_seconds{"),
        )
        .await?;
    let plain_scrape = http_get(plain.metrics_addr.context("metrics")?, "/metrics").await?;

    let page = metrics_reference::render(
        &metrics_reference::families(&plain_scrape)?,
        &[
            metrics_reference::families(&full_scrape)?,
            metrics_reference::families(&leaf_scrape)?,
        ],
    )?;
    let path = metrics_doc();
    if std::env::var_os("KUBE_FANOUT_WRITE_METRICS_DOC").is_some() {
        std::fs::write(&path, &page).with_context(|| path.display().to_string())?;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    ensure!(
        committed == page,
        "docs/metrics.md differs from what the servers export: run scripts/docs-reference \
         and commit the result\n{}",
        line_diff(&committed, &page)
    );
    leaf.stop().await?;
    plain.stop().await?;
    full.stop().await?;
    Ok(())
}

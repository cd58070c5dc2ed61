//! The audit log on the real API server: a run with allowed, denied,
//! cached and revoked requests has exactly one decision line per
//! SubjectAccessReview the API server answered (counted from its own
//! `apiserver_request_total`), none for a cached answer, the revoked
//! watch's re-check and end under its audit ID, and no token anywhere.

use std::{collections::BTreeMap, num::NonZeroU32, path::Path, time::Duration};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, ListParams};
use kube_fanout::security::{AuditOptions, AuthOptions, Security};
use kube_fanout_auth::{audit::AuditLevel, authz::DecisionCacheTtl, reviews::ReviewClient};
use kube_fanout_client::proto::{GetRequest, ListRequest, WatchRequest};
use kube_fanout_tests::{
    clients::plaintext,
    controlplane::{ADMIN_TOKEN, ControlPlane, client_for, user_token},
    eventually::eventually,
    fanout::Fanout,
    rbac::{grant, rule, until_api_server_lists, user},
    support::{create_configmap, create_namespace, http_get, read_snapshot, watch_list},
};
use serde_json::Value;
use tonic::Code;

/// The allow TTL: how long the revoked watch outlives its RoleBinding.
const ALLOW_TTL: Duration = Duration::from_secs(3);

/// The sum of kube-fanout's counter `name` over its labels.
async fn counter(fanout: &Fanout, name: &str) -> Result<BTreeMap<String, u64>> {
    let metrics = http_get(fanout.metrics_addr.context("metrics")?, "/metrics").await?;
    Ok(metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| {
            let (labels, value) = l.rsplit_once(' ')?;
            Some((labels.to_owned(), value.parse().ok()?))
        })
        .collect())
}

/// Every whole line of the audit log at `path` (not one being written),
/// parsed.
fn audit_lines(path: &Path) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(path)?;
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(|l| serde_json::from_str(l).with_context(|| format!("not a JSON line: {l}")))
        .collect()
}

/// A decision line's who, what and answer, to count them by.
fn decision_key(line: &Value) -> String {
    let object = &line["objectRef"];
    format!(
        "{} {} {}/{} {}{}",
        line["user"]["username"].as_str().unwrap_or("?"),
        line["verb"].as_str().unwrap_or("?"),
        object["namespace"].as_str().unwrap_or(""),
        object["name"].as_str().unwrap_or(""),
        line["decision"].as_str().unwrap_or("?"),
        if line["recheck"] == true {
            " (re-check)"
        } else {
            ""
        },
    )
}

fn configmaps_in(namespace: &str) -> ListRequest {
    ListRequest {
        resource: Some(kube_fanout_client::resource("v1/configmaps").expect("valid")),
        namespace: namespace.into(),
        ..ListRequest::default()
    }
}

#[tokio::test]
async fn the_audit_log_has_one_line_per_review_made_and_per_watch_end_and_no_token() -> Result<()> {
    kube_fanout_tests::init_logging();
    let cp = ControlPlane::start().await?;
    let admin = cp.client.clone();
    for ns in ["a", "b"] {
        create_namespace(&admin, ns).await?;
        create_configmap(&admin, ns, &format!("cm-{ns}"), "v").await?;
    }
    let grants = [
        ("a", "carol-reads-a", &["get", "list"][..], "carol"),
        ("a", "erin-watches-a", &["list", "watch"][..], "erin"),
        ("b", "dave-watches-b", &["list", "watch"][..], "dave"),
    ];
    for (ns, name, verbs, who) in grants {
        grant(
            &admin,
            ns,
            name,
            vec![rule(verbs, "configmaps")],
            vec![user(who)],
        )
        .await?;
        until_api_server_lists(&cp, &user_token(who), ns, &ListParams::default()).await?;
    }

    let dir = tempfile::tempdir()?;
    let log = dir.path().join("audit.jsonl");
    let auth = AuthOptions {
        review_client: Some(ReviewClient(client_for(&cp.kubeconfig).await?)),
        // Scraped by the test on loopback without a token.
        metrics: false,
        decision_ttl: DecisionCacheTtl {
            allowed: ALLOW_TTL,
            denied: Duration::from_secs(30),
        },
        ..AuthOptions::default()
    };
    let security = Security {
        auth: Some(auth),
        audit: AuditOptions {
            level: AuditLevel::Request,
            path: log.clone(),
            max_lines_per_second: NonZeroU32::new(1000).expect("not zero"),
        },
        ..Security::default()
    };
    let reviews_before = cp.requests_answered("subjectaccessreviews").await?;
    let fanout = Fanout::start_with(cp.client.clone(), &["v1/configmaps"], |o| {
        o.security = security;
    })
    .await?;
    fanout.wait_synced().await?;

    // Allowed, then the same again (cached): one review each.
    let mut carol = plaintext(fanout.addr, &user_token("carol")).await?;
    for _ in 0..2 {
        carol.list(configmaps_in("a")).await?;
        carol
            .get(GetRequest {
                resource: configmaps_in("a").resource,
                namespace: "a".into(),
                name: "cm-a".into(),
                ..GetRequest::default()
            })
            .await?;
    }
    // Denied, then the same again (cached), and a denied watch.
    let mut bob = plaintext(fanout.addr, &user_token("bob")).await?;
    for _ in 0..2 {
        let err = bob.list(configmaps_in("a")).await.expect_err("bob may not");
        ensure!(err.to_string().contains("cannot list resource"), "{err}");
    }
    let err = bob.watch(watch_list("b")).await.expect_err("bob may not");
    ensure!(err.to_string().contains("cannot watch resource"), "{err}");

    // A watch its client ends.
    let mut dave = plaintext(fanout.addr, &user_token("dave")).await?;
    let mut dave_watch = dave.watch(watch_list("b")).await?;
    read_snapshot(&mut dave_watch).await?;
    drop((dave_watch, dave));

    // A watch whose permission is revoked: its re-check refuses it.
    let mut erin = plaintext(fanout.addr, &user_token("erin")).await?;
    let mut erin_watch = erin
        .watch(WatchRequest {
            label_selector: "!gone".into(),
            ..watch_list("a")
        })
        .await?;
    read_snapshot(&mut erin_watch).await?;
    Api::<RoleBinding>::namespaced(admin.clone(), "a")
        .delete("erin-watches-a", &Default::default())
        .await?;
    let ended = tokio::time::timeout(ALLOW_TTL * 4, async {
        loop {
            match erin_watch.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => bail!("the watch ended without a status"),
                Err(status) => return Ok(status),
            }
        }
    })
    .await
    .context("the watch outlived the revocation")??;
    ensure!(ended.code() == Code::PermissionDenied, "{ended:?}");

    // Both stream ends are logged once their streams are dropped.
    let lines = eventually("both watches' end lines in the audit log")
        .within(Duration::from_secs(10))
        .every(Duration::from_millis(50))
        .until(
            async || audit_lines(&log),
            |lines| lines.iter().filter(|l| l["stage"] == "StreamEnd").count() >= 2,
        )
        .await?;
    let reviews = cp.requests_answered("subjectaccessreviews").await? - reviews_before;
    let counted: u64 = counter(&fanout, "kube_fanout_access_reviews_total")
        .await?
        .values()
        .sum();
    let text = std::fs::read_to_string(&log)?;
    let decisions: Vec<&Value> = lines.iter().filter(|l| l["stage"] == "Decision").collect();
    let mut by_key = BTreeMap::<String, usize>::new();
    for line in &decisions {
        *by_key.entry(decision_key(line)).or_default() += 1;
    }
    println!("audit log:\n{text}");
    println!(
        "{} decision lines, {reviews} SubjectAccessReviews answered by the API server, {counted} counted by kube-fanout: {by_key:#?}",
        decisions.len()
    );

    // Exactly one line per review made, none for a cached answer.
    assert_eq!(decisions.len() as u64, reviews, "{by_key:#?}");
    assert_eq!(reviews, counted);
    for (key, want) in [
        ("carol list a/ allow", 1),
        ("carol get a/cm-a allow", 1),
        ("bob list a/ deny", 1),
        ("bob watch b/ deny", 1),
        ("dave watch b/ allow", 1),
        ("erin watch a/ allow", 1),
        ("erin watch a/ deny (re-check)", 1),
    ] {
        assert_eq!(by_key.get(key), Some(&want), "{key}: {by_key:#?}");
    }
    // Nothing but these (an allowing re-check of erin's watch is possible
    // if the API server had not yet learnt of the deletion).
    let expected = by_key
        .keys()
        .filter(|k| *k != "erin watch a/ allow (re-check)")
        .count();
    assert_eq!(expected, 7, "{by_key:#?}");

    // The revoked watch: its decision, re-checks and end under one ID.
    let erin_id = &decisions
        .iter()
        .find(|l| decision_key(l) == "erin watch a/ allow")
        .context("erin's decision")?["auditID"];
    let ends: Vec<&Value> = lines.iter().filter(|l| l["stage"] == "StreamEnd").collect();
    assert_eq!(ends.len(), 2, "{ends:#?}");
    let erin_end = ends
        .iter()
        .find(|l| l["auditID"] == *erin_id)
        .context("erin's watch end")?;
    assert_eq!(erin_end["responseStatus"]["status"], "PERMISSION_DENIED");
    assert_eq!(erin_end["responseStatus"]["code"], 7);
    assert!(erin_end["events"].as_u64() >= Some(2), "{erin_end}");
    assert!(erin_end["durationSeconds"].as_f64() >= Some(ALLOW_TTL.as_secs_f64()));
    assert_eq!(erin_end["request"]["labelSelector"], "!gone");
    let recheck = decisions
        .iter()
        .find(|l| decision_key(l) == "erin watch a/ deny (re-check)")
        .context("the re-check")?;
    assert_eq!(recheck["auditID"], *erin_id);
    let dave_end = ends
        .iter()
        .find(|l| l["user"]["username"] == "dave")
        .context("dave's watch end")?;
    assert_eq!(dave_end["responseStatus"]["status"], "CANCELLED");
    for line in &lines {
        assert_eq!(line["kind"], "Event", "{line}");
        assert_eq!(line["level"], "Request", "{line}");
        assert_eq!(line["sourceIPs"][0], "127.0.0.1", "{line}");
    }

    // No token, in any line.
    for token in ["carol", "bob", "dave", "erin"]
        .map(user_token)
        .into_iter()
        .chain([ADMIN_TOKEN.to_owned()])
    {
        assert!(!text.contains(&token), "the token {token} is in the log");
    }
    assert!(!text.to_ascii_lowercase().contains("bearer"), "{text}");

    let audit = counter(&fanout, "kube_fanout_audit_lines_total").await?;
    assert_eq!(
        audit.get("kube_fanout_audit_lines_total{outcome=\"written\"}"),
        Some(&(lines.len() as u64)),
        "{audit:?}"
    );
    assert_eq!(
        audit.get("kube_fanout_audit_lines_total{outcome=\"dropped\"}"),
        Some(&0),
        "{audit:?}"
    );
    fanout.stop().await
}

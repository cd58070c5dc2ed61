//! kubectl-fanout against a real kube-fanout and API server: every
//! command's output, and the errors a person meets.

use anyhow::{Context, Result};
use kube_fanout_tests::{controlplane::ControlPlane, fanout::Fanout, support::*};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_kubectl-fanout-under-test");

async fn cli(server: &str, args: &[&str]) -> Result<(i32, String, String)> {
    let out = tokio::process::Command::new(CLI)
        .args(["--server", server])
        .args(args)
        .env_remove("KUBE_FANOUT_SERVER")
        .kill_on_drop(true)
        .output()
        .await?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// The cells of a table's lines, split on runs of spaces.
fn cells(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_prints_like_kubectl_and_fails_understandably() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let kube = cp.client.clone();
    create_namespace(&kube, "cli").await?;
    let alpha = create_configmap(&kube, "cli", "alpha", "1").await?;
    let beta = create_configmap(&kube, "cli", "beta", "2").await?;
    let fanout = Fanout::start(kube.clone(), &["v1/configmaps"]).await?;
    fanout.wait_synced().await?;
    let server = fanout.addr.to_string();

    // resources
    let (code, out, err) = cli(&server, &["resources"]).await?;
    assert_eq!(code, 0, "{err}");
    let rows = cells(&out);
    assert_eq!(
        rows[0],
        [
            "RESOURCE",
            "KIND",
            "SYNC",
            "RESOURCEVERSION",
            "OBJECTS",
            "SUBSCRIBERS",
            "REFLECTOR",
            "UPSTREAM",
            "LAG"
        ]
    );
    assert_eq!(rows[1][..3], ["v1/configmaps", "ConfigMap", "Synced"]);
    // Fed by the API server: no parent to be behind.
    assert_eq!(rows[1][7..], ["api-server", "-"]);
    let (code, out, _) = cli(&server, &["resources", "-o", "json"]).await?;
    assert_eq!(code, 0);
    let json: Value = serde_json::from_str(&out)?;
    assert_eq!(json["resources"][0]["resource"], "v1/configmaps");
    assert!(json["resources"][0]["objects"].as_u64() >= Some(2));
    assert_eq!(json["resources"][0]["upstream"], "api-server");

    // A tier's leaf of that server names it as its upstream, and its lag
    // (nothing written meanwhile: caught up).
    let leaf = Fanout::start_leaf(kube.clone(), &["v1/configmaps"], &[fanout.addr]).await?;
    let (code, out, err) = cli(&leaf.addr.to_string(), &["resources"]).await?;
    assert_eq!(code, 0, "{err}");
    let rows = cells(&out);
    assert_eq!(rows[1][7..], [format!("http://{server}/"), "0s".into()]);
    let (code, out, _) = cli(&leaf.addr.to_string(), &["resources", "-o", "json"]).await?;
    assert_eq!(code, 0);
    let json: Value = serde_json::from_str(&out)?;
    assert_eq!(
        json["resources"][0]["upstream"],
        format!("kube-fanout http://{server}/")
    );
    assert_eq!(json["resources"][0]["upstreamLagSeconds"], 0);
    drop(leaf);

    // list: a table, JSON equal to the API server's objects, YAML.
    let (code, out, err) = cli(&server, &["list", "configmaps", "-n", "cli"]).await?;
    assert_eq!(code, 0, "{err}");
    let rows = cells(&out);
    assert_eq!(rows[0], ["NAME", "RESOURCEVERSION", "AGE"]);
    assert_eq!(
        rows[1][..2],
        [
            "alpha".to_owned(),
            alpha.metadata.resource_version.clone().unwrap()
        ]
    );
    assert_eq!(
        rows[2][..2],
        [
            "beta".to_owned(),
            beta.metadata.resource_version.clone().unwrap()
        ]
    );
    assert_eq!(rows.len(), 3);
    let (code, out, _) = cli(
        &server,
        &["list", "v1/configmaps", "-n", "cli", "-o", "json"],
    )
    .await?;
    assert_eq!(code, 0);
    let list: Value = serde_json::from_str(&out)?;
    assert_eq!(list["kind"], "List");
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let truth = list_at(&kube, "cli", &rv).await?;
    let items: Vec<(String, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_owned(),
                o["data"]["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = truth
        .values()
        .map(|cm| {
            (
                cm.metadata.name.clone().unwrap(),
                cm.data.as_ref().unwrap()["value"].clone(),
            )
        })
        .collect();
    assert_eq!(
        items, expected,
        "the JSON list is the API server's state at its RV"
    );
    let (code, out, _) = cli(
        &server,
        &[
            "list",
            "ConfigMap",
            "-A",
            "-l",
            "missing=label",
            "-o",
            "yaml",
        ],
    )
    .await?;
    assert_eq!(code, 0);
    let yaml: Value = serde_yaml::from_str(&out)?;
    assert_eq!(yaml["items"], Value::Array(vec![]));
    let (code, out, _) = cli(&server, &["list", "configmaps", "-A"]).await?;
    assert_eq!(code, 0);
    assert_eq!(
        cells(&out)[0][0],
        "NAMESPACE",
        "every namespace: a NAMESPACE column"
    );
    let (code, out, err) = cli(&server, &["list", "configmaps", "-n", "empty"]).await?;
    assert_eq!((code, out.as_str()), (0, ""));
    assert!(
        err.contains("No resources found in empty namespace."),
        "{err}"
    );

    // get
    let (code, out, err) = cli(
        &server,
        &["get", "configmaps", "beta", "-n", "cli", "-o", "yaml"],
    )
    .await?;
    assert_eq!(code, 0, "{err}");
    let got: Value = serde_yaml::from_str(&out)?;
    assert_eq!(got["data"]["value"], "2");
    assert_eq!(
        got["metadata"]["resourceVersion"].as_str(),
        beta.metadata.resource_version.as_deref()
    );
    let (code, out, _) = cli(&server, &["get", "cm", "alpha", "-n", "cli"]).await?;
    // "cm" is no name of the type (short names are not served): unknown.
    assert_eq!(code, 4, "{out}");
    let (code, out, _) = cli(&server, &["get", "configmap", "alpha", "-n", "cli"]).await?;
    assert_eq!(code, 0);
    assert_eq!(cells(&out)[1][0], "alpha");

    // watch --since: exactly the changes after RV, as they happen. The RV
    // is the server's own (it has seen beta): one from before its first
    // sync would be older than its history, which is Expired.
    let since = kube_fanout_client::Client::connect(&server)
        .await?
        .list_resources()
        .await?
        .resources
        .iter()
        .find(|r| r.kind == "ConfigMap")
        .map(|r| r.resource_version.clone())
        .context("configmaps are served")?;
    assert!(
        since.parse::<u64>()?
            >= beta
                .metadata
                .resource_version
                .as_deref()
                .unwrap_or("0")
                .parse::<u64>()?
    );
    // The field selector hides gamma: the first change shown is delta's.
    create_configmap(&kube, "cli", "gamma", "3").await?;
    let mut watch = tokio::process::Command::new(CLI)
        .args([
            "--server",
            &server,
            "watch",
            "configmaps",
            "-n",
            "cli",
            "--since",
            &since,
            "--field-selector",
            "metadata.name!=gamma",
            "-o",
            "json",
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(watch.stdout.take().unwrap()));
    let delta = create_configmap(&kube, "cli", "delta", "4").await?;
    let first: Value = serde_json::from_str(
        &tokio::time::timeout(EVENT_TIMEOUT, lines.next_line())
            .await??
            .unwrap(),
    )?;
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["metadata"]["name"], "delta");
    assert_eq!(
        first["object"]["metadata"]["resourceVersion"].as_str(),
        delta.metadata.resource_version.as_deref()
    );
    watch.kill().await?;

    // watch without --since: the current objects first, as a table.
    let mut watch = tokio::process::Command::new(CLI)
        .args(["--server", &server, "watch", "configmaps", "-n", "cli"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(watch.stdout.take().unwrap()));
    let mut table = Vec::new();
    for _ in 0..5 {
        table.push(
            tokio::time::timeout(EVENT_TIMEOUT, lines.next_line())
                .await??
                .unwrap(),
        );
    }
    assert_eq!(
        cells(&table.join("\n"))[0],
        ["EVENT", "RV", "RESYNC", "NAME"]
    );
    let row = &cells(&table[1])[0];
    assert_eq!(
        (row[0].as_str(), row[2].as_str(), row[3].as_str()),
        ("ADDED", "-", "cli/alpha")
    );
    watch.kill().await?;

    // Errors a person understands, with distinct exit codes.
    let (code, _, err) = cli(&server, &["list", "widgets"]).await?;
    assert_eq!(code, 4);
    assert!(
        err.contains("doesn't have a resource type \"widgets\"")
            && err.contains("served: v1/configmaps"),
        "{err}"
    );
    let (code, _, err) = cli(&server, &["get", "configmaps", "nope", "-n", "cli"]).await?;
    assert_eq!(code, 5);
    assert!(err.contains("not found"), "{err}");
    let (code, _, err) = cli(
        &server,
        &["list", "configmaps", "-l", "a in (", "-n", "cli"],
    )
    .await?;
    assert_eq!(code, 1);
    assert!(
        err.contains("InvalidArgument")
            || err.contains("Invalid argument")
            || err.contains("selector"),
        "{err}"
    );
    let (code, _, err) = cli(&server, &["watch", "configmaps", "--since", "1"]).await?;
    assert_eq!(code, 1);
    assert!(err.contains("too old"), "{err}");
    let (code, _, err) = cli(&server, &["lisst"]).await?;
    assert_eq!(code, 2, "{err}");

    let dead = format!(
        "127.0.0.1:{}",
        kube_fanout_tests::controlplane::free_port()?
    );
    let (code, out, err) = cli(&dead, &["resources"]).await?;
    assert_eq!((code, out.as_str()), (3, ""));
    assert!(
        err.contains(&format!("cannot connect to kube-fanout at http://{dead}/"))
            && err.contains("is kube-fanout running there?"),
        "{err}"
    );

    fanout.stop().await?;
    Ok(())
}

/// kubectl-fanout's watch across its server going away, as in a rollout:
/// given two servers it follows the first; when that one shuts down it
/// resumes on the second after the last change it printed (the client
/// library's watcher), so every change written arrives once, in order,
/// and the command never exits. A single stream ends with the first
/// server: the changes after it never arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_on_the_next_server_without_loss() -> Result<()> {
    use kube_fanout_tests::changes::{check_each_once_in_order, printed};
    let cp = ControlPlane::start().await?;
    let kube = cp.client.clone();
    create_namespace(&kube, "resume").await?;
    let first = Fanout::start(kube.clone(), &["v1/configmaps"]).await?;
    let second = Fanout::start(kube.clone(), &["v1/configmaps"]).await?;
    first.wait_synced().await?;
    second.wait_synced().await?;
    let servers = format!("{},{}", first.addr, second.addr);
    let mut watch = tokio::process::Command::new(CLI)
        .args(["--server", &servers])
        .args(["watch", "configmaps", "-n", "resume", "-o", "json"])
        .env_remove("KUBE_FANOUT_SERVER")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let output = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let (output, stdout) = (output.clone(), watch.stdout.take().context("stdout")?);
        tokio::spawn(async move {
            let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
            while let Ok(Some(line)) = lines.next_line().await {
                let mut output = output.lock().expect("not poisoned");
                output.push_str(&line);
                output.push('\n');
            }
        })
    };
    let printed_now = || printed(&output.lock().expect("not poisoned"));
    let wait_printed = async |written: &[(String, u64)]| {
        kube_fanout_tests::eventually::eventually("kubectl-fanout printing every change")
            .until(
                async || Ok(printed_now()),
                |p| written.iter().all(|c| p.contains(c)),
            )
            .await
            .map(|_| ())
    };

    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(kube.clone(), "resume");
    let mut written = Vec::new();
    for round in 0..3 {
        written.extend(write_round(&api, round).await?);
    }
    wait_printed(&written).await?;
    // The first server shuts down (UNAVAILABLE to its watchers, as a pod
    // of a rollout does) while changes keep coming.
    let stopping = tokio::spawn(first.stop());
    for round in 3..10 {
        written.extend(write_round(&api, round).await?);
    }
    stopping.await??;
    wait_printed(&written).await?;
    ensure_running(&mut watch)?;
    check_each_once_in_order(&printed_now(), &written)?;

    watch.kill().await?;
    reader.await?;
    second.stop().await?;
    Ok(())
}

/// Writes ConfigMaps cm-0..2 with `round` in their data (created or
/// replaced, as server-side apply does): each one's name and new
/// resourceVersion.
async fn write_round(
    api: &kube::Api<k8s_openapi::api::core::v1::ConfigMap>,
    round: usize,
) -> Result<Vec<(String, u64)>> {
    let mut written = Vec::new();
    for i in 0..3 {
        let name = format!("cm-{i}");
        let cm = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name}, "data": {"round": round.to_string()},
        });
        let stored = api
            .patch(
                &name,
                &kube::api::PatchParams::apply("client-cli-test"),
                &kube::api::Patch::Apply(&cm),
            )
            .await?;
        written.push(name_and_rv(&stored)?);
    }
    Ok(written)
}

/// Fails when the watch command has exited.
fn ensure_running(watch: &mut tokio::process::Child) -> Result<()> {
    match watch.try_wait()? {
        None => Ok(()),
        Some(status) => anyhow::bail!("kubectl-fanout watch exited ({status}) instead of resuming"),
    }
}

//! The README's first command: starts a real kube-apiserver and etcd on
//! loopback, creates a few ConfigMaps, runs the `kube-fanout` binary against
//! them, and prints a subscriber's live stream while a writer changes things.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, Result};
use clap::Parser;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube_fanout_client::{Client, proto::EventType};
use kube_fanout_tests::{
    controlplane::{ControlPlane, free_port, tied_command},
    support::{create_configmap, create_namespace, decode, watch_list},
};
use tokio::signal::unix::{SignalKind, signal};

/// Show kube-fanout working against a real local control plane.
#[derive(Parser)]
struct Args {
    /// The kube-fanout binary to run.
    #[arg(long, default_value = "target/debug/kube-fanout")]
    kube_fanout: PathBuf,
    /// How long to keep changing objects (0: until Ctrl-C).
    #[arg(long, default_value_t = 20)]
    seconds: u64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    eprintln!(
        "starting a real kube-apiserver and etcd on 127.0.0.1 (the first run builds them: a few minutes)..."
    );
    let cp = ControlPlane::start().await?;
    eprintln!(
        "control plane ready at {}; kubeconfig: {}",
        cp.server_url,
        cp.kubeconfig.display()
    );
    create_namespace(&cp.client, "demo").await?;
    for name in ["alpha", "beta", "gamma"] {
        create_configmap(&cp.client, "demo", name, "v1").await?;
    }

    let addr = format!("127.0.0.1:{}", free_port()?);
    let metrics = format!("127.0.0.1:{}", free_port()?);
    let mut terminate = signal(SignalKind::terminate())?;
    let mut server = tied_command(&args.kube_fanout)
        .args(["--kubeconfig", &cp.kubeconfig.display().to_string()])
        .args([
            "--resource",
            "v1/configmaps",
            "--resource",
            "apps/v1/deployments",
        ])
        .args(["--listen", &addr])
        .args(["--metrics-listen", &metrics])
        .spawn()
        .with_context(|| format!("starting {}", args.kube_fanout.display()))?;
    let mut client = connect(&format!("http://{addr}")).await?;
    eprintln!("kube-fanout serving on {addr}; try, from another shell while this runs:");
    eprintln!(
        "  $(bash tests/tools/install.sh grpcurl) -plaintext {addr} kubefanout.v1.KubeFanout/ListResources"
    );
    eprintln!("  curl -s http://{metrics}/metrics");
    eprintln!();

    let mut stream = client.watch(watch_list("demo")).await?;
    let mut writer = tokio::spawn(write_changes(cp.client.clone(), args.seconds));
    println!("{:<9} {:>8}  {:<24} DATA", "EVENT", "RV", "OBJECT");
    loop {
        tokio::select! {
            event = stream.message() => {
                let Some(event) = event? else { break };
                let kind = event.r#type().as_str_name();
                if event.r#type() == EventType::Bookmark {
                    println!("{kind:<9} {:>8}  {:<24} (end of the initial snapshot)", event.resource_version, "-");
                    continue;
                }
                let cm = decode(&event)?;
                let name = format!("{}/{}", cm.metadata.namespace.unwrap_or_default(), cm.metadata.name.unwrap_or_default());
                println!("{kind:<9} {:>8}  {name:<24} {:?}", event.resource_version, cm.data.unwrap_or_default());
            }
            done = server.wait() => {
                anyhow::bail!("kube-fanout exited: {:?}", done?);
            }
            _ = tokio::signal::ctrl_c() => break,
            _ = terminate.recv() => break,
            finished = &mut writer => {
                finished??;
                // Let the last events arrive before stopping.
                tokio::time::sleep(Duration::from_secs(1)).await;
                while let Ok(Ok(Some(event))) = tokio::time::timeout(Duration::from_millis(200), stream.message()).await {
                    println!("{:<9} {:>8}", event.r#type().as_str_name(), event.resource_version);
                }
                break;
            }
        }
    }
    eprintln!("done; stopping kube-fanout and the control plane");
    Ok(())
}

async fn connect(addr: &str) -> Result<Client> {
    for _ in 0..100 {
        if let Ok(client) = Client::connect(addr).await {
            return Ok(client);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("kube-fanout did not listen on {addr} within 10s")
}

/// Creates, updates and deletes ConfigMaps once a second.
async fn write_changes(client: kube::Client, seconds: u64) -> Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "demo");
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    for i in 1.. {
        tick.tick().await;
        if seconds != 0 && i > seconds {
            return Ok(());
        }
        match i % 3 {
            1 => {
                create_configmap(&client, "demo", &format!("item-{i}"), "new").await?;
            }
            2 => {
                let patch = serde_json::json!({ "data": { "value": format!("v{i}") } });
                api.patch("alpha", &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
            _ => {
                api.delete(&format!("item-{}", i - 2), &DeleteParams::default())
                    .await?;
            }
        }
    }
    Ok(())
}

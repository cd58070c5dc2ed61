//! The README's first command: starts a real kube-apiserver and etcd on
//! loopback, creates a few ConfigMaps, runs the `kube-fanout` binary against
//! them in its secure default (TLS, every caller authenticated by the API
//! server and authorized by RBAC), and prints the live stream of a
//! ServiceAccount allowed to read one namespace, while a writer changes
//! things.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, Result};
use clap::Parser;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube_fanout_client::{Certificate, Client, ClientConfig, ClientTlsConfig, proto::EventType};
use kube_fanout_tests::{
    controlplane::{ControlPlane, free_port, tied_command},
    eventually::eventually,
    pki::Ca,
    rbac::{grant, rule, service_account},
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

    // kube-fanout's serving certificate, and a ServiceAccount that may
    // list and watch ConfigMaps in "demo" only, with a TokenRequest token.
    let dir = cp.dir();
    let ca = Ca::new("kube-fanout demo CA")?;
    let serving = ca.serving()?;
    let (ca_file, cert_file, key_file, token_file) = (
        dir.join("fanout-ca.crt"),
        dir.join("fanout.crt"),
        dir.join("fanout.key"),
        dir.join("viewer.token"),
    );
    std::fs::write(&ca_file, ca.pem())?;
    std::fs::write(&cert_file, &serving.cert)?;
    std::fs::write(&key_file, &serving.key)?;
    // Lets the ServiceAccount demo/viewer list and watch ConfigMaps in "demo".
    grant(
        &cp.client,
        "demo",
        "viewer",
        vec![rule(&["list", "watch"], "configmaps")],
        vec![service_account("demo", "viewer")],
    )
    .await?;
    let token = cp.service_account_token("demo", "viewer", &[]).await?;
    std::fs::write(&token_file, &token)?;

    let addr = format!("127.0.0.1:{}", free_port()?);
    let metrics = format!("127.0.0.1:{}", free_port()?);
    let mut terminate = signal(SignalKind::terminate())?;
    let mut server = tied_command(&args.kube_fanout)
        .args(["--kubeconfig", &cp.kubeconfig.display().to_string()])
        .args(["--tls-cert-file", &cert_file.display().to_string()])
        .args(["--tls-private-key-file", &key_file.display().to_string()])
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
    // The tie to this process is kube-fanout's stdin: held here, because
    // `Child::wait` (below) closes a stdin it still owns, which would end
    // kube-fanout at once.
    let _tie = server.stdin.take();
    let config = ClientConfig::new([format!("https://{addr}")])
        .tls(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca.pem()))
                .domain_name("localhost"),
        )
        .bearer_token(token);
    let mut client = connect(config).await?;
    eprintln!(
        "kube-fanout serving TLS on {addr} (ServiceAccount demo/viewer may list and watch ConfigMaps in \"demo\"); try, from another shell while this runs:"
    );
    eprintln!(
        "  $(bash tests/tools/install.sh grpcurl) -cacert {ca} -authority localhost -H \"authorization: Bearer $(cat {token})\" -d '{{\"resource\":{{\"version\":\"v1\",\"resource\":\"configmaps\"}},\"namespace\":\"demo\"}}' {addr} kubefanout.v1.KubeFanout/List",
        ca = ca_file.display(),
        token = token_file.display(),
    );
    eprintln!(
        "  (without the header: Unauthenticated; with \"namespace\":\"default\": PermissionDenied)"
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

async fn connect(config: ClientConfig) -> Result<Client> {
    eventually("kube-fanout answering")
        .within(Duration::from_secs(10))
        .until_ok(async || config.clone().connect().await)
        .await
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

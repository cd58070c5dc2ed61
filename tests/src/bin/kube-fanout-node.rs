//! `scripts/node-cluster`: starts the test cluster with a real node
//! (tests/src/node.rs), imports kube-fanout's image, installs the Helm
//! chart with its defaults and leaves everything running until Ctrl-C (or
//! SIGTERM), printing how to reach it with kubectl and grpcurl.

#[cfg(target_os = "linux")]
fn main() -> anyhow::Result<()> {
    node_cluster::main()
}

/// The real node runs a kubelet in network namespaces: Linux only.
#[cfg(not(target_os = "linux"))]
fn main() -> std::process::ExitCode {
    eprintln!(
        "kube-fanout-node: the real node (a kubelet in network namespaces) runs on Linux only"
    );
    std::process::ExitCode::FAILURE
}

/// The cluster with a real node, and the chart on it.
#[cfg(target_os = "linux")]
mod node_cluster {
    use std::time::Duration;

    use anyhow::{Context, Result};
    use clap::Parser;
    use kube_fanout_tests::{
        helm::Helm,
        node::{CHART, Cluster, chart_image, kube_fanout_image},
    };
    use tokio::signal::unix::{SignalKind, signal};

    /// Run a cluster with a real node and kube-fanout's chart installed.
    #[derive(Parser)]
    struct Args {
        /// Start the cluster and import the image, but do not install the chart.
        #[arg(long)]
        no_install: bool,
        /// More `helm install` arguments, e.g. `--set replicaCount=3`.
        #[arg(last = true)]
        helm_args: Vec<String>,
    }

    /// Runs the cluster until Ctrl-C or SIGTERM.
    #[tokio::main]
    pub(crate) async fn main() -> Result<()> {
        let args = Args::parse();
        // Listened for from the start: a Ctrl-C during the minutes of start-up
        // then drops what has started (each part cleans up as it drops)
        // instead of killing the process and leaving its temporary
        // directories behind.
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        let stopped = async move {
            tokio::select! {
                _ = interrupt.recv() => "SIGINT",
                _ = terminate.recv() => "SIGTERM",
            }
        };
        tokio::pin!(stopped);
        eprintln!(
            "building (first run: minutes) and starting kube-apiserver, etcd, kube-controller-manager, kube-scheduler, a kubelet on containerd and kube-proxy..."
        );
        let interrupted = |signal: &str| {
            eprintln!("{signal} while starting: stopping what had started");
        };
        let cluster = tokio::select! {
            signal = &mut stopped => {
                interrupted(signal);
                return Ok(());
            }
            cluster = start(&args) => match cluster {
                Ok(cluster) => cluster,
                // A terminal's Ctrl-C also ends the build or helm that
                // start-up waits for (a build blocks the runtime, so the
                // signal is seen after it): that failure is no error of its
                // own.
                Err(err) => match tokio::time::timeout(Duration::from_millis(500), &mut stopped).await {
                    Ok(signal) => {
                        interrupted(signal);
                        return Ok(());
                    }
                    Err(_) => return Err(err),
                },
            },
        };
        let kubeconfig = cluster.cp.kubeconfig.display().to_string();
        let kubectl = cluster.kubectl.display().to_string();
        println!(
            "\nThe cluster runs until Ctrl-C. Its files and logs: {dir}
  export KUBECONFIG={kubeconfig}
  alias kubectl={kubectl}
  kubectl get nodes,pods -A -o wide
  kubectl -n fanout logs deploy/kf-kube-fanout
  kubectl -n fanout port-forward service/kf-kube-fanout 50051:50051 &
  kubectl -n fanout get configmap kf-kube-fanout-ca -o jsonpath='{{.data.ca\\.crt}}' > ca.crt
  TOKEN=$(kubectl create token default -n fanout --audience kube-fanout)
  kubectl create clusterrolebinding explore --clusterrole=view --serviceaccount=fanout:default
  $(bash {tools}/install.sh grpcurl) -cacert ca.crt -servername kf-kube-fanout.fanout.svc \\
    -H \"authorization: Bearer $TOKEN\" 127.0.0.1:50051 kubefanout.v1.KubeFanout/ListResources",
            dir = cluster.dir().display(),
            // Absolute: the lines are pasted into a shell anywhere.
            tools = concat!(env!("CARGO_MANIFEST_DIR"), "/tools"),
        );
        let signal = stopped.await;
        eprintln!("{signal}: stopping the cluster");
        drop(cluster);
        Ok(())
    }

    /// Starts the cluster, imports the image and, unless told not to,
    /// installs the chart.
    async fn start(args: &Args) -> Result<Cluster> {
        let cluster = Cluster::start().await?;
        let image = chart_image()?;
        cluster
            .import_image(kube_fanout_image()?, &image)
            .await
            .context("importing kube-fanout's image")?;
        if !args.no_install {
            let helm = Helm::new(&cluster.cp)?;
            let mut install = vec![
                "install",
                "kf",
                CHART,
                "--namespace",
                "fanout",
                "--create-namespace",
                "--wait",
                "--timeout",
                "5m",
            ];
            install.extend(args.helm_args.iter().map(String::as_str));
            eprintln!("helm {}", install.join(" "));
            print!("{}", helm.run(&install).await?);
        }
        Ok(cluster)
    }
}

//! A test cluster with a real node: the [`ControlPlane`] (kube-apiserver
//! and etcd on 127.0.0.1) with kube-controller-manager and kube-scheduler,
//! and one node: a kubelet on containerd and runc (Debian's packages,
//! `scripts/node-packages`), the CNI bridge plugin, kube-proxy in iptables
//! mode, and a pause image built here (`tests/node/build.sh`, which builds
//! the Kubernetes components from the control plane's release too).
//!
//! The node lives in namespaces of its own, made by `unshare` for each
//! cluster: a network namespace (its bridge, pod addresses and kube-proxy's
//! iptables rules touch nothing of the host's), a mount namespace (the
//! overlay, tmpfs and network-namespace mounts of containerd and the
//! kubelet vanish with it; /run/containerd, /var/lib/cni, /var/lib/kubelet
//! and /var/log/{pods,containers} are tmpfs of its own) and a PID namespace
//! whose first process is the pause binary: when the cluster drops, or the
//! test process dies however it dies, that process is killed and the
//! kernel kills every process of the node with it, containerd's shims and
//! the containers included. Pods run under a cgroup of the cluster's own
//! ([`Cgroup`]), removed when it drops.
//!
//! The API server stays in the test's namespace on 127.0.0.1; forwarders
//! ([`Forwarder`]) carry the node's connections to it (the node and its
//! pods reach it at [`NODE_IP`] on the same port, which is also what the
//! `kubernetes` Service's endpoint says) and the API server's to the
//! kubelet (for logs, exec and port-forward: the node is named `localhost`
//! and its kubelet port is forwarded from 127.0.0.1).

mod cgroup;
mod container;
mod forward;
mod limits;

use std::{
    fs::File,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Mutex, OnceLock},
    time::Duration,
};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::Api;
use tempfile::TempDir;
use tokio::process::Child;

pub use self::cgroup::Cgroup;
pub use self::container::ContainerProcess;
pub use self::forward::Forwarder;
pub use self::limits::Limits;
use crate::{
    controlplane::{ControlPlane, Options, built_by, free_port, spawn},
    eventually::{Look, eventually},
};

/// The node's address: its bridge's, where pods reach the node, the
/// kubelet's probes come from and the API server is forwarded.
pub const NODE_IP: &str = "10.244.0.1";
/// The pods' addresses (the CNI bridge's host-local range).
pub const POD_CIDR: &str = "10.244.0.0/24";
/// The `kubernetes` Service's address (the first of the control plane's
/// `--service-cluster-ip-range`), which pods reach the API server at.
pub const API_SERVICE_IP: &str = "10.0.0.1";
/// The node's name: also the address the API server dials the kubelet at
/// (its Hostname address), forwarded from 127.0.0.1.
pub const NODE_NAME: &str = "localhost";
/// The pod sandbox image containerd runs first in every pod.
pub const PAUSE_IMAGE: &str = "kube-fanout.test/pause:1";
/// The bridge the CNI plugin attaches pods to.
const BRIDGE: &str = "kf0";
/// How long the node may take to become Ready.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// The Debian packages the node runs on, all installed by
/// `scripts/node-packages`: what each provides, for the error naming it.
const HOST_PROGRAMS: &[(&str, &str)] = &[
    ("/usr/bin/containerd", "containerd"),
    ("/usr/bin/ctr", "containerd"),
    ("/usr/sbin/runc", "runc"),
    ("/usr/lib/cni/bridge", "containernetworking-plugins"),
    ("/usr/lib/cni/host-local", "containernetworking-plugins"),
    ("/usr/lib/cni/loopback", "containernetworking-plugins"),
    ("/usr/sbin/iptables", "iptables"),
    ("/usr/sbin/conntrack", "conntrack"),
];

/// The directory holding the node's components (kubelet, kube-proxy,
/// kube-controller-manager, kube-scheduler, kubectl, pause and the pause
/// image's tarball), built on first use by `tests/node/build.sh`.
pub fn binaries() -> Result<&'static Path> {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    if let Some(dir) = DIR.get() {
        return Ok(dir);
    }
    let dir = built_by(&Path::new(env!("CARGO_MANIFEST_DIR")).join("node/build.sh"))?;
    Ok(DIR.get_or_init(|| dir))
}

/// kube-fanout's image as `scripts/image` writes it (a release build, an
/// OCI layout tarball), built on first use: its path.
pub fn kube_fanout_image() -> Result<&'static Path> {
    static TARBALL: OnceLock<PathBuf> = OnceLock::new();
    if let Some(tarball) = TARBALL.get() {
        return Ok(tarball);
    }
    let tarball = built_by(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/image"))?;
    Ok(TARBALL.get_or_init(|| tarball))
}

/// The Helm chart, `deploy/helm/kube-fanout`.
pub const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/helm/kube-fanout");

/// The image the chart's defaults name: its `image.repository` at the
/// chart's appVersion (import kube-fanout's image as this).
pub fn chart_image() -> Result<String> {
    let read = |file: &str| -> Result<serde_yaml::Value> {
        let path = format!("{CHART}/{file}");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        Ok(serde_yaml::from_str(&text)?)
    };
    let (chart, values) = (read("Chart.yaml")?, read("values.yaml")?);
    let repository = values["image"]["repository"]
        .as_str()
        .context("no image.repository in the chart's values")?;
    let tag = chart["appVersion"]
        .as_str()
        .context("no appVersion in Chart.yaml")?;
    Ok(format!("{repository}:{tag}"))
}

/// A process of the node, for liveness checks and failure messages.
struct Component {
    name: &'static str,
    child: Child,
}

/// A running cluster with one node. Dropping it stops everything.
pub struct Cluster {
    /// The control plane (kube-apiserver, etcd) the node registered with.
    pub cp: ControlPlane,
    /// kubectl, built from the control plane's release.
    pub kubectl: PathBuf,
    /// The kubeconfig the node's components use (the API server at
    /// [`NODE_IP`] inside the node's network namespace).
    node_kubeconfig: PathBuf,
    dir: TempDir,
    /// The node's namespaces: `unshare`, whose child is their first
    /// process.
    holder: Child,
    init_pid: u32,
    components: Mutex<Vec<Component>>,
    forwarders: Vec<Forwarder>,
    cgroup: Cgroup,
    containerd_socket: PathBuf,
    /// The kubelet's port: free on the host's 127.0.0.1 a moment ago,
    /// where the API server reaches it through a forwarder (the same port
    /// inside).
    kubelet_port: u16,
}

impl Cluster {
    /// Starts the control plane and the node and waits until the node is
    /// Ready and the `default` ServiceAccount exists.
    pub async fn start() -> Result<Self> {
        crate::init_logging();
        check_host()?;
        let bin = binaries()?;
        let cp = ControlPlane::start_with(Options {
            service_account_admission: true,
            serving_ips: vec![API_SERVICE_IP.into(), NODE_IP.into()],
            extra_args: vec![
                // The `kubernetes` Service's endpoint: where pods reach it.
                format!("--advertise-address={NODE_IP}"),
                // The kubelet at its node's name (localhost), forwarded.
                "--kubelet-preferred-address-types=Hostname".into(),
            ],
            ..Options::default()
        })
        .await?;
        let dir = tempfile::Builder::new()
            .prefix("kube-fanout-node-")
            .tempdir()?;
        let d = dir.path();
        let cgroup = Cgroup::create()?;
        let holder = spawn(
            "unshare".into(),
            &[
                "--pid".into(),
                "--fork".into(),
                "--kill-child".into(),
                "--net".into(),
                "--mount".into(),
                "--propagation".into(),
                "private".into(),
                "--mount-proc".into(),
                "--".into(),
                bin.join("pause").display().to_string(),
            ],
            &d.join("namespaces.log"),
        )?;
        let unshare_pid = holder.id().context("unshare exited at once")?;
        let init_pid = namespace_init(unshare_pid).await?;
        let containerd_socket = d.join("containerd.sock");
        let mut cluster = Cluster {
            kubectl: bin.join("kubectl"),
            node_kubeconfig: d.join("node.kubeconfig"),
            cp,
            dir,
            holder,
            init_pid,
            components: Mutex::new(Vec::new()),
            forwarders: Vec::new(),
            cgroup,
            containerd_socket,
            kubelet_port: free_port()?,
        };
        cluster.set_up_namespaces().await?;
        cluster.start_forwarders()?;
        cluster.start_containerd().await?;
        cluster
            .import_image(&bin.join("pause.oci.tar"), PAUSE_IMAGE)
            .await?;
        cluster.start_controllers()?;
        cluster.start_kubelet()?;
        cluster.start_kube_proxy()?;
        cluster.wait_ready().await?;
        Ok(cluster)
    }

    /// The cluster's temporary directory (logs of every component, the
    /// kubelet's and containerd's state, the pods' logs under pod-logs/).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Imports an OCI image tarball into the node's containerd (the
    /// namespace the kubelet's pods come from) as `reference`, the name a
    /// pod spec gives it (`registry/repository:tag`).
    ///
    /// The layout's index is rewritten to name that reference first:
    /// containerd 1.6 keeps a short name such as `kube-fanout:0.1.0` as
    /// is, while its CRI normalizes it to `docker.io/library/...`, a name
    /// it then cannot find ("failed to get image from containerd"); and a
    /// second name added with `ctr images tag` is not the one CRI looks up.
    pub async fn import_image(&self, tarball: &Path, reference: &str) -> Result<()> {
        let work = tempfile::Builder::new()
            .prefix("image-")
            .tempdir_in(self.dir.path())?;
        let layout = work.path().join("layout");
        std::fs::create_dir(&layout)?;
        run_tar(&[
            "-xf".as_ref(),
            tarball.as_os_str(),
            "-C".as_ref(),
            layout.as_os_str(),
        ])?;
        let index_path = layout.join("index.json");
        let mut index: serde_json::Value = serde_json::from_slice(&std::fs::read(&index_path)?)
            .with_context(|| format!("{} has no OCI index", tarball.display()))?;
        let manifests = index["manifests"]
            .as_array_mut()
            .context("the OCI index has no manifests")?;
        for manifest in manifests {
            manifest["annotations"]["org.opencontainers.image.ref.name"] = reference.into();
        }
        std::fs::write(&index_path, serde_json::to_vec(&index)?)?;
        let renamed = work.path().join("image.tar");
        run_tar(&[
            "-cf".as_ref(),
            renamed.as_os_str(),
            "-C".as_ref(),
            layout.as_os_str(),
            ".".as_ref(),
        ])?;
        let imported = self
            .ctr(&["images", "import", &renamed.display().to_string()])
            .await?;
        ensure!(
            imported.contains(&format!("unpacking {reference} ")),
            "ctr import did not name the image {reference}: {imported}"
        );
        Ok(())
    }

    /// Runs ctr against the node's containerd in the kubelet's namespace:
    /// its stdout, or an error quoting its stderr.
    async fn ctr(&self, args: &[&str]) -> Result<String> {
        let out = tokio::process::Command::new("ctr")
            .arg("--address")
            .arg(&self.containerd_socket)
            .args(["--namespace", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .context("running ctr")?;
        ensure!(
            out.status.success(),
            "ctr {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The last lines of a component's log (kubelet, containerd,
    /// kube-proxy, kube-controller-manager, kube-scheduler), for failure
    /// messages.
    pub fn log_tail(&self, name: &str, lines: usize) -> String {
        let log = std::fs::read_to_string(self.dir.path().join(format!("{name}.log")))
            .unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// An error if a component of the node has exited, naming it and
    /// quoting its log.
    pub fn check_alive(&self) -> Result<()> {
        let mut components = self
            .components
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?;
        for component in components.iter_mut() {
            if let Some(status) = component.child.try_wait()? {
                bail!(
                    "{} exited with {status}:\n{}",
                    component.name,
                    self.log_tail(component.name, 30)
                );
            }
        }
        Ok(())
    }

    /// Runs a shell script in the node's namespaces to completion.
    async fn run_in_node(&self, script: &str) -> Result<()> {
        let out = tokio::process::Command::new("nsenter")
            .args(self.nsenter_args())
            .args(["sh", "-euc", script])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .context("running nsenter")?;
        ensure!(
            out.status.success(),
            "in the node's namespaces, {script:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// nsenter's arguments to join the node's PID, network and mount
    /// namespaces.
    fn nsenter_args(&self) -> Vec<String> {
        vec![
            format!("--target={}", self.init_pid),
            "--pid".into(),
            "--net".into(),
            "--mount".into(),
            "--".into(),
        ]
    }

    /// Starts a component in the node's namespaces, its output to
    /// NAME.log in the cluster's directory.
    fn start_in_node(&self, name: &'static str, program: &Path, args: &[String]) -> Result<()> {
        let mut all = self.nsenter_args();
        all.push(program.display().to_string());
        all.extend(args.iter().cloned());
        let child = spawn(
            "nsenter".into(),
            &all,
            &self.dir.path().join(format!("{name}.log")),
        )?;
        self.components
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .push(Component { name, child });
        Ok(())
    }

    /// The node's network: loopback, the bridge with the node's address,
    /// forwarding and bridged traffic through iptables (kube-proxy's
    /// Service rules apply to pod-to-pod traffic on the bridge), and the
    /// tmpfs mounts over the paths containerd, the CNI plugins and the
    /// kubelet use whatever they are told.
    async fn set_up_namespaces(&self) -> Result<()> {
        const PRIVATE_DIRS: &[&str] = &[
            "/run/containerd",
            "/var/lib/cni",
            "/var/lib/kubelet",
            "/var/log/pods",
            "/var/log/containers",
        ];
        let mounts: String = PRIVATE_DIRS
            .iter()
            .map(|dir| format!("mkdir -p {dir}; mount -t tmpfs -o mode=0755 tmpfs {dir}\n"))
            .collect();
        self.run_in_node(&format!(
            "ip link set lo up
ip link add {BRIDGE} type bridge
ip addr add {NODE_IP}/24 dev {BRIDGE}
ip link set {BRIDGE} up
echo 1 > /proc/sys/net/ipv4/ip_forward
echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables
{mounts}"
        ))
        .await
    }

    /// The API server into the node (NODE_IP:port to 127.0.0.1:port) and
    /// the kubelet out of it (127.0.0.1:port to the kubelet's port).
    fn start_forwarders(&mut self) -> Result<()> {
        let host = File::open("/proc/thread-self/ns/net")?;
        let node = File::open(format!("/proc/{}/ns/net", self.init_pid))?;
        let api: SocketAddr = self
            .cp
            .server_url
            .strip_prefix("https://")
            .context("the API server's URL is not https")?
            .parse()?;
        let in_node = SocketAddr::new(NODE_IP.parse()?, api.port());
        self.forwarders.push(Forwarder::start(
            "kube-apiserver",
            &node,
            in_node,
            &host,
            api,
        )?);
        let kubelet = SocketAddr::new([127, 0, 0, 1].into(), self.kubelet_port);
        self.forwarders
            .push(Forwarder::start("kubelet", &host, kubelet, &node, kubelet)?);
        let kubeconfig = std::fs::read_to_string(&self.cp.kubeconfig)?
            .replace(&self.cp.server_url, &format!("https://{in_node}"));
        std::fs::write(&self.node_kubeconfig, kubeconfig)?;
        Ok(())
    }

    async fn start_containerd(&self) -> Result<()> {
        let d = self.dir.path();
        let cni = d.join("cni");
        std::fs::create_dir_all(cni.join("net.d"))?;
        std::fs::write(
            cni.join("net.d/10-kube-fanout.conflist"),
            cni_config(&cni.join("ipam")),
        )?;
        let config = d.join("containerd.toml");
        std::fs::write(
            &config,
            containerd_config(d, &self.containerd_socket, &cni.join("net.d")),
        )?;
        self.start_in_node(
            "containerd",
            Path::new("/usr/bin/containerd"),
            &[format!("--config={}", config.display())],
        )?;
        self.wait_for("containerd's socket", Duration::from_secs(30), || async {
            Ok(self.ctr(&["version"]).await.is_ok().then_some(()))
        })
        .await
    }

    fn start_controllers(&self) -> Result<()> {
        let bin = binaries()?;
        let kubeconfig = format!("--kubeconfig={}", self.node_kubeconfig.display());
        let ca = self.dir.path().join("ca.crt");
        std::fs::write(&ca, &self.cp.ca_pem)?;
        self.start_in_node(
            "kube-controller-manager",
            &bin.join("kube-controller-manager"),
            &[
                kubeconfig.clone(),
                "--leader-elect=false".into(),
                "--use-service-account-credentials=false".into(),
                // The CA of the kube-root-ca.crt ConfigMap in every
                // namespace (part of every pod's token volume).
                format!("--root-ca-file={}", ca.display()),
                format!(
                    "--service-account-private-key-file={}",
                    self.cp.dir().join("sa.key").display()
                ),
                "--controllers=*".into(),
                "--v=1".into(),
            ],
        )?;
        self.start_in_node(
            "kube-scheduler",
            &bin.join("kube-scheduler"),
            &[kubeconfig, "--leader-elect=false".into(), "--v=1".into()],
        )
    }

    fn start_kubelet(&self) -> Result<()> {
        let d = self.dir.path();
        let config = d.join("kubelet.yaml");
        std::fs::write(
            &config,
            kubelet_config(
                &self.cgroup.path(),
                &self.containerd_socket,
                self.kubelet_port,
                &d.join("pod-logs"),
            ),
        )?;
        std::fs::create_dir_all(d.join("pod-logs"))?;
        self.start_in_node(
            "kubelet",
            &binaries()?.join("kubelet"),
            &[
                format!("--config={}", config.display()),
                format!("--kubeconfig={}", self.node_kubeconfig.display()),
                format!("--root-dir={}", d.join("kubelet").display()),
                format!("--hostname-override={NODE_NAME}"),
                format!("--node-ip={NODE_IP}"),
                "--v=1".into(),
            ],
        )
    }

    fn start_kube_proxy(&self) -> Result<()> {
        self.start_in_node(
            "kube-proxy",
            &binaries()?.join("kube-proxy"),
            &[
                format!("--kubeconfig={}", self.node_kubeconfig.display()),
                format!("--hostname-override={NODE_NAME}"),
                "--proxy-mode=iptables".into(),
                format!("--cluster-cidr={POD_CIDR}"),
                // Leave the conntrack table's size and timeouts (sysctls
                // of the whole host) alone.
                "--conntrack-max-per-core=0".into(),
                "--conntrack-tcp-timeout-established=0".into(),
                "--conntrack-tcp-timeout-close-wait=0".into(),
                "--v=1".into(),
            ],
        )
    }

    /// Waits until the node is Ready and the `default` namespace's
    /// ServiceAccount exists (made by kube-controller-manager).
    async fn wait_ready(&self) -> Result<()> {
        let nodes: Api<Node> = Api::all(self.cp.client.clone());
        self.wait_for("the node to be Ready", READY_TIMEOUT, || async {
            let node = nodes.get_opt(NODE_NAME).await?;
            Ok(node.filter(node_ready).map(|_| ()))
        })
        .await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(self.cp.client.clone(), "default");
        self.wait_for(
            "the default ServiceAccount",
            Duration::from_secs(60),
            || async { Ok(accounts.get_opt("default").await?.map(|_| ())) },
        )
        .await
    }

    /// Waits (with [`eventually`]) until `check` gives a value, looking
    /// twice a second; a component of the node that exits ends the wait at
    /// once, and a timeout's error also quotes the kubelet's log. An error
    /// from `check` counts as not yet (an object or a log not there yet).
    pub async fn wait_for<T, F, Fut>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>>>,
    {
        eventually(what)
            .within(timeout)
            .every(Duration::from_millis(500))
            .until_done(async || {
                self.check_alive()?;
                Ok(match check().await {
                    Ok(Some(value)) => Look::Done(value),
                    Ok(None) => Look::NotYet("not yet".to_owned()),
                    Err(e) => Look::NotYet(format!("{e:#}")),
                })
            })
            .await
            .with_context(|| format!("the kubelet's log ends:\n{}", self.log_tail("kubelet", 20)))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Ok(mut components) = self.components.lock() {
            for component in components.iter_mut() {
                let _ = component.child.start_kill();
            }
        }
        // Killing unshare kills the namespaces' first process (its
        // --kill-child), and the kernel every other process in them.
        let _ = self.holder.start_kill();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while (Path::new(&format!("/proc/{}", self.init_pid)).exists() || !self.cgroup.is_empty())
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// An error naming the Debian package to install if a program the node
/// needs is missing.
fn check_host() -> Result<()> {
    let missing: Vec<&str> = HOST_PROGRAMS
        .iter()
        .filter(|(path, _)| !Path::new(path).exists())
        .map(|(_, package)| *package)
        .collect();
    ensure!(
        missing.is_empty(),
        "the node needs the Debian packages {missing:?}: run scripts/node-packages (as root)"
    );
    Ok(())
}

/// The child of unshare (`pid`) that is the first process of the new PID
/// namespace (unshare's other child is [`spawn`]'s watcher), once there
/// is one.
async fn namespace_init(pid: u32) -> Result<u32> {
    let ours = std::fs::read_link("/proc/self/ns/pid")?;
    for _ in 0..250 {
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .with_context(|| format!("unshare ({pid}) exited"))?;
        for child in children.split_whitespace() {
            if std::fs::read_link(format!("/proc/{child}/ns/pid")).is_ok_and(|ns| ns != ours) {
                return Ok(child.parse()?);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("unshare ({pid}) made no PID namespace")
}

/// Runs tar with `args`.
fn run_tar(args: &[&std::ffi::OsStr]) -> Result<()> {
    let status = std::process::Command::new("tar").args(args).status()?;
    ensure!(status.success(), "tar {args:?} failed ({status})");
    Ok(())
}

/// Whether a node's Ready condition is True.
fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// containerd's configuration: its state, sockets and CNI configuration in
/// `d`, runc with the cgroupfs driver (the kubelet's), the local pause
/// image, no registry. `restrict_oom_score_adj`: the machine may withhold
/// CAP_SYS_RESOURCE (this sandbox does: writing -998 to oom_score_adj
/// fails with EACCES, and runc then fails every pod sandbox with "can't
/// get final child's PID from pipe: EOF"), so containerd keeps every
/// container's OOM score at or above its own.
fn containerd_config(d: &Path, socket: &Path, cni_conf: &Path) -> String {
    let d = d.display();
    format!(
        r#"version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni_conf}"
"#,
        socket = socket.display(),
        cni_conf = cni_conf.display(),
    )
}

/// The CNI network: the bridge plugin on [`BRIDGE`] (the node's address
/// its gateway), host-local addresses from [`POD_CIDR`] with its state in
/// `ipam`, and the loopback plugin (containerd brings pods' lo up itself).
fn cni_config(ipam: &Path) -> String {
    format!(
        r#"{{"cniVersion": "0.4.0", "name": "kube-fanout-test", "plugins": [
  {{"type": "bridge", "bridge": "{BRIDGE}", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {{"type": "host-local", "dataDir": "{ipam}",
            "ranges": [[{{"subnet": "{POD_CIDR}", "gateway": "{NODE_IP}"}}]],
            "routes": [{{"dst": "0.0.0.0/0"}}]}}}}
]}}
"#,
        ipam = ipam.display()
    )
}

/// The kubelet's configuration: cgroupfs under `cgroup_root`, on cgroup v1
/// too (still supported by 1.36, refused unless failCgroupV1 is false),
/// its API on `port` (anonymous and always allowed: it is reachable only
/// inside the node's namespace and through the test's forwarder on
/// 127.0.0.1), eviction thresholds low enough that a busy shared disk does
/// not evict the test's pods.
fn kubelet_config(cgroup_root: &str, containerd: &Path, port: u16, pod_logs: &Path) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
containerRuntimeEndpoint: unix://{containerd}
address: 0.0.0.0
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
failSwapOn: false
podLogsDir: {pod_logs}
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 30
serializeImagePulls: false
"#,
        containerd = containerd.display(),
        pod_logs = pod_logs.display(),
    )
}

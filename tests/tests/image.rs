//! The container image `scripts/image` writes (an OCI image layout in a
//! tarball, assembled by crane without a container daemon): its config
//! says what a runtime runs, and its filesystem, unpacked, runs
//! kube-fanout as the image's non-root user with nothing from the host:
//! `--help`, then against the real API server with the in-cluster
//! credentials a pod gets, read back with the image's own kubectl-fanout.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use kube_fanout_tests::{
    controlplane::{ADMIN_TOKEN, ControlPlane, free_port},
    process::{FanoutProcess, READINESS_SERVICE},
    support::{create_configmap, create_namespace},
};
use serde_json::Value;
use tokio::process::Command;

/// The user the image runs as.
const USER: &str = "65532:65532";

/// Builds the image (release build and crane, cached) into `out`; the
/// tarball's path.
fn build_image(out: &Path) -> Result<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/image");
    let built = std::process::Command::new("bash")
        .arg(&script)
        .arg("--out")
        .arg(out)
        .stderr(std::process::Stdio::inherit())
        .output()?;
    ensure!(built.status.success(), "scripts/image failed");
    let stdout = String::from_utf8(built.stdout)?;
    Ok(PathBuf::from(stdout.lines().last().context("no path")?))
}

/// A JSON blob of an OCI layout by its digest.
fn blob(layout: &Path, digest: &str) -> Result<PathBuf> {
    let hex = digest
        .strip_prefix("sha256:")
        .context("not a sha256 digest")?;
    Ok(layout.join("blobs/sha256").join(hex))
}

fn read_json(path: &Path) -> Result<Value> {
    Ok(serde_json::from_slice(&std::fs::read(path)?)?)
}

/// `program` run inside `rootfs` as the image's user: chroot with that
/// user as root (CI), a user namespace mapping it otherwise. Nothing of the
/// host's environment goes in.
fn in_image(rootfs: &Path, program: &str) -> Result<Command> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let root = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|uids| uids.split_whitespace().nth(1))
        == Some("0");
    let mut command = if root {
        let mut c = Command::new(host_program("chroot")?);
        c.arg(format!("--userspec={USER}")).arg(rootfs);
        c
    } else {
        let mut c = Command::new(host_program("unshare")?);
        c.args(["--user", "--map-user=65532", "--map-group=65532"])
            .arg(format!("--root={}", rootfs.display()));
        c
    };
    command
        .arg(program)
        .env_clear()
        .env("PATH", "/usr/local/bin")
        .kill_on_drop(true);
    Ok(command)
}

/// A program of the host, found on its PATH (the child's environment,
/// which a command looks programs up in, is the image's).
fn host_program(name: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").context("no PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .with_context(|| format!("{name} not found on PATH"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_runs_kube_fanout_as_non_root_against_the_api_server() -> Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("kube-fanout-image-")
        .tempdir()?;
    let tarball = build_image(&dir.path().join("out"))?;

    // The layout: index -> manifest -> config and layers.
    let layout = dir.path().join("layout");
    std::fs::create_dir(&layout)?;
    let untar = std::process::Command::new("tar")
        .arg("-xf")
        .arg(&tarball)
        .arg("-C")
        .arg(&layout)
        .status()?;
    ensure!(untar.success(), "cannot unpack {}", tarball.display());
    let index = read_json(&layout.join("index.json"))?;
    let entry = &index["manifests"][0];
    assert_eq!(
        entry["annotations"]["org.opencontainers.image.ref.name"],
        "kube-fanout:0.1.0"
    );
    let manifest = read_json(&blob(
        &layout,
        entry["digest"].as_str().context("no manifest digest")?,
    )?)?;
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let config = read_json(&blob(
        &layout,
        manifest["config"]["digest"]
            .as_str()
            .context("no config digest")?,
    )?)?;
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(config["config"]["User"], USER);
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/usr/local/bin/kube-fanout"])
    );

    // The filesystem, unpacked as a runtime would: one layer, no shell.
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir(&rootfs)?;
    let layers = manifest["layers"].as_array().context("no layers")?;
    assert_eq!(layers.len(), 1);
    for layer in layers {
        let path = blob(&layout, layer["digest"].as_str().context("no digest")?)?;
        let untar = std::process::Command::new("tar")
            .arg("-xf")
            .arg(&path)
            .arg("-C")
            .arg(&rootfs)
            .status()?;
        ensure!(untar.success(), "cannot unpack layer {}", path.display());
    }
    assert!(!rootfs.join("bin/sh").exists(), "the image has a shell");

    // --help, from inside: the binary and its libraries are all there.
    let help = in_image(&rootfs, "/usr/local/bin/kube-fanout")?
        .arg("--help")
        .output()
        .await?;
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.status.success(),
        "{}",
        String::from_utf8_lossy(&help.stderr)
    );
    assert!(text.contains("--resource <GVR>"), "{text}");
    assert!(text.contains("[env: KUBE_FANOUT_LISTEN="), "{text}");

    // Against the API server, with the files and variables a pod gets.
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, "image").await?;
    create_configmap(&cp.client, "image", "from-the-image", "1").await?;
    let secrets = rootfs.join("var/run/secrets/kubernetes.io/serviceaccount");
    std::fs::create_dir_all(&secrets)?;
    std::fs::write(secrets.join("token"), ADMIN_TOKEN)?;
    std::fs::write(secrets.join("namespace"), "image")?;
    std::fs::write(secrets.join("ca.crt"), cluster_ca(&cp)?)?;
    let port = cp
        .server_url
        .rsplit(':')
        .next()
        .context("no API server port")?;
    let addr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let mut server = in_image(&rootfs, "/usr/local/bin/kube-fanout")?;
    server
        // On loopback without credentials: the image is under test here,
        // authorization in tests/tests/auth.rs.
        .args(["--resource", "v1/configmaps", "--log-json", "--auth=none"])
        .arg(format!("--listen={addr}"))
        .arg(format!("--metrics-listen=127.0.0.1:{}", free_port()?))
        .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        .env("KUBERNETES_SERVICE_PORT", port);
    let mut fanout = FanoutProcess::spawn(server, addr, dir.path().join("kube-fanout.log"))?;
    fanout.wait_serving(READINESS_SERVICE).await?;

    let listed = in_image(&rootfs, "/usr/local/bin/kubectl-fanout")?
        .arg(format!("--server={addr}"))
        .args(["list", "configmaps", "-n", "image"])
        .output()
        .await?;
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(
        table.lines().any(|l| l.starts_with("from-the-image ")),
        "{table}"
    );
    let log = std::fs::read_to_string(dir.path().join("kube-fanout.log"))?;
    let first = log.lines().next().context("kube-fanout logged nothing")?;
    serde_json::from_str::<Value>(first)
        .with_context(|| format!("not a JSON log line: {first}"))?;
    Ok(())
}

/// The API server's CA, from the admin kubeconfig.
fn cluster_ca(cp: &ControlPlane) -> Result<Vec<u8>> {
    use base64::Engine;
    let kubeconfig = kube::config::Kubeconfig::read_from(&cp.kubeconfig)?;
    let cluster = kubeconfig.clusters[0]
        .cluster
        .as_ref()
        .context("no cluster")?;
    let data = cluster
        .certificate_authority_data
        .as_deref()
        .context("no CA data")?;
    Ok(base64::engine::general_purpose::STANDARD.decode(data)?)
}

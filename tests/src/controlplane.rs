//! A real kube-apiserver and etcd on 127.0.0.1, like controller-runtime's
//! envtest: built from the Go module proxy by `tests/controlplane/build.sh`
//! (cached under `target/` by go.sum), started on free ports in a temporary
//! directory, and stopped when dropped, also when a test panics.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::Stdio,
    sync::OnceLock,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use tempfile::TempDir;
use tokio::process::{Child, Command};

use crate::{
    eventually::{Look, eventually},
    pki::Ca,
};

/// The token of the static admin user (group system:masters).
pub const ADMIN_TOKEN: &str = "kube-fanout-test-admin-token";

/// Users of the static token file besides the admin, without groups or
/// permissions of their own: tests grant them RBAC roles. Each one's token
/// is [`user_token`].
pub const USERS: &[&str] = &["alice", "bob", "carol", "dave", "erin"];

/// The bearer token of a user in [`USERS`].
pub fn user_token(user: &str) -> String {
    format!("kube-fanout-test-{user}-token")
}

/// How long the control plane may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// Options for [`ControlPlane::start_with`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--feature-gates` for kube-apiserver, e.g. `WatchList=false`.
    pub feature_gates: Option<String>,
    /// More kube-apiserver flags, e.g. `--watch-cache-sizes=configmaps#0`.
    pub extra_args: Vec<String>,
    /// Keep the ServiceAccount admission plugin (off by default, as in
    /// envtest): pods get their ServiceAccount's token volume, which a
    /// cluster whose pods run needs.
    pub service_account_admission: bool,
    /// More IP addresses the serving certificate is for, besides
    /// 127.0.0.1: where pods reach the API server.
    pub serving_ips: Vec<String>,
}

/// A running etcd + kube-apiserver pair.
pub struct ControlPlane {
    dir: TempDir,
    etcd: Child,
    apiserver: Child,
    apiserver_args: Vec<String>,
    /// A second kube-apiserver on the same etcd, if started.
    extra_apiserver: Option<Child>,
    /// `http://127.0.0.1:PORT` of etcd.
    pub etcd_endpoint: String,
    /// `https://127.0.0.1:PORT` of kube-apiserver.
    pub server_url: String,
    /// A kubeconfig for the admin user.
    pub kubeconfig: PathBuf,
    /// A client for the admin user.
    pub client: kube::Client,
    /// The CA (PEM) that signed the API server's serving certificate.
    pub ca_pem: String,
}

/// The directory holding `kube-apiserver` and `etcd`, built on first use.
pub fn binaries() -> Result<&'static Path> {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    if let Some(dir) = DIR.get() {
        return Ok(dir);
    }
    let dir = built_by(&Path::new(env!("CARGO_MANIFEST_DIR")).join("controlplane/build.sh"))?;
    Ok(DIR.get_or_init(|| dir))
}

/// Runs a build script (its progress on stderr) and returns the path it
/// prints last on stdout: where what it built is cached.
pub(crate) fn built_by(script: &Path) -> Result<PathBuf> {
    let out = std::process::Command::new("bash")
        .arg(script)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed ({})", script.display(), out.status);
    }
    let stdout = String::from_utf8(out.stdout)?;
    let path = stdout
        .lines()
        .last()
        .with_context(|| format!("{} printed no path", script.display()))?;
    Ok(PathBuf::from(path.trim()))
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The ports a control plane listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ports {
    etcd: u16,
    peer: u16,
    api: u16,
}

impl Ports {
    /// Ports that were free a moment ago.
    fn free() -> Result<Self> {
        Ok(Ports {
            etcd: free_port()?,
            peer: free_port()?,
            api: free_port()?,
        })
    }
}

/// Whether a start failed because a port was taken: etcd's or
/// kube-apiserver's log (in the error's context) says so.
fn port_taken(error: &anyhow::Error) -> bool {
    format!("{error:#}").contains("address already in use")
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver with default options.
    pub async fn start() -> Result<Self> {
        Self::start_with(Options::default()).await
    }

    /// Starts etcd and kube-apiserver and waits for `/readyz`.
    ///
    /// Their ports come from [`free_port`]: free a moment ago, so a process
    /// of a test running beside this one can take one before etcd or
    /// kube-apiserver binds it. A start that failed so is made again on
    /// fresh ports (at most three times); any other failure is returned.
    pub async fn start_with(options: Options) -> Result<Self> {
        Self::start_on(&options, Ports::free).await
    }

    /// Starts on the ports `ports` gives, asking it again (at most three
    /// starts in all) when a start failed because one was taken.
    async fn start_on(options: &Options, mut ports: impl FnMut() -> Result<Ports>) -> Result<Self> {
        let mut attempt = 1;
        loop {
            match Self::start_once(options, ports()?).await {
                Err(e) if attempt < 3 && port_taken(&e) => {
                    tracing::warn!(
                        attempt,
                        "a control plane port was taken meanwhile; again on fresh ports"
                    );
                    attempt += 1;
                }
                outcome => return outcome,
            }
        }
    }

    async fn start_once(options: &Options, ports: Ports) -> Result<Self> {
        crate::init_logging();
        let bin = binaries()?;
        let dir = tempfile::Builder::new()
            .prefix("kube-fanout-cp-")
            .tempdir()?;
        let d = dir.path();
        let Ports {
            etcd: etcd_port,
            peer: peer_port,
            api: api_port,
        } = ports;
        let etcd_endpoint = format!("http://127.0.0.1:{etcd_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let etcd = spawn(
            bin.join("etcd"),
            &[
                "--name=test".into(),
                format!("--data-dir={}", d.join("etcd").display()),
                format!("--listen-client-urls={etcd_endpoint}"),
                format!("--advertise-client-urls={etcd_endpoint}"),
                format!("--listen-peer-urls={peer}"),
                format!("--initial-advertise-peer-urls={peer}"),
                format!("--initial-cluster=test={peer}"),
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ],
            &d.join("etcd.log"),
        )?;

        let ca_pem = write_credentials(d, &options.serving_ips)?;
        let server_url = format!("https://127.0.0.1:{api_port}");
        let mut args = vec![
            format!("--etcd-servers={etcd_endpoint}"),
            format!("--cert-dir={}", d.join("certs").display()),
            format!("--tls-cert-file={}", d.join("serving.crt").display()),
            format!("--tls-private-key-file={}", d.join("serving.key").display()),
            format!("--secure-port={api_port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--allow-privileged=true".into(),
            "--authorization-mode=RBAC".into(),
            format!("--service-account-issuer={server_url}/"),
            format!("--service-account-key-file={}", d.join("sa.pub").display()),
            format!(
                "--service-account-signing-key-file={}",
                d.join("sa.key").display()
            ),
            format!("--token-auth-file={}", d.join("tokens.csv").display()),
            "--v=1".into(),
        ];
        if !options.service_account_admission {
            args.push("--disable-admission-plugins=ServiceAccount".into());
        }
        if let Some(gates) = &options.feature_gates {
            args.push(format!("--feature-gates={gates}"));
        }
        args.extend(options.extra_args.iter().cloned());
        let apiserver = spawn(
            bin.join("kube-apiserver"),
            &args,
            &d.join("kube-apiserver.log"),
        )?;

        let kubeconfig = d.join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_yaml(&server_url, &ca_pem))?;
        let client = client_for(&kubeconfig).await?;
        let mut cp = ControlPlane {
            dir,
            etcd,
            apiserver,
            apiserver_args: args,
            extra_apiserver: None,
            etcd_endpoint,
            server_url,
            kubeconfig,
            client,
            ca_pem,
        };
        cp.wait_ready().await?;
        Ok(cp)
    }

    /// Kills kube-apiserver (SIGKILL, no graceful shutdown); etcd keeps running.
    pub async fn kill_apiserver(&mut self) -> Result<()> {
        self.apiserver.kill().await?;
        Ok(())
    }

    /// Starts kube-apiserver again on the same port, data and credentials,
    /// and waits until it is ready.
    pub async fn restart_apiserver(&mut self) -> Result<()> {
        self.apiserver = spawn(
            binaries()?.join("kube-apiserver"),
            &self.apiserver_args,
            &self.dir.path().join("kube-apiserver.log"),
        )?;
        self.wait_ready().await
    }

    /// Starts a second kube-apiserver on the same etcd and returns a client
    /// for it: writes through it while the first one is down.
    pub async fn start_extra_apiserver(&mut self) -> Result<kube::Client> {
        let port = free_port()?;
        let args: Vec<String> = self
            .apiserver_args
            .iter()
            .map(|a| match a.split_once('=') {
                Some(("--secure-port", _)) => format!("--secure-port={port}"),
                Some(("--cert-dir", _)) => format!(
                    "--cert-dir={}",
                    self.dir.path().join("certs-extra").display()
                ),
                _ => a.clone(),
            })
            .collect();
        self.extra_apiserver = Some(spawn(
            binaries()?.join("kube-apiserver"),
            &args,
            &self.dir.path().join("kube-apiserver-extra.log"),
        )?);
        let kubeconfig = self.extra_kubeconfig();
        let yaml = std::fs::read_to_string(&self.kubeconfig)?
            .replace(&self.server_url, &format!("https://127.0.0.1:{port}"));
        std::fs::write(&kubeconfig, yaml)?;
        let client = client_for(&kubeconfig).await?;
        poll_ready(&client, || Ok(()))
            .await
            .with_context(|| self.log_tail("kube-apiserver-extra"))?;
        Ok(client)
    }

    /// The kubeconfig of the second kube-apiserver (see
    /// [`ControlPlane::start_extra_apiserver`]).
    pub fn extra_kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig-extra")
    }

    /// How many requests for `resource` (say `tokenreviews`) the API
    /// server has answered, whatever their verb and code: the sum of its
    /// own `apiserver_request_total` series for it.
    pub async fn requests_answered(&self, resource: &str) -> Result<u64> {
        Ok(self
            .metric_sum("apiserver_request_total", resource, "")
            .await? as u64)
    }

    /// The sum of the API server's own series `metric` for `resource`
    /// whose lines also hold `also` (say `verb="WATCH"`; "" for all).
    pub async fn metric_sum(&self, metric: &str, resource: &str, also: &str) -> Result<f64> {
        let metrics = self
            .client
            .request_text(http::Request::get("/metrics").body(Vec::new())?)
            .await?;
        let series = format!("{metric}{{");
        let wanted = format!("resource=\"{resource}\"");
        let mut total = 0.0;
        for line in metrics
            .lines()
            .filter(|l| l.starts_with(&series) && l.contains(&wanted) && l.contains(also))
        {
            total += line
                .rsplit(' ')
                .next()
                .context("a sample value")?
                .parse::<f64>()?;
        }
        Ok(total)
    }

    /// A client of the API server that authenticates with `token`.
    pub fn client_with_token(&self, token: &str) -> Result<kube::Client> {
        let mut config = kube::Config::new(self.server_url.parse()?);
        config.root_cert = Some(vec![pem_der(&self.ca_pem)?]);
        config.auth_info.token = Some(token.to_owned().into());
        Ok(kube::Client::try_from(config)?)
    }

    /// A client of the API server that authenticates with a client
    /// certificate (`cert` and `key`, PEM; the API server trusts client
    /// certificates only with `--client-ca-file` in
    /// [`Options::extra_args`]), and also sends `token` if given.
    pub fn client_with_certificate(
        &self,
        cert: &str,
        key: &str,
        token: Option<&str>,
    ) -> Result<kube::Client> {
        use base64::Engine;
        let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
        let mut config = kube::Config::new(self.server_url.parse()?);
        config.root_cert = Some(vec![pem_der(&self.ca_pem)?]);
        config.auth_info.client_certificate_data = Some(b64(cert));
        config.auth_info.client_key_data = Some(b64(key).into());
        config.auth_info.token = token.map(|t| t.to_owned().into());
        Ok(kube::Client::try_from(config)?)
    }

    /// A token for the ServiceAccount `namespace/name` (created if missing)
    /// from the TokenRequest API, for `audiences` (empty: the API server's).
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        audiences: &[&str],
    ) -> Result<String> {
        use k8s_openapi::api::{
            authentication::v1::{TokenRequest, TokenRequestSpec},
            core::v1::ServiceAccount,
        };
        let api: kube::Api<ServiceAccount> = kube::Api::namespaced(self.client.clone(), namespace);
        let mut sa = ServiceAccount::default();
        sa.metadata.name = Some(name.to_owned());
        match api.create(&Default::default(), &sa).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: Some(audiences.iter().map(|a| (*a).to_owned()).collect()),
                expiration_seconds: Some(3600),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let answer = api
            .create_token_request(name, &Default::default(), &request)
            .await?;
        answer
            .status
            .and_then(|s| s.token)
            .context("TokenRequest without a token")
    }

    /// The process IDs of kube-apiserver and etcd (`None` once exited),
    /// for benchmarks that read their CPU and memory from `/proc`.
    pub fn pids(&self) -> (Option<u32>, Option<u32>) {
        (self.apiserver.id(), self.etcd.id())
    }

    /// The temporary directory holding data, credentials and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let client = self.client.clone();
        let (etcd, apiserver) = (&mut self.etcd, &mut self.apiserver);
        let outcome = poll_ready(&client, || {
            for (name, child) in [("etcd", &mut *etcd), ("kube-apiserver", &mut *apiserver)] {
                if let Some(status) = child.try_wait()? {
                    bail!("{name} exited with {status}");
                }
            }
            Ok(())
        })
        .await;
        outcome.with_context(|| {
            format!(
                "etcd:\n{}\nkube-apiserver:\n{}",
                self.log_tail("etcd"),
                self.log_tail("kube-apiserver")
            )
        })
    }

    /// The last lines of a component's log, for failure messages.
    pub fn log_tail(&self, name: &str) -> String {
        let log = std::fs::read_to_string(self.dir.path().join(format!("{name}.log")))
            .unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        for child in [
            Some(&mut self.apiserver),
            self.extra_apiserver.as_mut(),
            Some(&mut self.etcd),
        ]
        .into_iter()
        .flatten()
        {
            let _ = child.start_kill();
        }
    }
}

/// Starts `program` with [`tied_command`], its output to `log`: killed
/// when the handle drops (a panicking test included) and when the test
/// process dies without dropping it.
pub fn spawn(program: PathBuf, args: &[String], log: &Path) -> Result<Child> {
    let log = std::fs::File::create(log)?;
    tied_command(&program)
        .args(args)
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", program.display()))
}

/// The watcher [`tied_command`] runs beside the program: it blocks reading
/// fd 3 (the read end of the stdin pipe, whose only write end is this
/// process's), so it wakes the moment this process exits, however it
/// dies, zombie or not; it kills the program only if the PID still names
/// it (the same start time), never a process that reused the PID.
const TIE: &str = r#"started=$(cut -d' ' -f22 /proc/$$/stat)
exec 3<&0
( read -r -u 3 _; [ "$(cut -d' ' -f22 /proc/$$/stat 2>/dev/null)" = "$started" ] && kill -9 $$ ) &
exec "$@" 3<&- </dev/null"#;

/// A command for `program` (append its arguments) that never outlives this
/// process: killed when the [`Child`] drops (a panicking test included)
/// and, through a watcher, when this process dies without dropping it (a
/// SIGTERM or SIGKILL, a test aborted by a timeout). Keep the `Child`: its
/// stdin handle is what keeps the program alive.
pub fn tied_command(program: &Path) -> Command {
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(TIE)
        .arg("tied")
        .arg(program)
        .stdin(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Writes the serving certificate (signed by a fresh CA, for 127.0.0.1,
/// localhost and `serving_ips`), the service-account key pair and the
/// static token file; returns the CA.
fn write_credentials(d: &Path, serving_ips: &[String]) -> Result<String> {
    let ca = Ca::new("kube-apiserver")?;
    let serving = ca.serving_with(serving_ips)?;
    std::fs::write(d.join("serving.crt"), serving.cert)?;
    std::fs::write(d.join("serving.key"), serving.key)?;
    let sa = rcgen::KeyPair::generate()?;
    std::fs::write(d.join("sa.key"), sa.serialize_pem())?;
    std::fs::write(d.join("sa.pub"), sa.public_key_pem())?;
    let mut tokens = format!("{ADMIN_TOKEN},admin,admin,system:masters\n");
    for user in USERS {
        tokens.push_str(&format!("{},{user},{user}-uid\n", user_token(user)));
    }
    std::fs::write(d.join("tokens.csv"), tokens)?;
    Ok(ca.pem())
}

/// The DER of the first certificate in `pem`.
pub fn pem_der(pem: &str) -> Result<Vec<u8>> {
    use base64::Engine;
    let body: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN CERTIFICATE"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    Ok(base64::engine::general_purpose::STANDARD.decode(body)?)
}

fn kubeconfig_yaml(server: &str, ca_pem: &str) -> String {
    use base64::Engine;
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: admin
  user:
    token: {ADMIN_TOKEN}
contexts:
- name: test
  context:
    cluster: test
    user: admin
current-context: test
",
        ca = base64::engine::general_purpose::STANDARD.encode(ca_pem)
    )
}

/// Polls `/readyz` through `client` until it answers, `alive` fails (a
/// process exited), or [`READY_TIMEOUT`] passes.
async fn poll_ready(client: &kube::Client, mut alive: impl FnMut() -> Result<()>) -> Result<()> {
    eventually("kube-apiserver answering /readyz")
        .within(READY_TIMEOUT)
        .every(Duration::from_millis(200))
        .until_done(async || {
            alive()?;
            let readyz = http::Request::get("/readyz").body(Vec::new())?;
            Ok(match client.request_text(readyz).await {
                Ok(_) => Look::Done(()),
                Err(err) => Look::NotYet(err.to_string()),
            })
        })
        .await
}

/// A kube client from a kubeconfig file.
pub async fn client_for(kubeconfig: &Path) -> Result<kube::Client> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(kube::Client::try_from(config)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first start's etcd client port is taken (as a test running
    /// beside it could take it between `free_port` and the bind): the
    /// start fails on it, is recognised as such, and the second start, on
    /// fresh ports, comes up.
    #[tokio::test]
    async fn a_start_on_a_port_taken_meanwhile_is_made_again_on_fresh_ports() -> Result<()> {
        let taken = TcpListener::bind("127.0.0.1:0")?;
        let port = taken.local_addr()?.port();
        let mut asked = Vec::new();
        let cp = ControlPlane::start_on(&Options::default(), || {
            let mut ports = Ports::free()?;
            if asked.is_empty() {
                ports.etcd = port;
            }
            asked.push(ports);
            Ok(ports)
        })
        .await?;
        assert_eq!(asked.len(), 2, "one start again: {asked:?}");
        assert_eq!(cp.server_url, format!("https://127.0.0.1:{}", asked[1].api));
        cp.client
            .apiserver_version()
            .await
            .context("the second start serves")?;
        Ok(())
    }
}

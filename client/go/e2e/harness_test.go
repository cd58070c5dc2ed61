package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/cert"

	kubefanout "github.com/kube-fanout/kube-fanout/client/go"
	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

// The harness starts what tests/src/controlplane.rs starts, the same way:
// a real etcd and kube-apiserver (built by tests/controlplane/build.sh) on
// free loopback ports in a temporary directory, plus the kube-fanout binary
// (cargo build -p kube-fanout). Nothing is skipped: a missing binary fails
// the test, with the command that builds it.

const adminToken = "kube-fanout-test-admin-token"

// repoRoot is the repository's root, three levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// controlPlaneBinaries runs the (cached) build script and returns the
// directory holding kube-apiserver and etcd.
func controlPlaneBinaries(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("bash", filepath.Join(repoRoot(t), "tests/controlplane/build.sh")).Output()
	if err != nil {
		t.Fatalf("tests/controlplane/build.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// fanoutBinary is target/debug/kube-fanout, or $KUBE_FANOUT_BIN.
func fanoutBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("KUBE_FANOUT_BIN")
	if bin == "" {
		target := os.Getenv("CARGO_TARGET_DIR")
		if target == "" {
			target = filepath.Join(repoRoot(t), "target")
		}
		bin = filepath.Join(target, "debug", "kube-fanout")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no kube-fanout binary at %s: run `cargo build -p kube-fanout` first (scripts/test does): %v", bin, err)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// process is a child killed when the test ends, and with the test process
// (Pdeathsig), whose output goes to a log file.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func spawn(t *testing.T, dir, name, bin string, args ...string) *process {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = log.Close(); close(p.done) }()
	t.Cleanup(func() { p.stop(syscall.SIGKILL) })
	return p
}

// stop sends sig and waits until the process has exited.
func (p *process) stop(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	<-p.done
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail is the end of the process's log, for failure messages.
func (p *process) tail() string {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// controlPlane is a running etcd + kube-apiserver, with a second
// kube-apiserver on the same etcd on demand (to write while the first is
// down).
type controlPlane struct {
	t          *testing.T
	dir, bin   string
	etcd       *process
	apiserver  *process
	apiArgs    []string
	kubeconfig string
	config     *rest.Config
	client     kubernetes.Interface
}

func startControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	bin := controlPlaneBinaries(t)
	dir := t.TempDir()
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	etcd := spawn(t, dir, "etcd", filepath.Join(bin, "etcd"),
		"--name=test", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=test="+peerURL, "--unsafe-no-fsync=true", "--log-level=warn")
	caPEM := writeCredentials(t, dir)
	port := freePort(t)
	url := fmt.Sprintf("https://127.0.0.1:%d", port)
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--tls-cert-file=" + filepath.Join(dir, "serving.crt"),
		"--tls-private-key-file=" + filepath.Join(dir, "serving.key"),
		fmt.Sprintf("--secure-port=%d", port),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
		"--disable-admission-plugins=ServiceAccount", "--authorization-mode=RBAC",
		"--service-account-issuer=" + url + "/",
		"--service-account-key-file=" + filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--v=1",
	}
	cp := &controlPlane{t: t, dir: dir, bin: bin, etcd: etcd, apiArgs: args}
	cp.kubeconfig = filepath.Join(dir, "kubeconfig")
	cp.config = writeKubeconfig(t, cp.kubeconfig, url, caPEM)
	cp.client = kubernetes.NewForConfigOrDie(cp.config)
	cp.apiserver = spawn(t, dir, "kube-apiserver", filepath.Join(bin, "kube-apiserver"), args...)
	cp.waitReady(cp.client, cp.apiserver)
	return cp
}

// killAPIServer kills kube-apiserver (no graceful shutdown); etcd keeps
// running.
func (cp *controlPlane) killAPIServer() { cp.apiserver.stop(syscall.SIGKILL) }

// restartAPIServer starts kube-apiserver again on the same port, data and
// credentials.
func (cp *controlPlane) restartAPIServer() {
	cp.apiserver = spawn(cp.t, cp.dir, "kube-apiserver", filepath.Join(cp.bin, "kube-apiserver"), cp.apiArgs...)
	cp.waitReady(cp.client, cp.apiserver)
}

// extraAPIServer starts a second kube-apiserver on the same etcd and
// returns a client for it.
func (cp *controlPlane) extraAPIServer() kubernetes.Interface {
	port := freePort(cp.t)
	var args []string
	for _, a := range cp.apiArgs {
		switch {
		case strings.HasPrefix(a, "--secure-port="):
			a = fmt.Sprintf("--secure-port=%d", port)
		case strings.HasPrefix(a, "--cert-dir="):
			a = "--cert-dir=" + filepath.Join(cp.dir, "certs-extra")
		}
		args = append(args, a)
	}
	p := spawn(cp.t, cp.dir, "kube-apiserver-extra", filepath.Join(cp.bin, "kube-apiserver"), args...)
	config := rest.CopyConfig(cp.config)
	config.Host = fmt.Sprintf("https://127.0.0.1:%d", port)
	client := kubernetes.NewForConfigOrDie(config)
	cp.waitReady(client, p)
	return client
}

func (cp *controlPlane) waitReady(client kubernetes.Interface, apiserver *process) {
	cp.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		for _, p := range []*process{cp.etcd, apiserver} {
			if p.exited() {
				cp.t.Fatalf("%s exited:\n%s", p.name, p.tail())
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			cp.t.Fatalf("kube-apiserver not ready after 90s: %v\n%s", err, apiserver.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// writeCredentials writes the serving certificate (with its CA), the
// service-account key pair and the static token file; returns the CA bundle.
func writeCredentials(t *testing.T, dir string) []byte {
	t.Helper()
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"serving.crt": certPEM,
		"serving.key": keyPEM,
		"sa.key":      pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(sa)}),
		"sa.pub":      pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		"tokens.csv":  []byte(adminToken + ",admin,admin,system:masters\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certPEM
}

func writeKubeconfig(t *testing.T, path, server string, ca []byte) *rest.Config {
	t.Helper()
	config := clientcmdapi.NewConfig()
	config.Clusters["test"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	config.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: adminToken}
	config.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin"}
	config.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*config, path); err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*config, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	// No client-side rate limit: the writers would wait on client-go's
	// default 5 QPS (and fail when a phase ends inside the limiter's wait).
	rc.QPS = -1
	return rc
}

// fanout is a running kube-fanout binary serving ConfigMaps.
type fanout struct {
	t       *testing.T
	cp      *controlPlane
	bin     string
	addr    string
	proc    *process
	conn    *kubefanout.Conn
	metrics int
	// security is the flags for TLS and authentication.
	security []string
}

func startFanout(t *testing.T, cp *controlPlane) *fanout {
	t.Helper()
	f := &fanout{t: t, cp: cp, bin: fanoutBinary(t), addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), metrics: freePort(t),
		// Loopback and no credentials: the Go client's reading is tested
		// here, not authorization (tests/tests/auth.rs covers that).
		security: []string{"--auth=none"}}
	conn, err := kubefanout.Dial([]string{f.addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	f.conn = conn
	f.start()
	return f
}

func (f *fanout) start() {
	args := append([]string{
		"--resource", "v1/configmaps", "--listen", f.addr,
		"--metrics-listen", fmt.Sprintf("127.0.0.1:%d", f.metrics),
		"--kubeconfig", f.cp.kubeconfig,
	}, f.security...)
	f.proc = spawn(f.t, f.cp.dir, "kube-fanout", f.bin, args...)
	f.waitSynced()
}

// restart stops kube-fanout with sig and starts it again on the same
// address, as a restarted pod behind the same Service.
func (f *fanout) restart(sig syscall.Signal) {
	f.proc.stop(sig)
	f.start()
}

// waitSynced waits until every served type has synced.
func (f *fanout) waitSynced() {
	f.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if f.proc.exited() {
			f.t.Fatalf("kube-fanout exited:\n%s", f.proc.tail())
		}
		resources, err := f.resources()
		synced := err == nil && len(resources) > 0
		for _, r := range resources {
			synced = synced && r.GetSyncState() == pb.SyncState_SYNCED
		}
		if synced {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("kube-fanout not synced after 60s (%v):\n%s", err, f.proc.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (f *fanout) resources() ([]*pb.ResourceStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return f.conn.Resources(ctx, "")
}

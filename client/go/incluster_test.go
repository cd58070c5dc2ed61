package kubefanout

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/util/cert"
)

// The in-cluster set-up names what is missing: the address variable, a CA
// bundle without certificates, a token file that is not there.
func TestInClusterSetUpNamesWhatIsMissing(t *testing.T) {
	t.Setenv(EnvAddress, "")
	t.Setenv(EnvTokenFile, "")
	t.Setenv(EnvCAFile, "")
	c, err := InClusterConfig()
	if err == nil || !strings.Contains(err.Error(), EnvAddress) {
		t.Fatalf("without %s: %v", EnvAddress, err)
	}
	if c.TokenFile != DefaultTokenFile || c.CAFile != DefaultCAFile {
		t.Fatalf("defaults %+v", c)
	}

	dir := t.TempDir()
	t.Setenv(EnvAddress, "kube-fanout.ops.svc:50051")
	t.Setenv(EnvTokenFile, filepath.Join(dir, "token"))
	t.Setenv(EnvCAFile, filepath.Join(dir, "ca.crt"))
	if c, err = InClusterConfig(); err != nil || c.Address != "kube-fanout.ops.svc:50051" || c.TokenFile != filepath.Join(dir, "token") {
		t.Fatalf("from the environment: %+v %v", c, err)
	}
	if err := os.WriteFile(c.CAFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Dial(); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Fatalf("a CA bundle without certificates: %v", err)
	}
	pemCert, _, err := cert.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.CAFile, pemCert, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Dial(); err == nil || !strings.Contains(err.Error(), c.TokenFile) {
		t.Fatalf("a token file that is not there: %v", err)
	}
}

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/cert"

	kubefanout "github.com/kube-fanout/kube-fanout/client/go"
)

// audience is the token audience kube-fanout accepts, the chart's default.
const audience = "kube-fanout"

// startSecureFanout runs kube-fanout as installed: TLS, TokenReview for
// the kube-fanout audience, SubjectAccessReview. Accepted tokens are cached
// for a second, so a revoked token stops working within a second. It waits
// for the sync with a ServiceAccount that may list ConfigMaps everywhere.
// Returns the CA bundle of its serving certificate.
func startSecureFanout(t *testing.T, cp *controlPlane) (*fanout, []byte) {
	t.Helper()
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(cp.dir, "fanout.crt"), filepath.Join(cp.dir, "fanout.key")
	for path, data := range map[string][]byte{certFile: certPEM, keyFile: keyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	createNamespace(t, cp, "kube-fanout-probe")
	grant(t, cp, "", "probe-lists-configmaps", "kube-fanout-probe", "probe", "list")
	token, _ := serviceAccountToken(t, cp, "kube-fanout-probe", "probe", audience, "")
	f := &fanout{t: t, cp: cp, bin: fanoutBinary(t), addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), metrics: freePort(t),
		security: []string{
			"--tls-cert-file", certFile, "--tls-private-key-file", keyFile,
			"--auth=kubernetes", "--auth-token-audiences", audience,
			"--auth-token-cache-ttl-seconds", "1",
		}}
	f.conn = f.dial(t, certPEM, kubefanout.WithBearerToken(token))
	f.start()
	return f, certPEM
}

// dial connects to f over TLS verified with ca.
func (f *fanout) dial(t *testing.T, ca []byte, opts ...kubefanout.Option) *kubefanout.Conn {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	conn, err := kubefanout.Dial([]string{f.addr}, append([]kubefanout.Option{kubefanout.WithTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func createNamespace(t *testing.T, cp *controlPlane, name string) {
	t.Helper()
	if _, err := cp.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// grant gives the ServiceAccount saNS/sa the verbs on ConfigMaps in
// namespace ("" for a ClusterRole bound cluster-wide), creating the
// ServiceAccount if needed.
func grant(t *testing.T, cp *controlPlane, namespace, name, saNS, sa string, verbs ...string) {
	t.Helper()
	ctx := context.Background()
	_, _ = cp.client.CoreV1().ServiceAccounts(saNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	rules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs}}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNS, Name: sa}}
	meta := metav1.ObjectMeta{Name: name, Namespace: namespace}
	var err error
	if namespace == "" {
		rbac := cp.client.RbacV1()
		if _, err = rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: meta, Rules: rules}, metav1.CreateOptions{}); err == nil {
			_, err = rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}}, metav1.CreateOptions{})
		}
	} else {
		rbac := cp.client.RbacV1()
		if _, err = rbac.Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: meta, Rules: rules}, metav1.CreateOptions{}); err == nil {
			_, err = rbac.RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}}, metav1.CreateOptions{})
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	waitAllowed(t, cp, saNS, sa, namespace, verbs[0])
}

// waitAllowed waits until the API server's RBAC cache allows the grant.
func waitAllowed(t *testing.T, cp *controlPlane, saNS, sa, namespace, verb string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		review, err := cp.client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sarFor(saNS, sa, namespace, verb), metav1.CreateOptions{})
		if err == nil && review.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s still may not %s configmaps in %q: %v", saNS, sa, verb, namespace, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serviceAccountToken is a TokenRequest token of saNS/sa for aud (the API
// server's own when empty), bound to a new Secret named boundTo when given
// (deleting it invalidates the token at once). Returns the token and the
// Secret.
func serviceAccountToken(t *testing.T, cp *controlPlane, saNS, sa, aud, boundTo string) (string, *corev1.Secret) {
	t.Helper()
	ctx := context.Background()
	seconds := int64(600) // the shortest the API server issues
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	if aud != "" {
		req.Spec.Audiences = []string{aud}
	}
	var secret *corev1.Secret
	if boundTo != "" {
		var err error
		secret, err = cp.client.CoreV1().Secrets(saNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: boundTo}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: secret.Name, UID: secret.UID}
	}
	resp, err := cp.client.CoreV1().ServiceAccounts(saNS).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Status.Token, secret
}

// apiConfigFor is the control plane's client configuration with token as
// the credential.
func apiConfigFor(cp *controlPlane, token string) *rest.Config {
	config := rest.AnonymousClientConfig(cp.config)
	config.BearerToken = token
	config.QPS = -1
	return config
}

func sarFor(saNS, sa, namespace, verb string) *authorizationv1.SubjectAccessReview {
	return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   fmt.Sprintf("system:serviceaccount:%s:%s", saNS, sa),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + saNS, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: verb, Resource: "configmaps",
		},
	}}
}

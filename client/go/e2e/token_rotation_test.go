package e2e

import (
	"context"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	kubefanout "github.com/kube-fanout/kube-fanout/client/go"
	"github.com/kube-fanout/kube-fanout/client/go/internal/projected"
)

// errorLog is what an informer's watch error handler was given.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) record(_ context.Context, _ *cache.Reflector, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) unauthorized() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, err := range l.errs {
		if apierrors.IsUnauthorized(err) {
			n++
		}
	}
	return n
}

// A controller set up in-cluster (DialInCluster, the token and CA bundle
// laid out as the kubelet lays a projected volume) keeps its informer fed
// when its short-lived TokenRequest token is rotated in its file and the
// old token stops working; an informer holding the old token as a fixed
// string is refused from then on and misses the next object.
//
// The old token is made invalid by deleting the Secret it is bound to (the
// API server rejects it at once; a token cannot be issued for less than
// ten minutes, too long to wait for its expiry). kube-fanout caches an
// accepted token for a second here, and is restarted, so that both
// informers must present their credential again.
func TestInClusterTokenFileSurvivesRotationFixedTokenDoesNot(t *testing.T) {
	cp := startControlPlane(t)
	fo, ca := startSecureFanout(t, cp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	createNamespace(t, cp, "rot")
	grant(t, cp, "rot", "reader-reads", "rot", "reader", "list", "watch")
	first, firstHolder := serviceAccountToken(t, cp, "rot", "reader", audience, "first-holder")

	vol := &projected.Volume{Dir: t.TempDir()}
	if err := vol.Write(map[string]string{"token": first, "ca.crt": string(ca)}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(kubefanout.EnvAddress, fo.addr)
	t.Setenv(kubefanout.EnvTokenFile, filepath.Join(vol.Dir, "token"))
	t.Setenv(kubefanout.EnvCAFile, filepath.Join(vol.Dir, "ca.crt"))
	inCluster, err := kubefanout.DialInCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inCluster.Close() })
	fixed := fo.dial(t, ca, kubefanout.WithBearerToken(first))

	start := func(conn *kubefanout.Conn) (cache.SharedIndexInformer, *errorLog) {
		inf := cache.NewSharedIndexInformer(kubefanout.NewListWatch(conn, configMaps, "rot", nil), &corev1.ConfigMap{}, 0, cache.Indexers{})
		log := &errorLog{}
		if err := inf.SetWatchErrorHandlerWithContext(log.record); err != nil {
			t.Fatal(err)
		}
		go inf.RunWithContext(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatal("informer did not sync")
		}
		return inf, log
	}
	rotating, rotatingErrs := start(inCluster)
	pinned, pinnedErrs := start(fixed)
	create := func(name string) {
		t.Helper()
		if _, err := cp.client.CoreV1().ConfigMaps("rot").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	has := func(inf cache.SharedIndexInformer, name string) bool {
		_, ok, _ := inf.GetStore().GetByKey("rot/" + name)
		return ok
	}
	create("before")
	waitFor(t, "both informers hold the first object", func() bool { return has(rotating, "before") && has(pinned, "before") })

	second, _ := serviceAccountToken(t, cp, "rot", "reader", audience, "second-holder")
	if err := vol.Write(map[string]string{"token": second, "ca.crt": string(ca)}); err != nil {
		t.Fatal(err)
	}
	if err := cp.client.CoreV1().Secrets("rot").Delete(ctx, firstHolder.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the API server rejects the old token", func() bool {
		review, err := cp.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: first, Audiences: []string{audience}},
		}, metav1.CreateOptions{})
		return err == nil && !review.Status.Authenticated
	})
	fo.restart(syscall.SIGKILL)
	create("after")
	waitFor(t, "the in-cluster informer holds the object made after the rotation", func() bool { return has(rotating, "after") })
	waitFor(t, "the fixed-token informer is refused", func() bool { return pinnedErrs.unauthorized() > 0 })
	if has(pinned, "after") {
		t.Fatal("the informer with the old token as a fixed string got the new object")
	}
	if n := rotatingErrs.unauthorized(); n != 0 {
		t.Fatalf("the in-cluster informer was refused %d times", n)
	}
}

// waitFor waits up to 60 s for cond, polling.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 60s: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

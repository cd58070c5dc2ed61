package e2e

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kubefanout "github.com/kube-fanout/kube-fanout/client/go"
	"github.com/kube-fanout/kube-fanout/client/go/crcache"
)

// forbiddenText is the message of the first Forbidden error in errs, if
// one was recorded.
func (l *errorLog) forbiddenText() (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range l.errs {
		var status *apierrors.StatusError
		if apierrors.IsForbidden(err) && errors.As(err, &status) {
			return status.ErrStatus.Message, true
		}
	}
	return "", false
}

// startUnsyncedManager runs a manager whose cache covers namespaces, its
// cache made by newCache (nil: controller-runtime's on the API server),
// without waiting for the cache to sync (a namespace it may not list never
// does); its watch errors are recorded.
func startUnsyncedManager(ctx context.Context, t *testing.T, cp *controlPlane, name, apiToken string, namespaces []string, newCache cache.NewCacheFunc) *errorLog {
	t.Helper()
	errs := &errorLog{}
	defaults := map[string]cache.Config{}
	for _, ns := range namespaces {
		defaults[ns] = cache.Config{}
	}
	mgr, err := ctrl.NewManager(apiConfigFor(cp, apiToken), ctrl.Options{
		Scheme:   scheme.Scheme,
		Metrics:  metricsserver.Options{BindAddress: "0"},
		Cache:    cache.Options{DefaultNamespaces: defaults, DefaultWatchErrorHandler: errs.record},
		NewCache: newCache,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named(name).For(&corev1.ConfigMap{}).Complete(&recorder{seen: map[string]bool{}}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		stop()
		<-done
	})
	return errs
}

// A controller-runtime manager whose cache names a namespace where its
// ServiceAccount has no Role is told, through kube-fanout, exactly what
// the API server tells the same manager: a 403 Forbidden whose message
// names the user, verb, resource and namespace, not that the type is not
// served.
func TestAManagerRefusedANamespaceSeesTheAPIServersForbidden(t *testing.T) {
	cp := startControlPlane(t)
	fo, ca := startSecureFanout(t, cp)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, ns := range []string{"a", "team-c", "ops"} {
		createNamespace(t, cp, ns)
	}
	grant(t, cp, "a", "go-operator", "ops", "go-operator", "list", "watch", "get")
	apiToken, _ := serviceAccountToken(t, cp, "ops", "go-operator", "", "")
	fanoutToken, _ := serviceAccountToken(t, cp, "ops", "go-operator", audience, "")
	conn := fo.dial(t, ca, kubefanout.WithBearerToken(fanoutToken))
	namespaces := []string{"a", "team-c"}
	direct := startUnsyncedManager(ctx, t, cp, "forbidden-direct", apiToken, namespaces, nil)
	viaFanout := startUnsyncedManager(ctx, t, cp, "forbidden-fanout", apiToken, namespaces, crcache.NewCacheFunc(conn))
	var theirs, ours string
	waitFor(t, "both managers told they may not list configmaps in team-c", func() bool {
		var okTheirs, okOurs bool
		theirs, okTheirs = direct.forbiddenText()
		ours, okOurs = viaFanout.forbiddenText()
		return okTheirs && okOurs
	})
	want := `configmaps is forbidden: User "system:serviceaccount:ops:go-operator" cannot list resource "configmaps" in API group "" in the namespace "team-c"`
	if theirs != want {
		t.Fatalf("the API server said %q, expected %q", theirs, want)
	}
	if ours != theirs {
		t.Fatalf("through kube-fanout the manager read %q, from the API server %q", ours, theirs)
	}
}

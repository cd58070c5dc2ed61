package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubefanout "github.com/kube-fanout/kube-fanout/client/go"
	"github.com/kube-fanout/kube-fanout/client/go/crcache"
)

// recorder is a reconciler that notes the requests it is given.
type recorder struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (r *recorder) Reconcile(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen[req.String()] = true
	return reconcile.Result{}, nil
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.seen))
}

// scopedOptions is the operator's cache: namespaces a and b, and in b only
// the ConfigMaps labelled selected=true. (A fresh value each time:
// controller-runtime writes its defaults into the maps.)
func scopedOptions(errs *errorLog) cache.Options {
	return cache.Options{
		DefaultNamespaces: map[string]cache.Config{
			"a": {},
			"b": {LabelSelector: labels.SelectorFromSet(labels.Set{"selected": "true"})},
		},
		DefaultWatchErrorHandler: errs.record,
	}
}

// startScopedManager runs a manager with the operator's credentials and
// cache options, its cache made by newCache (nil: controller-runtime's on
// the API server), reconciling ConfigMaps into a recorder.
func startScopedManager(ctx context.Context, t *testing.T, cp *controlPlane, name, apiToken string, newCache cache.NewCacheFunc) (manager.Manager, *recorder, *errorLog) {
	t.Helper()
	errs := &errorLog{}
	mgr, err := ctrl.NewManager(apiConfigFor(cp, apiToken), ctrl.Options{
		Scheme:   scheme.Scheme,
		Metrics:  metricsserver.Options{BindAddress: "0"},
		Cache:    scopedOptions(errs),
		NewCache: newCache,
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{seen: map[string]bool{}}
	if err := ctrl.NewControllerManagedBy(mgr).Named(name).For(&corev1.ConfigMap{}).Complete(rec); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("%s manager: %v", name, err)
		}
	})
	syncCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		errs.mu.Lock()
		defer errs.mu.Unlock()
		t.Fatalf("%s manager's cache did not sync in 60s: %v", name, errs.errs)
	}
	return mgr, rec, errs
}

// cached is namespace/name@resourceVersion of every ConfigMap in the
// manager's cache, per namespace of the cache.
func cached(ctx context.Context, t *testing.T, mgr manager.Manager) []string {
	t.Helper()
	var out []string
	for _, ns := range []string{"a", "b"} {
		var list corev1.ConfigMapList
		if err := mgr.GetCache().List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, cm := range list.Items {
			out = append(out, fmt.Sprintf("%s/%s@%s", cm.Namespace, cm.Name, cm.ResourceVersion))
		}
	}
	slices.Sort(out)
	return out
}

// An operator whose ServiceAccount has Roles only in namespaces a and b,
// its cache restricted to a and b (and to labelled ConfigMaps in b), gets
// through kube-fanout the same reconcile requests and the same cache
// contents as the same manager on the API server, is never refused, and
// its informers are kube-fanout's subscribers, one per namespace.
func TestNamespaceScopedManagerMatchesTheAPIServer(t *testing.T) {
	cp := startControlPlane(t)
	fo, ca := startSecureFanout(t, cp)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, ns := range []string{"a", "b", "c", "operators"} {
		createNamespace(t, cp, ns)
	}
	for _, ns := range []string{"a", "b"} {
		grant(t, cp, ns, "operator", "operators", "operator", "list", "watch", "get")
	}
	create := func(ns, name string, selected bool) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if selected {
			cm.Labels = map[string]string{"selected": "true"}
		}
		if _, err := cp.client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("a", "a-1", false)
	create("a", "a-2", true)
	create("b", "b-1", true)
	create("b", "b-2", false)
	create("c", "c-1", true)

	apiToken, _ := serviceAccountToken(t, cp, "operators", "operator", "", "")
	fanoutToken, _ := serviceAccountToken(t, cp, "operators", "operator", audience, "")
	conn := fo.dial(t, ca, kubefanout.WithBearerToken(fanoutToken))
	direct, directSeen, directErrs := startScopedManager(ctx, t, cp, "direct", apiToken, nil)
	viaFanout, fanoutSeen, fanoutErrs := startScopedManager(ctx, t, cp, "fanout", apiToken, crcache.NewCacheFunc(conn))

	create("a", "a-3", false)
	create("b", "b-3", true)
	create("b", "b-4", false)
	create("c", "c-2", true)
	want := []string{"a/a-1", "a/a-2", "a/a-3", "b/b-1", "b/b-3"}
	waitFor(t, "both managers reconciled every object in their scope", func() bool {
		return slices.Equal(directSeen.requests(), want) && slices.Equal(fanoutSeen.requests(), want)
	})
	waitFor(t, "both caches hold the same objects at the same versions", func() bool {
		return slices.Equal(cached(ctx, t, direct), cached(ctx, t, viaFanout)) && len(cached(ctx, t, viaFanout)) == len(want)
	})
	// Nothing else arrives later either: the API server's manager has seen
	// every event by now, and so must kube-fanout's.
	if got := fanoutSeen.requests(); !slices.Equal(got, directSeen.requests()) {
		t.Fatalf("reconcile requests through kube-fanout %q, on the API server %q", got, directSeen.requests())
	}
	for name, errs := range map[string]*errorLog{"kube-fanout": fanoutErrs, "API server": directErrs} {
		errs.mu.Lock()
		if len(errs.errs) > 0 {
			t.Errorf("the manager on the %s had watch errors: %v", name, errs.errs)
		}
		errs.mu.Unlock()
	}
	if n := subscribers(t, fo); n != 2 {
		t.Fatalf("kube-fanout has %d subscribers, want the manager's two namespaced informers", n)
	}
}

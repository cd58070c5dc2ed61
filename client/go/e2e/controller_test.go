package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kube-fanout/kube-fanout/client/go/crcache"
	"github.com/kube-fanout/kube-fanout/client/go/examples/configmapcontroller"
)

// The example controller-runtime controller reconciles through kube-fanout:
// its manager's ConfigMap informer is kube-fanout's subscriber (and the
// API server's watchers do not grow), and an object created on the API
// server gets the controller's annotation, also after kube-fanout restarts.
func TestExampleControllerReconcilesThroughKubeFanout(t *testing.T) {
	cp := startControlPlane(t)
	fo := startFanout(t, cp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	mgr, err := ctrl.NewManager(cp.config, ctrl.Options{
		Scheme:   scheme.Scheme,
		Metrics:  metricsserver.Options{BindAddress: "0"},
		NewCache: crcache.NewCacheFunc(fo.conn),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&configmapcontroller.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the manager's cache did not sync")
	}
	if n := subscribers(t, fo); n != 1 {
		t.Fatalf("kube-fanout has %d subscribers after the manager synced, want its ConfigMap informer", n)
	}

	create := func(name string, data map[string]string) {
		t.Helper()
		_, err := cp.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{configmapcontroller.Label: "true"}},
			Data:       data,
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	create("first", map[string]string{"a": "1", "b": "2"})
	waitAnnotation(t, cp, "first", "2")

	fo.restart(syscall.SIGKILL)
	create("second", map[string]string{"a": "1", "b": "2", "c": "3"})
	waitAnnotation(t, cp, "second", "3")
	if n := subscribers(t, fo); n != 1 {
		t.Fatalf("kube-fanout has %d subscribers after its restart, want the manager's informer back", n)
	}
}

func subscribers(t *testing.T, fo *fanout) uint64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resources, err := fo.resources()
		if err == nil && len(resources) == 1 && resources[0].GetSubscribers() > 0 || time.Now().After(deadline) {
			if err != nil {
				t.Fatal(err)
			}
			return resources[0].GetSubscribers()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitAnnotation(t *testing.T, cp *controlPlane, name, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		cm, err := cp.client.CoreV1().ConfigMaps("default").Get(context.Background(), name, metav1.GetOptions{})
		var got string
		if err == nil {
			got = cm.Annotations[configmapcontroller.Annotation]
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ConfigMap %s: annotation %q, not %q, after 60s (%v)", name, got, want, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

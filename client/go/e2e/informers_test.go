package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	kubefanout "github.com/kube-fanout/kube-fanout/client/go"
)

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// Two client-go informers on the same ConfigMaps, one fed by the API server
// and one by kube-fanout (with and without a label selector, whose matches
// the writers flip), through writes, a kube-fanout restart and an API
// server restart (writes meanwhile going through a second API server):
// after every quiet point both stores equal the API server's state, and
// each informer's handlers saw a sequence consistent with its store.
func TestInformersFedByKubeFanoutAgreeWithTheAPIServer(t *testing.T) {
	cp := startControlPlane(t)
	fo := startFanout(t, cp)
	extra := cp.extraAPIServer()
	for _, watchList := range []bool{false, true} {
		t.Run(fmt.Sprintf("WatchListClient=%v", watchList), func(t *testing.T) {
			clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, watchList)
			ns := fmt.Sprintf("informers-%v", watchList)
			if _, err := cp.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var pairs []*pair
			for _, selector := range []string{"", "color=red"} {
				pairs = append(pairs, startPair(ctx, t, cp.client, fo, ns, selector))
			}
			quiet := func(phase string) {
				t.Helper()
				for _, p := range pairs {
					p.waitAgree(t, cp.client, phase)
				}
			}
			w := &writers{ns: ns}
			w.run(t, cp.client, 3*time.Second)
			quiet("after writes")

			// kube-fanout killed, writes while it is down, then restarted.
			fo.proc.stop(syscall.SIGKILL)
			w.run(t, cp.client, 2*time.Second)
			fo.start()
			w.run(t, cp.client, 2*time.Second)
			quiet("after a kube-fanout restart (SIGKILL)")

			// A graceful shutdown ends watches with UNAVAILABLE: resumed.
			fo.restart(syscall.SIGTERM)
			w.run(t, cp.client, 2*time.Second)
			quiet("after a kube-fanout restart (SIGTERM)")

			// The API server killed; writes through the second one; restarted.
			// The restarted API server no longer holds kube-fanout's watch
			// position (410), so kube-fanout relists and sends what changed
			// meanwhile as a re-sync unit, which ends the client's watch.
			resyncs := make([]int64, len(pairs))
			for i, p := range pairs {
				resyncs[i] = p.lw.resyncs.Load()
			}
			cp.killAPIServer()
			w.run(t, extra, 3*time.Second)
			cp.restartAPIServer()
			w.run(t, cp.client, 2*time.Second)
			quiet("after an API server restart")
			for i, p := range pairs {
				if p.lw.resyncs.Load() == resyncs[i] {
					t.Fatalf("selector %q: no re-sync unit ended the kube-fanout informer's watch after the API server restart (kube-fanout: %s)", p.selector, describeFanout(fo))
				}
			}

			for _, p := range pairs {
				p.checkMode(t, watchList)
			}
			t.Logf("writes: %d ok, %d refused; kube-fanout: %s", w.ok.Load(), w.refused.Load(), describeFanout(fo))
		})
	}
}

func describeFanout(fo *fanout) string {
	resources, err := fo.resources()
	if err != nil || len(resources) == 0 {
		return fmt.Sprintf("unreachable: %v", err)
	}
	r := resources[0]
	return fmt.Sprintf("rv %s, relists %d, lists %d, watch-lists %d, watches %d", r.GetResourceVersion(), r.GetRelists(), r.GetLists(), r.GetWatchLists(), r.GetWatches())
}

// pair is an informer fed by the API server and one fed by kube-fanout,
// with the same selector.
type pair struct {
	ns, selector string
	direct       *informer
	fanout       *informer
	lw           *countingLW
}

type informer struct {
	name     string
	informer cache.SharedIndexInformer
	tracker  *tracker
}

func startPair(ctx context.Context, t *testing.T, client kubernetes.Interface, fo *fanout, ns, selector string) *pair {
	t.Helper()
	tweak := func(o *metav1.ListOptions) { o.LabelSelector = selector }
	direct := cache.NewFilteredListWatchFromClient(client.CoreV1().RESTClient(), "configmaps", ns, tweak)
	lw := &countingLW{inner: kubefanout.NewListWatch(fo.conn, configMaps, ns, tweak)}
	p := &pair{ns: ns, selector: selector, lw: lw,
		direct: newInformer(ctx, t, "api-server["+selector+"]", direct),
		fanout: newInformer(ctx, t, "kube-fanout["+selector+"]", lw),
	}
	for _, i := range []*informer{p.direct, p.fanout} {
		if !cache.WaitForCacheSync(ctx.Done(), i.informer.HasSynced) {
			t.Fatalf("%s did not sync", i.name)
		}
	}
	return p
}

func newInformer(ctx context.Context, t *testing.T, name string, lw cache.ListerWatcher) *informer {
	t.Helper()
	i := &informer{name: name, tracker: &tracker{seen: map[string]string{}}}
	i.informer = cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	if _, err := i.informer.AddEventHandler(i.tracker); err != nil {
		t.Fatal(err)
	}
	go i.informer.RunWithContext(ctx)
	return i
}

// state is key → resourceVersion.
type state map[string]string

func (i *informer) store() state {
	s := state{}
	for _, obj := range i.informer.GetStore().List() {
		cm := obj.(*corev1.ConfigMap)
		s[cm.Namespace+"/"+cm.Name] = cm.ResourceVersion
	}
	return s
}

// waitAgree waits (up to 60 s) until both stores equal the API server's
// state and each tracker's view equals its store; it fails as soon as a
// handler saw an inconsistent event.
func (p *pair) waitAgree(t *testing.T, client kubernetes.Interface, phase string) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	for {
		for _, i := range []*informer{p.direct, p.fanout} {
			if v := i.tracker.violations(); len(v) > 0 {
				t.Fatalf("%s: %s handlers saw inconsistent events:\n%s", phase, i.name, strings.Join(v, "\n"))
			}
		}
		want, err := serverState(client, p.ns, p.selector)
		var diffs []string
		if err != nil {
			diffs = append(diffs, err.Error())
		}
		for _, i := range []*informer{p.direct, p.fanout} {
			if got := i.store(); !maps.Equal(got, want) {
				diffs = append(diffs, fmt.Sprintf("%s store %s", i.name, diff(got, want)))
			}
			if got := i.tracker.view(); !maps.Equal(got, i.store()) {
				diffs = append(diffs, fmt.Sprintf("%s handlers %s", i.name, diff(got, i.store())))
			}
		}
		if len(diffs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s, selector %q: not equal after 60s:\n%s", phase, p.selector, strings.Join(diffs, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%s, selector %q: both stores hold the API server's %d objects (%v after the writes)", phase, p.selector, len(p.direct.store()), time.Since(start).Round(time.Millisecond))
}

// checkMode checks the kube-fanout informer synced the way the gate says:
// watch-lists with WatchListClient on, LISTs with it off.
func (p *pair) checkMode(t *testing.T, watchList bool) {
	t.Helper()
	lists, watchLists := p.lw.lists.Load(), p.lw.watchLists.Load()
	t.Logf("selector %q: the kube-fanout informer's watch ended %d times for a re-sync unit", p.selector, p.lw.resyncs.Load())
	if watchList && (watchLists == 0 || lists != 0) || !watchList && (lists == 0 || watchLists != 0) {
		t.Fatalf("WatchListClient=%v but the kube-fanout informer made %d lists and %d watch-lists", watchList, lists, watchLists)
	}
	t.Logf("selector %q: the kube-fanout informer made %d lists and %d watch-lists", p.selector, lists, watchLists)
}

func serverState(client kubernetes.Interface, ns, selector string) (state, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	s := state{}
	for _, cm := range list.Items {
		s[cm.Namespace+"/"+cm.Name] = cm.ResourceVersion
	}
	return s, nil
}

func diff(got, want state) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			out = append(out, fmt.Sprintf("%s: %q, want %q", k, got[k], want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s: %q, want none", k, got[k]))
		}
	}
	return strings.Join(out, "; ")
}

// tracker follows an informer's handler calls and records every call that
// does not fit what it saw before: an add of an object it holds, an update
// or delete of one it does not, an update from another version than it
// holds.
type tracker struct {
	mu    sync.Mutex
	seen  state
	wrong []string
}

func key(obj any) (string, string) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	cm := obj.(*corev1.ConfigMap)
	return cm.Namespace + "/" + cm.Name, cm.ResourceVersion
}

func (tr *tracker) OnAdd(obj any, _ bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	k, rv := key(obj)
	if old, ok := tr.seen[k]; ok {
		tr.wrong = append(tr.wrong, fmt.Sprintf("add of %s@%s, held at %s", k, rv, old))
	}
	tr.seen[k] = rv
}

func (tr *tracker) OnUpdate(oldObj, newObj any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	k, rv := key(newObj)
	_, oldRV := key(oldObj)
	if held, ok := tr.seen[k]; !ok {
		tr.wrong = append(tr.wrong, fmt.Sprintf("update of unknown %s to %s", k, rv))
	} else if held != oldRV {
		tr.wrong = append(tr.wrong, fmt.Sprintf("update of %s from %s, held at %s", k, oldRV, held))
	}
	tr.seen[k] = rv
}

func (tr *tracker) OnDelete(obj any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	k, rv := key(obj)
	if _, ok := tr.seen[k]; !ok {
		tr.wrong = append(tr.wrong, fmt.Sprintf("delete of unknown %s@%s", k, rv))
	}
	delete(tr.seen, k)
}

func (tr *tracker) view() state {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return maps.Clone(tr.seen)
}

func (tr *tracker) violations() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.wrong)
}

// countingLW counts how the reflector syncs (LISTs or watch-lists) and the
// watches the client ended because a re-sync unit arrived.
type countingLW struct {
	inner                      *kubefanout.ListWatch
	lists, watchLists, resyncs atomic.Int64
}

func (c *countingLW) List(o metav1.ListOptions) (runtime.Object, error) {
	return c.ListWithContext(context.Background(), o)
}

func (c *countingLW) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return c.WatchWithContext(context.Background(), o)
}

func (c *countingLW) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	c.lists.Add(1)
	return c.inner.ListWithContext(ctx, o)
}

func (c *countingLW) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	if o.SendInitialEvents != nil && *o.SendInitialEvents {
		c.watchLists.Add(1)
	}
	w, err := c.inner.WatchWithContext(ctx, o)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		if st, ok := ev.Object.(*metav1.Status); ok && strings.Contains(st.Message, "re-sync unit") {
			c.resyncs.Add(1)
		}
		return ev, true
	}), nil
}

// writers create, patch (data and the color label) and delete ConfigMaps
// from a pool of names, from three goroutines.
type writers struct {
	ns          string
	ok, refused atomic.Int64
}

func (w *writers) run(t *testing.T, client kubernetes.Interface, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for ctx.Err() == nil {
				err := w.once(ctx, client)
				switch {
				case err == nil:
					w.ok.Add(1)
				case apierrors.IsNotFound(err), apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
					w.refused.Add(1)
				case ctx.Err() != nil:
					// The phase ended during the call.
					w.refused.Add(1)
				default:
					t.Errorf("write: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func (w *writers) once(ctx context.Context, client kubernetes.Interface) error {
	cms := client.CoreV1().ConfigMaps(w.ns)
	name := fmt.Sprintf("cm-%02d", rand.IntN(20))
	color := []string{"red", "blue"}[rand.IntN(2)]
	switch rand.IntN(4) {
	case 0:
		_, err := cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"color": color}},
			Data:       map[string]string{"v": "0"},
		}, metav1.CreateOptions{})
		return err
	case 1:
		patch := fmt.Sprintf(`{"data":{"v":"%d"}}`, rand.IntN(1000))
		_, err := cms.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	case 2:
		patch := fmt.Sprintf(`{"metadata":{"labels":{"color":%q}}}`, color)
		_, err := cms.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	default:
		return cms.Delete(ctx, name, metav1.DeleteOptions{})
	}
}

package kubefanout

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/tools/cache"

	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

// handlerLog records an informer's handler calls as "add a@10" lines.
type handlerLog struct {
	mu    sync.Mutex
	lines []string
}

func (h *handlerLog) record(verb string, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	cm := obj.(*corev1.ConfigMap)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, verb+" "+cm.Name+"@"+cm.ResourceVersion)
}

// phases is the log split after the first n lines, each part sorted: the
// order within one Replace is the store's map order.
func (h *handlerLog) phases(n int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.lines) < n {
		return strings.Join(h.lines, ", ")
	}
	first, rest := slices.Sorted(slices.Values(h.lines[:n])), slices.Sorted(slices.Values(h.lines[n:]))
	return strings.Join(first, ", ") + " | " + strings.Join(rest, ", ")
}

// An informer whose watch meets a re-sync unit relists (here: a new
// watch-list) and moves from the old state to the relisted one in one
// Replace: its handlers never see the unit's changes one by one.
func TestInformerAppliesAResyncUnitByRelisting(t *testing.T) {
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, true)
	f := &fakeServer{scripts: []watchScript{
		{events: []*pb.WatchEvent{
			{Type: pb.EventType_ADDED, ResourceVersion: "10", Object: configMap("a", "10")},
			{Type: pb.EventType_ADDED, ResourceVersion: "10", Object: configMap("b", "9")},
			{Type: pb.EventType_BOOKMARK, ResourceVersion: "10", Object: bookmark("10", initialEventsEnd)},
			// The unit at 20: a deleted, b modified, c added.
			{Type: pb.EventType_DELETED, ResourceVersion: "20", Object: configMap("a", "20"), Resync: true},
			{Type: pb.EventType_MODIFIED, ResourceVersion: "20", Object: configMap("b", "15"), Resync: true},
			{Type: pb.EventType_ADDED, ResourceVersion: "20", Object: configMap("c", "18"), Resync: true},
			{Type: pb.EventType_BOOKMARK, ResourceVersion: "20", Object: bookmark("20", ""), Resync: true},
		}},
		// The relist's snapshot is a little newer than the unit (b changed
		// again at 21), so what the handlers saw tells which was applied.
		{events: []*pb.WatchEvent{
			{Type: pb.EventType_ADDED, ResourceVersion: "21", Object: configMap("b", "21")},
			{Type: pb.EventType_ADDED, ResourceVersion: "21", Object: configMap("c", "18")},
			{Type: pb.EventType_BOOKMARK, ResourceVersion: "21", Object: bookmark("21", initialEventsEnd)},
		}},
	}}
	lw := NewListWatch(dial(t, []string{serve(t, f, nil)}), configMaps, "ns", nil)
	informer := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	log := &handlerLog{}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { log.record("add", obj) },
		UpdateFunc: func(_, obj any) { log.record("update", obj) },
		DeleteFunc: func(obj any) { log.record("delete", obj) },
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go informer.RunWithContext(ctx)
	want := "add a@10, add b@9 | add c@18, delete a@10, update b@21"
	deadline := time.Now().Add(10 * time.Second)
	for log.phases(2) != want {
		if time.Now().After(deadline) {
			t.Fatalf("handlers saw %q, want %q", log.phases(2), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) != 2 || !f.requests[1].GetSendInitialEvents() || f.requests[1].GetResourceVersion() != "10" {
		t.Fatalf("watch requests %v, want a second watch-list from 10", f.requests)
	}
}

// An informer whose only server restarts again and again watches again
// from where it was within moments of each restart: the watch ends cleanly
// when the connection breaks and the next one waits for the server, so the
// reflector's backoff (0.8 s doubling to 30-60 s, kept for two minutes) is
// never stepped. Backing off instead, the third restart already costs
// 3.2-6.4 s.
func TestInformerResumesPromptlyAfterRestarts(t *testing.T) {
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, true)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	srv := startServer(t, &fakeServer{scripts: []watchScript{{events: []*pb.WatchEvent{
		{Type: pb.EventType_ADDED, ResourceVersion: "10", Object: configMap("a", "10")},
		{Type: pb.EventType_BOOKMARK, ResourceVersion: "10", Object: bookmark("10", initialEventsEnd)},
	}}}}, nil, lis)
	informer := cache.NewSharedIndexInformer(NewListWatch(dial(t, []string{addr}), configMaps, "ns", nil), &corev1.ConfigMap{}, 0, cache.Indexers{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	// A watch that ends within a second without events is one the
	// reflector takes as broken and relists after, so each one lives longer.
	const lives, down, bound = 1100 * time.Millisecond, 500 * time.Millisecond, 3 * time.Second
	for i := range 4 {
		time.Sleep(lives)
		srv.Stop()
		time.Sleep(down) // the server is down for a while, as a restarting pod is
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		restarted := &fakeServer{}
		srv = startServer(t, restarted, nil, lis)
		back := time.Now()
		for {
			restarted.mu.Lock()
			requests := slices.Clone(restarted.requests)
			restarted.mu.Unlock()
			if len(requests) > 0 {
				if rv := requests[0].GetResourceVersion(); rv != "10" || requests[0].GetSendInitialEvents() {
					t.Fatalf("restart %d: the informer's watch asked %v, want a resume from 10", i+1, requests[0])
				}
				t.Logf("restart %d: watching again %v after the server was back", i+1, time.Since(back).Round(time.Millisecond))
				break
			}
			if time.Since(back) > bound {
				t.Fatalf("restart %d: no watch %v after the server was back", i+1, bound)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

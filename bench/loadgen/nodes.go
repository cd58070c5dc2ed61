package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

// The node-scoped case (issue 12): pod pod-<i> sits on node node-<i>, and
// watcher i watches pods with fieldSelector=spec.nodeName=node-<i>, as a
// node agent (kubelet, a DaemonSet pod) does. No node objects, scheduler or
// kubelet exist: spec.nodeName is set at creation and nothing runs the pods.
func podName(i int) string  { return fmt.Sprintf("pod-%05d", i) }
func nodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

// setupPods creates the namespace and pods pod-0..pods-1 (those missing),
// each bound to its own node.
func setupPods(args []string) error {
	fs := flag.NewFlagSet("pods", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server")
	ns := fs.String("namespace", "nodes", "namespace")
	pods := fs.Int("pods", 5000, "pods, one per node")
	fs.Parse(args)
	ctx := context.Background()
	cs, err := clientsetWithNamespace(ctx, *kubeconfig, *ns)
	if err != nil {
		return err
	}
	return openAll(*pods, 16, func(i int) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: podName(i)},
			Spec: corev1.PodSpec{
				NodeName:   nodeName(i),
				Containers: []corev1.Container{{Name: "agent", Image: "registry.invalid/agent:1"}},
			},
		}
		_, err := cs.CoreV1().Pods(*ns).Create(ctx, pod, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// podWriter patches the stamp annotation of pod (k mod pods): the writes
// go round the nodes, each to one node's watcher.
func podWriter(cs *kubernetes.Clientset, ns string, pods int) *writer {
	return &writer{write: func(ctx context.Context, k int) error {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"stamp":%q}}}`, stampValue(time.Now().UnixNano()))
		_, err := cs.CoreV1().Pods(ns).Patch(ctx, podName(k%pods), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}}
}

// nodesResult is one node-scoped measurement.
type nodesResult struct {
	Case        string                 `json:"case"`
	Target      string                 `json:"target"`
	Watchers    int                    `json:"watchers"`
	Connections int                    `json:"connections"`
	Writes      int                    `json:"writes"`
	Expected    int                    `json:"expected"`
	Delivered   int64                  `json:"delivered"`
	OpenS       float64                `json:"open_s"`
	WallS       float64                `json:"wall_s"`
	P50Ms       float64                `json:"p50_ms"`
	P99Ms       float64                `json:"p99_ms"`
	MaxMs       float64                `json:"max_ms"`
	Procs       map[string]*procWindow `json:"procs"`
}

// nodes runs the node-scoped case against one target: apiserver-proto,
// fanout, or none (the writes alone, the API server's baseline).
func nodes(args []string) (*nodesResult, error) {
	fs := flag.NewFlagSet("nodes", flag.ExitOnError)
	servers := addServerFlags(fs)
	target := fs.String("target", "fanout", "apiserver-proto, fanout, or none (writes only)")
	ns := fs.String("namespace", "nodes", "namespace of the pods")
	watchers := fs.Int("watchers", 500, "node watchers, one per node")
	conns := fs.Int("connections", 500, "connections the watchers share, round robin")
	rate := fs.Float64("rate", 100, "writes per second")
	seconds := fs.Float64("seconds", 20, "length of the write window")
	drain := fs.Duration("drain", 60*time.Second, "how long deliveries may trail the last write")
	fs.Parse(args)
	writes := int(*rate * *seconds)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, err := restConfig(*servers.kubeconfig)
	if err != nil {
		return nil, err
	}
	writerClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	w := podWriter(writerClient, *ns, *watchers)

	n := *watchers
	if *target == "none" {
		n = 0
	}
	// The connections first, then the watches spread over them.
	apiClients := make([]*kubernetes.Clientset, 0, *conns)
	channels := make([]*grpc.ClientConn, 0, *conns)
	var dialer *fanoutDialer
	for range min(*conns, n) {
		switch *target {
		case "apiserver-proto":
			cs, err := ownClient(cfg, protoType)
			if err != nil {
				return nil, err
			}
			apiClients = append(apiClients, cs)
		case "fanout":
			if dialer == nil {
				if dialer, err = newFanoutDialer(*servers.fanoutAddr, *servers.fanoutCA); err != nil {
					return nil, err
				}
			}
			ch, err := dialer.channel()
			if err != nil {
				return nil, err
			}
			defer ch.Close()
			channels = append(channels, ch)
		default:
			return nil, fmt.Errorf("unknown target %q", *target)
		}
	}
	opened := time.Now()
	streams := make([]events, n)
	err = openAll(n, 32, func(i int) error {
		selector := "spec.nodeName=" + nodeName(i)
		var err error
		if *target == "fanout" {
			streams[i], err = watchOn(ctx, channels[i%len(channels)], &pb.WatchRequest{
				Resource: &pb.ResourceRef{Version: "v1", Resource: "pods"}, Namespace: *ns, FieldSelector: selector,
			})
			return err
		}
		cs := apiClients[i%len(apiClients)]
		// From now: the watch starts at the list's RV.
		list, err := cs.CoreV1().Pods(*ns).List(ctx, metav1.ListOptions{FieldSelector: selector, Limit: 1})
		if err != nil {
			return err
		}
		streams[i], err = watchAPI(ctx, cs, protoType, *ns, "pods", map[string]string{
			"resourceVersion": list.ResourceVersion, "fieldSelector": selector,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening watchers: %w", err)
	}
	openS := time.Since(opened).Seconds()

	var windowStart atomic.Int64
	windowStart.Store(1<<63 - 1)
	states := make([]*watcherState, n)
	var streamErr atomic.Pointer[error]
	for i, s := range streams {
		st := &watcherState{}
		states[i] = st
		own := []byte(`"` + podName(i))
		if *target == "apiserver-proto" {
			// Protobuf strings are length-prefixed, not quoted.
			own = []byte(podName(i))
		}
		go func() {
			for {
				b, err := s.next()
				if err != nil {
					if ctx.Err() == nil {
						streamErr.CompareAndSwap(nil, &err)
					}
					return
				}
				sent, ok := stampOf(b)
				if !ok || sent < windowStart.Load() {
					continue
				}
				now := time.Now().UnixNano()
				if !bytes.Contains(b, own) {
					err := fmt.Errorf("watcher of %s got another node's pod", nodeName(i))
					streamErr.CompareAndSwap(nil, &err)
					return
				}
				st.latencies = append(st.latencies, now-sent)
				st.delivered.Add(1)
			}
		}()
	}

	window, err := processes(servers.pids).start()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	windowStart.Store(start.UnixNano())
	if err := w.run(ctx, writes, *rate); err != nil {
		return nil, fmt.Errorf("writer: %w", err)
	}
	// Each write is one delivery, to its node's watcher only: watcher i
	// gets the writes k with k mod watchers = i.
	expected := 0
	if n > 0 {
		expected = writes
	}
	complete := func() bool {
		for i, st := range states {
			if st.delivered.Load() < int64(writes/n+boolInt(i < writes%n)) {
				return false
			}
		}
		return true
	}
	waitErr := waitFor(*drain, complete, &streamErr)
	wall := time.Since(start)
	if err := processes(servers.pids).end(window); err != nil {
		return nil, err
	}
	cancel()
	for _, s := range streams {
		s.close()
	}
	var delivered int64
	var all []int64
	for _, st := range states {
		delivered += st.delivered.Load()
		all = append(all, st.latencies...)
	}
	result := &nodesResult{
		Case: "nodes", Target: *target, Watchers: n, Connections: max(len(apiClients), len(channels)),
		Writes: writes, Expected: expected, Delivered: delivered, OpenS: openS, WallS: wall.Seconds(), Procs: window,
	}
	if waitErr != nil {
		return result, fmt.Errorf("%d of %d deliveries after %v: %w", delivered, expected, wall, waitErr)
	}
	if delivered != int64(expected) {
		return result, fmt.Errorf("%d deliveries, expected %d", delivered, expected)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	if len(all) > 0 {
		ms := func(q float64) float64 {
			return float64(all[min(len(all)-1, int(q*float64(len(all))))]) / 1e6
		}
		result.P50Ms, result.P99Ms, result.MaxMs = ms(0.5), ms(0.99), float64(all[len(all)-1])/1e6
	}
	return result, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

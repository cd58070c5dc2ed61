package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

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
		_, err := cs.CoreV1().Pods(*ns).Create(ctx, agentPod(i), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// agentPod is pod i as a node agent's DaemonSet makes it (a log or CNI
// agent: labels, an owner, env from the downward API, probes, resources,
// host mounts, tolerations), so that an event is as large as a real one:
// 6,407 bytes of JSON once the API server has defaulted it and added its
// managedFields (2,980 of them), 3.4 KiB as kube-fanout keeps it. No
// status is written: nothing runs the pods.
func agentPod(i int) *corev1.Pod {
	yes, no := true, false
	hostPath := func(name, path string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
	}
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	probe := func(path string, port int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port)}},
			InitialDelaySeconds: 10, PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 3,
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: podName(i),
			Labels: map[string]string{
				"app.kubernetes.io/name": "node-agent", "app.kubernetes.io/instance": "node-agent",
				"app.kubernetes.io/component": "agent", "controller-revision-hash": "7d9f8c6b5d",
				"pod-template-generation": "3",
			},
			Annotations: map[string]string{
				"checksum/config":                         "5f0c2d8e6b1a9f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e",
				"prometheus.io/scrape":                    "true",
				"prometheus.io/port":                      "9102",
				"kubectl.kubernetes.io/default-container": "agent",
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "DaemonSet", Name: "node-agent",
				UID: "3b0f6a52-9c1e-4d2b-8f7a-6e5d4c3b2a10", Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Spec: corev1.PodSpec{
			NodeName:           nodeName(i),
			ServiceAccountName: "node-agent",
			Containers: []corev1.Container{{
				Name:  "agent",
				Image: "registry.invalid/node-agent/agent:v1.32.4@sha256:4f8c2e6b1a9d3f7e5c0b8a6d4f2e1c9b7a5d3f1e0c8b6a4d2f0e9c7b5a3d1f0e",
				Args:  []string{"--config=/etc/agent/config.yaml", "--node-name=$(NODE_NAME)", "--log-level=info", "--metrics-addr=:9102"},
				Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9102, Protocol: corev1.ProtocolTCP}},
				Env: []corev1.EnvVar{
					fieldEnv("NODE_NAME", "spec.nodeName"), fieldEnv("POD_NAME", "metadata.name"),
					fieldEnv("POD_NAMESPACE", "metadata.namespace"), fieldEnv("HOST_IP", "status.hostIP"),
					{Name: "GOMEMLIMIT", Value: "180MiB"},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("200Mi")},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "config", MountPath: "/etc/agent", ReadOnly: true},
					{Name: "varlog", MountPath: "/var/log", ReadOnly: true},
					{Name: "containers", MountPath: "/var/lib/containers", ReadOnly: true},
					{Name: "run", MountPath: "/run/agent"},
				},
				LivenessProbe:  probe("/healthz", 9102),
				ReadinessProbe: probe("/readyz", 9102),
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"DAC_READ_SEARCH"}},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "node-agent"}}}},
				hostPath("varlog", "/var/log"), hostPath("containers", "/var/lib/containers"), hostPath("run", "/run/agent"),
			},
			Tolerations: []corev1.Toleration{
				{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			},
		},
	}
}

// podWriter patches the stamp annotation of pod pod(k) for write k.
func podWriter(cs *kubernetes.Clientset, ns string, pod func(k int) int) *writer {
	return &writer{write: func(ctx context.Context, k int) error {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"stamp":%q}}}`, stampValue(time.Now().UnixNano()))
		_, err := cs.CoreV1().Pods(ns).Patch(ctx, podName(pod(k)), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}}
}

// nodesResult is one node-scoped measurement: every target's watchers open
// side by side, and the write windows in turn.
type nodesResult struct {
	Case        string                  `json:"case"`
	Watchers    int                     `json:"watchers"`
	Connections int                     `json:"connections"`
	Spare       int                     `json:"spare"`
	Targets     map[string]*nodesTarget `json:"targets"`
	Windows     []*nodesWindow          `json:"windows"`
}

// nodesTarget is what one server's watchers received, over every window.
type nodesTarget struct {
	Expected  int64   `json:"expected"`
	Delivered int64   `json:"delivered"`
	OpenS     float64 `json:"open_s"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
}

// nodesWindow is one write window: to the watched pods ("on": each write
// one delivery per target) or to the spare pods no watcher watches ("off":
// the same writes, nothing to deliver), and what each process spent in it.
type nodesWindow struct {
	On        bool                   `json:"on"`
	Placement placement              `json:"placement"`
	Writes    int                    `json:"writes"`
	WallS     float64                `json:"wall_s"`
	Procs     map[string]*procWindow `json:"procs"`
	// Perf is each process's samples in the window, with -perf-dir.
	Perf map[string]*perfCounts `json:"perf,omitempty"`
}

// nodes runs the node-scoped case: the watchers of every target
// (apiserver-proto, fanout) open at once, then -rounds rounds of two
// windows, "on" and "off", in the order on-off, off-on, on-off... so that a
// drift in the servers' cost cancels. A server's CPU per delivery is its
// CPU in the on windows less the off windows (the same writes, the same
// watchers open, only the deliveries differ), over the deliveries.
func nodes(args []string) (*nodesResult, error) {
	fs := flag.NewFlagSet("nodes", flag.ExitOnError)
	servers := addServerFlags(fs)
	targetList := fs.String("targets", "apiserver-proto,fanout", "servers whose watchers are open side by side: apiserver-proto, fanout")
	ns := fs.String("namespace", "nodes", "namespace of the pods")
	watchers := fs.Int("watchers", 500, "node watchers per target, one per node")
	conns := fs.Int("connections", 500, "connections each target's watchers share, round robin")
	spare := fs.Int("spare", 100, "pods after the watched ones, on nodes no watcher watches: the off windows write these")
	rate := fs.Float64("rate", 100, "writes per second")
	seconds := fs.Float64("seconds", 20, "length of each window")
	rounds := fs.Int("rounds", 5, "rounds of an on and an off window")
	staticWindow := fs.Bool("fanout-static-window", false, "kube-fanout's channels with fixed HTTP/2 windows, without grpc-go's BDP pings")
	drain := fs.Duration("drain", 60*time.Second, "how long deliveries may trail a window's last write")
	perfDir := fs.String("perf-dir", "", "record each window of the API server with `perf record -g` into this directory, and count its samples on its watch path")
	perfFreq := fs.Int("perf-freq", 999, "perf's sampling frequency, Hz")
	perfProcess := fs.String("perf-process", "kube-apiserver", "the process -perf-dir records: kube-apiserver (its watch path is counted) or kube-fanout (to read its profile with perf report)")
	placementList := fs.String("placements", "shared", "where the servers run, each round's windows once per placement: shared (every process on every CPU), isolated (kube-fanout alone on -fanout-cpu)")
	fanoutCPU := fs.Int("fanout-cpu", 0, "kube-fanout's CPU in the isolated placement")
	fs.Parse(args)
	placements, err := parsePlacements(*placementList)
	if err != nil {
		return nil, err
	}
	var recorder *perfRecorder
	if *perfDir != "" {
		// One process: the other's figure is its whole CPU on − off, which
		// sampling it would only inflate.
		pid, ok := servers.pids[*perfProcess]
		if !ok {
			return nil, fmt.Errorf("-perf-dir needs the pid of %s in -pids", *perfProcess)
		}
		callGraph := "fp"
		if *perfProcess == "kube-fanout" {
			callGraph = "dwarf,16384"
		}
		recorder = &perfRecorder{dir: *perfDir, freq: *perfFreq, pids: processes{*perfProcess: pid}, callGraph: callGraph}
	}
	perWindow := int(*rate * *seconds)
	n := *watchers
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
	result := &nodesResult{
		Case: "nodes", Watchers: n, Connections: *conns, Spare: *spare,
		Targets: map[string]*nodesTarget{},
	}

	var windowStart atomic.Int64
	windowStart.Store(1<<63 - 1)
	var streamErr atomic.Pointer[error]
	states := map[string][]*watcherState{}
	var streams []events
	defer func() {
		cancel()
		for _, s := range streams {
			s.close()
		}
	}()
	for _, target := range strings.Split(*targetList, ",") {
		opened := time.Now()
		ts, err := openNodeWatchers(ctx, cfg, servers, target, *ns, n, *conns, *staticWindow)
		if err != nil {
			return nil, fmt.Errorf("opening %s's watchers: %w", target, err)
		}
		streams = append(streams, ts...)
		result.Targets[target] = &nodesTarget{OpenS: time.Since(opened).Seconds()}
		states[target] = readNodeWatchers(ctx, target, ts, &windowStart, &streamErr)
	}

	// Watcher i gets the on writes k with k mod n = i; off writes go to the
	// spare pods n, n+1, ... round the spare set.
	var onWrites, offWrites int
	complete := func() bool {
		for _, sts := range states {
			for i, st := range sts {
				if st.delivered.Load() < int64(onWrites/n+boolInt(i < onWrites%n)) {
					return false
				}
			}
		}
		return true
	}
	on := podWriter(writerClient, *ns, func(k int) int { return k % n })
	off := podWriter(writerClient, *ns, func(k int) int { return n + k%*spare })
	windowStart.Store(time.Now().UnixNano())
	var failed error
	var recordings []*perfRun
	// Each round runs its pair of windows once per placement, the
	// placements in turn and their order reversed every other round, so
	// that a drift cancels between placements as between on and off.
	type slot struct {
		placement placement
		on        bool
	}
	var slots []slot
	for r := range *rounds {
		order := placements
		if r%2 == 1 {
			order = reversed(placements)
		}
		for _, p := range order {
			for _, isOn := range [2]bool{r%2 == 0, r%2 == 1} {
				slots = append(slots, slot{p, isOn})
			}
		}
	}
	var placed placement
	for _, sl := range slots {
		if sl.placement != placed {
			if err := sl.placement.apply(processes(servers.pids), *fanoutCPU); err != nil {
				return nil, err
			}
			placed = sl.placement
		}
		var recording *perfRun
		if recorder != nil {
			if recording, err = recorder.start(len(result.Windows), sl.on); err != nil {
				return nil, err
			}
		}
		procs, err := processes(servers.pids).start()
		if err != nil {
			return nil, err
		}
		start := time.Now()
		w, base := off, offWrites
		if sl.on {
			w, base = on, onWrites
		}
		if err := w.run(ctx, base, perWindow, *rate); err != nil {
			return nil, fmt.Errorf("writer: %w", err)
		}
		if sl.on {
			onWrites += perWindow
			// The window ends once every delivery it owes has arrived.
			if err := waitFor(*drain, complete, &streamErr); err != nil {
				failed = fmt.Errorf("window %d: %w", len(result.Windows), err)
			}
		} else {
			offWrites += perWindow
		}
		wall := time.Since(start)
		if err := processes(servers.pids).end(procs); err != nil {
			return nil, err
		}
		window := &nodesWindow{On: sl.on, Placement: placed, Writes: perWindow, WallS: wall.Seconds(), Procs: procs}
		if recording != nil {
			recording.stop()
			recordings = append(recordings, recording)
		}
		result.Windows = append(result.Windows, window)
		if failed != nil {
			break
		}
	}
	if placed != shared {
		// Back on every CPU for whatever runs next.
		if err := shared.apply(processes(servers.pids), *fanoutCPU); err != nil {
			return nil, err
		}
	}
	// The recordings are read once every window is over, so that perf's
	// own work does not run beside a window.
	for i, recording := range recordings {
		result.Windows[i].Perf = map[string]*perfCounts{}
		for name, file := range recording.files {
			counts, err := countPerf(file, *perfFreq)
			if err != nil {
				return nil, err
			}
			result.Windows[i].Perf[name] = counts
		}
	}
	if failed == nil {
		if err := streamErr.Load(); err != nil {
			// A delivery of an off write, or another node's pod.
			failed = *err
		}
	}
	for target, sts := range states {
		t := result.Targets[target]
		t.Expected = int64(onWrites)
		var all []int64
		for _, st := range sts {
			t.Delivered += st.delivered.Load()
			all = append(all, st.latencies...)
		}
		t.P50Ms, t.P99Ms, t.MaxMs = percentiles(all)
		if failed == nil && t.Delivered != t.Expected {
			failed = fmt.Errorf("%s: %d deliveries, expected %d", target, t.Delivered, t.Expected)
		}
	}
	return result, failed
}

// openNodeWatchers opens target's n node watchers over conns connections:
// watcher i watches pods with spec.nodeName=node-<i>.
func openNodeWatchers(ctx context.Context, cfg *rest.Config, servers *serverFlags, target, ns string, n, conns int, staticWindow bool) ([]events, error) {
	// The connections first, then the watches spread over them.
	apiClients := make([]*kubernetes.Clientset, 0, conns)
	channels := make([]*grpc.ClientConn, 0, conns)
	var dialer *fanoutDialer
	for range min(conns, n) {
		switch target {
		case "apiserver-proto":
			cs, err := ownClient(cfg, protoType)
			if err != nil {
				return nil, err
			}
			apiClients = append(apiClients, cs)
		case "fanout":
			if dialer == nil {
				var err error
				if dialer, err = newFanoutDialer(*servers.fanoutAddr, *servers.fanoutCA); err != nil {
					return nil, err
				}
				dialer.staticWindow = staticWindow
			}
			ch, err := dialer.channel()
			if err != nil {
				return nil, err
			}
			channels = append(channels, ch)
		default:
			return nil, fmt.Errorf("unknown target %q", target)
		}
	}
	streams := make([]events, n)
	err := openAll(n, 32, func(i int) error {
		selector := "spec.nodeName=" + nodeName(i)
		var err error
		if target == "fanout" {
			var w *fanoutWatch
			w, err = watchOn(ctx, channels[i%len(channels)], &pb.WatchRequest{
				Resource: &pb.ResourceRef{Version: "v1", Resource: "pods"}, Namespace: ns, FieldSelector: selector,
			})
			if err == nil && i < len(channels) {
				// The first watch on each channel closes it with itself.
				w.conn = channels[i]
			}
			streams[i] = w
			return err
		}
		cs := apiClients[i%len(apiClients)]
		// From now: the watch starts at the list's RV.
		list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: selector, Limit: 1})
		if err != nil {
			return err
		}
		streams[i], err = watchAPI(ctx, cs, protoType, ns, "pods", map[string]string{
			"resourceVersion": list.ResourceVersion, "fieldSelector": selector,
		})
		return err
	})
	return streams, err
}

// readNodeWatchers counts each watcher's deliveries of writes stamped
// after windowStart, failing on a pod of another node.
func readNodeWatchers(ctx context.Context, target string, streams []events, windowStart *atomic.Int64, streamErr *atomic.Pointer[error]) []*watcherState {
	states := make([]*watcherState, len(streams))
	for i, s := range streams {
		st := &watcherState{}
		states[i] = st
		own := []byte(`"` + podName(i))
		if target == "apiserver-proto" {
			// Protobuf strings are length-prefixed, not quoted.
			own = []byte(podName(i))
		}
		go readStamped(ctx, s, streamErr, func(b []byte, sent, now int64) error {
			if sent < windowStart.Load() {
				return nil
			}
			if !bytes.Contains(b, own) {
				return fmt.Errorf("%s: watcher of %s got another node's pod", target, nodeName(i))
			}
			st.latencies = append(st.latencies, now-sent)
			st.delivered.Add(1)
			return nil
		})
	}
	return states
}

// reversed is ps in the opposite order.
func reversed(ps []placement) []placement {
	out := make([]placement, len(ps))
	for i, p := range ps {
		out[len(ps)-1-i] = p
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

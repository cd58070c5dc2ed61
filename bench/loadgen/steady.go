package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

// setup creates the namespace and its ConfigMaps (those missing), each
// with about size bytes of data.
func setup(args []string) error {
	fs := flag.NewFlagSet("setup", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server")
	ns := fs.String("namespace", "bench", "namespace")
	objects := fs.Int("objects", 100, "ConfigMaps")
	size := fs.Int("size", 1024, "bytes of data per ConfigMap")
	fs.Parse(args)
	ctx := context.Background()
	cs, err := clientsetWithNamespace(ctx, *kubeconfig, *ns)
	if err != nil {
		return err
	}
	jobs := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i)},
					Data:       map[string]string{"pad": pad(*size), "stamp": stampValue(0)},
				}
				_, err := cs.CoreV1().ConfigMaps(*ns).Create(ctx, cm, metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range *objects {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// writer makes write k at a fixed rate, from a pool of goroutines on one
// client (one connection, as one writing controller has), so a slow answer
// delays no later write.
type writer struct {
	write func(ctx context.Context, k int) error
}

// configMapWriter patches the stamp of ConfigMap (k mod objects).
func configMapWriter(cs *kubernetes.Clientset, ns string, objects int) *writer {
	return &writer{write: func(ctx context.Context, k int) error {
		patch := fmt.Sprintf(`{"data":{"stamp":%q}}`, stampValue(time.Now().UnixNano()))
		_, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, fmt.Sprintf("cm-%05d", k%objects),
			types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}}
}

// run makes writes from..from+count-1 at rate per second; returns when all
// are answered.
func (w *writer) run(ctx context.Context, from, count int, rate float64) error {
	jobs := make(chan int, count)
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range jobs {
				if err := w.write(ctx, k); err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	start := time.Now()
	for k := range count {
		time.Sleep(time.Until(start.Add(time.Duration(float64(k) / rate * float64(time.Second)))))
		jobs <- from + k
	}
	close(jobs)
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
}

// steadyResult is one steady-fanout measurement.
type steadyResult struct {
	Case       string                 `json:"case"`
	Target     string                 `json:"target"`
	Watchers   int                    `json:"watchers"`
	Writes     int                    `json:"writes"`
	Expected   int                    `json:"expected"`
	Delivered  int64                  `json:"delivered"`
	WallS      float64                `json:"wall_s"`
	P50Ms      float64                `json:"p50_ms"`
	P99Ms      float64                `json:"p99_ms"`
	MaxMs      float64                `json:"max_ms"`
	Procs      map[string]*procWindow `json:"procs"`
	EventBytes int                    `json:"event_bytes,omitempty"`
}

// watcherState counts one watcher's deliveries and keeps its latencies.
type watcherState struct {
	warm      atomic.Bool
	delivered atomic.Int64
	latencies []int64
}

func steady(args []string) (*steadyResult, error) {
	fs := flag.NewFlagSet("steady", flag.ExitOnError)
	servers := addServerFlags(fs)
	target := fs.String("target", "fanout", "apiserver-json, apiserver-proto, fanout (grpc-go's default windows), fanout-static (fixed windows, as kube-fanout's Go client dials), floor, or none (writes only)")
	ns := fs.String("namespace", "bench", "namespace of the written ConfigMaps")
	objects := fs.Int("objects", 100, "ConfigMaps written in turn")
	watchers := fs.Int("watchers", 100, "watchers, each on its own connection")
	rate := fs.Float64("rate", 100, "writes per second")
	seconds := fs.Float64("seconds", 30, "length of the write window")
	size := fs.Int("size", 1024, "floor: bytes per message")
	drain := fs.Duration("drain", 60*time.Second, "how long deliveries may trail the last write")
	fs.Parse(args)
	pids := servers.pids
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
	w := configMapWriter(writerClient, *ns, *objects)

	var floor *floorWriter
	if *target == "floor" {
		if floor, err = startFloor(*watchers, *size); err != nil {
			return nil, err
		}
		defer floor.stop()
		pids["floor"] = floor.pid
	}

	// Every watcher opens its own connection (in parallel, 32 at a time).
	var dialer *fanoutDialer
	if *target == "fanout" || *target == "fanout-static" {
		if dialer, err = newFanoutDialer(*servers.fanoutAddr, *servers.fanoutCA); err != nil {
			return nil, err
		}
		dialer.staticWindow = *target == "fanout-static"
	}
	streams := make([]events, *watchers)
	if *target == "none" {
		streams = nil
	}
	err = openAll(len(streams), 32, func(i int) error {
		var err error
		switch *target {
		case "apiserver-json", "apiserver-proto":
			ct := jsonType
			if *target == "apiserver-proto" {
				ct = protoType
			}
			var cs *kubernetes.Clientset
			if cs, err = ownClient(cfg, ct); err != nil {
				return err
			}
			// From now: the watch starts at the list's RV.
			list, err := cs.CoreV1().ConfigMaps(*ns).List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				return err
			}
			streams[i], err = watchAPI(ctx, cs, ct, *ns, "configmaps", map[string]string{"resourceVersion": list.ResourceVersion})
			return err
		case "fanout", "fanout-static":
			streams[i], err = dialer.watch(ctx, &pb.WatchRequest{Resource: configMaps(), Namespace: *ns})
			return err
		case "floor":
			c, err := net.Dial("tcp", floor.addr)
			streams[i] = &floorConn{c: c, size: *size}
			return err
		default:
			return fmt.Errorf("unknown target %q", *target)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("opening watchers: %w", err)
	}

	var windowStart atomic.Int64
	windowStart.Store(1<<63 - 1)
	states := make([]*watcherState, *watchers)
	var streamErr atomic.Pointer[error]
	for i, s := range streams {
		if s == nil {
			continue
		}
		st := &watcherState{latencies: make([]int64, 0, writes)}
		states[i] = st
		go readStamped(ctx, s, &streamErr, func(_ []byte, sent, now int64) error {
			if sent < windowStart.Load() {
				st.warm.Store(true)
				return nil
			}
			st.latencies = append(st.latencies, now-sent)
			st.delivered.Add(1)
			return nil
		})
	}

	// Warm up: one write every watcher must see before the window opens.
	if *target == "floor" {
		err = floor.send(1, 1)
	} else {
		err = w.run(ctx, 0, 1, 1)
	}
	if err != nil {
		return nil, err
	}
	if err := waitFor(60*time.Second, func() bool {
		for _, st := range states {
			if st != nil && !st.warm.Load() {
				return false
			}
		}
		return true
	}, &streamErr); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}

	window, err := processes(pids).start()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	windowStart.Store(start.UnixNano())
	if *target == "floor" {
		err = floor.send(writes, *rate)
	} else {
		err = w.run(ctx, 0, writes, *rate)
	}
	if err != nil {
		return nil, fmt.Errorf("writer: %w", err)
	}
	expected := writes * len(nonNil(streams))
	delivered := func() int64 {
		var n int64
		for _, st := range states {
			if st != nil {
				n += st.delivered.Load()
			}
		}
		return n
	}
	waitErr := waitFor(*drain, func() bool { return delivered() >= int64(expected) }, &streamErr)
	wall := time.Since(start)
	if err := processes(pids).end(window); err != nil {
		return nil, err
	}
	result := &steadyResult{
		Case: "steady", Target: *target, Watchers: len(nonNil(streams)), Writes: writes,
		Expected: expected, Delivered: delivered(), WallS: wall.Seconds(), Procs: window,
	}
	if *target == "floor" {
		result.EventBytes = *size
	}
	cancel()
	for _, s := range streams {
		if s != nil {
			s.close()
		}
	}
	if waitErr != nil {
		return result, fmt.Errorf("%d of %d deliveries after %v: %w", result.Delivered, expected, wall, waitErr)
	}
	if result.Delivered != int64(expected) {
		return result, fmt.Errorf("%d deliveries, expected %d", result.Delivered, expected)
	}
	var all []int64
	for _, st := range states {
		if st != nil {
			all = append(all, st.latencies...)
		}
	}
	result.P50Ms, result.P99Ms, result.MaxMs = percentiles(all)
	return result, nil
}

// percentiles are the p50, p99 and maximum of latencies (nanoseconds), in
// milliseconds; zero without any. Sorts latencies.
func percentiles(latencies []int64) (p50, p99, maxMs float64) {
	if len(latencies) == 0 {
		return 0, 0, 0
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	ms := func(q float64) float64 {
		return float64(latencies[min(len(latencies)-1, int(q*float64(len(latencies))))]) / 1e6
	}
	return ms(0.5), ms(0.99), float64(latencies[len(latencies)-1]) / 1e6
}

func nonNil(s []events) []events {
	var out []events
	for _, e := range s {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

// waitFor polls done every 5 ms until it holds, a stream fails, or timeout.
func waitFor(timeout time.Duration, done func() bool, failed *atomic.Pointer[error]) error {
	deadline := time.Now().Add(timeout)
	for !done() {
		if err := failed.Load(); err != nil {
			return *err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v", timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// floorWriter is the physical floor: a child process (so its CPU is its
// own) that writes each message to every accepted plain TCP socket, one
// write each, Nagle off (Go's default).
type floorWriter struct {
	cmd  *exec.Cmd
	in   *os.File
	addr string
	pid  int
}

func startFloor(conns, size int) (*floorWriter, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "floor-server", "-conns", fmt.Sprint(conns), "-size", fmt.Sprint(size))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("floor writer: %w", err)
	}
	f := &floorWriter{cmd: cmd, addr: line[:len(line)-1], pid: cmd.Process.Pid}
	f.in = stdin.(*os.File)
	return f, nil
}

// send asks the floor writer for count messages at rate per second and
// waits until it has written them.
func (f *floorWriter) send(count int, rate float64) error {
	_, err := fmt.Fprintf(f.in, "%d %g\n", count, rate)
	if err != nil {
		return err
	}
	// The round takes count/rate seconds; the caller then waits for the
	// deliveries themselves.
	time.Sleep(time.Duration(float64(count) / rate * float64(time.Second)))
	return nil
}

func (f *floorWriter) stop() {
	f.in.Close()
	f.cmd.Wait()
}

// floorServer is the floor writer's process.
func floorServer(args []string) error {
	fs := flag.NewFlagSet("floor-server", flag.ExitOnError)
	conns := fs.Int("conns", 100, "connections to accept")
	size := fs.Int("size", 1024, "bytes per message")
	fs.Parse(args)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(l.Addr().String())
	accepted := make([]net.Conn, 0, *conns)
	for len(accepted) < *conns {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		accepted = append(accepted, c)
	}
	msg := []byte(pad(*size))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var count int
		var rate float64
		if _, err := fmt.Sscanf(in.Text(), "%d %g", &count, &rate); err != nil {
			return err
		}
		start := time.Now()
		for k := range count {
			time.Sleep(time.Until(start.Add(time.Duration(float64(k) / rate * float64(time.Second)))))
			copy(msg, stampValue(time.Now().UnixNano()))
			for _, c := range accepted {
				if _, err := c.Write(msg); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// clientsetWithNamespace is a client of the API server of kubeconfig, with
// the namespace ns created if it is missing.
func clientsetWithNamespace(ctx context.Context, kubeconfig, ns string) (*kubernetes.Clientset, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	return cs, nil
}

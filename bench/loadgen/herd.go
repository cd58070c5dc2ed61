package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/client-go/kubernetes"

	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

// herdResult is one restart herd: every watcher needs the whole list at once.
type herdResult struct {
	Case        string                 `json:"case"`
	Target      string                 `json:"target"`
	Watchers    int                    `json:"watchers"`
	WallS       float64                `json:"wall_s"`
	Bytes       int64                  `json:"bytes"`
	ObjectBytes int64                  `json:"object_bytes"`
	Objects     int64                  `json:"objects"`
	Procs       map[string]*procWindow `json:"procs"`
}

func herd(args []string) (*herdResult, error) {
	fs := flag.NewFlagSet("herd", flag.ExitOnError)
	servers := addServerFlags(fs)
	target := fs.String("target", "fanout", "list (unpaged), paged, watchlist (API server, protobuf), or fanout")
	ns := fs.String("namespace", "herd", "namespace of the listed ConfigMaps")
	watchers := fs.Int("watchers", 200, "watchers, each on its own connection, all at once")
	objects := fs.Int64("objects", 10000, "objects each watcher must receive")
	pageSize := fs.Int64("page-size", 500, "paged: objects per page")
	gzipped := fs.Bool("gzip", false, "fanout: ask kube-fanout for gzip-compressed answers")
	fs.Parse(args)
	if *gzipped {
		// grpc-go offers every registered compressor in each call's
		// grpc-accept-encoding, so registering gzip is the asking; done
		// here rather than by importing encoding/gzip, which would make
		// every case of this program ask.
		encoding.RegisterCompressor(gzipCompressor{})
	}
	pids := servers.pids
	ctx := context.Background()
	cfg, err := restConfig(*servers.kubeconfig)
	if err != nil {
		return nil, err
	}
	// With several kube-fanout addresses (-fanout A,B,...), watcher i
	// asks the (i mod n)th: a herd spread over replicas or a tier's leaves.
	var dialers []*fanoutDialer
	if *target == "fanout" {
		for _, addr := range strings.Split(*servers.fanoutAddr, ",") {
			dialer, err := newFanoutDialer(addr, *servers.fanoutCA)
			if err != nil {
				return nil, err
			}
			dialers = append(dialers, dialer)
		}
	}
	// Connections first (a restarted controller's dial is not what is
	// measured), then every watcher asks at once.
	clients := make([]*kubernetes.Clientset, *watchers)
	if *target != "fanout" {
		for i := range clients {
			if clients[i], err = ownClient(cfg, protoType); err != nil {
				return nil, err
			}
		}
	}
	window, err := processes(pids).start()
	if err != nil {
		return nil, err
	}
	var wireBytes, objectBytes, received atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for i := range *watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n, ob, objs int64
			var err error
			switch *target {
			case "list":
				n, objs, err = listAll(ctx, clients[i], *ns, 0)
			case "paged":
				n, objs, err = listAll(ctx, clients[i], *ns, *pageSize)
			case "watchlist":
				n, objs, err = watchList(ctx, clients[i], *ns)
			case "fanout":
				n, ob, objs, err = fanoutSnapshot(ctx, dialers[i%len(dialers)], *ns)
			default:
				err = fmt.Errorf("unknown target %q", *target)
			}
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
			wireBytes.Add(n)
			objectBytes.Add(ob)
			received.Add(objs)
		}()
	}
	// Peak memory: VmHWM at the end covers the whole window.
	wg.Wait()
	wall := time.Since(start)
	if err := processes(pids).end(window); err != nil {
		return nil, err
	}
	if err := failed.Load(); err != nil {
		return nil, *err
	}
	result := &herdResult{Case: "herd", Target: *target, Watchers: *watchers, WallS: wall.Seconds(),
		Bytes: wireBytes.Load(), ObjectBytes: objectBytes.Load(), Objects: received.Load(), Procs: window}
	if want := *objects * int64(*watchers); result.Objects != want {
		return result, fmt.Errorf("%d objects received, expected %d", result.Objects, want)
	}
	return result, nil
}

// listAll reads a protobuf LIST, page by page if limit > 0; returns the
// bytes read and the objects counted in them (each page's items, counted
// from the protobuf without decoding the objects).
func listAll(ctx context.Context, cs *kubernetes.Clientset, ns string, limit int64) (int64, int64, error) {
	var total, objects int64
	cont := ""
	for {
		req := cs.CoreV1().RESTClient().Get().Namespace(ns).Resource("configmaps").SetHeader("Accept", protoType)
		if limit > 0 {
			req = req.Param("limit", fmt.Sprint(limit))
		}
		if cont != "" {
			req = req.Param("continue", cont)
		}
		body, err := req.DoRaw(ctx)
		if err != nil {
			return total, objects, err
		}
		total += int64(len(body))
		items, next, err := listPage(body)
		if err != nil {
			return total, objects, err
		}
		objects += items
		if next == "" {
			return total, objects, nil
		}
		cont = next
	}
}

// listPage reads a protobuf list: the "k8s\x00" magic, a runtime.Unknown
// whose raw (field 2) is the ConfigMapList: metadata (1, with continue in
// its field 3) and items (2).
func listPage(body []byte) (items int64, cont string, err error) {
	if len(body) < 4 || string(body[:4]) != "k8s\x00" {
		return 0, "", fmt.Errorf("not a protobuf body")
	}
	raw := field(body[4:], 2)
	meta := field(raw, 1)
	cont = string(field(meta, 3))
	for b := raw; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, "", protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return 0, "", protowire.ParseError(m)
		}
		if num == 2 {
			items++
		}
		b = b[n+m:]
	}
	return items, cont, nil
}

// field is the first bytes-typed field numbered num in b.
func field(b []byte, num protowire.Number) []byte {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil
		}
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			return v
		}
		m := protowire.ConsumeFieldValue(n, typ, b)
		if m < 0 {
			return nil
		}
		b = b[m:]
	}
	return nil
}

// watchList reads a watch-list (sendInitialEvents) until the bookmark that
// ends the initial events.
func watchList(ctx context.Context, cs *kubernetes.Clientset, ns string) (int64, int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := watchAPI(ctx, cs, protoType, ns, "configmaps", map[string]string{
		"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan", "allowWatchBookmarks": "true",
	})
	if err != nil {
		return 0, 0, err
	}
	defer w.close()
	var total, objects int64
	for {
		b, err := w.next()
		if err != nil {
			return total, objects, err
		}
		total += int64(len(b)) + 4
		if bytes.Contains(b, initialEventsEnd) {
			return total, objects, nil
		}
		objects++
	}
}

// fanoutSnapshot reads a kube-fanout Watch with initial events until its
// initial-events-end bookmark; returns the object bytes (twice: gRPC's
// framing is not counted) and the objects.
func fanoutSnapshot(ctx context.Context, d *fanoutDialer, ns string) (int64, int64, int64, error) {
	w, err := d.watch(ctx, snapshotRequest(ns))
	if err != nil {
		return 0, 0, 0, err
	}
	defer w.close()
	return readSnapshot(w)
}

// snapshotRequest asks for a Watch with initial events of ns's ConfigMaps.
func snapshotRequest(ns string) *pb.WatchRequest {
	return &pb.WatchRequest{Resource: configMaps(), Namespace: ns, SendInitialEvents: true, AllowBookmarks: true}
}

// readSnapshot reads w until its initial-events-end bookmark (see
// fanoutSnapshot).
func readSnapshot(w *fanoutWatch) (int64, int64, int64, error) {
	var objectBytes, objects int64
	for {
		ev, err := w.stream.Recv()
		if err != nil {
			return objectBytes, objectBytes, objects, err
		}
		if ev.Type == pb.EventType_BOOKMARK {
			if bytes.Contains([]byte(ev.Object), initialEventsEnd) {
				return objectBytes, objectBytes, objects, nil
			}
			continue
		}
		objectBytes += int64(len(ev.Object))
		objects++
	}
}

// gzipCompressor is gzip for grpc-go (as its encoding/gzip, without a
// pool: a herd's answers are decompressed, its requests are not
// compressed), registered only by a herd that asks for gzip.
type gzipCompressor struct{}

func (gzipCompressor) Name() string { return "gzip" }

func (gzipCompressor) Compress(w io.Writer) (io.WriteCloser, error) { return gzip.NewWriter(w), nil }

func (gzipCompressor) Decompress(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }

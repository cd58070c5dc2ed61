package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	kubefanout "github.com/kube-fanout/kube-fanout/client/go"
)

const (
	compressObjects   = 10_000
	compressNamespace = "compress"
)

// properties is a properties file as ConfigMaps carry them: repetitive,
// compressible, a little different in each object (the Rust compression
// test's data).
func properties(i int) string {
	var b strings.Builder
	for k := range 24 {
		fmt.Fprintf(&b, "feature.%d.enabled=true\nfeature.%d.owner=team-%d\nfeature.%d.endpoint=https://svc-%d.example.internal:8443/v1\n", k, k, (i+k)%5, k, k)
	}
	return b.String()
}

// countingConn counts the bytes the client reads: what the server sent.
type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

// snapshotBytes is the bytes on the wire for an informer of the namespace
// to sync through a new Conn with opts.
func snapshotBytes(ctx context.Context, t *testing.T, fo *fanout, opts ...kubefanout.Option) int64 {
	t.Helper()
	var read atomic.Int64
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: conn, read: &read}, nil
	}
	conn, err := kubefanout.Dial([]string{fo.addr}, append(opts, kubefanout.WithDialOptions(grpc.WithContextDialer(dialer)))...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	inf := cache.NewSharedIndexInformer(kubefanout.NewListWatch(conn, configMaps, compressNamespace, nil), &corev1.ConfigMap{}, 0, cache.Indexers{})
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	if n := len(inf.GetStore().ListKeys()); n != compressObjects {
		t.Fatalf("informer holds %d ConfigMaps, want %d", n, compressObjects)
	}
	return read.Load()
}

// A snapshot of 10,000 compressible ConfigMaps moves at least three times
// fewer bytes with WithGzip, counted on the wire (the client's reads from
// its TCP connection). Without it the client asks for no compression, even
// though gzip is registered in the process.
func TestGzipSnapshotMovesThreeTimesFewerBytes(t *testing.T) {
	cp := startControlPlane(t)
	ctx := context.Background()
	createNamespace(t, cp, compressNamespace)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < compressObjects; i += 16 {
				_, err := cp.client.CoreV1().ConfigMaps(compressNamespace).Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i)},
					Data:       map[string]string{"app.properties": properties(i)},
				}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fo := startFanout(t, cp)
	waitFor(t, "kube-fanout holds every ConfigMap", func() bool {
		resources, err := fo.resources()
		return err == nil && len(resources) == 1 && resources[0].GetObjects() >= compressObjects
	})

	plain := snapshotBytes(ctx, t, fo)
	gzipped := snapshotBytes(ctx, t, fo, kubefanout.WithGzip())
	ratio := float64(plain) / float64(gzipped)
	t.Logf("snapshot of %d ConfigMaps: %d bytes plain, %d bytes with gzip (%.1fx fewer)", compressObjects, plain, gzipped, ratio)
	if ratio < 3 {
		t.Fatalf("gzip moved %d bytes against %d plain: %.2fx fewer, want at least 3x", gzipped, plain, ratio)
	}
}

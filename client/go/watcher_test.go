package kubefanout

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/cert"

	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func dial(t *testing.T, addrs []string, opts ...Option) *Conn {
	t.Helper()
	conn, err := Dial(addrs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// collect reads a watch until it closes (or fails the test after 10 s).
func collect(t *testing.T, w watch.Interface) []watch.Event {
	t.Helper()
	var events []watch.Event
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return events
			}
			events = append(events, ev)
		case <-timeout:
			t.Fatalf("watch still open after 10s; got %d events", len(events))
		}
	}
}

func describeEvent(ev watch.Event) string {
	if st, ok := ev.Object.(*metav1.Status); ok {
		return string(ev.Type) + " " + string(st.Reason)
	}
	m, _ := ev.Object.(metav1.Object)
	return string(ev.Type) + " " + m.GetName() + "@" + m.GetResourceVersion()
}

func watchTrue() *bool { b := true; return &b }

// The first event of a re-sync unit ends the watch with 410 Expired before
// any event of the unit is delivered: a watch.Interface cannot apply a unit
// atomically, the reflector's relist can.
func TestResyncUnitEndsWatchWithExpiredBeforeAnyOfIt(t *testing.T) {
	f := &fakeServer{scripts: []watchScript{{events: []*pb.WatchEvent{
		{Type: pb.EventType_ADDED, ResourceVersion: "10", Object: configMap("a", "10")},
		{Type: pb.EventType_BOOKMARK, ResourceVersion: "10", Object: bookmark("10", initialEventsEnd)},
		{Type: pb.EventType_MODIFIED, ResourceVersion: "11", Object: configMap("a", "11")},
		{Type: pb.EventType_ADDED, ResourceVersion: "20", Object: configMap("b", "20"), Resync: true},
		{Type: pb.EventType_DELETED, ResourceVersion: "20", Object: configMap("a", "20"), Resync: true},
		{Type: pb.EventType_BOOKMARK, ResourceVersion: "20", Object: bookmark("20", ""), Resync: true},
		{Type: pb.EventType_MODIFIED, ResourceVersion: "21", Object: configMap("b", "21")},
	}}}}
	lw := NewListWatch(dial(t, []string{serve(t, f, nil)}), configMaps, "ns", nil)
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{
		SendInitialEvents: watchTrue(), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range collect(t, w) {
		got = append(got, describeEvent(ev))
	}
	want := []string{"ADDED a@10", "BOOKMARK @10", "MODIFIED a@11", "ERROR Expired"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// Every status kube-fanout ends a watch with becomes the error client-go's
// reflector acts on as it does against the API server.
func TestWatchStatusesBecomeTheAPIServersErrors(t *testing.T) {
	cases := []struct {
		name string
		end  error
		is   func(error) bool
	}{
		{"expired relists", withReason(codes.OutOfRange, "too old", "Expired", "5"), apierrors.IsResourceExpired},
		{"too large rv relists from the freshest state", withReason(codes.DeadlineExceeded, "too large resource version", "TooLargeResourceVersion", "9"),
			func(err error) bool { return apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) }},
		{"a lagging subscriber resumes", withReason(codes.ResourceExhausted, "lagged", "SubscriberLagged", "7"), apierrors.IsTooManyRequests},
		{"a server not synced yet is retried", withReason(codes.Unavailable, "not synced", "NotSynced", "7"), apierrors.IsTooManyRequests},
		{"a bad selector is a bad request", withReason(codes.InvalidArgument, "bad label selector", "", ""), apierrors.IsBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeServer{scripts: []watchScript{{end: c.end}}}
			lw := NewListWatch(dial(t, []string{serve(t, f, nil)}), configMaps, "", nil)
			w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "3"})
			if err != nil {
				t.Fatal(err)
			}
			events := collect(t, w)
			if len(events) != 1 || events[0].Type != watch.Error {
				t.Fatalf("events %v, want one error", events)
			}
			err = apierrors.FromObject(events[0].Object)
			if !c.is(err) {
				t.Fatalf("%v is not the expected kind of error", err)
			}
		})
	}
}

// A watch from "" without sendInitialEvents gets the current objects as
// ADDED events without the initial-events-end bookmark, as from the API
// server; bookmarks the caller did not allow are not delivered.
func TestLegacyInitialEventsAndBookmarks(t *testing.T) {
	script := watchScript{events: []*pb.WatchEvent{
		{Type: pb.EventType_ADDED, ResourceVersion: "10", Object: configMap("a", "10")},
		{Type: pb.EventType_BOOKMARK, ResourceVersion: "10", Object: bookmark("10", initialEventsEnd)},
		{Type: pb.EventType_BOOKMARK, ResourceVersion: "12", Object: bookmark("12", "")},
	}, end: withReason(codes.OutOfRange, "gone", "Expired", "1")}
	f := &fakeServer{scripts: []watchScript{script, script}}
	lw := NewListWatch(dial(t, []string{serve(t, f, nil)}), configMaps, "", nil)
	for _, c := range []struct {
		bookmarks bool
		want      []string
	}{
		{true, []string{"ADDED a@10", "BOOKMARK @12", "ERROR Expired"}},
		{false, []string{"ADDED a@10", "ERROR Expired"}},
	} {
		w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{AllowWatchBookmarks: c.bookmarks})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ev := range collect(t, w) {
			got = append(got, describeEvent(ev))
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Fatalf("bookmarks %v: events %q, want %q", c.bookmarks, got, c.want)
		}
	}
	if req := f.requests[0]; !req.GetSendInitialEvents() {
		t.Fatalf("a watch from \"\" asked no initial events: %v", req)
	}
}

// timeoutSeconds ends the watch cleanly, as the API server does.
func TestWatchTimeoutClosesCleanly(t *testing.T) {
	f := &fakeServer{}
	lw := NewListWatch(dial(t, []string{serve(t, f, nil)}), configMaps, "", nil)
	timeout := int64(1)
	start := time.Now()
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "3", TimeoutSeconds: &timeout})
	if err != nil {
		t.Fatal(err)
	}
	if events := collect(t, w); len(events) != 0 {
		t.Fatalf("a timed-out watch delivered %v", events)
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("closed after %v, before its timeout", took)
	}
}

// A list comes back as the typed list of the informer's type, paged, and a
// list less fresh than the asked resourceVersion is refused the way the
// reflector understands.
func TestListTypedPagesAndFreshness(t *testing.T) {
	f := &fakeServer{list: &pb.ListResponse{ResourceVersion: "42", Objects: []string{configMap("a", "40"), configMap("b", "41")}, Continue: "next", RemainingItemCount: 3}}
	lw := NewListWatch(dial(t, []string{serve(t, f, nil)}), configMaps, "", nil)
	obj, err := lw.ListWithContext(context.Background(), metav1.ListOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	list, ok := obj.(*corev1.ConfigMapList)
	if !ok {
		t.Fatalf("list is a %T", obj)
	}
	if list.ResourceVersion != "42" || list.Continue != "next" || *list.RemainingItemCount != 3 || len(list.Items) != 2 || list.Items[1].Name != "b" {
		t.Fatalf("list %+v", list)
	}
	_, err = lw.ListWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "43"})
	if !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		t.Fatalf("a list at 42 for resourceVersion 43: %v", err)
	}
	_, err = lw.ListWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "41", ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if !apierrors.IsResourceExpired(err) {
		t.Fatalf("an exact list at 41 answered at 42: %v", err)
	}
	obj, err = NewListWatch(lw.conn, configMaps, "", nil, Unstructured()).ListWithContext(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := obj.(*unstructured.UnstructuredList); !ok || len(u.Items) != 2 || u.Items[0].GetKind() != "ConfigMap" {
		t.Fatalf("unstructured list %#v", obj)
	}
}

// With the first address unreachable, calls go to the next one, with TLS and
// the bearer token.
func TestFailoverTLSAndToken(t *testing.T) {
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	f := &fakeServer{scripts: []watchScript{{end: withReason(codes.OutOfRange, "gone", "Expired", "1")}}}
	live := serve(t, f, &pair)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close()
	conn := dial(t, []string{deadAddr, live}, WithTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}), WithBearerToken("s3cret"))
	w, err := NewListWatch(conn, configMaps, "", nil).WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "3"})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, w)
	if conn.Address() != live {
		t.Fatalf("using %s, want %s", conn.Address(), live)
	}
	if len(f.tokens) != 1 || f.tokens[0] != "Bearer s3cret" {
		t.Fatalf("tokens seen %q", f.tokens)
	}
}

// When no server answers within the reconnect wait, opening a watch fails
// with the 429 the reflector retries without relisting, after waiting.
func TestNoServerIsRetriable(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	_ = dead.Close()
	const wait = 300 * time.Millisecond
	start := time.Now()
	_, err = NewListWatch(dial(t, []string{addr}, WithReconnectWait(wait)), configMaps, "", nil).WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "3"})
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("watching with no server: %v", err)
	}
	if took := time.Since(start); took < wait {
		t.Fatalf("failed after %v, before the reconnect wait of %v", took, wait)
	}
}

// A watch opened while its only server is down (restarting) waits for it
// and opens once it is back, instead of failing with the 429 that costs the
// reflector a step of backoff.
func TestWatchWaitsForARestartedServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	startServer(t, &fakeServer{}, nil, lis).Stop()
	restarted := &fakeServer{}
	go func() {
		time.Sleep(time.Second)
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		startServer(t, restarted, nil, lis)
	}()
	w, err := NewListWatch(dial(t, []string{addr}), configMaps, "", nil).WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "3"})
	if err != nil {
		t.Fatalf("watching while the server restarts: %v", err)
	}
	defer w.Stop()
	restarted.mu.Lock()
	defer restarted.mu.Unlock()
	if len(restarted.requests) != 1 || restarted.requests[0].GetResourceVersion() != "3" {
		t.Fatalf("the restarted server got %v", restarted.requests)
	}
}

// endsCleanlyThenWatches opens a watch from 3 on conn, lets end end it
// (nil: the server's script ends it), checks it ended cleanly (no event),
// and checks that the next watch, from 7, went to want.
func endsCleanlyThenWatches(t *testing.T, conn *Conn, end func(), want string) {
	t.Helper()
	lw := NewListWatch(conn, configMaps, "", nil)
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "3"})
	if err != nil {
		t.Fatal(err)
	}
	if end != nil {
		end()
	}
	if events := collect(t, w); len(events) != 0 {
		t.Fatalf("events %v, want none: a clean end", events)
	}
	w, err = lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "7"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	if conn.Address() != want {
		t.Fatalf("the next watch went to %s, want %s", conn.Address(), want)
	}
}

// A watch whose server went away (the connection broke) ends cleanly, as
// client-go's own watch does when the API server's connection breaks: the
// reflector watches again at once, on the next server.
func TestWatchEndsCleanlyWhenItsServerIsGone(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := startServer(t, &fakeServer{}, nil, lis)
	second := serve(t, &fakeServer{}, nil)
	endsCleanlyThenWatches(t, dial(t, []string{lis.Addr().String(), second}), gone.Stop, second)
}

// Metadata-only and unstructured watches decode into the types their
// informers expect.
func TestWatchDecodesMetadataAndUnstructured(t *testing.T) {
	script := watchScript{events: []*pb.WatchEvent{{Type: pb.EventType_ADDED, ResourceVersion: "10", Object: configMap("a", "10")}}}
	f := &fakeServer{scripts: []watchScript{script, script}}
	conn := dial(t, []string{serve(t, f, nil)})
	for i, c := range []struct {
		opt          ListWatchOption
		metadataOnly bool
		check        func(obj any) bool
	}{
		{Metadata(), true, func(obj any) bool {
			m, ok := obj.(*metav1.PartialObjectMetadata)
			return ok && m.Name == "a" && m.Kind == "ConfigMap" && m.ResourceVersion == "10"
		}},
		{Unstructured(), false, func(obj any) bool {
			u, ok := obj.(*unstructured.Unstructured)
			return ok && u.GetName() == "a" && u.GetKind() == "ConfigMap"
		}},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		w, err := NewListWatch(conn, configMaps, "", nil, c.opt).WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "3"})
		if err != nil {
			t.Fatal(err)
		}
		if ev := <-w.ResultChan(); !c.check(ev.Object) {
			t.Fatalf("decoded %#v", ev.Object)
		}
		f.mu.Lock()
		asked := f.requests[i].GetMetadataOnly()
		f.mu.Unlock()
		if asked != c.metadataOnly {
			t.Fatalf("request %d asked metadata_only=%v", i, asked)
		}
		cancel()
	}
}

// A watch whose connection kube-fanout retired ends cleanly, as one that
// timed out: no error for the reflector to back off on, and no move to
// another address (the Service in front chooses the replica).
func TestWatchEndsCleanlyWhenItsConnectionIsRetired(t *testing.T) {
	retiring := &fakeServer{scripts: []watchScript{{end: withReason(codes.Unavailable, "connection retired", "ConnectionRetired", "7")}}}
	other := &fakeServer{}
	first, second := serve(t, retiring, nil), serve(t, other, nil)
	endsCleanlyThenWatches(t, dial(t, []string{first, second}), nil, first)
}

// A server that ends a watch as shutting down is left: the watch ends
// cleanly (no 429 for the reflector to back off on) and the reflector's
// next watch goes to the next address.
func TestWatchMovesOnFromAServerShuttingDown(t *testing.T) {
	leaving := &fakeServer{scripts: []watchScript{{end: withReason(codes.Unavailable, "shutting down", "ShuttingDown", "7")}}}
	staying := &fakeServer{}
	first, second := serve(t, leaving, nil), serve(t, staying, nil)
	endsCleanlyThenWatches(t, dial(t, []string{first, second}), nil, second)
	staying.mu.Lock()
	defer staying.mu.Unlock()
	if len(staying.requests) != 1 || staying.requests[0].GetResourceVersion() != "7" {
		t.Fatalf("the next server got %v", staying.requests)
	}
}

package crcache

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefanout "github.com/kube-fanout/kube-fanout/client/go"
	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

// fanout answers that it serves ConfigMaps and notes each watch's
// namespace and selectors; it holds watches open.
type fanout struct {
	pb.UnimplementedKubeFanoutServer
	mu      sync.Mutex
	watches []string
}

func (s *fanout) ListResources(context.Context, *pb.ListResourcesRequest) (*pb.ListResourcesResponse, error) {
	return &pb.ListResourcesResponse{Resources: []*pb.ResourceStatus{{
		Resource: &pb.ResourceRef{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", Namespaced: true,
	}}}, nil
}

func (s *fanout) Watch(req *pb.WatchRequest, stream grpc.ServerStreamingServer[pb.WatchEvent]) error {
	s.mu.Lock()
	s.watches = append(s.watches, req.GetNamespace()+" labels="+req.GetLabelSelector()+" fields="+req.GetFieldSelector())
	s.mu.Unlock()
	<-stream.Context().Done()
	return nil
}

func (s *fanout) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(slices.Values(s.watches))
}

// The informers of controller-runtime's cache, built from its options,
// list and watch exactly their namespace with exactly their selectors
// through kube-fanout, one per namespace of a multi-namespace cache; types
// kube-fanout does not serve stay on the API server (a stand-in counting
// requests: the end-to-end tests use the real one).
func TestCacheOptionsNarrowKubeFanoutInformers(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fo := &fanout{}
	pb.RegisterKubeFanoutServer(srv, fo)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	var apiCalls, apiConfigMaps atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		apiCalls.Add(1)
		if strings.HasSuffix(r.URL.Path, "/configmaps") {
			apiConfigMaps.Add(1)
		}
		if r.URL.Query().Get("watch") == "true" {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"SecretList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`))
	}))
	defer api.Close()

	conn, err := kubefanout.Dial([]string{lis.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	newCache := NewCacheFunc(conn)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Secret"), meta.RESTScopeNamespace)
	c, err := newCache(&rest.Config{Host: api.URL}, cache.Options{
		Scheme:            scheme.Scheme,
		Mapper:            mapper,
		DefaultNamespaces: map[string]cache.Config{"a": {}, "b": {LabelSelector: labels.SelectorFromSet(labels.Set{"team": "b"})}},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	// Neither stand-in ever completes a sync (kube-fanout's answers no List
	// and client-go's watch-list to the API server's never ends), and the
	// test is about the requests made, so getting an informer must not wait
	// for one: it hung until go test's timeout in a CI run.
	for _, obj := range []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}} {
		if _, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false)); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"a labels= fields=", "b labels=team=b fields="}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Equal(fo.seen(), want) || apiCalls.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("kube-fanout watches %q, want %q; API server requests %d, want the Secret informers'", fo.seen(), want, apiCalls.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := apiConfigMaps.Load(); n != 0 {
		t.Fatalf("%d ConfigMap requests reached the API server", n)
	}
}

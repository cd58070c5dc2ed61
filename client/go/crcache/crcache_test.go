package crcache

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"

	kubefanout "github.com/kube-fanout/kube-fanout/client/go"
	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

// served answers that it serves ConfigMaps and counts watches, which it
// holds open.
type served struct {
	pb.UnimplementedKubeFanoutServer
	watches atomic.Int64
}

func (s *served) ListResources(context.Context, *pb.ListResourcesRequest) (*pb.ListResourcesResponse, error) {
	return &pb.ListResourcesResponse{Resources: []*pb.ResourceStatus{{
		Resource: &pb.ResourceRef{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", Namespaced: true,
	}}}, nil
}

func (s *served) Watch(_ *pb.WatchRequest, stream grpc.ServerStreamingServer[pb.WatchEvent]) error {
	s.watches.Add(1)
	<-stream.Context().Done()
	return nil
}

// apiServer stands for the ListerWatcher controller-runtime built; it
// counts lists and watches.
type apiServer struct{ calls atomic.Int64 }

func (a *apiServer) lw() *toolscache.ListWatch {
	return &toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			a.calls.Add(1)
			return &corev1.SecretList{}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			a.calls.Add(1)
			return watch.NewFake(), nil
		},
	}
}

// Types kube-fanout serves (typed or unstructured) are watched through it;
// the others keep controller-runtime's ListerWatcher.
func TestServedTypesGoThroughKubeFanoutOthersStay(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fanout := &served{}
	pb.RegisterKubeFanoutServer(srv, fanout)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := kubefanout.Dial([]string{lis.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	newInformer, err := NewInformerFunc(ctx, conn, scheme.Scheme)
	if err != nil {
		t.Fatal(err)
	}
	cm := &unstructured.Unstructured{}
	cm.SetAPIVersion("v1")
	cm.SetKind("ConfigMap")
	for _, c := range []struct {
		obj    runtime.Object
		fanout int64
		viaAPI bool
	}{
		{&corev1.ConfigMap{}, 1, false},
		{cm, 2, false},
		{&corev1.Secret{}, 2, true},
	} {
		api := &apiServer{}
		informer := newInformer(api.lw(), c.obj, 0, toolscache.Indexers{})
		go informer.RunWithContext(ctx)
		deadline := time.Now().Add(10 * time.Second)
		for fanout.watches.Load() != c.fanout || (api.calls.Load() > 0) != c.viaAPI {
			if time.Now().After(deadline) {
				t.Fatalf("%T: kube-fanout watches %d, want %d; API server calls %d, want some: %v", c.obj, fanout.watches.Load(), c.fanout, api.calls.Load(), c.viaAPI)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

package kubefanout

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

// fakeServer is a scripted kube-fanout, for the answers a real one cannot
// be made to give on cue (a re-sync unit, a lagging subscriber, each error
// status). Each Watch call takes the next script.
type fakeServer struct {
	pb.UnimplementedKubeFanoutServer
	mu       sync.Mutex
	scripts  []watchScript
	list     *pb.ListResponse
	requests []*pb.WatchRequest
	tokens   []string
}

type watchScript struct {
	events []*pb.WatchEvent
	// end is the status the stream ends with after the events (nil: it
	// stays open until the client goes away).
	end error
}

func (f *fakeServer) Watch(req *pb.WatchRequest, stream grpc.ServerStreamingServer[pb.WatchEvent]) error {
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.tokens = append(f.tokens, token(stream.Context()))
	var script watchScript
	if len(f.scripts) > 0 {
		script, f.scripts = f.scripts[0], f.scripts[1:]
	}
	f.mu.Unlock()
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for _, ev := range script.events {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	if script.end != nil {
		return script.end
	}
	<-stream.Context().Done()
	return nil
}

func (f *fakeServer) List(ctx context.Context, _ *pb.ListRequest) (*pb.ListResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens = append(f.tokens, token(ctx))
	return f.list, nil
}

func (f *fakeServer) ListResources(context.Context, *pb.ListResourcesRequest) (*pb.ListResourcesResponse, error) {
	return &pb.ListResourcesResponse{Resources: []*pb.ResourceStatus{{
		Resource: &pb.ResourceRef{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", Namespaced: true,
	}}}, nil
}

func token(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) > 0 {
		return v[0]
	}
	return ""
}

// serve starts f on a loopback port (TLS when cert is given) and returns
// its address.
func serve(t *testing.T, f *fakeServer, cert *tls.Certificate) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, f, cert, lis)
}

// serveOn starts f on lis (TLS when cert is given) and returns its address.
func serveOn(t *testing.T, f *fakeServer, cert *tls.Certificate, lis net.Listener) string {
	t.Helper()
	startServer(t, f, cert, lis)
	return lis.Addr().String()
}

// startServer starts f on lis (TLS when cert is given), stopped when the
// test ends unless the test stops it first.
func startServer(t *testing.T, f *fakeServer, cert *tls.Certificate, lis net.Listener) *grpc.Server {
	t.Helper()
	var opts []grpc.ServerOption
	if cert != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{*cert}})))
	}
	srv := grpc.NewServer(opts...)
	pb.RegisterKubeFanoutServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return srv
}

// withReason is a status carrying kube-fanout's ErrorInfo.
func withReason(code codes.Code, msg, reason, rv string) error {
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{
		Reason: reason, Domain: "kube-fanout.io", Metadata: map[string]string{"resourceVersion": rv},
	})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func configMap(name, rv string) string {
	return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"ns","resourceVersion":"` + rv + `"},"data":{"k":"` + rv + `"}}`
}

func bookmark(rv string, annotations string) string {
	return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"resourceVersion":"` + rv + `","annotations":{` + annotations + `}}}`
}

const initialEventsEnd = `"k8s.io/initial-events-end":"true"`

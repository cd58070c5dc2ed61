package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

const (
	jsonType  = "application/json"
	protoType = "application/vnd.kubernetes.protobuf"
)

// restConfig reads the kubeconfig, without client-side rate limits (the
// benchmark sets its own rate).
func restConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 1e6, 1e6
	return cfg, nil
}

// ownClient is a clientset on a connection of its own, as each separate
// controller process has: client-go shares one transport (and so one HTTP/2
// connection) between configs that compare equal, but never caches one
// with a custom dialer.
func ownClient(base *rest.Config, contentType string) (*kubernetes.Clientset, error) {
	cfg := rest.CopyConfig(base)
	dialer := &net.Dialer{}
	cfg.Dial = dialer.DialContext
	cfg.ContentType = contentType
	cfg.AcceptContentTypes = contentType
	return kubernetes.NewForConfig(cfg)
}

// events reads one watch stream's events as raw bytes.
type events interface {
	next() ([]byte, error)
	close()
}

// apiWatch is a raw watch on the API server: the body is read frame by
// frame, never decoded, so the watcher's own CPU stays small.
type apiWatch struct {
	body  io.ReadCloser
	r     *bufio.Reader
	proto bool
	buf   []byte
}

// watchAPI opens `GET .../<resource>?watch=1` with extra query parameters.
func watchAPI(ctx context.Context, cs *kubernetes.Clientset, contentType, ns, resource string, params map[string]string) (*apiWatch, error) {
	req := cs.CoreV1().RESTClient().Get().Namespace(ns).Resource(resource).
		Param("watch", "true").Param("timeoutSeconds", "3600").
		SetHeader("Accept", contentType+";stream=watch")
	for k, v := range params {
		req = req.Param(k, v)
	}
	body, err := req.Stream(ctx)
	if err != nil {
		return nil, err
	}
	return &apiWatch{body: body, r: bufio.NewReaderSize(body, 64<<10), proto: contentType == protoType}, nil
}

func (w *apiWatch) next() ([]byte, error) {
	if !w.proto {
		// JSON watch events are newline-delimited.
		line, err := w.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			rest, err := w.r.ReadBytes('\n')
			return append(append([]byte(nil), line...), rest...), err
		}
		return line, err
	}
	// Protobuf watch events: a 4-byte big-endian length, then the frame.
	var n [4]byte
	if _, err := io.ReadFull(w.r, n[:]); err != nil {
		return nil, err
	}
	size := int(binary.BigEndian.Uint32(n[:]))
	if cap(w.buf) < size {
		w.buf = make([]byte, size)
	}
	w.buf = w.buf[:size]
	_, err := io.ReadFull(w.r, w.buf)
	return w.buf, err
}

func (w *apiWatch) close() { w.body.Close() }

// fanoutDialer makes one gRPC channel (one connection) per call, over TLS.
type fanoutDialer struct {
	addr  string
	creds credentials.TransportCredentials
	// staticWindow: fixed HTTP/2 windows (staticWindowOptions) instead of
	// grpc-go's bandwidth-delay-product estimation.
	staticWindow bool
}

// staticWindowOptions are HTTP/2 windows as large as client-go's stream
// window (4 MiB) and a connection window for four such streams. Setting
// them turns off grpc-go's BDP estimator, which otherwise sends the server
// a WINDOW_UPDATE and a PING (and waits for its ack) for the first DATA
// frame after each ack: on a quiet watch, one round trip per event.
func staticWindowOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(4 << 20), grpc.WithInitialConnWindowSize(16 << 20)}
}

func newFanoutDialer(addr, caFile string) (*fanoutDialer, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", caFile)
	}
	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12})
	return &fanoutDialer{addr: addr, creds: creds}, nil
}

// fanoutWatch is one kube-fanout Watch, on its own channel (conn set) or
// on one it shares (conn nil: its owner closes it).
type fanoutWatch struct {
	conn   *grpc.ClientConn
	stream grpc.ServerStreamingClient[pb.WatchEvent]
	cancel context.CancelFunc
}

// channel is a new gRPC channel: one connection, opened on first use.
func (d *fanoutDialer) channel() (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(d.creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20))}
	if d.staticWindow {
		opts = append(opts, staticWindowOptions()...)
	}
	return grpc.NewClient("passthrough:///"+d.addr, opts...)
}

// watch opens a Watch on a channel of its own.
func (d *fanoutDialer) watch(ctx context.Context, req *pb.WatchRequest) (*fanoutWatch, error) {
	conn, err := d.channel()
	if err != nil {
		return nil, err
	}
	w, err := watchOn(ctx, conn, req)
	if err != nil {
		conn.Close()
		return nil, err
	}
	w.conn = conn
	return w, nil
}

// watchOn opens a Watch on a shared channel.
func watchOn(ctx context.Context, conn *grpc.ClientConn, req *pb.WatchRequest) (*fanoutWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := pb.NewKubeFanoutClient(conn).Watch(ctx, req)
	if err == nil {
		// The response headers: the server has taken the watch.
		_, err = stream.Header()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &fanoutWatch{stream: stream, cancel: cancel}, nil
}

func (w *fanoutWatch) next() ([]byte, error) {
	ev, err := w.stream.Recv()
	if err != nil {
		return nil, err
	}
	return []byte(ev.Object), nil
}

func (w *fanoutWatch) close() {
	w.cancel()
	if w.conn != nil {
		w.conn.Close()
	}
}

func configMaps() *pb.ResourceRef { return &pb.ResourceRef{Version: "v1", Resource: "configmaps"} }

// floorConn reads the floor writer's fixed-size messages.
type floorConn struct {
	c    net.Conn
	size int
	buf  []byte
}

func (f *floorConn) next() ([]byte, error) {
	if f.buf == nil {
		f.buf = make([]byte, f.size)
	}
	_, err := io.ReadFull(f.c, f.buf)
	return f.buf, err
}

func (f *floorConn) close() { f.c.Close() }

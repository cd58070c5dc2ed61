package kubefanout

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

// pingCounter is a listener whose connections count the PING frames
// (not acks) their client sends, read from a copy of what the server reads.
type pingCounter struct {
	net.Listener
	pings atomic.Int64
	// read is done once every connection has been read to its end.
	read sync.WaitGroup
}

func (l *pingCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	r, w := io.Pipe()
	l.read.Add(1)
	go func() {
		defer l.read.Done()
		defer r.Close()
		if _, err := io.ReadFull(r, make([]byte, len(http2.ClientPreface))); err != nil {
			return
		}
		fr := http2.NewFramer(nil, r)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
				l.pings.Add(1)
			}
		}
	}()
	return &teeConn{Conn: c, copy: w}, nil
}

// teeConn copies what is read from it to copy.
type teeConn struct {
	net.Conn
	copy *io.PipeWriter
}

func (c *teeConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		_, _ = c.copy.Write(b[:n])
	}
	if err != nil {
		_ = c.copy.CloseWithError(err)
	}
	return n, err
}

// A quiet watch costs the server one write per event: the client's
// connection has fixed flow-control windows, so grpc-go's bandwidth
// estimator does not answer each event with a PING (and a WINDOW_UPDATE)
// that the server must read and acknowledge.
func TestEventsCostTheServerNoPings(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counter := &pingCounter{Listener: lis}
	var events []*pb.WatchEvent
	for i := range 20 {
		rv := strconv.Itoa(i + 2)
		events = append(events, &pb.WatchEvent{Type: pb.EventType_ADDED, ResourceVersion: rv, Object: configMap("a", rv)})
	}
	f := &fakeServer{scripts: []watchScript{{events: events, end: withReason(codes.OutOfRange, "gone", "Expired", "1")}}}
	conn := dial(t, []string{serveOn(t, f, nil, counter)})
	lw := NewListWatch(conn, configMaps, "", nil)
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	// The events, then the Expired that ends the script.
	if got := collect(t, w); len(got) != len(events)+1 {
		t.Fatalf("got %d events, want %d", len(got), len(events)+1)
	}
	// Every frame the client sent is counted once its connection is gone.
	_ = conn.Close()
	read := make(chan struct{})
	go func() { counter.read.Wait(); close(read) }()
	select {
	case <-read:
	case <-time.After(10 * time.Second):
		t.Fatal("the server still reads the closed connection after 10s")
	}
	if n := counter.pings.Load(); n != 0 {
		t.Fatalf("the client sent %d PINGs for %d events", n, len(events))
	}
}

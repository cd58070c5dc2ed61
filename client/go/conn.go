// Package kubefanout feeds client-go informers (and controller-runtime
// caches, see the crcache package) from kube-fanout instead of the
// Kubernetes API server: NewListWatch returns a cache.ListerWatcher, so
//
//	cache.NewSharedIndexInformer(kubefanout.NewListWatch(conn, gvr, ns, nil), &corev1.ConfigMap{}, 0, indexers)
//
// is the one-line switch from cache.NewListWatchFromClient. Writes still go
// to the API server; kube-fanout only serves reads.
package kubefanout

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

// streamWindow and connWindow are the HTTP/2 flow-control windows of a
// stream and of a connection: client-go's stream window, and room for four
// streams at full speed on one connection.
const (
	streamWindow = 4 << 20
	connWindow   = 4 * streamWindow
)

// maxMessage is the largest message accepted: one object of a big type can
// be megabytes, and a List page holds many.
const maxMessage = 64 << 20

// Option configures Dial.
type Option func(*settings)

type settings struct {
	tls                    *tls.Config
	token                  tokenSource
	insecurePlaintextToken bool
	gzip                   bool
	reconnectWait          time.Duration
	extra                  []grpc.DialOption
}

// defaultReconnectWait is how long a call waits for a server to be
// reachable again before it fails: the reflector's longest backoff, so a
// restart shorter than that costs an informer none of its backoff.
const defaultReconnectWait = 30 * time.Second

// WithReconnectWait sets how long a call waits, when no server can be
// reached, for one to become reachable (a restarting replica, a rolling
// update) before failing as unavailable (the 429 the reflector backs off
// on). The default is 30 s; 0 fails at once.
func WithReconnectWait(d time.Duration) Option {
	return func(s *settings) { s.reconnectWait = d }
}

// WithTLS uses TLS with this configuration (CA, server name, client
// certificate) for every address. Without it, https:// addresses use the
// system's roots and the others are plaintext.
func WithTLS(cfg *tls.Config) Option {
	return func(s *settings) { s.tls = cfg }
}

// WithDialOptions adds gRPC dial options (interceptors, a custom dialer).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(s *settings) { s.extra = append(s.extra, opts...) }
}

// Conn is a connection to kube-fanout: one server at a time out of a list
// of addresses. A call that cannot reach the current server moves on to
// the next. Safe for concurrent use; share one Conn between informers.
type Conn struct {
	addrs         []string
	clients       []pb.KubeFanoutClient
	conns         []*grpc.ClientConn
	reconnectWait time.Duration

	mu      sync.Mutex
	current int
	kinds   map[resourceKey]string
}

type resourceKey struct{ group, version, resource string }

// Dial prepares connections to the given servers, in order of preference:
// "host:port", "http://host:port" or "https://host:port". Nothing is
// dialed until the first call.
func Dial(addresses []string, opts ...Option) (*Conn, error) {
	if len(addresses) == 0 {
		return nil, errors.New("kube-fanout: no server address given")
	}
	s := settings{reconnectWait: defaultReconnectWait}
	for _, opt := range opts {
		opt(&s)
	}
	c := &Conn{addrs: addresses, reconnectWait: s.reconnectWait, kinds: map[resourceKey]string{}}
	for _, addr := range addresses {
		if err := checkPlaintextToken(addr, &s); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("kube-fanout: address %q: %w", addr, err)
		}
		conn, err := grpc.NewClient(target(addr), dialOptions(addr, &s)...)
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("kube-fanout: address %q: %w", addr, err)
		}
		c.conns = append(c.conns, conn)
		c.clients = append(c.clients, pb.NewKubeFanoutClient(conn))
	}
	return c, nil
}

func target(addr string) string {
	for _, scheme := range []string{"http://", "https://"} {
		if rest, ok := strings.CutPrefix(addr, scheme); ok {
			return "passthrough:///" + strings.TrimSuffix(rest, "/")
		}
	}
	return "passthrough:///" + addr
}

// plaintext is whether calls to addr go without TLS.
func plaintext(addr string, s *settings) bool {
	return s.tls == nil && !strings.HasPrefix(addr, "https://")
}

func dialOptions(addr string, s *settings) []grpc.DialOption {
	creds := insecure.NewCredentials()
	switch {
	case s.tls != nil:
		creds = credentials.NewTLS(s.tls)
	case !plaintext(addr, s):
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(append(compression(s.gzip), grpc.MaxCallRecvMsgSize(maxMessage))...),
		// A restarted server is reconnected within seconds, not after
		// grpc-go's default backoff of up to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		// A peer that vanished without closing the connection (a deleted
		// pod) is noticed within seconds, not at the next TCP timeout.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		// Fixed flow-control windows, as client-go's HTTP/2 transport has
		// (4 MiB a stream). Setting them turns off grpc-go's bandwidth
		// estimator, which answers the first DATA frame after each ping
		// ack with a WINDOW_UPDATE and a PING: on a quiet watch, one per
		// event, which the server must read and acknowledge (what that
		// costs it: BENCHMARKS.md, node-scoped watchers).
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
	}
	if s.token != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{s.token}))
	}
	return append(opts, s.extra...)
}

// Close closes every connection.
func (c *Conn) Close() error {
	var errs []error
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	return errors.Join(errs...)
}

// Address is the server in use.
func (c *Conn) Address() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addrs[c.current]
}

// call runs fn against the current server and, when that server cannot be
// reached (UNAVAILABLE), against the next ones in turn, each at most once.
// When none could be reached at all (no server answered, as against a
// restarting replica), it waits up to the reconnect wait for one to become
// reachable and tries them once more: a watch or list made while
// kube-fanout restarts then returns once it is back, instead of failing
// and costing the reflector a step of its backoff, which grows to 30-60 s
// and is kept for two minutes, so a few restarts in a row would leave an
// informer stale for a minute. The server that answered becomes the
// current one; its index is returned.
func (c *Conn) call(ctx context.Context, fn func(pb.KubeFanoutClient) error) (int, error) {
	idx, err := c.tryEach(ctx, fn)
	if !unreachable(err) || ctx.Err() != nil || !c.waitReachable(ctx) {
		return idx, err
	}
	return c.tryEach(ctx, fn)
}

// tryEach is one pass of call over the servers.
func (c *Conn) tryEach(ctx context.Context, fn func(pb.KubeFanoutClient) error) (int, error) {
	c.mu.Lock()
	start := c.current
	c.mu.Unlock()
	var err error
	for i := range c.clients {
		idx := (start + i) % len(c.clients)
		if err = fn(c.clients[idx]); status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			c.mu.Lock()
			c.current = idx
			c.mu.Unlock()
			return idx, err
		}
	}
	return start, err
}

// unavailableReason is the ErrorInfo reason of an UNAVAILABLE status ("" if
// it has none); ok is false for any other error.
func unavailableReason(err error) (reason string, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || st.Code() != codes.Unavailable {
		return "", false
	}
	reason, _ = errorInfo(st)
	return reason, true
}

// unreachable reports whether err is grpc-go's UNAVAILABLE for a server it
// could not reach or lost the connection to. kube-fanout's own UNAVAILABLE
// answers (NotSynced, ShuttingDown, ConnectionRetired) carry an ErrorInfo
// reason.
func unreachable(err error) bool {
	reason, ok := unavailableReason(err)
	return ok && reason == ""
}

// waitReachable waits until a connection to one of the servers is ready,
// for at most the reconnect wait; it reports whether one is.
func (c *Conn) waitReachable(ctx context.Context) bool {
	if c.reconnectWait <= 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, c.reconnectWait)
	defer cancel()
	ready := make(chan struct{}, len(c.conns))
	for _, conn := range c.conns {
		go func() {
			for {
				state := conn.GetState()
				switch state {
				case connectivity.Ready:
					ready <- struct{}{}
					return
				case connectivity.Idle:
					conn.Connect()
				}
				if !conn.WaitForStateChange(ctx, state) {
					return
				}
			}
		}()
	}
	select {
	case <-ready:
		return true
	case <-ctx.Done():
		return false
	}
}

// moveOn makes the next call start at the server after idx, unless another
// call moved on already: the server at idx said it is unavailable (shutting
// down, not synced) after accepting a stream.
func (c *Conn) moveOn(idx int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current == idx {
		c.current = (idx + 1) % len(c.clients)
	}
}

// kind is the Kind of a resource type's objects, as kube-fanout reports it
// to a caller listing in namespace (remembered: it never changes while a
// server runs).
func (c *Conn) kind(ctx context.Context, ref *pb.ResourceRef, namespace string) (string, error) {
	key := resourceKey{ref.GetGroup(), ref.GetVersion(), ref.GetResource()}
	c.mu.Lock()
	kind, ok := c.kinds[key]
	c.mu.Unlock()
	if ok {
		return kind, nil
	}
	// Asked for this type only: a caller refused it learns why, in the API
	// server's words (a server that predates the field describes every type
	// the caller may list, and one it may not is then missing).
	var resp *pb.ListResourcesResponse
	_, err := c.call(ctx, func(client pb.KubeFanoutClient) (err error) {
		resp, err = client.ListResources(ctx, &pb.ListResourcesRequest{Namespace: namespace, Resource: ref})
		return err
	})
	if err != nil {
		return "", statusError(err)
	}
	resources := resp.GetResources()
	for _, r := range resources {
		if r.GetResource().GetGroup() == key.group && r.GetResource().GetVersion() == key.version && r.GetResource().GetResource() == key.resource {
			c.mu.Lock()
			c.kinds[key] = r.GetKind()
			c.mu.Unlock()
			return r.GetKind(), nil
		}
	}
	return "", statusError(status.Errorf(codes.NotFound, "kube-fanout does not serve %s", describe(ref)))
}

// Resources lists the resource types the server serves, with their cache
// state. With authorization on, only those the caller may list in
// namespace ("": cluster-wide) are listed, so a caller whose Roles are per
// namespace names one of its namespaces.
func (c *Conn) Resources(ctx context.Context, namespace string) ([]*pb.ResourceStatus, error) {
	var resp *pb.ListResourcesResponse
	_, err := c.call(ctx, func(client pb.KubeFanoutClient) (err error) {
		resp, err = client.ListResources(ctx, &pb.ListResourcesRequest{Namespace: namespace})
		return err
	})
	if err != nil {
		return nil, statusError(err)
	}
	return resp.GetResources(), nil
}

func describe(ref *pb.ResourceRef) string {
	if ref.GetGroup() == "" {
		return ref.GetVersion() + "/" + ref.GetResource()
	}
	return ref.GetGroup() + "/" + ref.GetVersion() + "/" + ref.GetResource()
}

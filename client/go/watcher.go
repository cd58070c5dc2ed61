package kubefanout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

type watchSettings struct {
	decode decoder
	// bookmarks: the caller allowed bookmarks (kube-fanout always sends
	// the ones closing units).
	bookmarks bool
	// dropInitialsEnd: the caller asked for the legacy initial ADDED events,
	// which the API server sends without a closing bookmark.
	dropInitialsEnd bool
	timeoutSeconds  *int64
}

// watcher is a watch.Interface over one kube-fanout Watch stream.
type watcher struct {
	result chan watch.Event
	cancel context.CancelFunc
}

func (w *watcher) Stop()                          { w.cancel() }
func (w *watcher) ResultChan() <-chan watch.Event { return w.result }

// startWatch opens the stream (moving to the next server while the current
// one cannot be reached) and pumps it into a watch.Interface. When no
// server answers the error wraps a 429, so the reflector backs off and
// watches again from where it was, as it does when the API server refuses
// connections.
func startWatch(ctx context.Context, conn *Conn, req *pb.WatchRequest, s watchSettings) (watch.Interface, error) {
	ctx, cancel := context.WithCancel(ctx)
	if s.timeoutSeconds != nil && *s.timeoutSeconds > 0 {
		// The API server ends a watch cleanly at its timeout; so does this
		// one (the stream's context ends, the channel closes, no error).
		ctx, cancel = withTimeout(ctx, cancel, time.Duration(*s.timeoutSeconds)*time.Second)
	}
	var stream pb.KubeFanout_WatchClient
	server, err := conn.call(ctx, func(client pb.KubeFanoutClient) (err error) {
		if stream, err = client.Watch(ctx, req); err != nil {
			return err
		}
		// Headers arrive once the server accepted the stream (or failed it
		// at once), so an unreachable server is found here, not later.
		_, err = stream.Header()
		return err
	})
	if err != nil {
		cancel()
		return nil, statusError(err)
	}
	w := &watcher{result: make(chan watch.Event), cancel: cancel}
	go func() {
		// A server that ends the stream as unavailable (shutting down, not
		// synced, gone) is left for the next one, where the reflector's
		// next watch resumes.
		if w.pump(ctx, stream, s) == codes.Unavailable {
			conn.moveOn(server)
		}
	}()
	return w, nil
}

func withTimeout(ctx context.Context, cancel context.CancelFunc, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancelTimeout := context.WithTimeout(ctx, d)
	return ctx, func() { cancelTimeout(); cancel() }
}

// pump delivers the stream's events until it ends, the watch is stopped, or
// its timeout passes; then it closes the result channel and returns the
// code the stream ended with (OK when it ended cleanly or was stopped).
//
// A stream that ended because its server is going (ShuttingDown) or gone
// (the connection was lost) also closes the channel without an error, as
// client-go's own watch does when the API server's connection breaks: the
// reflector watches again at once from its last resourceVersion, and that
// watch waits for a reachable server (see Conn.call). An error would make
// the reflector back off first, and its backoff outlives the restart.
//
// Re-sync units: kube-fanout sends what the upstream lost as a unit of
// events with resync=true, to be applied together. A watch.Interface
// delivers events one by one into the informer's store, so applying a unit
// event by event would show states that never existed on the API server.
// At the first resync event, before delivering any of the unit, the watch
// ends with 410 Expired instead: the reflector relists (or re-runs its
// watch-list) and replaces its store in one step, which is atomic.
func (w *watcher) pump(ctx context.Context, stream pb.KubeFanout_WatchClient, s watchSettings) codes.Code {
	defer close(w.result)
	defer w.cancel()
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil || timedOut(ctx, err) || retired(err) {
				return codes.OK
			}
			if handedOver(err) {
				return codes.Unavailable
			}
			w.send(ctx, errorEvent(statusError(err)))
			return status.Code(err)
		}
		if ev.GetResync() {
			w.send(ctx, errorEvent(apierrors.NewResourceExpired(fmt.Sprintf(
				"kube-fanout: the upstream lost history; a re-sync unit at resourceVersion %s follows, relist to apply it atomically",
				ev.GetResourceVersion()))))
			return codes.OutOfRange
		}
		event, deliver, err := convert(ev, s)
		if err != nil {
			w.send(ctx, errorEvent(apierrors.NewInternalError(err)))
			return codes.Internal
		}
		if deliver && !w.send(ctx, event) {
			return codes.OK
		}
	}
}

// send delivers one event unless the watch was stopped first.
func (w *watcher) send(ctx context.Context, event watch.Event) bool {
	select {
	case w.result <- event:
		return true
	case <-ctx.Done():
		return false
	}
}

func errorEvent(err error) watch.Event {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		st := status.Status()
		return watch.Event{Type: watch.Error, Object: &st}
	}
	return watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(err).ErrStatus}
}

// convert decodes one event; deliver is false for the bookmarks the
// caller did not ask for.
func convert(ev *pb.WatchEvent, s watchSettings) (watch.Event, bool, error) {
	var typ watch.EventType
	switch ev.GetType() {
	case pb.EventType_ADDED:
		typ = watch.Added
	case pb.EventType_MODIFIED:
		typ = watch.Modified
	case pb.EventType_DELETED:
		typ = watch.Deleted
	case pb.EventType_BOOKMARK:
		typ = watch.Bookmark
	default:
		return watch.Event{}, false, fmt.Errorf("kube-fanout sent an event of unknown type %d at resourceVersion %q", ev.GetType(), ev.GetResourceVersion())
	}
	obj, err := s.decode.object([]byte(ev.GetObject()))
	if err != nil {
		return watch.Event{}, false, fmt.Errorf("decoding a %s event at resourceVersion %q: %w", typ, ev.GetResourceVersion(), err)
	}
	if typ == watch.Bookmark && (!s.bookmarks || (s.dropInitialsEnd && isInitialEventsEnd(obj))) {
		return watch.Event{}, false, nil
	}
	return watch.Event{Type: typ, Object: obj}, true, nil
}

func isInitialEventsEnd(obj runtime.Object) bool {
	accessor, ok := obj.(metav1.Object)
	return ok && accessor.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
}

// timedOut reports whether err ends the stream because its timeout passed:
// the deadline travels to the server, which may cancel the stream a moment
// before this side's own timer fires.
func timedOut(ctx context.Context, err error) bool {
	deadline, ok := ctx.Deadline()
	code := status.Code(err)
	return ok && (code == codes.Canceled || code == codes.DeadlineExceeded) &&
		time.Until(deadline) < 100*time.Millisecond
}

// handedOver reports whether err ends the stream because its server is
// shutting down (it names the resourceVersion to resume from elsewhere) or
// could no longer be reached: the watch resumes on the next server.
func handedOver(err error) bool {
	reason, ok := unavailableReason(err)
	return ok && (reason == reasonShuttingDown || reason == "")
}

// retired reports whether err ends the stream because kube-fanout retired
// its connection (--max-connection-age-seconds). Like a watch timeout, the
// stream then ends cleanly: the reflector's next watch, from the last
// resourceVersion it saw, goes over a new connection (grpc-go dials one
// after the server's GOAWAY), perhaps to another replica, which is the
// point of retiring it.
func retired(err error) bool {
	reason, ok := unavailableReason(err)
	return ok && reason == reasonRetired
}

package kubefanout

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

// ListWatch lists and watches one resource type through kube-fanout. It is a
// cache.ListerWatcher and a cache.ListerWatcherWithContext, so informers and
// reflectors take it in place of the API server's.
type ListWatch struct {
	conn      *Conn
	resource  *pb.ResourceRef
	namespace string
	tweak     func(*metav1.ListOptions)
	decode    decoder
	// metadataOnly asks the server for PartialObjectMetadata (Metadata()).
	metadataOnly bool
}

var (
	_ cache.ListerWatcher            = (*ListWatch)(nil)
	_ cache.ListerWatcherWithContext = (*ListWatch)(nil)
)

// ListWatchOption chooses how objects are decoded.
type ListWatchOption func(*ListWatch)

// WithScheme decodes objects into the typed Go structs registered in s (for
// example a scheme with CRD types). The default is client-go's scheme of
// built-in types.
func WithScheme(s *runtime.Scheme) ListWatchOption {
	return func(lw *ListWatch) { lw.decode = typed(serializer.NewCodecFactory(s).UniversalDeserializer()) }
}

// Unstructured decodes objects into *unstructured.Unstructured, for dynamic
// informers.
func Unstructured() ListWatchOption {
	return func(lw *ListWatch) { lw.decode = typed(unstructured.UnstructuredJSONScheme) }
}

// Metadata decodes objects into *metav1.PartialObjectMetadata, for
// metadata-only informers, and asks kube-fanout for only the objects'
// metadata (metadata_only), as client-go's metadata client asks the API
// server: the objects arrive as meta.k8s.io/v1 PartialObjectMetadata, a
// fraction of the bytes.
func Metadata() ListWatchOption {
	return func(lw *ListWatch) {
		lw.decode = metadataOnly{}
		lw.metadataOnly = true
	}
}

// NewListWatch lists and watches the resource type gvr in namespace (""
// for all) through conn. tweak, if not nil, adjusts every request's options
// (label and field selectors), like the optionsModifier of
// cache.NewFilteredListWatchFromClient.
func NewListWatch(conn *Conn, gvr schema.GroupVersionResource, namespace string, tweak func(*metav1.ListOptions), opts ...ListWatchOption) *ListWatch {
	lw := &ListWatch{
		conn:      conn,
		resource:  &pb.ResourceRef{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource},
		namespace: namespace,
		tweak:     tweak,
		decode:    typed(scheme.Codecs.UniversalDeserializer()),
	}
	for _, opt := range opts {
		opt(lw)
	}
	return lw
}

// List lists without a context.
//
// Deprecated: use ListWithContext.
func (lw *ListWatch) List(options metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), options)
}

// Watch watches without a context.
//
// Deprecated: use WatchWithContext.
func (lw *ListWatch) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), options)
}

// ListWithContext returns one page of kube-fanout's current state, honouring
// the selectors and limit/continue. kube-fanout lists only its current
// state, so resourceVersion is checked, not served: a list not as fresh as a
// non-zero resourceVersion fails as "too large resource version" (the
// reflector then lists from the freshest state), and resourceVersionMatch
// Exact at another version fails as Expired.
func (lw *ListWatch) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	if lw.tweak != nil {
		lw.tweak(&options)
	}
	kind, err := lw.conn.kind(ctx, lw.resource, lw.namespace)
	if err != nil {
		return nil, err
	}
	req := &pb.ListRequest{
		Resource:      lw.resource,
		Namespace:     lw.namespace,
		LabelSelector: options.LabelSelector,
		FieldSelector: options.FieldSelector,
		Continue:      options.Continue,
		MetadataOnly:  lw.metadataOnly,
	}
	if options.Limit > 0 {
		req.Limit = uint32(min(options.Limit, int64(^uint32(0))))
	}
	var resp *pb.ListResponse
	_, err = lw.conn.call(ctx, func(client pb.KubeFanoutClient) (err error) {
		resp, err = client.List(ctx, req)
		return err
	})
	if err != nil {
		return nil, statusError(err)
	}
	if options.Continue == "" {
		if err := checkFreshness(options, resp.GetResourceVersion()); err != nil {
			return nil, err
		}
	}
	return lw.decode.list(listJSON(lw.resource, kind, resp))
}

// checkFreshness fails a list at got that the options do not accept.
func checkFreshness(options metav1.ListOptions, got string) error {
	asked := options.ResourceVersion
	if asked == "" || asked == "0" {
		return nil
	}
	if options.ResourceVersionMatch == metav1.ResourceVersionMatchExact && got != asked {
		return apierrors.NewResourceExpired(fmt.Sprintf("kube-fanout lists its current state (resourceVersion %s), not resourceVersion %s", got, asked))
	}
	a, errA := strconv.ParseUint(asked, 10, 64)
	g, errG := strconv.ParseUint(got, 10, 64)
	if errA == nil && errG == nil && g < a {
		return tooLargeResourceVersion(fmt.Sprintf("kube-fanout: Too large resource version: %s, current: %s", asked, got))
	}
	return nil
}

// listJSON wraps a page's objects, which are already JSON, into the JSON of
// a Kubernetes list, so any decoder (typed, unstructured) takes it whole.
func listJSON(ref *pb.ResourceRef, kind string, resp *pb.ListResponse) []byte {
	apiVersion := ref.GetVersion()
	if ref.GetGroup() != "" {
		apiVersion = ref.GetGroup() + "/" + ref.GetVersion()
	}
	meta := map[string]any{"resourceVersion": resp.GetResourceVersion()}
	if resp.GetContinue() != "" {
		meta["continue"] = resp.GetContinue()
		meta["remainingItemCount"] = resp.GetRemainingItemCount()
	}
	head, _ := json.Marshal(map[string]any{"apiVersion": apiVersion, "kind": kind + "List", "metadata": meta})
	var buf bytes.Buffer
	buf.Write(head[:len(head)-1])
	buf.WriteString(`,"items":[`)
	for i, obj := range resp.GetObjects() {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(obj)
	}
	buf.WriteString("]}")
	return buf.Bytes()
}

// WatchWithContext watches through kube-fanout with the options client-go's
// reflector passes: the resourceVersion to resume after, sendInitialEvents
// (a watch-list ending with the initial-events-end bookmark),
// allowWatchBookmarks, timeoutSeconds and the selectors. As with the API
// server, a watch from resourceVersion "" or "0" without sendInitialEvents
// starts with ADDED events for the current objects and no closing bookmark.
// The stream's failures arrive as watch.Error events holding the
// metav1.Status the API server would have sent (see statusError), and a
// re-sync unit ends the watch with Expired (see the watcher).
func (lw *ListWatch) WatchWithContext(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	if lw.tweak != nil {
		lw.tweak(&options)
	}
	initial := options.SendInitialEvents != nil && *options.SendInitialEvents
	legacyInitial := options.SendInitialEvents == nil && (options.ResourceVersion == "" || options.ResourceVersion == "0")
	req := &pb.WatchRequest{
		Resource:          lw.resource,
		Namespace:         lw.namespace,
		LabelSelector:     options.LabelSelector,
		FieldSelector:     options.FieldSelector,
		ResourceVersion:   options.ResourceVersion,
		SendInitialEvents: initial || legacyInitial,
		AllowBookmarks:    options.AllowWatchBookmarks,
		MetadataOnly:      lw.metadataOnly,
	}
	return startWatch(ctx, lw.conn, req, watchSettings{
		decode:          lw.decode,
		bookmarks:       options.AllowWatchBookmarks,
		dropInitialsEnd: legacyInitial,
		timeoutSeconds:  options.TimeoutSeconds,
	})
}

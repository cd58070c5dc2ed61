// Package crcache makes a controller-runtime manager read through
// kube-fanout while it writes to the API server. NewCacheFunc returns a
// manager's Options.NewCache:
//
//	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme,
//		NewCache: crcache.NewCacheFunc(conn),
//		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{"a": {}, "b": {}}}})
//
// The cache is controller-runtime's own, built from the manager's
// cache.Options: DefaultNamespaces, ByObject (namespaces, label and field
// selectors), DefaultLabelSelector and DefaultFieldSelector give the same
// informers (one per namespace for a multi-namespace cache) as against the
// API server, and each of them lists and watches exactly that namespace
// with exactly those selectors through kube-fanout. A manager whose
// ServiceAccount has Roles in a few namespaces is then authorized by
// kube-fanout as by the API server, and a selector-restricted cache holds
// only the selected objects. Types kube-fanout does not serve keep
// controller-runtime's ListerWatcher on the API server.
package crcache

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	kubefanout "github.com/kube-fanout/kube-fanout/client/go"
)

// served is a resource type kube-fanout serves.
type served struct {
	gvr        schema.GroupVersionResource
	namespaced bool
}

// discoveryTimeout bounds asking kube-fanout which types it serves when
// the cache is made.
const discoveryTimeout = 30 * time.Second

// NewCacheFunc returns a manager's Options.NewCache that feeds from conn
// the informers of the types kube-fanout serves. When the manager makes
// its cache, kube-fanout is asked which types the manager may list in each
// namespace the cache options name (cluster-wide when they name none), so
// that it fails then, not later, when kube-fanout cannot be reached.
// Typed objects are decoded with the cache's scheme, unstructured and
// metadata-only ones as such.
func NewCacheFunc(conn *kubefanout.Conn) cache.NewCacheFunc {
	return func(config *rest.Config, opts cache.Options) (cache.Cache, error) {
		types, err := servedTypes(conn, opts)
		if err != nil {
			return nil, err
		}
		if opts.Scheme == nil {
			opts.Scheme = scheme.Scheme
		}
		client, err := probingClient(config, opts.HTTPClient)
		if err != nil {
			return nil, err
		}
		opts.HTTPClient = client
		next := opts.NewInformer
		if next == nil {
			next = toolscache.NewSharedIndexInformer
		}
		opts.NewInformer = func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
			gvk, decode, ok := kindOf(obj, opts.Scheme)
			if t, isServed := types[gvk]; ok && isServed {
				if s, probed := probe(lw, t); probed {
					lw = kubefanout.NewListWatch(conn, t.gvr, s.namespace, s.apply, decode)
				}
			}
			return next(lw, obj, resync, indexers)
		}
		return cache.New(config, opts)
	}
}

// servedTypes is the types kube-fanout serves the caller in any of the
// namespaces opts names.
func servedTypes(conn *kubefanout.Conn, opts cache.Options) (map[schema.GroupVersionKind]served, error) {
	namespaces := map[string]bool{}
	for ns := range opts.DefaultNamespaces {
		namespaces[ns] = true
	}
	for _, by := range opts.ByObject {
		for ns := range by.Namespaces {
			namespaces[ns] = true
		}
	}
	if len(namespaces) == 0 {
		namespaces[metav1.NamespaceAll] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), discoveryTimeout)
	defer cancel()
	types := map[schema.GroupVersionKind]served{}
	for ns := range namespaces {
		resources, err := conn.Resources(ctx, ns)
		if err != nil {
			return nil, fmt.Errorf("asking kube-fanout %s which types it serves in namespace %q: %w", conn.Address(), ns, err)
		}
		for _, r := range resources {
			ref := r.GetResource()
			gvk := schema.GroupVersionKind{Group: ref.GetGroup(), Version: ref.GetVersion(), Kind: r.GetKind()}
			types[gvk] = served{
				gvr:        schema.GroupVersionResource{Group: ref.GetGroup(), Version: ref.GetVersion(), Resource: ref.GetResource()},
				namespaced: r.GetNamespaced(),
			}
		}
	}
	return types, nil
}

// kindOf is the object's kind and the decoding its informer expects.
func kindOf(obj runtime.Object, s *runtime.Scheme) (schema.GroupVersionKind, kubefanout.ListWatchOption, bool) {
	switch obj.(type) {
	case runtime.Unstructured:
		return obj.GetObjectKind().GroupVersionKind(), kubefanout.Unstructured(), true
	case *metav1.PartialObjectMetadata:
		return obj.GetObjectKind().GroupVersionKind(), kubefanout.Metadata(), true
	}
	gvk, err := apiutil.GVKForObject(obj, s)
	return gvk, kubefanout.WithScheme(s), err == nil
}

// scope is the namespace and selectors of one of controller-runtime's
// informers.
type scope struct {
	namespace, labels, fields string
}

func (s scope) apply(options *metav1.ListOptions) {
	options.LabelSelector, options.FieldSelector = s.labels, s.fields
}

// controller-runtime builds an informer's namespace and selectors into the
// ListerWatcher it hands NewInformer, where they cannot be read. So it is
// asked: the probe lists through that ListerWatcher with a context marked
// probeKey, and the cache's HTTP client answers a marked request itself,
// noting the namespace and selectors controller-runtime would have asked
// the API server for; nothing leaves the process. Reading the request
// rather than controller-runtime's internals keeps this exact across its
// versions: it is what the API server would have been asked.
type probeKey struct{}

// errProbed ends a probe's request.
var errProbed = errors.New("kube-fanout crcache: scope probe (never sent)")

// probe is the scope of the informer lw lists for, if lw is
// controller-runtime's and asked the HTTP client.
func probe(lw toolscache.ListerWatcher, t served) (scope, bool) {
	var asked *http.Request
	ctx := context.WithValue(context.Background(), probeKey{}, &asked)
	_, _ = toolscache.ToListerWatcherWithContext(lw).ListWithContext(ctx, metav1.ListOptions{})
	if asked == nil {
		return scope{}, false
	}
	s := scope{labels: asked.URL.Query().Get("labelSelector"), fields: asked.URL.Query().Get("fieldSelector")}
	// .../namespaces/NAMESPACE/RESOURCE for one namespace, .../RESOURCE
	// for all (and for cluster-scoped types).
	segments := strings.Split(strings.Trim(asked.URL.Path, "/"), "/")
	n := len(segments)
	if n == 0 || segments[n-1] != t.gvr.Resource {
		return scope{}, false
	}
	if t.namespaced && n >= 3 && segments[n-3] == "namespaces" {
		s.namespace = segments[n-2]
	}
	return s, true
}

// probingClient is the cache's HTTP client with probe requests answered
// in-process; every other request goes out unchanged.
func probingClient(config *rest.Config, client *http.Client) (*http.Client, error) {
	if client == nil {
		var err error
		if client, err = rest.HTTPClientFor(config); err != nil {
			return nil, fmt.Errorf("crcache: HTTP client: %w", err)
		}
	}
	next := client.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	probing := *client
	probing.Transport = probeTransport{next: next}
	return &probing, nil
}

type probeTransport struct{ next http.RoundTripper }

func (p probeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if asked, ok := req.Context().Value(probeKey{}).(**http.Request); ok {
		*asked = req
		return nil, errProbed
	}
	return p.next.RoundTrip(req)
}

// Package crcache makes a controller-runtime manager read through
// kube-fanout while it writes to the API server. controller-runtime's
// extension point for where informers get their objects is
// cache.Options.NewInformer; NewInformerFunc returns one:
//
//	newInformer, err := crcache.NewInformerFunc(ctx, conn, scheme)
//	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme,
//		Cache: cache.Options{NewInformer: newInformer}})
//
// Types kube-fanout serves are listed and watched through it; every other
// type keeps controller-runtime's own ListerWatcher on the API server.
package crcache

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	kubefanout "github.com/kube-fanout/kube-fanout/client/go"
)

// NewInformer has the signature of controller-runtime's
// cache.Options.NewInformer.
type NewInformer = func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer

// NewInformerFunc asks kube-fanout which types it serves (so it fails here,
// not later, when kube-fanout cannot be reached) and returns a
// cache.Options.NewInformer that feeds those types' informers from it.
// Typed objects are decoded with scheme, unstructured and metadata-only
// ones as such.
//
// controller-runtime hands NewInformer a ListerWatcher with its namespace
// and selector restrictions (cache.Options DefaultNamespaces, ByObject)
// already inside, where they cannot be read: an informer fed by kube-fanout
// watches every namespace without selector. Reads stay correct (the cache
// filters by namespace when read), only the memory saving of a narrower
// cache is lost.
func NewInformerFunc(ctx context.Context, conn *kubefanout.Conn, scheme *runtime.Scheme) (NewInformer, error) {
	resources, err := conn.Resources(ctx)
	if err != nil {
		return nil, fmt.Errorf("asking kube-fanout %s which types it serves: %w", conn.Address(), err)
	}
	served := map[schema.GroupVersionKind]schema.GroupVersionResource{}
	for _, r := range resources {
		ref := r.GetResource()
		gvk := schema.GroupVersionKind{Group: ref.GetGroup(), Version: ref.GetVersion(), Kind: r.GetKind()}
		served[gvk] = schema.GroupVersionResource{Group: ref.GetGroup(), Version: ref.GetVersion(), Resource: ref.GetResource()}
	}
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		gvk, decode, ok := kindOf(obj, scheme)
		if gvr, served := served[gvk]; ok && served {
			lw = kubefanout.NewListWatch(conn, gvr, metav1.NamespaceAll, nil, decode)
		}
		return toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
	}, nil
}

// kindOf is the object's kind and the decoding its informer expects.
func kindOf(obj runtime.Object, scheme *runtime.Scheme) (schema.GroupVersionKind, kubefanout.ListWatchOption, bool) {
	switch obj.(type) {
	case runtime.Unstructured:
		return obj.GetObjectKind().GroupVersionKind(), kubefanout.Unstructured(), true
	case *metav1.PartialObjectMetadata:
		return obj.GetObjectKind().GroupVersionKind(), kubefanout.Metadata(), true
	}
	gvk, err := apiutil.GVKForObject(obj, scheme)
	return gvk, kubefanout.WithScheme(scheme), err == nil
}

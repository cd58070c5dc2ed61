// Package configmapcontroller is an example controller-runtime controller
// that reads through kube-fanout and writes to the API server: for every
// ConfigMap labelled kube-fanout.io/example=true it keeps the annotation
// kube-fanout.io/keys equal to the number of keys in its data. cmd/ runs it.
package configmapcontroller

import (
	"context"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

const (
	// Label marks the ConfigMaps the controller looks after.
	Label = "kube-fanout.io/example"
	// Annotation is what the controller writes: the number of data keys.
	Annotation = "kube-fanout.io/keys"
)

// Reconciler keeps Annotation up to date.
type Reconciler struct {
	client.Client
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[Label] == "true"
		}))).
		Complete(r)
}

// Reconcile reads the ConfigMap from the cache (kube-fanout) and patches the
// annotation on the API server when it differs.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cm corev1.ConfigMap
	if err := r.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	want := strconv.Itoa(len(cm.Data))
	if cm.Annotations[Annotation] == want {
		return ctrl.Result{}, nil
	}
	patch := []byte(`{"metadata":{"annotations":{"` + Annotation + `":"` + want + `"}}}`)
	return ctrl.Result{}, r.Patch(ctx, &cm, client.RawPatch(types.MergePatchType, patch))
}

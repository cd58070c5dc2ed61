package main

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsv1beta1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1beta1 "k8s.io/apimachinery/pkg/apis/meta/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationv1beta1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1beta1"
)

// newScheme holds every kind an API server of the pinned version serves
// from its built-in types: client-go's scheme (every group of k8s.io/api),
// the apiextensions and apiregistration groups, and the meta.k8s.io kinds
// the API server answers with (PartialObjectMetadata, its list, Table).
func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(apiextensionsv1beta1.AddToScheme(s))
	utilruntime.Must(apiregistrationv1.AddToScheme(s))
	utilruntime.Must(apiregistrationv1beta1.AddToScheme(s))
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(metav1.AddMetaToScheme(s))
	utilruntime.Must(metav1beta1.AddMetaToScheme(s))
	return s
}

// codecs are the serializers the API server negotiates: its JSON decoder
// (case-sensitive, unknown fields dropped) and its protobuf serializers,
// the enveloped one for objects and the raw one for watch events.
type codecs struct {
	scheme   *runtime.Scheme
	json     *json.Serializer
	protobuf *protobuf.Serializer
	raw      *protobuf.RawSerializer
}

func newCodecs() codecs {
	s := newScheme()
	return codecs{
		scheme:   s,
		json:     json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{}),
		protobuf: protobuf.NewSerializer(s, s),
		raw:      protobuf.NewRawSerializer(s, s),
	}
}

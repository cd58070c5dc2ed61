package kubefanout

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// decoder turns kube-fanout's JSON into the Go objects an informer expects.
type decoder interface {
	object(data []byte) (runtime.Object, error)
	list(data []byte) (runtime.Object, error)
}

// typed decodes with a runtime decoder, which picks the Go type from the
// JSON's apiVersion and kind (lists included).
func typed(d runtime.Decoder) decoder { return runtimeDecoder{d} }

type runtimeDecoder struct{ runtime.Decoder }

func (d runtimeDecoder) object(data []byte) (runtime.Object, error) {
	obj, _, err := d.Decode(data, nil, nil)
	return obj, err
}

func (d runtimeDecoder) list(data []byte) (runtime.Object, error) { return d.object(data) }

// metadataOnly decodes into PartialObjectMetadata, keeping the apiVersion
// and kind the server sent (meta.k8s.io/v1 PartialObjectMetadata, as the
// API server's metadata-only responses carry).
type metadataOnly struct{}

func (metadataOnly) object(data []byte) (runtime.Object, error) {
	obj := &metav1.PartialObjectMetadata{}
	return obj, json.Unmarshal(data, obj)
}

func (metadataOnly) list(data []byte) (runtime.Object, error) {
	list := &metav1.PartialObjectMetadataList{}
	return list, json.Unmarshal(data, list)
}

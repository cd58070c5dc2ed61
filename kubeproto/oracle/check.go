package main

import (
	"bufio"
	"bytes"
	encjson "encoding/json"
	"fmt"
	"io"
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	kjson "sigs.k8s.io/json"
)

// A verdict answers one case: whether Go decodes kube-fanout's bytes to an
// object semantically equal to what it decodes from the JSON, and whether
// they are the bytes apimachinery's serializer writes for that object.
//
// "What it decodes from the JSON" is taken as a client of the API server
// gets it in protobuf: the JSON's object through Go's own encoding and
// decoding, since protobuf itself holds less than the JSON does (no kind on
// nested objects, whole seconds of a metav1.Time).
type verdict struct {
	Equal     bool   `json:"equal"`
	Identical bool   `json:"identical"`
	Error     string `json:"error,omitempty"`
	Want      []byte `json:"want,omitempty"`
}

func check(r io.Reader, w io.Writer) error {
	c := newCodecs()
	in := bufio.NewScanner(r)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := bufio.NewWriter(w)
	defer out.Flush()
	enc := encjson.NewEncoder(out)
	for in.Scan() {
		var tc testCase
		if err := encjson.Unmarshal(in.Bytes(), &tc); err != nil {
			return err
		}
		want, got, err := c.answer(tc)
		v := verdict{Want: want}
		if err != nil {
			v.Error = err.Error()
		} else {
			v.Identical = bytes.Equal(want, tc.Ours)
			v.Equal = got.typeJSON == got.typeOurs && equality.Semantic.DeepEqual(got.fromJSON, got.fromOurs)
		}
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return in.Err()
}

// decoded is what Go reads from the JSON and from kube-fanout's bytes.
type decoded struct {
	fromJSON, fromOurs runtime.Object
	typeJSON, typeOurs string
}

// answer is Go's encoding of the case's JSON, and both decodings.
func (c codecs) answer(tc testCase) ([]byte, decoded, error) {
	gvk := schema.FromAPIVersionAndKind(tc.APIVersion, tc.Kind)
	var d decoded
	switch tc.Mode {
	case "object", "watch":
		obj, err := c.decodeJSON(gvk, tc.JSON)
		if err != nil {
			return nil, d, err
		}
		want, err := c.encode(obj)
		if err != nil {
			return nil, d, err
		}
		if d.fromJSON, err = c.decodeProtobuf(gvk, want); err != nil {
			return nil, d, fmt.Errorf("Go cannot decode its own encoding: %w", err)
		}
		if tc.Mode == "watch" {
			d.typeJSON = tc.EventType
			if want, err = c.frame(tc.EventType, want); err != nil {
				return nil, d, err
			}
			d.typeOurs, d.fromOurs, err = c.decodeWatch(gvk, tc.Ours)
		} else {
			d.fromOurs, err = c.decodeProtobuf(gvk, tc.Ours)
		}
		if err != nil {
			return want, d, fmt.Errorf("Go cannot decode kube-fanout's bytes: %w", err)
		}
		normalize(gvk, d.fromJSON, d.fromOurs)
		return want, d, nil
	case "list":
		list, err := c.scheme.New(gvk)
		if err != nil {
			return nil, d, err
		}
		items := reflect.ValueOf(list).Elem().FieldByName("Items")
		if !items.IsValid() || items.Kind() != reflect.Slice {
			return nil, d, fmt.Errorf("%s has no items", gvk)
		}
		itemType := items.Type().Elem()
		itemGVK, err := c.kindOf(reflect.New(itemType).Interface().(runtime.Object))
		if err != nil {
			return nil, d, err
		}
		for _, text := range tc.Items {
			item, err := c.decodeJSON(itemGVK, text)
			if err != nil {
				return nil, d, err
			}
			// List items carry no kind, as the API server's do not.
			item.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
			items.Set(reflect.Append(items, reflect.ValueOf(item).Elem()))
		}
		lm, err := meta.ListAccessor(list)
		if err != nil {
			return nil, d, err
		}
		lm.SetResourceVersion(tc.ListMeta.ResourceVersion)
		lm.SetContinue(tc.ListMeta.Continue)
		lm.SetRemainingItemCount(tc.ListMeta.RemainingItemCount)
		list.GetObjectKind().SetGroupVersionKind(gvk)
		want, err := c.encode(list)
		if err != nil {
			return nil, d, err
		}
		if d.fromJSON, err = c.decodeProtobuf(gvk, want); err != nil {
			return nil, d, fmt.Errorf("Go cannot decode its own encoding: %w", err)
		}
		if d.fromOurs, err = c.decodeProtobuf(gvk, tc.Ours); err != nil {
			return want, d, fmt.Errorf("Go cannot decode kube-fanout's bytes: %w", err)
		}
		normalize(gvk, d.fromJSON, d.fromOurs)
		return want, d, nil
	}
	return nil, d, fmt.Errorf("unknown mode %q", tc.Mode)
}

func (c codecs) kindOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	kinds, _, err := c.scheme.ObjectKinds(obj)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	return kinds[0], nil
}

// decodeJSON reads text as the API server's JSON decoder reads a body into
// a typed object (case-sensitive keys, unknown ones dropped).
func (c codecs) decodeJSON(gvk schema.GroupVersionKind, text string) (runtime.Object, error) {
	obj, err := c.scheme.New(gvk)
	if err != nil {
		return nil, err
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts([]byte(text), obj); err != nil {
		return nil, fmt.Errorf("the JSON does not decode: %w", err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj, nil
}

func (c codecs) encode(obj runtime.Object) ([]byte, error) {
	var b bytes.Buffer
	err := c.protobuf.Encode(obj, &b)
	return b.Bytes(), err
}

// frame is the watch event as the API server's watch encoder writes it:
// metav1.WatchEvent with the enveloped object, by the raw serializer,
// length-prefixed (handlers/watch.go, response.go).
func (c codecs) frame(eventType string, object []byte) ([]byte, error) {
	var b bytes.Buffer
	ev := &metav1.WatchEvent{Type: eventType, Object: runtime.RawExtension{Raw: object}}
	if err := c.raw.Encode(ev, protobuf.LengthDelimitedFramer.NewFrameWriter(&b)); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// decodeProtobuf reads an enveloped object, which must say it is of kind gvk.
func (c codecs) decodeProtobuf(gvk schema.GroupVersionKind, b []byte) (runtime.Object, error) {
	obj, got, err := c.protobuf.Decode(b, nil, nil)
	if err == nil && *got != gvk {
		err = fmt.Errorf("the envelope says %s, not %s", got, gvk)
	}
	return obj, err
}

// decodeWatch reads one frame as client-go's watch reads a stream.
func (c codecs) decodeWatch(gvk schema.GroupVersionKind, b []byte) (string, runtime.Object, error) {
	frames := protobuf.LengthDelimitedFramer.NewFrameReader(io.NopCloser(bytes.NewReader(b)))
	dec := streaming.NewDecoder(frames, c.raw)
	var ev metav1.WatchEvent
	if _, _, err := dec.Decode(nil, &ev); err != nil {
		return "", nil, err
	}
	if _, _, err := dec.Decode(nil, &metav1.WatchEvent{}); err != io.EOF {
		return "", nil, fmt.Errorf("more than one frame (%v)", err)
	}
	obj, err := c.decodeProtobuf(gvk, ev.Object.Raw)
	return ev.Type, obj, err
}

// normalize sets both objects' kind to the asked one: protobuf carries it
// in the envelope only (checked by decodeProtobuf).
func normalize(gvk schema.GroupVersionKind, objs ...runtime.Object) {
	for _, o := range objs {
		o.GetObjectKind().SetGroupVersionKind(gvk)
	}
}

package main

import (
	"bufio"
	"bytes"
	encjson "encoding/json"
	"fmt"
	"io"
	"math/rand"
	"reflect"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsv1beta1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/randfill"
)

// A case is one input for kube-fanout's encoder and, with its encoding
// ("ours", base64) added, one question for check.
type testCase struct {
	Mode       string    `json:"mode"` // object, list or watch
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	JSON       string    `json:"json,omitempty"` // object and watch: the object's JSON text
	EventType  string    `json:"eventType,omitempty"`
	ListMeta   *listMeta `json:"listMeta,omitempty"` // list
	Items      []string  `json:"items,omitempty"`    // list: the items' JSON texts
	Ours       []byte    `json:"ours,omitempty"`
}

type listMeta struct {
	ResourceVersion    string `json:"resourceVersion"`
	Continue           string `json:"continue"`
	RemainingItemCount *int64 `json:"remainingItemCount,omitempty"`
}

var eventTypes = []string{"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"}

// fuzz writes, for every kind with a protobuf form, count random objects
// as JSON (as the API server's encoder writes them), and for each a list
// of it, a watch event of it and its PartialObjectMetadata.
func fuzz(w io.Writer, seed int64, count int) error {
	c := newCodecs()
	r := rand.New(rand.NewSource(seed))
	filler := randfill.NewWithSeed(seed).NilChance(0.25).NumElements(0, 2).MaxDepth(8).Funcs(fillers()...)
	out := bufio.NewWriter(w)
	defer out.Flush()
	enc := encjson.NewEncoder(out)
	var gvks []schema.GroupVersionKind
	for gvk := range c.scheme.AllKnownTypes() {
		if gvk.Version != runtime.APIVersionInternal && servable(c.scheme, gvk) {
			gvks = append(gvks, gvk)
		}
	}
	sort.Slice(gvks, func(i, j int) bool { return gvks[i].String() < gvks[j].String() })
	skipped := 0
	for _, gvk := range gvks {
		for i := 0; i < count; i++ {
			obj, err := c.scheme.New(gvk)
			if err != nil {
				return err
			}
			filler.Fill(obj)
			obj.GetObjectKind().SetGroupVersionKind(gvk)
			var text bytes.Buffer
			if err := c.json.Encode(obj, &text); err != nil {
				skipped++ // a value its JSON cannot hold (the filler's, not the API server's)
				continue
			}
			js := strings.TrimSuffix(text.String(), "\n")
			av, kind := gvk.GroupVersion().String(), gvk.Kind
			cases := []testCase{
				{Mode: "object", APIVersion: av, Kind: kind, JSON: js},
				{Mode: "watch", APIVersion: av, Kind: kind, EventType: eventTypes[r.Intn(len(eventTypes))], JSON: js},
			}
			if listOf(c, gvk) {
				cases = append(cases, testCase{Mode: "list", APIVersion: av, Kind: kind + "List", ListMeta: randomListMeta(r), Items: []string{js, js}})
			}
			if strings.Contains(js, `"metadata":`) {
				cases = append(cases,
					testCase{Mode: "object", APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata", JSON: js},
					testCase{Mode: "list", APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList", ListMeta: randomListMeta(r), Items: []string{js}})
			}
			for _, tc := range cases {
				if err := enc.Encode(tc); err != nil {
					return err
				}
			}
		}
	}
	if skipped > len(gvks)*count/10 {
		return fmt.Errorf("%d of %d random objects had no JSON form", skipped, len(gvks)*count)
	}
	return nil
}

func randomListMeta(r *rand.Rand) *listMeta {
	m := &listMeta{ResourceVersion: fmt.Sprint(r.Int63()), Continue: randomText(r)}
	if r.Intn(2) == 0 {
		n := r.Int63n(1 << 40)
		m.RemainingItemCount = &n
	}
	return m
}

// randomText mixes ASCII, escapes JSON needs and characters beyond the BMP.
func randomText(r *rand.Rand) string {
	alphabet := []string{"a", "Z", "0", "-", ".", "\"", "\\", "\n", "<", "&", "é", "日本", "🚀", "\u2028", " "}
	var b strings.Builder
	for n := r.Intn(8); n > 0; n-- {
		b.WriteString(alphabet[r.Intn(len(alphabet))])
	}
	return b.String()
}

// fillers give the types whose random Go value has no JSON form (raw
// JSON, quantities) values the API server could hold.
func fillers() []interface{} {
	rawJSON := func(c randfill.Continue) []byte {
		switch c.Intn(6) {
		case 0:
			return nil
		case 1:
			return []byte(fmt.Sprintf(`{"apiVersion":"example.com/v1","kind":"Thing","spec":{"n":%d,"s":%q}}`, c.Int63(), randomText(c.Rand)))
		case 2:
			return []byte(fmt.Sprintf(`[1,"%d",{"a":null},true]`, c.Intn(100)))
		case 3:
			return []byte(fmt.Sprintf("%q", randomText(c.Rand)))
		case 4:
			return []byte(fmt.Sprint(c.Float64()))
		default:
			return []byte(`{}`)
		}
	}
	return []interface{}{
		func(e *runtime.RawExtension, c randfill.Continue) {
			e.Raw = rawJSON(c)
			if len(e.Raw) > 0 && e.Raw[0] != '{' {
				e.Raw = []byte(`{"kind":"X","apiVersion":"v1"}`)
			}
		},
		func(j *apiextensionsv1.JSON, c randfill.Continue) { j.Raw = rawJSON(c) },
		func(j *apiextensionsv1beta1.JSON, c randfill.Continue) { j.Raw = rawJSON(c) },
		func(f *metav1.FieldsV1, c randfill.Continue) {
			f.Raw = []byte(fmt.Sprintf(`{"f:metadata":{"f:labels":{"f:%s":{}}}}`, fmt.Sprint(c.Intn(1000))))
		},
		func(q *resource.Quantity, c randfill.Continue) {
			formats := []resource.Format{resource.DecimalSI, resource.BinarySI, resource.DecimalExponent}
			v := c.Int63n(1 << uint(c.Intn(50)+1))
			if c.Intn(4) == 0 {
				v = -v
			}
			switch c.Intn(3) {
			case 0:
				*q = *resource.NewQuantity(v, formats[c.Intn(len(formats))])
			case 1:
				*q = *resource.NewMilliQuantity(v, resource.DecimalSI)
			default:
				*q = *resource.NewScaledQuantity(v, resource.Scale(c.Intn(19)-9))
			}
		},
	}
}

// listOf tells whether gvk has a list kind whose items are of its type.
func listOf(c codecs, gvk schema.GroupVersionKind) bool {
	list, err := c.scheme.New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err != nil {
		return false
	}
	items, ok := reflect.TypeOf(list).Elem().FieldByName("Items")
	t, _ := c.scheme.AllKnownTypes()[gvk]
	return ok && items.Type.Kind() == reflect.Slice && items.Type.Elem() == t
}

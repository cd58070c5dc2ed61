package main

import (
	"encoding/hex"
	encjson "encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsv1beta1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The schema is one line a record, fields separated by one space:
//
//	kind    API_VERSION KIND MESSAGE
//	message NAME FORM ZERO
//	field   PROTO_NAME JSON_NAME NUMBER TYPE CARDINALITY [inline]
//
// A message is named by its Go type (package path, a dot, the type's name).
// FORM says how its JSON reads: "object" (a JSON object of its fields), or
// one of the forms of the types whose JSON Kubernetes writes by hand
// (forms below), or "array" for a named slice that protobuf wraps in a
// message of one repeated field "items". ZERO is the hex of the protobuf
// encoding of the type's zero value as its generated Marshal writes it ("-"
// when empty): the fields a message carries even when their JSON is absent
// or null (every non-pointer field) are exactly those in it. Each field
// line follows its message, by number: JSON_NAME is "-" when the field has
// no JSON key, TYPE is string, bytes, bool, int32, int64, double or a
// message's name (no other scalar occurs in the types; one that appears
// fails the generator), CARDINALITY is one, rep or map (a map
// from string keys to TYPE), and "inline" marks a field whose JSON keys sit
// in the enclosing object (`json:",inline"`).

// forms are the types whose JSON form is not a JSON object of their
// protobuf fields (each implements json.Unmarshaler).
var forms = map[reflect.Type]string{
	reflect.TypeFor[metav1.Time]():                                       "time",
	reflect.TypeFor[metav1.MicroTime]():                                  "microtime",
	reflect.TypeFor[resource.Quantity]():                                 "quantity",
	reflect.TypeFor[intstr.IntOrString]():                                "intorstring",
	reflect.TypeFor[runtime.RawExtension]():                              "raw",
	reflect.TypeFor[metav1.FieldsV1]():                                   "raw",
	reflect.TypeFor[apiextensionsv1.JSON]():                              "raw",
	reflect.TypeFor[apiextensionsv1beta1.JSON]():                         "raw",
	reflect.TypeFor[apiextensionsv1.JSONSchemaPropsOrBool]():             "orbool",
	reflect.TypeFor[apiextensionsv1beta1.JSONSchemaPropsOrBool]():        "orbool",
	reflect.TypeFor[apiextensionsv1.JSONSchemaPropsOrArray]():            "orarray",
	reflect.TypeFor[apiextensionsv1beta1.JSONSchemaPropsOrArray]():       "orarray",
	reflect.TypeFor[apiextensionsv1.JSONSchemaPropsOrStringArray]():      "orstringarray",
	reflect.TypeFor[apiextensionsv1beta1.JSONSchemaPropsOrStringArray](): "orstringarray",
}

var unmarshalerType = reflect.TypeFor[encjson.Unmarshaler]()

type schemaField struct {
	proto, json string
	number      int
	typ, card   string
	inline      bool
}

type schemaMessage struct {
	name, form string
	zero       []byte
	fields     []schemaField
}

type schemaWriter struct {
	messages map[string]*schemaMessage
}

func messageName(t reflect.Type) string {
	return t.PkgPath() + "." + t.Name()
}

func writeSchema(w io.Writer) error {
	s := newScheme()
	g := &schemaWriter{messages: map[string]*schemaMessage{}}
	var kinds []string
	for gvk, t := range s.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal {
			continue
		}
		if !servable(s, gvk) {
			continue
		}
		name, err := g.message(t)
		if err != nil {
			return fmt.Errorf("%s: %w", gvk, err)
		}
		kinds = append(kinds, fmt.Sprintf("kind %s %s %s", gvk.GroupVersion().String(), gvk.Kind, name))
	}
	// The watch stream's envelope, no kind of its own.
	if _, err := g.message(reflect.TypeFor[metav1.WatchEvent]()); err != nil {
		return err
	}
	sort.Strings(kinds)
	fmt.Fprintln(w, "# The Kubernetes API types kube-fanout-kubeproto encodes, written by")
	fmt.Fprintln(w, "# kubeproto/schema/generate.sh from the Go module versions in")
	fmt.Fprintln(w, "# kubeproto/oracle/go.mod. Do not edit; the format is in kubeproto/oracle/schema.go.")
	for _, k := range kinds {
		fmt.Fprintln(w, k)
	}
	names := make([]string, 0, len(g.messages))
	for n := range g.messages {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		m := g.messages[n]
		zero := "-"
		if len(m.zero) > 0 {
			zero = hex.EncodeToString(m.zero)
		}
		fmt.Fprintf(w, "message %s %s %s\n", m.name, m.form, zero)
		for _, f := range m.fields {
			line := fmt.Sprintf("field %s %s %d %s %s", f.proto, f.json, f.number, f.typ, f.card)
			if f.inline {
				line += " inline"
			}
			fmt.Fprintln(w, line)
		}
	}
	return nil
}

// message records t (a struct, or a named slice protobuf wraps) and the
// messages it refers to, and returns its name.
func (g *schemaWriter) message(t reflect.Type) (string, error) {
	name := messageName(t)
	if _, ok := g.messages[name]; ok {
		return name, nil
	}
	m := &schemaMessage{name: name, form: "object"}
	g.messages[name] = m // before the fields: messages refer to themselves (JSONSchemaProps)
	zero, ok := reflect.New(t).Interface().(interface{ Marshal() ([]byte, error) })
	if !ok {
		return "", fmt.Errorf("%s has no protobuf Marshal", name)
	}
	z, err := zero.Marshal()
	if err != nil {
		return "", fmt.Errorf("%s: zero value: %w", name, err)
	}
	m.zero = z
	if form, ok := forms[t]; ok {
		m.form = form
	} else if reflect.PointerTo(t).Implements(unmarshalerType) {
		return "", fmt.Errorf("%s has a JSON form of its own that kubeproto does not know", name)
	}
	switch {
	case t.Kind() == reflect.Slice:
		elem, err := g.valueType(t.Elem())
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		m.form = "array"
		m.fields = []schemaField{{proto: "items", json: "-", number: 1, typ: elem, card: "rep"}}
		return name, nil
	case m.form == "time" || m.form == "microtime":
		// Their protobuf form is metav1.Timestamp's (time_proto.go).
		t = reflect.TypeFor[metav1.Timestamp]()
	case m.form == "quantity":
		// quantity_proto.go writes the canonical string as field 1.
		m.fields = []schemaField{{proto: "string", json: "-", number: 1, typ: "string", card: "one"}}
		return name, nil
	}
	for i := 0; i < t.NumField(); i++ {
		f, skip, err := g.field(t.Field(i))
		if err != nil {
			return "", fmt.Errorf("%s.%s: %w", name, t.Field(i).Name, err)
		}
		if !skip {
			m.fields = append(m.fields, f)
		}
	}
	sort.Slice(m.fields, func(i, j int) bool { return m.fields[i].number < m.fields[j].number })
	if m.form != "object" {
		// Their JSON is their form's, not keys of their fields.
		for i := range m.fields {
			m.fields[i].json = "-"
		}
	}
	return name, nil
}

func (g *schemaWriter) field(sf reflect.StructField) (schemaField, bool, error) {
	tag := sf.Tag.Get("protobuf")
	if tag == "" || tag == "-" {
		return schemaField{}, true, nil // TypeMeta: no protobuf field, its JSON keys are dropped
	}
	parts := strings.Split(tag, ",")
	if len(parts) < 3 {
		return schemaField{}, false, fmt.Errorf("protobuf tag %q", tag)
	}
	number, err := strconv.Atoi(parts[1])
	if err != nil {
		return schemaField{}, false, fmt.Errorf("protobuf tag %q", tag)
	}
	f := schemaField{number: number, card: "one"}
	f.proto = sf.Name // an embedded struct's tag may have no name=
	for _, p := range parts[2:] {
		if n, ok := strings.CutPrefix(p, "name="); ok {
			f.proto = n
		}
	}
	f.json, f.inline = jsonName(sf)
	t := sf.Type
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Map:
		if t.Key().Kind() != reflect.String {
			return f, false, fmt.Errorf("map key %s", t.Key())
		}
		f.card = "map"
		f.typ, err = g.valueType(t.Elem())
	case t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8 && !wrapped(t):
		// The Go type decides, not the tag's "rep" (some tags of plain
		// strings say "rep"; the generated code follows the type).
		f.card = "rep"
		f.typ, err = g.valueType(t.Elem())
	default:
		f.typ, err = g.valueType(t)
	}
	return f, false, err
}

// valueType names t's protobuf type: a scalar, or a message.
func (g *schemaWriter) valueType(t reflect.Type) (string, error) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string", nil
	case reflect.Bool:
		return "bool", nil
	case reflect.Int32:
		return "int32", nil
	case reflect.Int64:
		return "int64", nil
	case reflect.Float64:
		return "double", nil
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "bytes", nil
		}
		if !wrapped(t) {
			return "", fmt.Errorf("no protobuf type for %s", t)
		}
		return g.message(t) // a named slice wrapped in a message (ExtraValue)
	case reflect.Struct:
		return g.message(t)
	}
	return "", fmt.Errorf("no protobuf type for %s", t)
}

// jsonName is the field's JSON key as Kubernetes' decoder matches it
// (case-sensitively), and whether its fields are inlined.
func jsonName(sf reflect.StructField) (string, bool) {
	tag := sf.Tag.Get("json")
	name, opts, _ := strings.Cut(tag, ",")
	if name == "-" && opts == "" {
		return "-", false
	}
	inline := strings.Contains(","+opts+",", ",inline,")
	if name == "" && (sf.Anonymous || inline) {
		return "-", true
	}
	if name == "" {
		return sf.Name, false
	}
	return name, inline
}

// wrapped tells a named slice that protobuf wraps in a message of its own
// (ExtraValue, Verbs) from one that is a plain repeated field.
func wrapped(t reflect.Type) bool {
	_, ok := reflect.New(t).Interface().(interface{ Marshal() ([]byte, error) })
	return t.Name() != "" && ok
}

// servable tells a kind an API server answers with: one with a protobuf
// form (not Table, TableOptions: the API server answers 406 for them) that
// carries its kind (not WatchEvent, the watch stream's own envelope, whose
// encoding names no kind).
func servable(s *runtime.Scheme, gvk schema.GroupVersionKind) bool {
	obj, err := s.New(gvk)
	if err != nil {
		return false
	}
	if _, ok := obj.(interface{ Marshal() ([]byte, error) }); !ok {
		return false
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj.GetObjectKind().GroupVersionKind() == gvk
}

// Command printercolumns prints the column definitions of kube-apiserver's
// Table printers at this module's Kubernetes version, as the API server
// encodes them, for kube-fanout-printers (printers/src/builtin/columns.json):
//
//	cd tests/controlplane && go run -pgo=off -trimpath ./printercolumns >../../printers/src/builtin/columns.json
//
// The flags are the control plane build's (build.sh), so the packages it
// compiled are reused. Keys are the Go type each printer takes ("*core.Pod"),
// plus the convertors that are not printers: the default one (Name, Created
// At), the APIService one, and the two descriptions custom resources' tables
// take from ObjectMeta.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kube-aggregator/pkg/apis/apiregistration"
	apiserviceetcd "k8s.io/kube-aggregator/pkg/registry/apiservice/etcd"
	"k8s.io/kubernetes/pkg/printers"
	printersinternal "k8s.io/kubernetes/pkg/printers/internalversion"
)

// collector is a printers.PrintHandler that keeps each printer's columns.
type collector map[string][]metav1.TableColumnDefinition

func (c collector) TableHandler(columns []metav1.TableColumnDefinition, printFunc interface{}) error {
	c[reflect.TypeOf(printFunc).In(0).String()] = columns
	return nil
}

var _ printers.PrintHandler = collector{}

func main() {
	columns := collector{}
	printersinternal.AddHandlers(columns)

	ctx := context.Background()
	defaults, err := rest.NewDefaultTableConvertor(schema.GroupResource{}).ConvertToTable(ctx, &metav1.PartialObjectMetadata{}, nil)
	if err != nil {
		fail(err)
	}
	columns["default"] = defaults.ColumnDefinitions
	apiServices, err := (&apiserviceetcd.REST{}).ConvertToTable(ctx, &apiregistration.APIServiceList{}, nil)
	if err != nil {
		fail(err)
	}
	columns["*apiregistration.APIService"] = apiServices.ColumnDefinitions

	out := map[string]json.RawMessage{}
	for key, definitions := range columns {
		// A list's printer prints its items with the item's columns.
		if item := strings.TrimSuffix(key, "List"); item != key && reflect.DeepEqual(columns[item], definitions) {
			continue
		}
		encoded, err := json.Marshal(definitions)
		if err != nil {
			fail(err)
		}
		out[key] = encoded
	}
	descriptions := metav1.ObjectMeta{}.SwaggerDoc()
	for _, field := range []string{"name", "creationTimestamp"} {
		encoded, err := json.Marshal(descriptions[field])
		if err != nil {
			fail(err)
		}
		out["ObjectMeta."+field] = encoded
	}

	keys := make([]string, 0, len(out))
	for key := range out {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	// One key a line, for readable diffs on a Kubernetes upgrade; each value
	// is exactly encoding/json's bytes, as the API server writes them.
	fmt.Print("{\n")
	for i, key := range keys {
		name, _ := json.Marshal(key)
		separator := ","
		if i == len(keys)-1 {
			separator = ""
		}
		fmt.Printf("%s:%s%s\n", name, out[key], separator)
	}
	fmt.Print("}\n")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "printercolumns:", err)
	os.Exit(1)
}

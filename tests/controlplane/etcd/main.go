// Command etcd runs the etcd server that k8s.io/kubernetes requires, built
// inside this module because etcd's own go.mod has local replace lines that
// make `go install go.etcd.io/etcd/server/v3@...` impossible.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}

// Command loadgen is the client side of `fanout-bench vs-apiserver`: watchers
// that each hold their own connection (to kube-apiserver, JSON or protobuf;
// to kube-fanout, one gRPC channel each; or to a minimal plain-TCP writer,
// the physical floor), a writer at a fixed rate that stamps its send time
// into the object, and the servers' CPU (utime+stime) and memory read from
// /proc at the window's edges. Each run prints one JSON result on stdout.
//
//	loadgen setup  -kubeconfig F -namespace N -objects 100 -size 1024
//	loadgen steady -target apiserver-json|apiserver-proto|fanout|floor|none ...
//	loadgen herd   -target list|paged|watchlist|fanout ...
//	loadgen snapshot -fanout ADDR -repeat 10 ...
//	loadgen idle   -fanout ADDR -watchers 10000 ...
//	loadgen pods   -kubeconfig F -namespace nodes -pods 5000
//	loadgen nodes  -target apiserver-proto|fanout|none -watchers 5000 -connections 100 ...
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadgen setup|steady|herd|snapshot|idle|pods|nodes|floor-server [flags]")
		os.Exit(2)
	}
	var err error
	var result any
	switch os.Args[1] {
	case "setup":
		err = setup(os.Args[2:])
	case "steady":
		result, err = orNil(steady(os.Args[2:]))
	case "herd":
		result, err = orNil(herd(os.Args[2:]))
	case "snapshot":
		result, err = orNil(snapshot(os.Args[2:]))
	case "idle":
		result, err = orNil(idle(os.Args[2:]))
	case "pods":
		err = setupPods(os.Args[2:])
	case "nodes":
		result, err = orNil(nodes(os.Args[2:]))
	case "floor-server":
		err = floorServer(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		if result == nil {
			os.Exit(1)
		}
		// A run that measured something but did not complete (a watch the
		// server closed, deliveries missing): its figures and why.
		result = failedRun{Result: result, Error: err.Error()}
	}
	if result != nil {
		if err := json.NewEncoder(os.Stdout).Encode(result); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
	}
}

// pidsFlag is "-pids name=PID,name=PID": the server processes to measure.
type pidsFlag processes

func (p pidsFlag) String() string { return fmt.Sprint(map[string]int(p)) }

func (p pidsFlag) Set(v string) error {
	for _, kv := range strings.Split(v, ",") {
		name, pid, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("want name=PID, got %q", kv)
		}
		n, err := strconv.Atoi(pid)
		if err != nil {
			return err
		}
		p[name] = n
	}
	return nil
}

// failedRun is a result that comes with the error that ended its run.
type failedRun struct {
	Result any    `json:"result"`
	Error  string `json:"error"`
}

// orNil keeps a nil result nil as an `any` (a nil *T would not be).
func orNil[T any](r *T, err error) (any, error) {
	if r == nil {
		return nil, err
	}
	return r, err
}

// serverFlags are the flags every measuring command takes: where the
// servers are and which processes to measure.
type serverFlags struct {
	kubeconfig *string
	fanoutAddr *string
	fanoutCA   *string
	pids       pidsFlag
}

func addServerFlags(fs *flag.FlagSet) *serverFlags {
	f := &serverFlags{
		kubeconfig: fs.String("kubeconfig", "", "kubeconfig of the API server"),
		fanoutAddr: fs.String("fanout", "", "kube-fanout's address (herd: several, comma-separated, its watchers spread over them)"),
		fanoutCA:   fs.String("fanout-ca", "", "CA of kube-fanout's serving certificate"),
		pids:       pidsFlag{},
	}
	fs.Var(f.pids, "pids", "name=PID,... of the servers to measure")
	return f
}

// openAll runs open(0..n-1), parallel at a time; the first error wins.
func openAll(n, parallel int, open func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(parallel)
	for i := range n {
		g.Go(func() error { return open(i) })
	}
	return g.Wait()
}

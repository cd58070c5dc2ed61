// Command configmap-controller runs the example controller: reads through
// kube-fanout (--fanout, several for failover), writes to the API server
// of the usual kubeconfig.
package main

import (
	"context"
	"flag"
	"os"
	"strings"

	"k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kubefanout "github.com/kube-fanout/kube-fanout/client/go"
	"github.com/kube-fanout/kube-fanout/client/go/crcache"
	"github.com/kube-fanout/kube-fanout/client/go/examples/configmapcontroller"
)

func main() {
	fanout := flag.String("fanout", "127.0.0.1:50051", "kube-fanout addresses, comma-separated")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	log := ctrl.Log.WithName("configmap-controller")
	if err := run(ctrl.SetupSignalHandler(), strings.Split(*fanout, ",")); err != nil {
		log.Error(err, "stopped")
		os.Exit(1)
	}
}

func run(ctx context.Context, addrs []string) error {
	conn, err := kubefanout.Dial(addrs)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme: scheme.Scheme,
		// The one-line switch: informers read through kube-fanout.
		NewCache: crcache.NewCacheFunc(conn),
	})
	if err != nil {
		return err
	}
	if err := (&configmapcontroller.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

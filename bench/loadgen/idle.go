package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

// idleResult is the server memory held by subscribers that receive nothing.
type idleResult struct {
	Case        string                 `json:"case"`
	Target      string                 `json:"target"`
	Watchers    int                    `json:"watchers"`
	OpenS       float64                `json:"open_s"`
	BytesPerSub float64                `json:"bytes_per_subscriber"`
	Procs       map[string]*procWindow `json:"procs"`
}

func idle(args []string) (*idleResult, error) {
	fs := flag.NewFlagSet("idle", flag.ExitOnError)
	servers := addServerFlags(fs)
	ns := fs.String("namespace", "idle", "a namespace without ConfigMaps (nothing is delivered)")
	watchers := fs.Int("watchers", 10000, "idle watchers, each on its own connection")
	settle := fs.Duration("settle", 3*time.Second, "wait after the last watch opens before reading RSS")
	fs.Parse(args)
	pids := servers.pids
	dialer, err := newFanoutDialer(*servers.fanoutAddr, *servers.fanoutCA)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	window, err := processes(pids).start()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	streams := make([]*fanoutWatch, *watchers)
	err = openAll(*watchers, 64, func(i int) error {
		w, err := dialer.watch(ctx, &pb.WatchRequest{Resource: configMaps(), Namespace: *ns})
		streams[i] = w
		return err
	})
	open := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("opening watchers: %w", err)
	}
	time.Sleep(*settle)
	if err := processes(pids).end(window); err != nil {
		return nil, err
	}
	result := &idleResult{Case: "idle", Target: "fanout", Watchers: *watchers, OpenS: open.Seconds(), Procs: window}
	if fan, ok := window["kube-fanout"]; ok {
		result.BytesPerSub = float64(fan.RSSEnd-fan.RSSStart) / float64(*watchers)
	}
	for _, w := range streams {
		if w != nil {
			w.close()
		}
	}
	return result, nil
}

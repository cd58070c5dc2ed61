package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc/connectivity"
)

// snapshotResult is one subscriber's snapshots, one after another on one
// connection opened (and its TLS handshake done) before the window.
type snapshotResult struct {
	Case        string                 `json:"case"`
	Runs        []float64              `json:"wall_s"`
	ObjectBytes int64                  `json:"object_bytes"`
	Objects     int64                  `json:"objects"`
	Procs       map[string]*procWindow `json:"procs"`
}

// snapshot measures the rate of kube-fanout's snapshot to one subscriber:
// -repeat Watches with initial events in turn, each timed from the call to
// its initial-events-end bookmark, after one untimed. The loadgen's own
// CPU is measured too (as "loadgen"): client and server share the machine.
func snapshot(args []string) (*snapshotResult, error) {
	fs := flag.NewFlagSet("snapshot", flag.ExitOnError)
	servers := addServerFlags(fs)
	ns := fs.String("namespace", "herd", "namespace of the listed ConfigMaps")
	objects := fs.Int64("objects", 10000, "objects each snapshot must hold")
	repeat := fs.Int("repeat", 10, "timed snapshots")
	fs.Parse(args)
	ctx := context.Background()
	dialer, err := newFanoutDialer(*servers.fanoutAddr, *servers.fanoutCA)
	if err != nil {
		return nil, err
	}
	conn, err := dialer.channel()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.Connect()
	for state := conn.GetState(); state != connectivity.Ready; state = conn.GetState() {
		if state == connectivity.TransientFailure || !conn.WaitForStateChange(ctx, state) {
			return nil, fmt.Errorf("connecting to %s: %s", *servers.fanoutAddr, state)
		}
	}
	once := func() (int64, int64, error) {
		w, err := watchOn(ctx, conn, snapshotRequest(*ns))
		if err != nil {
			return 0, 0, err
		}
		defer w.close()
		_, ob, objs, err := readSnapshot(w)
		if err == nil && objs != *objects {
			err = fmt.Errorf("%d objects received, expected %d", objs, *objects)
		}
		return ob, objs, err
	}
	if _, _, err := once(); err != nil {
		return nil, err
	}
	pids := processes{"loadgen": os.Getpid()}
	for name, pid := range servers.pids {
		pids[name] = pid
	}
	window, err := pids.start()
	if err != nil {
		return nil, err
	}
	result := &snapshotResult{Case: "snapshot", Procs: window}
	for range *repeat {
		start := time.Now()
		ob, objs, err := once()
		if err != nil {
			return nil, err
		}
		result.Runs = append(result.Runs, time.Since(start).Seconds())
		result.ObjectBytes, result.Objects = ob, objs
	}
	if err := pids.end(window); err != nil {
		return nil, err
	}
	return result, nil
}

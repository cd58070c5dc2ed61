package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The kube-apiserver's code that serves its watchers, as perf names it
// (Go keeps frame pointers, so perf unwinds each sample's call chain):
// a sample is on the watch path when its chain holds the watch handler
// (its encode-and-flush loop), the watch cache's per-watcher goroutines or
// its dispatch to them, or, outside any request handler, the HTTP/2
// server's connection goroutines (frame writes, TLS, the socket). Request
// handlers run under the HTTP/2 server too (runHandler), and writes go
// through the watch cache's CacheDelegator: those are the writes', not the
// watchers'. The writer's requests still share the connection machinery,
// and kube-fanout's own upstream watch is one more watch handler, but
// both are the same in an on and an off window, so the difference is the
// deliveries'. The Go runtime's scheduling and garbage collection for the
// deliveries are in no such chain: the figure is a lower bound.
var (
	watchHandlerFrames = []string{"k8s.io/apiserver/pkg/endpoints/handlers.(*WatchServer)"}
	watchCacheFrames   = []string{
		"k8s.io/apiserver/pkg/storage/cacher.(*cacheWatcher)",
		"k8s.io/apiserver/pkg/storage/cacher.(*Cacher).dispatch",
	}
	requestFrames    = []string{".runHandler", "k8s.io/apiserver/pkg/storage/cacher.(*CacheDelegator)"}
	connectionFrames = []string{"golang.org/x/net/http2.", "net/http.(*http2", "crypto/tls."}
)

// onWatchPath says whether a sample with call chain frames (one symbol
// each) is on the API server's watch path.
func onWatchPath(frames []string) bool {
	has := func(names []string) bool {
		for _, f := range frames {
			for _, n := range names {
				if strings.Contains(f, n) {
					return true
				}
			}
		}
		return false
	}
	switch {
	case has(watchHandlerFrames), has(watchCacheFrames):
		return true
	case has(requestFrames):
		return false
	default:
		return has(connectionFrames)
	}
}

// perfRecorder records each window of the measured processes with `perf
// record -g`, a file per window and process under dir.
type perfRecorder struct {
	dir  string
	freq int
	pids processes
	// callGraph is perf's unwinding: "fp" (frame pointers, which Go keeps)
	// or "dwarf" (for a Rust release build, which keeps none).
	callGraph string
}

// perfRun is one window's recordings, by process name.
type perfRun struct {
	cmds  map[string]*exec.Cmd
	files map[string]string
}

// start begins recording window i; perf is given a moment to attach
// before the window's writes begin.
func (r *perfRecorder) start(i int, on bool) (*perfRun, error) {
	run := &perfRun{cmds: map[string]*exec.Cmd{}, files: map[string]string{}}
	kind := "off"
	if on {
		kind = "on"
	}
	for name, pid := range r.pids {
		file := filepath.Join(r.dir, fmt.Sprintf("window-%02d-%s-%s.data", i, kind, name))
		cmd := exec.Command("perf", "record", "-q", "--call-graph", r.callGraph, "-F", strconv.Itoa(r.freq), "-p", strconv.Itoa(pid), "-o", file)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			run.stop()
			return nil, fmt.Errorf("perf record for %s: %w", name, err)
		}
		run.cmds[name] = cmd
		run.files[name] = file
	}
	time.Sleep(500 * time.Millisecond)
	return run, nil
}

// stop ends the window's recordings and waits for perf to write them.
func (run *perfRun) stop() {
	for _, cmd := range run.cmds {
		_ = cmd.Process.Signal(os.Interrupt)
	}
	for _, cmd := range run.cmds {
		_ = cmd.Wait()
	}
}

// perfCounts are one recording's samples: all of them, and those whose
// call chain is on the watch path (onWatchPath).
type perfCounts struct {
	File      string `json:"file"`
	Freq      int    `json:"freq"`
	Samples   int64  `json:"samples"`
	WatchPath int64  `json:"watch_path"`
}

// countPerf reads a recording with `perf script` and counts its samples.
func countPerf(file string, freq int) (*perfCounts, error) {
	cmd := exec.Command("perf", "script", "-i", file, "-F", "comm,ip,sym")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	samples, watchPath, readErr := countSamples(out)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("perf script -i %s: %w", file, err)
	}
	if readErr != nil {
		return nil, fmt.Errorf("perf script -i %s: %w", file, readErr)
	}
	return &perfCounts{File: file, Freq: freq, Samples: samples, WatchPath: watchPath}, nil
}

// countSamples counts the samples `perf script -F comm,ip,sym` prints, and
// those on the API server's watch path. A sample is a header line (the
// command name), its call chain, a frame a line, each indented with a tab,
// then a blank line.
func countSamples(r io.Reader) (samples, watchPath int64, err error) {
	var frames []string
	inSample := false
	end := func() {
		if inSample {
			samples++
			if onWatchPath(frames) {
				watchPath++
			}
		}
		inSample, frames = false, frames[:0]
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			end()
		case line[0] != '\t':
			end()
			inSample = true
		default:
			frames = append(frames, line)
		}
	}
	end()
	return samples, watchPath, sc.Err()
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// The writer stamps "sent=<unix nanos>;" into a ConfigMap's data; every
// encoding (JSON, protobuf, kube-fanout's JSON) carries those bytes as they
// are, so a watcher finds them without decoding the object.
var stampPrefix = []byte("sent=")

func stampValue(unixNanos int64) string { return fmt.Sprintf("sent=%d;", unixNanos) }

// stampOf finds the send time in an event's bytes.
func stampOf(b []byte) (int64, bool) {
	i := bytes.Index(b, stampPrefix)
	if i < 0 {
		return 0, false
	}
	var n int64
	digits := 0
	for _, c := range b[i+len(stampPrefix):] {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int64(c-'0')
		digits++
	}
	return n, digits > 0
}

// initialEventsEnd marks the bookmark that ends a watch-list's snapshot,
// from the API server and from kube-fanout alike.
var initialEventsEnd = []byte("k8s.io/initial-events-end")

// pad is the filler that makes each object about size bytes.
func pad(size int) string { return strings.Repeat("x", size) }

// readStamped reads s until it fails, handing each event that carries a
// stamp to seen with its send time and arrival time (ns). A read failure
// is recorded in streamErr unless ctx was cancelled first (the run ended);
// an error from seen is recorded and ends the reading.
func readStamped(ctx context.Context, s events, streamErr *atomic.Pointer[error], seen func(b []byte, sent, now int64) error) {
	for {
		b, err := s.next()
		if err != nil {
			if ctx.Err() == nil {
				streamErr.CompareAndSwap(nil, &err)
			}
			return
		}
		sent, ok := stampOf(b)
		if !ok {
			continue
		}
		if err := seen(b, sent, time.Now().UnixNano()); err != nil {
			streamErr.CompareAndSwap(nil, &err)
			return
		}
	}
}

package main

import (
	"bytes"
	"fmt"
	"strings"
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

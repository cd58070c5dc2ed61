package main

import (
	"strings"
	"testing"
)

// Call chains as `perf script -F comm,ip,sym` prints them for the
// kube-apiserver, leaf first (abridged from a real recording).
const perfScript = `kube-apiserver 
	ffffffff81c0a1b2 tcp_sendmsg_locked
	          31a7c2 crypto/tls.(*Conn).Write
	          9a1234 golang.org/x/net/http2.(*bufferedWriter).Flush
	          9a2345 golang.org/x/net/http2.(*serverConn).writeFrameAsync
	           97f41 runtime.goexit.abi0

kube-apiserver 
	         1a2b3c4 k8s.io/apiserver/pkg/storage/cacher.(*cachingObject).CacheEncode
	         1a2b3c5 k8s.io/apiserver/pkg/endpoints/handlers.(*watchEncoder).Encode
	         1a2b3c6 k8s.io/apiserver/pkg/endpoints/handlers.(*WatchServer).HandleHTTP
	         1a2b3c7 golang.org/x/net/http2.(*serverConn).runHandler

kube-apiserver 
	         1a2b3c8 k8s.io/apiserver/pkg/storage/cacher.(*cacheWatcher).processInterval

kube-apiserver 
	          31a7c3 crypto/tls.(*Conn).Read
	         1a2b3c9 k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate
	         1a2b3d0 k8s.io/apiserver/pkg/storage/cacher.(*CacheDelegator).GuaranteedUpdate
	         1a2b3d1 golang.org/x/net/http2.(*serverConn).runHandler

kube-apiserver 
	          31a7c4 crypto/tls.(*Conn).Write
	         1a2b3d2 golang.org/x/net/http2.(*serverConn).runHandler

kube-apiserver 
	           4a1b2 runtime.mallocgc
	           4a1b3 runtime.gcBgMarkWorker
`

// The watch handler, a watcher's goroutine and the HTTP/2 connection's
// own writes count; a request handler (a write, through the watch cache's
// delegator or not) and the runtime do not.
func TestOnlyTheWatchPathsSamplesCount(t *testing.T) {
	samples, watchPath, err := countSamples(strings.NewReader(perfScript))
	if err != nil {
		t.Fatal(err)
	}
	if samples != 6 || watchPath != 3 {
		t.Fatalf("%d samples, %d on the watch path; want 6 and 3", samples, watchPath)
	}
}

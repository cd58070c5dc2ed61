package kubefanout

import (
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/experimental"
)

// WithGzip asks kube-fanout to compress its answers with gzip (grpc-go's
// encoding/gzip) on every call of the Conn. A snapshot of compressible
// objects (ConfigMaps of properties, a fleet of similar Pods) moves several
// times fewer bytes, for CPU on both ends: worth it over a slow or metered
// link, rarely inside one cluster (BENCHMARKS.md, compression).
func WithGzip() Option {
	return func(s *settings) { s.gzip = true }
}

// noCompression is the name advertised as the only acceptable response
// encoding of a call that did not ask for gzip. Importing encoding/gzip
// registers gzip for the whole process, and grpc-go then lists every
// registered compressor in each call's grpc-accept-encoding, which
// kube-fanout takes as a request to compress; grpc-go's
// experimental.AcceptCompressors() with no name does not narrow that list,
// so a name no server knows stands for "identity only".
const noCompression = "kube-fanout-no-compression"

func init() { encoding.RegisterCompressor(identityCompressor{}) }

// compression is the call options of a Conn with or without gzip.
func compression(gzipped bool) []grpc.CallOption {
	if gzipped {
		// Asking for compressed answers is enough; the requests are a few
		// bytes, which gzip would only make longer.
		return []grpc.CallOption{experimental.AcceptCompressors(gzip.Name)}
	}
	return []grpc.CallOption{experimental.AcceptCompressors(noCompression)}
}

// identityCompressor is registered only so that noCompression may be named
// in grpc-accept-encoding; no server sends or is sent anything with it, and
// if one did it would be passed through unchanged.
type identityCompressor struct{}

func (identityCompressor) Name() string { return noCompression }

func (identityCompressor) Compress(w io.Writer) (io.WriteCloser, error) { return nopCloser{w}, nil }

func (identityCompressor) Decompress(r io.Reader) (io.Reader, error) { return r, nil }

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

package kubefanout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxTokenBytes bounds a token read from a file or a callback: a projected
// ServiceAccount token is about a kilobyte, and kube-fanout refuses an
// authorization header much longer than this anyway.
const maxTokenBytes = 16 << 10

// tokenRecheck is how long a token read from a file is used before the file
// is read again even though its size, modification time and inode look the
// same (a rewrite in place within the file system's timestamp resolution).
const tokenRecheck = time.Minute

// tokenSource yields the bearer token of one call.
type tokenSource interface {
	token(ctx context.Context) (string, error)
}

// WithBearerToken sends "authorization: Bearer TOKEN" with every call: a
// token that never changes. A projected ServiceAccount token is rotated by
// the kubelet; use WithTokenFile for it.
func WithBearerToken(token string) Option {
	return func(s *settings) { s.token = fixedToken(token) }
}

// WithTokenFile sends the token held in the file at path, as the kubelet
// mounts a projected ServiceAccount token: the file is looked at before
// every call (List, Watch; not every event) and read again when it is
// another file (the kubelet swaps a symlink), has changed, or was read more
// than a minute ago. If it cannot be read after a good read, the last good
// token is sent; if it never could, the call fails with UNAUTHENTICATED
// naming the file.
func WithTokenFile(path string) Option {
	return func(s *settings) { s.token = &fileToken{path: path, now: time.Now} }
}

// WithTokenFunc sends the token fn returns, asked before every call (List,
// Watch; not every event), for tokens from elsewhere (a vault, an exchange).
// fn should answer quickly: cache in it what is expensive to get. An error
// fails the call with UNAUTHENTICATED, which the informers retry with
// back-off.
func WithTokenFunc(fn func(ctx context.Context) (string, error)) Option {
	return func(s *settings) { s.token = tokenFunc(fn) }
}

// WithInsecurePlaintextToken allows sending the bearer token over plaintext
// to an address that is not loopback. Without it Dial refuses to: anyone on
// the path could read the token and use it (against kube-fanout and against
// the API server, for which the same token is valid when its audience is).
// Loopback addresses (127.0.0.0/8, ::1, localhost) are always allowed.
func WithInsecurePlaintextToken() Option {
	return func(s *settings) { s.insecurePlaintextToken = true }
}

type fixedToken string

func (t fixedToken) token(context.Context) (string, error) { return string(t), nil }

type tokenFunc func(ctx context.Context) (string, error)

func (fn tokenFunc) token(ctx context.Context) (string, error) {
	tok, err := fn(ctx)
	if err != nil {
		return "", fmt.Errorf("token callback: %w", err)
	}
	return checkToken(tok, "the token callback")
}

// fileToken is the token in a file, read again when the file changes.
type fileToken struct {
	path string
	now  func() time.Time

	mu    sync.Mutex
	cur   string
	stamp os.FileInfo
	read  time.Time
}

func (f *fileToken) token(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// os.Stat follows the symlinks, so the kubelet's swap of ..data shows
	// as another file.
	info, err := os.Stat(f.path)
	if err == nil && f.cur != "" && f.now().Sub(f.read) < tokenRecheck && sameFile(info, f.stamp) {
		return f.cur, nil
	}
	tok, err := readToken(f.path)
	if err != nil {
		if f.cur != "" {
			// The kubelet replaces the file atomically: a failed read is
			// a moment of a pod's teardown, not a new token.
			return f.cur, nil
		}
		return "", err
	}
	f.cur, f.stamp, f.read = tok, info, f.now()
	return tok, nil
}

func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

func readToken(path string) (string, error) {
	file, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer func() { _ = file.Close() }()
	data, err := io.ReadAll(io.LimitReader(file, maxTokenBytes+1))
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	return checkToken(string(data), "token file "+path)
}

// checkToken trims the token and checks it could be a token at all.
func checkToken(tok, from string) (string, error) {
	tok = strings.TrimSpace(tok)
	switch {
	case tok == "":
		return "", fmt.Errorf("%s: empty token", from)
	case len(tok) > maxTokenBytes:
		return "", fmt.Errorf("%s: token longer than %d bytes", from, maxTokenBytes)
	case strings.ContainsAny(tok, "\r\n"):
		return "", fmt.Errorf("%s: token holds a line break", from)
	}
	return tok, nil
}

// bearer sends the token of its source as gRPC metadata.
type bearer struct{ source tokenSource }

func (b bearer) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	tok, err := b.source.token(ctx)
	if err != nil {
		// UNAUTHENTICATED (401 to the informer, which backs off and
		// retries), not grpc-go's default UNAVAILABLE, which would move
		// the Conn to another server for a local fault.
		return nil, status.Errorf(codes.Unauthenticated, "kube-fanout client: %v", err)
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity is false because grpc-go would then refuse
// loopback plaintext too; Dial refuses plaintext to other addresses itself
// (checkPlaintextToken).
func (bearer) RequireTransportSecurity() bool { return false }

// String hides the token: it is a credential.
func (bearer) String() string { return "bearer(<redacted>)" }

// errPlaintextToken is Dial's refusal to send a token in the clear.
var errPlaintextToken = errors.New("refusing to send a bearer token over plaintext to a non-loopback address: use an https:// address or WithTLS, or say WithInsecurePlaintextToken()")

// checkPlaintextToken refuses a token over plaintext to addr unless addr is
// loopback or the caller said it is fine.
func checkPlaintextToken(addr string, s *settings) error {
	if s.token == nil || s.insecurePlaintextToken || !plaintext(addr, s) || isLoopback(addr) {
		return nil
	}
	return errPlaintextToken
}

// isLoopback is whether addr ("host:port", with or without scheme) names
// the local host: localhost, 127.0.0.0/8 or ::1.
func isLoopback(addr string) bool {
	host := strings.TrimPrefix(target(addr), "passthrough:///")
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

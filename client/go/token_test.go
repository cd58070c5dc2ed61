package kubefanout

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-fanout/kube-fanout/client/go/internal/projected"
	pb "github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1"
)

// listToken lists through conn and returns the authorization the server
// saw, or the list's error.
func listToken(t *testing.T, f *fakeServer, conn *Conn) (string, error) {
	t.Helper()
	f.mu.Lock()
	f.tokens = nil
	f.mu.Unlock()
	if _, err := NewListWatch(conn, configMaps, "", nil).ListWithContext(context.Background(), metav1.ListOptions{}); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.tokens) != 1 {
		t.Fatalf("server saw %d calls, want 1", len(f.tokens))
	}
	return f.tokens[0], nil
}

// The token file is read again when the kubelet rotates it in place; a
// file that vanishes after a good read leaves the last good token; a file
// that never could be read fails the call as unauthorized, naming it.
func TestTokenFileFollowsTheKubeletsRotation(t *testing.T) {
	f := &fakeServer{list: &pb.ListResponse{ResourceVersion: "1"}}
	addr := serve(t, f, nil)
	vol := &projected.Volume{Dir: t.TempDir()}
	if err := vol.Write(map[string]string{"token": "first-token\n"}); err != nil {
		t.Fatal(err)
	}
	conn := dial(t, []string{addr}, WithTokenFile(filepath.Join(vol.Dir, "token")))
	for _, want := range []string{"first-token", "first-token"} {
		if got, err := listToken(t, f, conn); err != nil || got != "Bearer "+want {
			t.Fatalf("sent %q (%v), want the token %q", got, err, want)
		}
	}
	if err := vol.Write(map[string]string{"token": "second-token"}); err != nil {
		t.Fatal(err)
	}
	if got, err := listToken(t, f, conn); err != nil || got != "Bearer second-token" {
		t.Fatalf("after the rotation sent %q (%v)", got, err)
	}
	if err := os.RemoveAll(vol.Dir); err != nil {
		t.Fatal(err)
	}
	if got, err := listToken(t, f, conn); err != nil || got != "Bearer second-token" {
		t.Fatalf("with the file gone sent %q (%v), want the last good token", got, err)
	}

	missing := filepath.Join(t.TempDir(), "token")
	_, err := listToken(t, f, dial(t, []string{addr}, WithTokenFile(missing)))
	if !apierrors.IsUnauthorized(err) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("a token file that is not there: %v", err)
	}
}

// A token rewritten in place within the file system's timestamp resolution
// (same size, same mtime, same inode) is still picked up within a minute.
func TestTokenFileIsReadAgainAfterAMinute(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("aaaa"), 0o600); err != nil {
		t.Fatal(err)
	}
	stamp, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	src := &fileToken{path: path, now: func() time.Time { return now }}
	if tok, err := src.token(context.Background()); err != nil || tok != "aaaa" {
		t.Fatalf("%q %v", tok, err)
	}
	if err := os.WriteFile(path, []byte("bbbb"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, stamp.ModTime(), stamp.ModTime()); err != nil {
		t.Fatal(err)
	}
	if tok, _ := src.token(context.Background()); tok != "aaaa" {
		t.Fatalf("read again at once (%q): the stat check is not in use", tok)
	}
	now = now.Add(tokenRecheck)
	if tok, _ := src.token(context.Background()); tok != "bbbb" {
		t.Fatalf("after a minute still %q", tok)
	}
}

// The callback is asked for every call; its error fails the call as
// unauthorized (which the reflector retries) without sending anything.
func TestTokenCallback(t *testing.T) {
	f := &fakeServer{list: &pb.ListResponse{ResourceVersion: "1"}}
	addr := serve(t, f, nil)
	calls := 0
	conn := dial(t, []string{addr}, WithTokenFunc(func(context.Context) (string, error) {
		calls++
		if calls == 4 {
			return "", errors.New("vault sealed")
		}
		return fmt.Sprintf("token-%d", calls), nil
	}))
	// The first list asks for the type's kind first (ListResources).
	for _, want := range []string{"Bearer token-2", "Bearer token-3"} {
		if got, err := listToken(t, f, conn); err != nil || got != want {
			t.Fatalf("sent %q (%v), want %q", got, err, want)
		}
	}
	if _, err := listToken(t, f, conn); !apierrors.IsUnauthorized(err) || !strings.Contains(err.Error(), "vault sealed") {
		t.Fatalf("a failing callback: %v", err)
	}
}

// A token is never sent in the clear off loopback unless the caller says
// WithInsecurePlaintextToken; TLS and loopback are fine.
func TestPlaintextTokenOnlyToLoopbackUnlessInsecure(t *testing.T) {
	tok := WithBearerToken("t")
	for _, c := range []struct {
		addr    string
		opts    []Option
		refused bool
	}{
		{"10.0.0.1:50051", []Option{tok}, true},
		{"http://10.0.0.1:50051", []Option{tok}, true},
		{"fanout.example:50051", []Option{WithTokenFile("/x")}, true},
		{"[2001:db8::1]:50051", []Option{WithTokenFunc(func(context.Context) (string, error) { return "t", nil })}, true},
		{"10.0.0.1:50051", []Option{tok, WithInsecurePlaintextToken()}, false},
		{"https://10.0.0.1:50051", []Option{tok}, false},
		{"10.0.0.1:50051", []Option{tok, WithTLS(nil)}, true},
		{"10.0.0.1:50051", []Option{}, false},
		{"127.0.0.5:50051", []Option{tok}, false},
		{"http://[::1]:50051", []Option{tok}, false},
		{"localhost:50051", []Option{tok}, false},
		{"LocalHost:50051", []Option{tok}, false},
		{"127.example:50051", []Option{tok}, true},
	} {
		conn, err := Dial([]string{"127.0.0.1:1", c.addr}, c.opts...)
		if c.refused {
			if !errors.Is(err, errPlaintextToken) || !strings.Contains(err.Error(), c.addr) {
				t.Errorf("%s: %v, want the refusal naming the address", c.addr, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.addr, err)
			continue
		}
		_ = conn.Close()
	}
}

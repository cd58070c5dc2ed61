// Command x509oracle answers, for certificate chains, what the Kubernetes
// API server does with them: the differential test of kube-fanout's
// certificate reader (tests/tests/x509_differential.rs) asks it about the
// same certificates as kube-fanout and compares the answers.
//
// It reads one JSON case per line on stdin and writes one answer per line
// on stdout:
//
//	{"id": 1, "chain": ["<base64 DER>", ...], "roots": ["<base64 DER>", ...], "now": <Unix nanoseconds>}
//	{"id": 1, "roots": "", "handshake": "", "user": {...} | null, "error": ""}
//
// "roots" is the error loading the CA bundle (as the API server's
// --client-ca-file: every certificate must parse), "handshake" the error
// of the API server's TLS handshake (crypto/tls, asking for client
// certificates without requiring them, parses each certificate, bounds
// RSA keys at 8192 bits and takes only RSA, ECDSA and Ed25519 leaves:
// processCertsFromClient's checks, made here with the same calls), and
// "user" and "error" what the API server's own x509 authenticator
// (k8s.io/apiserver x509.CommonNameUserConversion with its default verify
// options, behind its authenticated-group adder) makes of the chain.
package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"k8s.io/apiserver/pkg/authentication/group"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
)

type request struct {
	ID    int      `json:"id"`
	Chain [][]byte `json:"chain"`
	Roots [][]byte `json:"roots"`
	Now   int64    `json:"now"`
}

type user struct {
	Name   string              `json:"name"`
	UID    string              `json:"uid"`
	Groups []string            `json:"groups"`
	Extra  map[string][]string `json:"extra"`
}

type answer struct {
	ID        int    `json:"id"`
	Roots     string `json:"roots"`
	Handshake string `json:"handshake"`
	User      *user  `json:"user"`
	Error     string `json:"error"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "x509oracle:", err)
			os.Exit(2)
		}
		if err := out.Encode(decide(req)); err != nil {
			fmt.Fprintln(os.Stderr, "x509oracle:", err)
			os.Exit(2)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "x509oracle:", err)
		os.Exit(2)
	}
}

func decide(req request) answer {
	a := answer{ID: req.ID}
	roots := x509.NewCertPool()
	for _, der := range req.Roots {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			a.Roots = err.Error()
			return a
		}
		roots.AddCert(cert)
	}
	chain, err := handshake(req.Chain)
	if err != nil {
		a.Handshake = err.Error()
		return a
	}
	opts := x509request.DefaultVerifyOptions()
	opts.Roots = roots
	opts.CurrentTime = time.Unix(0, req.Now)
	authn := group.NewAuthenticatedGroupAdder(x509request.New(opts, x509request.CommonNameUserConversion))
	resp, ok, err := authn.AuthenticateRequest(&http.Request{TLS: &tls.ConnectionState{PeerCertificates: chain}})
	if err != nil {
		a.Error = err.Error()
	}
	if ok {
		u := resp.User
		a.User = &user{Name: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: u.GetExtra()}
	}
	return a
}

// handshake makes the checks crypto/tls's server makes of a client's
// certificates (processCertsFromClient, Go 1.26) with ClientAuth
// RequestClientCert: the checks are small, and calling them directly
// needs no private key of the generated certificates.
func handshake(ders [][]byte) ([]*x509.Certificate, error) {
	certs := make([]*x509.Certificate, len(ders))
	for i, der := range ders {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, errors.New("tls: failed to parse client certificate: " + err.Error())
		}
		if cert.PublicKeyAlgorithm == x509.RSA && cert.PublicKey.(*rsa.PublicKey).N.BitLen() > 8192 {
			return nil, errors.New("tls: client sent certificate containing RSA key larger than 8192 bits")
		}
		certs[i] = cert
	}
	if len(certs) > 0 {
		switch certs[0].PublicKey.(type) {
		case *ecdsa.PublicKey, *rsa.PublicKey, ed25519.PublicKey:
		default:
			return nil, fmt.Errorf("tls: client certificate contains an unsupported public key of type %T", certs[0].PublicKey)
		}
	}
	return certs, nil
}

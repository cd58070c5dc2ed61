package kubefanout

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// The agreed in-cluster layout: the chart's client instructions mount a
// projected ServiceAccount token for the audience kube-fanout accepts
// ("kube-fanout" by default) and kube-fanout's CA bundle here.
const (
	// DefaultTokenFile is where a pod mounts its projected token for
	// kube-fanout.
	DefaultTokenFile = "/var/run/secrets/kube-fanout/token"
	// DefaultCAFile is where a pod mounts kube-fanout's CA bundle.
	DefaultCAFile = "/var/run/secrets/kube-fanout/ca.crt"
)

// Environment variables overriding the in-cluster defaults.
const (
	// EnvAddress is kube-fanout's host:port (its Service); required.
	EnvAddress = "KUBE_FANOUT_ADDRESS"
	// EnvTokenFile overrides DefaultTokenFile.
	EnvTokenFile = "KUBE_FANOUT_TOKEN_FILE"
	// EnvCAFile overrides DefaultCAFile.
	EnvCAFile = "KUBE_FANOUT_CA_FILE"
)

// InCluster is how a pod reaches kube-fanout: the counterpart of
// rest.InClusterConfig for the API server. Change a field before Dial to
// override it.
type InCluster struct {
	// Address is kube-fanout's "host:port"; its host is the name the
	// server's certificate must carry.
	Address string
	// TokenFile holds the projected ServiceAccount token, re-read when the
	// kubelet rotates it (WithTokenFile).
	TokenFile string
	// CAFile is the PEM bundle kube-fanout's serving certificate must
	// chain to; read once, at Dial.
	CAFile string
}

// InClusterConfig is the in-cluster set-up from the environment:
// KUBE_FANOUT_ADDRESS, and KUBE_FANOUT_TOKEN_FILE and KUBE_FANOUT_CA_FILE
// or the default paths. It fails, naming the variable, when the address is
// not set.
func InClusterConfig() (InCluster, error) {
	c := InCluster{
		Address:   os.Getenv(EnvAddress),
		TokenFile: envOr(EnvTokenFile, DefaultTokenFile),
		CAFile:    envOr(EnvCAFile, DefaultCAFile),
	}
	if c.Address == "" {
		return c, fmt.Errorf("kube-fanout: %s is not set: give kube-fanout's Service as host:port", EnvAddress)
	}
	return c, nil
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// Dial connects over TLS, verified against CAFile, sending the token in
// TokenFile. opts come after these and so override them (WithTLS for a
// client certificate, WithGzip, ...). It fails if the CA bundle cannot be
// read or holds no certificate, or the token file cannot be read now.
func (c InCluster) Dial(opts ...Option) (*Conn, error) {
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("kube-fanout: CA bundle: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("kube-fanout: CA bundle %s holds no PEM certificate", c.CAFile)
	}
	// A missing token is said now, not at the first informer's retries.
	if _, err := readToken(c.TokenFile); err != nil {
		return nil, fmt.Errorf("kube-fanout: %w", err)
	}
	if c.Address == "" {
		return nil, errors.New("kube-fanout: in-cluster set-up without an address")
	}
	base := []Option{
		WithTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}),
		WithTokenFile(c.TokenFile),
	}
	return Dial([]string{c.Address}, append(base, opts...)...)
}

// DialInCluster is InClusterConfig followed by Dial: one call for a
// controller running in a pod set up as the chart's NOTES describe.
func DialInCluster(opts ...Option) (*Conn, error) {
	c, err := InClusterConfig()
	if err != nil {
		return nil, err
	}
	return c.Dial(opts...)
}

// Package kubefanoutv1 is the generated gRPC API of kube-fanout, from
// proto/proto/kubefanout/v1/fanout.proto. Do not edit the generated files:
// change the proto and run `go generate ./...` in client/go.
package kubefanoutv1

//go:generate bash ../generate.sh

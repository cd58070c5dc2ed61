// Command oracle is kube-fanout-kubeproto's Go counterpart:
//
//	oracle schema            writes the crate's schema (kubeproto/schema/kubernetes.schema)
//	oracle fuzz SEED COUNT   writes COUNT random objects of every kind, as JSON lines of cases
//	oracle check             reads cases with kube-fanout's encoding, writes one verdict a line
package main

import (
	"fmt"
	"os"
	"strconv"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "schema":
		err = writeSchema(os.Stdout)
	case "fuzz":
		if len(os.Args) != 4 {
			usage()
		}
		seed, serr := strconv.ParseInt(os.Args[2], 10, 64)
		count, cerr := strconv.Atoi(os.Args[3])
		if serr != nil || cerr != nil {
			usage()
		}
		err = fuzz(os.Stdout, seed, count)
	case "check":
		err = check(os.Stdin, os.Stdout)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "oracle:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: oracle schema | oracle fuzz SEED COUNT | oracle check")
	os.Exit(2)
}

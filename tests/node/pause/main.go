// Command pause is the node tests' pod sandbox image: the first process of
// every pod, holding its namespaces open, reaping the zombies it inherits as
// PID 1, and exiting on SIGINT or SIGTERM. What registry.k8s.io/pause does,
// built here because the tests pull no image from any registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

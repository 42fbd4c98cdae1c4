// pause is the e2e node's sandbox ("pause") container: it holds the pod's
// namespaces and exits on SIGTERM or SIGINT. Public registries are unreachable
// from the test machines, so the harness builds its sandbox image from this.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
}

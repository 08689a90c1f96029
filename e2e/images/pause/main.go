// Command pause is the pod sandbox process of the e2e cluster: it holds the
// pod's namespaces open and does nothing until it is told to stop. The e2e
// cluster builds its pause image from it (no C toolchain or registry needed).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of the sandbox it would also inherit orphans; the runtime
	// shares the PID namespace only on request, and then reaping matters:
	// ignore SIGCHLD so the kernel reaps them.
	signal.Ignore(syscall.SIGCHLD)
	<-stop
}

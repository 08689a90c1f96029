// kubectl-kubefarm is the kubectl plugin of kubefarm (`kubectl kubefarm`,
// once it is on PATH): a tenant cluster's admin kubeconfig, clusters, pools
// and rollouts at a glance, and a NodePool rollout's pause, resume, retry
// and status. The commands are in internal/cli, what they print and send in
// internal/plugin; docs/kubectl-plugin.md documents them.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubefarm/kubefarm/cmd/kubectl-kubefarm/internal/cli"
)

func main() {
	// Ctrl-C cancels the request in flight instead of leaving a write
	// half-reported.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, time.Now)
	stop()
	os.Exit(code)
}

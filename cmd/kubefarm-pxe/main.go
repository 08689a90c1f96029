// Command kubefarm-pxe boots kubefarm's bare-metal machines: DHCPv4 (static
// leases from Machines and NodePools), TFTP for the iPXE binaries, and HTTP
// for iPXE scripts and boot artifacts. The server is package pxe/server;
// this command maps its flags onto server.Options and runs it until
// SIGTERM.
//
// It runs as hostNetwork pods on the nodes of the boot network, several
// replicas at once. There is no leader election: every replica answers,
// because the answers are derived from the same API objects and agree, and a
// machine must be able to boot while any one replica is down. State is read
// through a controller-runtime cache, so when the admin API server goes away
// the replicas keep serving what they last knew.
package main

import (
	"context"
	"flag"
	"os"
	"runtime/debug"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kubefarm/kubefarm/pxe/server"
)

// gcPercent is kubefarm-pxe's garbage collection target when GOGC is not
// set: the heap may grow 50% over what is live between collections instead
// of Go's default 100%. Every replica holds every Machine, and allocation per
// packet is small, so the trade is cheap: with 20,000 Machines `make bench`
// measured 90 MiB resident instead of 121 MiB (with the Machines then still
// in the informer cache), at the same CPU per DHCP exchange (86 against 89
// µs at 5,000/s). GOGC in the environment overrides it, as for any Go
// program.
const gcPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	var opts server.Options
	bindFlags(flag.CommandLine, &opts)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("kubefarm-pxe")
	opts.Log = log

	if err := run(ctrl.SetupSignalHandler(), opts); err != nil {
		log.Error(err, "exiting")
		os.Exit(1)
	}
	log.Info("stopped")
}

// run serves until ctx ends (SIGTERM) or a service fails. The
// kubeconfig is --kubeconfig's, $KUBECONFIG or in-cluster: opts.Config is
// left nil for the server to load it after it checked the flags.
func run(ctx context.Context, opts server.Options) error {
	s, err := server.New(opts)
	if err != nil {
		return err
	}
	return s.Start(ctx)
}

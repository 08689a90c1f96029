// Package cli is kubectl-kubefarm's commands: cobra wiring, kubectl's
// connection flags (genericclioptions.ConfigFlags: --kubeconfig, --context,
// -n and the rest), and for each command a Run that fetches objects, hands
// them to package plugin and writes what it returns. Nothing here decides
// what to print or what to send.
package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/cmd/kubectl-kubefarm/internal/plugin"
)

// Exit codes. Halted is its own code so that scripts and CI gates can tell
// "the rollout needs an operator" from "the command could not run".
const (
	ExitOK     = 0
	ExitError  = 1
	ExitHalted = 2
)

// exitError carries an exit code other than ExitError to Main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Main runs the plugin with args (without the program name) and returns the
// process's exit code; main is os.Exit(Main(...)). Errors are printed to
// streams.ErrOut as kubectl prints them ("error: ...").
func Main(ctx context.Context, args []string, streams genericiooptions.IOStreams, now func() time.Time) int {
	root := NewRootCommand(streams, now)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(streams.ErrOut, "error:", err)
	if ee := (*exitError)(nil); errors.As(err, &ee) {
		return ee.code
	}
	return ExitError
}

// env is what every command needs: the streams, the clock, and the
// connection flags to build a client from.
type env struct {
	streams genericiooptions.IOStreams
	now     func() time.Time
	flags   *genericclioptions.ConfigFlags
}

// NewRootCommand is `kubectl kubefarm` with its subcommands. now is the
// clock for the ages the commands print (time.Now outside tests).
func NewRootCommand(streams genericiooptions.IOStreams, now func() time.Time) *cobra.Command {
	e := &env{streams: streams, now: now, flags: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		// kubectl finds plugins by the executable's name; the display
		// name makes help and usage say `kubectl kubefarm`, which is how
		// people run it.
		Use:         "kubectl-kubefarm",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl kubefarm"},
		Short:       "Tenant clusters, node pools and rollouts of kubefarm at a glance",
		Long: `kubectl kubefarm works with kubefarm's objects in the admin cluster: it fetches a
tenant cluster's admin kubeconfig, shows clusters, pools and rollouts at a glance,
and pauses, resumes, retries and reports a NodePool's rolling reboot-to-update.
See docs/kubectl-plugin.md.`,
		// Errors are printed once, by Main; a failed request is not a
		// usage mistake, so cobra must not print the usage for it.
		SilenceErrors: true,
		SilenceUsage:  true,
		// A completion command would need documenting and a
		// kubectl_complete-kubefarm helper to be useful; not yet.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	e.flags.AddFlags(root.PersistentFlags())
	root.AddCommand(newKubeconfigCommand(e), newStatusCommand(e), newRolloutCommand(e),
		newPowerCommand(e), newEnrollCommand(e))
	return root
}

// scheme knows only what the plugin reads: Secrets and kubefarm's kinds.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// client builds a client from the connection flags and returns it with the
// namespace to work in: -n, else the kubeconfig context's, else default.
func (e *env) client() (client.WithWatch, string, error) {
	cfg, err := e.flags.ToRESTConfig()
	if err != nil {
		return nil, "", err
	}
	cfg.UserAgent = plugin.FieldManager
	ns, _, err := e.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", err
	}
	// WithWatch: `rollout status` watches its pool.
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", err
	}
	return c, ns, nil
}

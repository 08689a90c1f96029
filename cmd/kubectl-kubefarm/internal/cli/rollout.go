package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/cmd/kubectl-kubefarm/internal/plugin"
)

// RolloutOptions are the arguments of the `kubectl kubefarm rollout`
// commands.
type RolloutOptions struct {
	Namespace string
	Pool      string
	// History is how many finished updates `rollout status` lists
	// (negative: all the machines keep).
	History int
	// Watch: `rollout status` reports every change of the pool until its
	// rollout finishes (plugin.RolloutFinished) or Timeout passes (zero:
	// no limit); without it, it reports once.
	Watch   bool
	Timeout time.Duration
}

func newRolloutCommand(e *env) *cobra.Command {
	o := &RolloutOptions{}
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Pause, resume, retry or report a NodePool's rolling reboot-to-update",
		Long: `Act on a NodePool's rolling reboot-to-update (docs/rollout.md). pause and resume
set spec.rollout.paused, retry sets the kubefarm.io/rollout-retry annotation, each
with a JSON merge patch of that one field under the field manager kubectl-kubefarm;
status reports the rollout and exits with 2 when it is halted.`,
	}
	// sub makes one subcommand taking POOL; run gets a client and o with
	// the namespace and pool filled in.
	sub := func(use, short, long string, run func(ctx context.Context, c client.WithWatch) error) *cobra.Command {
		return &cobra.Command{
			Use: use + " POOL", Short: short, Long: long, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, ns, err := e.client()
				if err != nil {
					return err
				}
				o.Namespace, o.Pool = ns, args[0]
				return run(cmd.Context(), c)
			},
		}
	}
	pause := sub("pause", "Stop new machine updates of a NodePool (updates in flight finish)",
		`Set spec.rollout.paused to true: no new machine update starts; the ones in flight
finish. Only that field is written (a JSON merge patch, field manager kubectl-kubefarm).`,
		func(ctx context.Context, c client.WithWatch) error { return RunPause(ctx, c, o, true, e.streams.Out) })
	resume := sub("resume", "Let a paused NodePool's rollout start machine updates again",
		`Set spec.rollout.paused to false. Only that field is written (a JSON merge patch,
field manager kubectl-kubefarm). A halted rollout stays halted: see retry.`,
		func(ctx context.Context, c client.WithWatch) error { return RunPause(ctx, c, o, false, e.streams.Out) })
	retry := sub("retry", "Retry a halted NodePool rollout's failed machine updates",
		`Set the kubefarm.io/rollout-retry annotation to a new value (the current time):
the rollout controller forgets the failed updates (uncordoning the nodes it had
cordoned), starts the failure count from zero and tries those machines again.`,
		func(ctx context.Context, c client.WithWatch) error {
			return RunRetry(ctx, c, o, e.now(), e.streams.Out)
		})
	status := sub("status", "Watch a NodePool's rollout until it completes; exit status 2 when it is halted",
		`Print the pool's image and rollout image, spec.rollout.paused, the machine counts,
the Progressing, Paused, Halted and Complete conditions with their messages, the
machines with a rollout record (phase, reason, time in the phase, target, message)
and the latest finished updates of its machines.

Like kubectl rollout status, it then watches the pool and prints the report again
at every change, until the rollout is complete (exit status 0), halted (exit
status 2) or stopped by an invalid strategy (exit status 1), or --timeout passes
(exit status 1). With --watch=false it prints once and exits with status 2 when
the rollout is halted, 0 otherwise. Any other error exits with status 1.`,
		func(ctx context.Context, c client.WithWatch) error {
			if o.Watch {
				return WatchRolloutStatus(ctx, c, o, e.now, e.streams.Out)
			}
			return RunRolloutStatus(ctx, c, o, e.now(), e.streams.Out)
		})
	status.Flags().IntVar(&o.History, "history", 5, "how many finished machine updates to list (0: none, -1: all)")
	status.Flags().BoolVarP(&o.Watch, "watch", "w", true, "watch the pool until its rollout completes, halts or fails")
	status.Flags().DurationVar(&o.Timeout, "timeout", 0, "with --watch, how long to wait before giving up (0: no limit)")
	cmd.AddCommand(pause, resume, retry, status)
	return cmd
}

func getPool(ctx context.Context, c client.Client, o *RolloutOptions) (*v1alpha1.NodePool, error) {
	p := &v1alpha1.NodePool{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Pool}, p); err != nil {
		return nil, describeGetError("NodePool", o.Namespace, o.Pool, err)
	}
	return p, nil
}

// patch sends a JSON merge patch (see plugin.PausePatch for why) as
// plugin.FieldManager.
func patch(ctx context.Context, c client.Client, p *v1alpha1.NodePool, data []byte, field string) error {
	if err := c.Patch(ctx, p, client.RawPatch(types.MergePatchType, data), client.FieldOwner(plugin.FieldManager)); err != nil {
		return fmt.Errorf("setting %s of NodePool %s/%s: %w", field, p.Namespace, p.Name, err)
	}
	return nil
}

// RunPause sets spec.rollout.paused of the pool to paused. A pool already
// in that state is not written, so its managedFields keep saying who set
// the value.
func RunPause(ctx context.Context, c client.Client, o *RolloutOptions, paused bool, out io.Writer) error {
	p, err := getPool(ctx, c, o)
	if err != nil {
		return err
	}
	verb := map[bool]string{true: "paused", false: "resumed"}[paused]
	if p.Spec.Rollout.Paused == paused {
		_, err := fmt.Fprintf(out, "nodepool %s/%s already %s (spec.rollout.paused is %t)\n", p.Namespace, p.Name, verb, paused)
		return err
	}
	if err := patch(ctx, c, p, plugin.PausePatch(paused), "spec.rollout.paused"); err != nil {
		return err
	}
	what := "new machine updates start again within the budget and windows"
	if paused {
		what = "no new machine update starts; updates in flight finish"
	}
	_, err = fmt.Fprintf(out, "nodepool %s/%s %s: %s\n", p.Namespace, p.Name, verb, what)
	return err
}

// RunRetry sets the pool's kubefarm.io/rollout-retry annotation to a new
// value.
func RunRetry(ctx context.Context, c client.Client, o *RolloutOptions, now time.Time, out io.Writer) error {
	p, err := getPool(ctx, c, o)
	if err != nil {
		return err
	}
	value := plugin.RetryValue(p, now)
	if err := patch(ctx, c, p, plugin.RetryPatch(value), "annotation "+v1alpha1.AnnotationRolloutRetry); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "nodepool %s/%s: %s=%s; the rollout controller retries its %d failed updates\n",
		p.Namespace, p.Name, v1alpha1.AnnotationRolloutRetry, value, p.Status.FailedUpdates)
	return err
}

// RunRolloutStatus writes the pool's rollout report, and returns an error
// with ExitHalted when the rollout is halted.
func RunRolloutStatus(ctx context.Context, c client.Client, o *RolloutOptions, now time.Time, out io.Writer) error {
	p, err := getPool(ctx, c, o)
	if err != nil {
		return err
	}
	if err := writeRolloutStatus(ctx, c, p, o, now, out); err != nil {
		return err
	}
	if _, halted := plugin.Halted(p); halted {
		return haltedError(p)
	}
	return nil
}

// writeRolloutStatus writes the report of p with its machines.
func writeRolloutStatus(ctx context.Context, c client.Client, p *v1alpha1.NodePool, o *RolloutOptions, now time.Time, out io.Writer) error {
	var machines v1alpha1.MachineList
	if err := c.List(ctx, &machines, client.InNamespace(p.Namespace)); err != nil {
		return fmt.Errorf("listing the Machines of NodePool %s/%s: %w", p.Namespace, p.Name, err)
	}
	_, err := io.WriteString(out, plugin.RolloutStatus(p, machines.Items, o.History, now))
	return err
}

func haltedError(p *v1alpha1.NodePool) error {
	msg, _ := plugin.Halted(p)
	return &exitError{code: ExitHalted, err: fmt.Errorf("the rollout of NodePool %s/%s is halted: %s (kubectl kubefarm rollout retry %s -n %s retries)",
		p.Namespace, p.Name, msg, p.Name, p.Namespace)}
}

// WatchRolloutStatus writes the pool's rollout report, then again at every
// change of the pool (a blank line between reports), until
// plugin.RolloutFinished says the rollout finished: nil when it is
// complete, an error with ExitHalted when it is halted, another error
// naming why it stopped otherwise. o.Timeout, when set, bounds the wait.
//
// It watches the one pool (a field selector on its name) through client-go's
// UntilWithSync, which lists, then watches from the list's resource version
// and lists and watches again when the server closes the watch, so that no
// change is missed and nothing polls. The machines are listed again for
// each report; a change of a machine alone is shown with the next change of
// the pool, which follows it (its counts).
func WatchRolloutStatus(ctx context.Context, c client.WithWatch, o *RolloutOptions, now func() time.Time, out io.Writer) error {
	// A pool that does not exist is an error now, not a wait.
	p, err := getPool(ctx, c, o)
	if err != nil {
		return err
	}
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	byName := fields.OneTermEqualSelector("metadata.name", o.Pool).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = byName
			l := &v1alpha1.NodePoolList{}
			return l, c.List(ctx, l, client.InNamespace(o.Namespace), &client.ListOptions{Raw: &opts})
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = byName
			return c.Watch(ctx, &v1alpha1.NodePoolList{}, client.InNamespace(o.Namespace), &client.ListOptions{Raw: &opts})
		},
		DisableChunking: true,
	}
	last, printed := p, ""
	_, err = watchtools.UntilWithSync(ctx, lw, &v1alpha1.NodePool{}, nil, func(ev watch.Event) (bool, error) {
		switch ev.Type {
		case watch.Deleted:
			return false, fmt.Errorf("NodePool %s/%s was deleted while its rollout was watched", o.Namespace, o.Pool)
		case watch.Added, watch.Modified:
		default:
			return false, nil
		}
		p, ok := ev.Object.(*v1alpha1.NodePool)
		if !ok || p.ResourceVersion == printed {
			return false, nil
		}
		if printed != "" {
			if _, err := io.WriteString(out, "\n"); err != nil {
				return false, err
			}
		}
		if err := writeRolloutStatus(ctx, c, p, o, now(), out); err != nil {
			return false, err
		}
		last, printed = p, p.ResourceVersion
		finished, failure := plugin.RolloutFinished(p)
		switch {
		case !finished:
			return false, nil
		case failure == "":
			return true, nil
		}
		if _, halted := plugin.Halted(p); halted {
			return true, haltedError(p)
		}
		return true, fmt.Errorf("the rollout of NodePool %s/%s stopped: %s", p.Namespace, p.Name, failure)
	})
	// The timeout ended the wait (before the first list, or after).
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && (wait.Interrupted(err) || errors.Is(err, ctx.Err())) {
		return fmt.Errorf("timed out after %s waiting for the rollout of NodePool %s/%s to complete; it is %s",
			o.Timeout, o.Namespace, o.Pool, plugin.RolloutState(last))
	}
	return err
}

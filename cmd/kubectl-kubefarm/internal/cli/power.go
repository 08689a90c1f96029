package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/cmd/kubectl-kubefarm/internal/plugin"
	"github.com/kubefarm/kubefarm/power"
)

// PowerOptions are the arguments of `kubectl kubefarm power`.
type PowerOptions struct {
	Namespace, Machine string
	// Netboot forces the next boot to the network (on and cycle).
	Netboot bool
	// Wait for kubefarm-manager to perform the request, at most Timeout.
	Wait    bool
	Timeout time.Duration
	// Poll is how often the Machine is read while waiting.
	Poll time.Duration
}

func newPowerCommand(e *env) *cobra.Command {
	o := &PowerOptions{Poll: 500 * time.Millisecond}
	cmd := &cobra.Command{
		Use:   "power",
		Short: "Power a Machine on, off or cycle it through its BMC, or show its power state",
		Long: `Ask kubefarm-manager for a power operation on a Machine through the driver its
spec.power names (docs/power.md): on, off or cycle set the kubefarm.io/power-request
annotation ("<op>[,netboot]@<time>", a JSON merge patch under the field manager
kubectl-kubefarm) and wait until the manager has performed it, then print the
result. status prints the power state, when it was read, the last operation and
the PowerControl condition.`,
	}
	op := func(name power.Op, short string) *cobra.Command {
		c := &cobra.Command{
			Use: string(name) + " MACHINE", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, ns, err := e.client()
				if err != nil {
					return err
				}
				o.Namespace, o.Machine = ns, args[0]
				return RunPower(cmd.Context(), c, o, name, e.now, e.streams.Out)
			},
		}
		if name != power.OpOff {
			c.Flags().BoolVar(&o.Netboot, "netboot", false, "make the next boot, and only it, a network boot (set on the BMC first)")
		}
		c.Flags().BoolVar(&o.Wait, "wait", true, "wait until kubefarm-manager has performed the request and print its result")
		c.Flags().DurationVar(&o.Timeout, "timeout", 2*time.Minute, "with --wait, how long to wait")
		return c
	}
	status := &cobra.Command{
		Use: "status MACHINE", Short: "Print a Machine's power state, when it was read, and the PowerControl condition",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := e.client()
			if err != nil {
				return err
			}
			m, err := getMachine(cmd.Context(), c, ns, args[0])
			if err != nil {
				return err
			}
			_, err = io.WriteString(e.streams.Out, plugin.PowerStatus(m, e.now()))
			return err
		},
	}
	cmd.AddCommand(op(power.OpOn, "Power a Machine on"), op(power.OpOff, "Power a Machine off at once (no clean shutdown)"),
		op(power.OpCycle, "Power-cycle a Machine (a hard reset; powers it on when off)"), status)
	return cmd
}

func getMachine(ctx context.Context, c client.Client, ns, name string) (*v1alpha1.Machine, error) {
	m := &v1alpha1.Machine{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
		return nil, describeGetError("Machine", ns, name, err)
	}
	return m, nil
}

// RunPower sets the power request annotation on the Machine and, with
// o.Wait, waits until kubefarm-manager records it performed, then prints
// the outcome and the PowerControl condition. A failed operation is an
// error.
func RunPower(ctx context.Context, c client.Client, o *PowerOptions, op power.Op, now func() time.Time, out io.Writer) error {
	m, err := getMachine(ctx, c, o.Namespace, o.Machine)
	if err != nil {
		return err
	}
	if m.Spec.Power == nil {
		return fmt.Errorf("cannot power Machine %s/%s: it has no spec.power", o.Namespace, o.Machine)
	}
	r := plugin.PowerRequest(m, op, o.Netboot && op != power.OpOff, now())
	if err := c.Patch(ctx, m, client.RawPatch(types.MergePatchType, plugin.PowerRequestPatch(r)), client.FieldOwner(plugin.FieldManager)); err != nil {
		return fmt.Errorf("setting annotation %s of Machine %s/%s: %w", v1alpha1.AnnotationPowerRequest, o.Namespace, o.Machine, err)
	}
	if _, err := fmt.Fprintf(out, "machine %s/%s: requested %s=%s\n", o.Namespace, o.Machine, v1alpha1.AnnotationPowerRequest, r); err != nil {
		return err
	}
	if !o.Wait {
		return nil
	}
	var failed bool
	var outcome power.Outcome
	err = wait.PollUntilContextTimeout(ctx, o.Poll, o.Timeout, true, func(ctx context.Context) (bool, error) {
		if m, err = getMachine(ctx, c, o.Namespace, o.Machine); err != nil {
			return false, err
		}
		var done bool
		done, failed, outcome = plugin.PowerResult(m, r)
		return done, nil
	})
	if err != nil {
		if wait.Interrupted(err) {
			return fmt.Errorf("timed out after %s waiting for kubefarm-manager to perform %s on Machine %s/%s (is it running? kubectl kubefarm power status %s -n %s)",
				o.Timeout, r, o.Namespace, o.Machine, o.Machine, o.Namespace)
		}
		return err
	}
	if _, err := io.WriteString(out, plugin.PowerStatus(m, now())); err != nil {
		return err
	}
	if failed {
		return fmt.Errorf("%s on Machine %s/%s: %s", r.Operation(), o.Namespace, o.Machine, outcome)
	}
	return nil
}

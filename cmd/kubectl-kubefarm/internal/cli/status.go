package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/cmd/kubectl-kubefarm/internal/plugin"
)

// StatusOptions are `kubectl kubefarm status`'s arguments.
type StatusOptions struct {
	Namespace     string
	AllNamespaces bool
}

func newStatusCommand(e *env) *cobra.Command {
	o := &StatusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Tenant clusters, node pools, machines and rollouts at a glance",
		Long: `List the TenantClusters (version, Ready and its reason, endpoint), the NodePools
(cluster, image, machines ready/updated/total, rollout state) and every Machine
with a rollout record (phase, time in it, target image, message) of a namespace,
or of all namespaces with -A. Each table is sorted by namespace and name.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ns, err := e.client()
			if err != nil {
				return err
			}
			o.Namespace = ns
			return RunStatus(cmd.Context(), c, o, e.now(), e.streams.Out)
		},
	}
	cmd.Flags().BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "list the objects of every namespace")
	return cmd
}

// RunStatus lists the namespace's (or every namespace's) kubefarm objects
// and writes the status tables.
func RunStatus(ctx context.Context, c client.Client, o *StatusOptions, now time.Time, out io.Writer) error {
	var opts []client.ListOption
	scope := "all namespaces"
	if !o.AllNamespaces {
		opts = append(opts, client.InNamespace(o.Namespace))
		scope = "namespace " + o.Namespace
	}
	var (
		clusters v1alpha1.TenantClusterList
		pools    v1alpha1.NodePoolList
		machines v1alpha1.MachineList
	)
	for _, l := range []struct {
		kind string
		list client.ObjectList
	}{{"TenantClusters", &clusters}, {"NodePools", &pools}, {"Machines", &machines}} {
		if err := c.List(ctx, l.list, opts...); err != nil {
			return fmt.Errorf("listing %s in %s: %w", l.kind, scope, err)
		}
	}
	_, err := io.WriteString(out, plugin.Status(clusters.Items, pools.Items, machines.Items, o.Namespace, o.AllNamespaces, now))
	return err
}

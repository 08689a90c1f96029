package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/cmd/kubectl-kubefarm/internal/plugin"
)

// KubeconfigOptions are `kubectl kubefarm kubeconfig`'s arguments.
type KubeconfigOptions struct {
	Namespace string
	Cluster   string
	// Output is the file to write; empty or "-" writes to stdout.
	Output string
	// Force replaces an existing Output.
	Force bool
}

func newKubeconfigCommand(e *env) *cobra.Command {
	o := &KubeconfigOptions{}
	cmd := &cobra.Command{
		Use:   "kubeconfig CLUSTER",
		Short: "Write a tenant cluster's admin kubeconfig to stdout or a file",
		Long: `Write the admin kubeconfig of the TenantCluster CLUSTER (the Secret its
status.adminKubeconfigSecret names, key "kubeconfig") to stdout, or with -o to a
new file of mode 0600. An existing file is kept unless --force is given.`,
		Example: `  kubectl kubefarm kubeconfig cluster1 -n cluster1 -o cluster1.kubeconfig
  kubectl --kubeconfig <(kubectl kubefarm kubeconfig cluster1 -n cluster1) get nodes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := e.client()
			if err != nil {
				return err
			}
			o.Namespace, o.Cluster = ns, args[0]
			return RunKubeconfig(cmd.Context(), c, o, e.streams.Out)
		},
	}
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", `file to write the kubeconfig to (mode 0600); empty or "-" writes to stdout`)
	cmd.Flags().BoolVar(&o.Force, "force", false, "replace the --output file if it exists")
	return cmd
}

// RunKubeconfig writes the admin kubeconfig of o.Cluster to o.Output, or to
// stdout.
func RunKubeconfig(ctx context.Context, c client.Client, o *KubeconfigOptions, stdout io.Writer) error {
	tc := &v1alpha1.TenantCluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Cluster}, tc); err != nil {
		return describeGetError("TenantCluster", o.Namespace, o.Cluster, err)
	}
	name, err := plugin.AdminKubeconfigSecret(tc)
	if err != nil {
		return err
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: tc.Namespace, Name: name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("TenantCluster %s/%s names Secret %s in status.adminKubeconfigSecret, but it does not exist", tc.Namespace, tc.Name, name)
		}
		return fmt.Errorf("reading Secret %s/%s (status.adminKubeconfigSecret of TenantCluster %s/%s): %w", tc.Namespace, name, tc.Namespace, tc.Name, err)
	}
	data := secret.Data[plugin.AdminKubeconfigKey]
	if len(data) == 0 {
		return fmt.Errorf("the admin kubeconfig Secret %s/%s (status.adminKubeconfigSecret of TenantCluster %s/%s) has no data key %q",
			tc.Namespace, name, tc.Namespace, tc.Name, plugin.AdminKubeconfigKey)
	}
	if o.Output == "" || o.Output == "-" {
		_, err := stdout.Write(data)
		return err
	}
	return writePrivateFile(o.Output, data, o.Force)
}

// writePrivateFile writes a file only its owner can read: the kubeconfig
// carries the tenant's admin client key. Without force it is created
// exclusively (O_EXCL), so an existing file, or one appearing meanwhile,
// is never overwritten. With force the data goes to a new file in the same
// folder that is renamed over the old one, so the result has mode 0600
// whatever mode the old file had, and no reader ever sees half a
// kubeconfig.
func writePrivateFile(path string, data []byte, force bool) error {
	if !force {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s exists; pass --force to replace it", path)
		}
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			os.Remove(path)
			return err
		}
		return f.Close()
	}
	// os.CreateTemp creates the file with mode 0600.
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// describeGetError names the object a failed read was for; NotFound says
// so plainly, the way kubectl does.
func describeGetError(kind, namespace, name string, err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s %s/%s not found", kind, namespace, name)
	}
	return fmt.Errorf("reading %s %s/%s: %w", kind, namespace, name, err)
}

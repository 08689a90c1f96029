package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/cmd/kubectl-kubefarm/internal/plugin"
)

// ExitEditSource is enroll's exit code when the pool belongs to Helm or
// Argo CD: nothing was changed, and the lines printed must go into the
// release's values (a script must not take it for success, nor for a
// failure to retry).
const ExitEditSource = 3

// EnrollOptions are the arguments of `kubectl kubefarm enroll`.
type EnrollOptions struct {
	Namespace  string
	Discovered string
	Pool       string
	Name       string
	IP         string
	Power      plugin.PowerFlags
}

func newEnrollCommand(e *env) *cobra.Command {
	o := &EnrollOptions{}
	cmd := &cobra.Command{
		Use:   "enroll DISCOVERED --pool POOL --name NAME [--ip IP] [--power-driver ipmi|redfish --power-credentials SECRET ...]",
		Short: "Make a discovered machine an entry of a NodePool",
		Long: `Add a DiscoveredMachine (its name, or its MAC) to a NodePool's spec.machines as
NAME with its MAC and IP (default: the address it has now, when inside the pool's
subnet). A name, MAC or IP the pool or another holder already uses is refused.

With --power-driver the entry gets the machine's power control (spec.power):
its BMC over ipmi (--power-address defaults to the BMC address the machine
reported, spec.hardware.bmcAddress) or redfish (--power-address required:
https://host[:port][/redfish/v1/Systems/<id>]), and --power-credentials, a
Secret in the pool's namespace with the keys username and password and the
label kubefarm.io/bmc-credentials=true (the manager sends no other Secret to a
BMC). The command reads that Secret and warns when it is missing, unlabelled
or unreadable, but enrolls all the same. See docs/power.md.

A pool that a Helm release or Argo CD owns is not changed: the command prints the
lines to add under the pool's nodes: in the values file and exits with status 3.
Otherwise it appends the entry with a JSON patch that is valid only against the
pool it read (a concurrent edit makes it read and decide again), recorded under
the field manager kubectl-kubefarm. The NodePool controller then makes the
Machine, the DiscoveredMachine goes, and the machine reboots from discovery
into the pool's image and joins. See docs/enrollment.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := e.client()
			if err != nil {
				return err
			}
			o.Namespace, o.Discovered = ns, args[0]
			return RunEnroll(cmd.Context(), c, o, e.streams.Out, e.streams.ErrOut)
		},
	}
	cmd.Flags().StringVar(&o.Pool, "pool", "", "the NodePool to enroll into (in -n's namespace)")
	cmd.Flags().StringVar(&o.Name, "name", "", "the machine's name in the pool (its hostname)")
	cmd.Flags().StringVar(&o.IP, "ip", "", "the machine's static IPv4 address (default: the discovered address)")
	cmd.Flags().StringVar(&o.Power.Driver, "power-driver", "", "the machine's power control: ipmi or redfish (its BMC); none when absent")
	cmd.Flags().StringVar(&o.Power.Address, "power-address", "",
		"the BMC: for ipmi host or host:port (default: the address the machine reported, spec.hardware.bmcAddress); for redfish https://host[:port][/redfish/v1/Systems/<id>] (required)")
	cmd.Flags().StringVar(&o.Power.Credentials, "power-credentials", "",
		"Secret in the pool's namespace with the BMC's username and password, labelled "+v1alpha1.LabelBMCCredentials+"=true (required with --power-driver)")
	cmd.Flags().StringVar(&o.Power.CA, "power-ca", "", "redfish only: Secret whose ca.crt (PEM) verifies the BMC's certificate")
	cmd.Flags().BoolVar(&o.Power.InsecureSkipVerify, "power-insecure-skip-verify", false,
		"redfish only: accept any certificate from the BMC (and allow http://): anyone on the path can read the BMC password")
	_ = cmd.MarkFlagRequired("pool")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

// RunEnroll enrolls o.Discovered into o.Pool: it reads both and the
// address claims, decides (plugin.EnrollEntry), and patches the pool or,
// for a pool a GitOps tool owns, prints the values lines and returns an
// error with ExitEditSource. A patch refused because the pool changed
// since it was read is decided again on the new pool, three times at most.
// What is wrong with the Secrets the entry's power names goes to errOut
// as warnings, once, whichever way the entry goes.
func RunEnroll(ctx context.Context, c client.Client, o *EnrollOptions, out, errOut io.Writer) error {
	name := o.Discovered
	if strings.Count(name, ":") == 5 {
		name = v1alpha1.DiscoveredMachineName(strings.ToLower(name))
	}
	dm := &v1alpha1.DiscoveredMachine{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, dm); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("DiscoveredMachine %s not found (kubectl get discoveredmachines lists them)", name)
		}
		return fmt.Errorf("reading DiscoveredMachine %s: %w", name, err)
	}
	warned := false
	for attempt := 1; ; attempt++ {
		p := &v1alpha1.NodePool{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Pool}, p); err != nil {
			return describeGetError("NodePool", o.Namespace, o.Pool, err)
		}
		req := plugin.EnrollRequest{Pool: p, Discovered: dm, Name: o.Name, IP: o.IP, Power: o.Power}
		ip := o.IP
		if ip == "" {
			ip = dm.Spec.IP
		}
		var err error
		if req.Claims, err = claimsOf(ctx, c, dm.Spec.MAC, ip); err != nil {
			return err
		}
		entry, err := plugin.EnrollEntry(req)
		if err != nil {
			return fmt.Errorf("enrolling %s into NodePool %s/%s: %w", dm.Name, p.Namespace, p.Name, err)
		}
		if !warned {
			warned = true
			if err := warnPowerSecrets(ctx, c, p.Namespace, entry.Power, errOut); err != nil {
				return err
			}
		}
		if owner := plugin.PoolOwner(p); owner != "" {
			if _, err := io.WriteString(out, plugin.ValuesSnippet(p, owner, entry)); err != nil {
				return err
			}
			return &exitError{code: ExitEditSource, err: fmt.Errorf("NodePool %s/%s is managed by %s: add the lines above to its values, nothing was changed",
				p.Namespace, p.Name, owner)}
		}
		err = c.Patch(ctx, p, client.RawPatch(types.JSONPatchType, plugin.EnrollPatch(p, entry)), client.FieldOwner(plugin.FieldManager))
		if err == nil {
			_, err = fmt.Fprintf(out, "nodepool %s/%s: enrolled %s as machine %s (MAC %s, IP %s%s); the NodePool controller makes Machine %s-%s, the DiscoveredMachine goes once it exists, and the machine reboots into the pool's image and joins\n",
				p.Namespace, p.Name, dm.Name, entry.Name, entry.MACs[0], entry.IP, powerNote(entry.Power), p.Name, entry.Name)
			return err
		}
		if !changedSinceRead(err) || attempt == 3 {
			return fmt.Errorf("adding machine %s to spec.machines of NodePool %s/%s: %w", entry.Name, p.Namespace, p.Name, err)
		}
	}
}

// warnPowerSecrets reads the Secrets power names in ns and writes what is
// wrong with them (plugin.PowerSecretWarnings) to w as kubectl writes
// warnings. Only a warning, whatever the read answers (Forbidden
// included): the Secret may be made after the entry, it is its owner's
// business, and the manager reports the same later in the Machine's
// PowerControl condition.
func warnPowerSecrets(ctx context.Context, c client.Client, ns string, power *v1alpha1.PowerSpec, w io.Writer) error {
	if power == nil {
		return nil
	}
	read := func(name string) plugin.SecretRead {
		if name == "" {
			return plugin.SecretRead{}
		}
		s := &corev1.Secret{}
		switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); {
		case err == nil:
			return plugin.SecretRead{Secret: s}
		case apierrors.IsNotFound(err):
			return plugin.SecretRead{NotFound: true}
		case apierrors.IsForbidden(err):
			return plugin.SecretRead{Forbidden: true}
		default:
			return plugin.SecretRead{Err: err}
		}
	}
	for _, msg := range plugin.PowerSecretWarnings(ns, power, read(power.CredentialsSecret), read(power.CASecret)) {
		if _, err := fmt.Fprintf(w, "Warning: %s\n", msg); err != nil {
			return err
		}
	}
	return nil
}

// powerNote is the entry's power control in enroll's report.
func powerNote(p *v1alpha1.PowerSpec) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf(", power %s %s with Secret %s", p.Driver, p.Address, p.CredentialsSecret)
}

// changedSinceRead: the pool changed since it was read (the patch's
// resourceVersion precondition failed).
func changedSinceRead(err error) bool { return apierrors.IsConflict(err) }

// claimsOf reads the AddressClaims of mac and ip that exist. An operator
// who may not read claims gets the same answer later from the NodePool
// webhook and the pool's AddressesClaimed condition, so Forbidden skips
// the check rather than failing the command.
func claimsOf(ctx context.Context, c client.Client, mac, ip string) ([]v1alpha1.AddressClaim, error) {
	var out []v1alpha1.AddressClaim
	var names []string
	if mac != "" {
		names = append(names, v1alpha1.AddressClaimName(v1alpha1.AddressMAC, strings.ToLower(mac)))
	}
	if ip != "" {
		names = append(names, v1alpha1.AddressClaimName(v1alpha1.AddressIPv4, ip))
	}
	for _, name := range names {
		cl := &v1alpha1.AddressClaim{}
		switch err := c.Get(ctx, client.ObjectKey{Name: name}, cl); {
		case err == nil:
			out = append(out, *cl)
		case apierrors.IsNotFound(err), apierrors.IsForbidden(err), apierrors.IsInvalid(err):
		default:
			return nil, fmt.Errorf("reading AddressClaim %s: %w", name, err)
		}
	}
	return out, nil
}

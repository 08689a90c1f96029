// Package nodepool validates NodePools against each other: a MAC or an IP may
// belong to one machine in the whole admin cluster. Rules that need only the
// object itself live in the CRD as CEL; this webhook holds what CEL cannot
// see, other objects, and what CEL cannot compute nicely: the order and size
// of spec.network.dynamicRange, the time zones and durations of
// spec.rollout.maintenanceWindows, spec.rollout.blockingPodSelector, the
// alert gate's patterns, and whether spec.rollout.notify.template renders.
//
// The address check answers from an informer cache, for a quick answer to
// kubectl apply: two pools created at the same instant can both pass it.
// What keeps them from both getting a Machine on one address is the
// AddressClaim, which the NodePool controller creates before each Machine
// and the Machine webhook (webhooks/machine) requires (docs/addresses.md).
package nodepool

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/window"
)

// Cache index names. Each maps an address to the NodePools that use it, so a
// check costs one index lookup per address, never a scan of every pool.
const (
	IndexMAC = "kubefarm.io/nodepool-mac"
	IndexIP  = "kubefarm.io/nodepool-ip"
)

// maxReported bounds the conflicts listed in one rejection so that a pool of
// hundreds of copied machines does not produce a megabyte of errors.
const maxReported = 20

// SetupIndexes registers the MAC and IP indexes on the manager's cache.
func SetupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &kubefarmv1.NodePool{}, IndexMAC, func(o client.Object) []string {
		return MACs(o.(*kubefarmv1.NodePool))
	}); err != nil {
		return fmt.Errorf("indexing NodePools by MAC: %w", err)
	}
	if err := indexer.IndexField(ctx, &kubefarmv1.NodePool{}, IndexIP, func(o client.Object) []string {
		return IPs(o.(*kubefarmv1.NodePool))
	}); err != nil {
		return fmt.Errorf("indexing NodePools by IP: %w", err)
	}
	return nil
}

// MACs lists every MAC of a pool's machines.
func MACs(pool *kubefarmv1.NodePool) []string {
	var out []string
	for _, m := range pool.Spec.Machines {
		out = append(out, m.MACs...)
	}
	return out
}

// IPs lists every IP of a pool's machines.
func IPs(pool *kubefarmv1.NodePool) []string {
	out := make([]string, 0, len(pool.Spec.Machines))
	for _, m := range pool.Spec.Machines {
		out = append(out, m.IP)
	}
	return out
}

// AddressValidator rejects a NodePool whose machines reuse a MAC or IP of a
// machine in another NodePool. Reader must be backed by a cache with the
// indexes of SetupIndexes.
type AddressValidator struct {
	Reader client.Reader
}

var _ admission.Validator[*kubefarmv1.NodePool] = &AddressValidator{}

// +kubebuilder:webhook:path=/validate-kubefarm-io-v1alpha1-nodepool,mutating=false,failurePolicy=fail,sideEffects=None,groups=kubefarm.io,resources=nodepools,verbs=create;update,versions=v1alpha1,name=nodepool-addresses.kubefarm.io,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:rbac:groups=kubefarm.io,resources=nodepools,verbs=get;list;watch

// ValidateCreate checks a new pool.
func (v *AddressValidator) ValidateCreate(ctx context.Context, pool *kubefarmv1.NodePool) (admission.Warnings, error) {
	return nil, v.validate(ctx, pool)
}

// ValidateUpdate checks a changed pool.
func (v *AddressValidator) ValidateUpdate(ctx context.Context, _, pool *kubefarmv1.NodePool) (admission.Warnings, error) {
	return nil, v.validate(ctx, pool)
}

// ValidateDelete allows every deletion.
func (v *AddressValidator) ValidateDelete(context.Context, *kubefarmv1.NodePool) (admission.Warnings, error) {
	return nil, nil
}

func (v *AddressValidator) validate(ctx context.Context, pool *kubefarmv1.NodePool) error {
	errs := validateDynamicRange(pool)
	// The CRD checks the days and start of a window; the zone (a name in the
	// time zone database) and the duration's bounds only code can.
	errs = append(errs, window.Validate(pool.Spec.Rollout.MaintenanceWindows)...)
	errs = append(errs, validateBlockingPodSelector(pool)...)
	errs = append(errs, validateNotify(pool)...)
	errs = append(errs, validateAlertGate(pool)...)
	errs = append(errs, validateHostNetwork(pool)...)
	conflicts := 0
	report := func(path *field.Path, value, owner string) bool {
		errs = append(errs, field.Invalid(path, value, "already used by "+owner))
		conflicts++
		return conflicts < maxReported
	}
	machines := field.NewPath("spec", "machines")
	// Inside the pool: linear, with a map of what earlier machines used (in
	// CEL this was quadratic, and the API server paid for it on every write).
	macOwner := make(map[string]string)
	ipOwner := make(map[string]string, len(pool.Spec.Machines))
	for i, m := range pool.Spec.Machines {
		for j, mac := range m.MACs {
			if first, seen := macOwner[mac]; seen && first != m.Name {
				if !report(machines.Index(i).Child("macs").Index(j), mac, fmt.Sprintf("machine %q of this pool", first)) {
					return v.invalid(pool, errs, machines)
				}
			}
			macOwner[mac] = m.Name
		}
		if first, seen := ipOwner[m.IP]; seen {
			if !report(machines.Index(i).Child("ip"), m.IP, fmt.Sprintf("machine %q of this pool", first)) {
				return v.invalid(pool, errs, machines)
			}
		} else {
			ipOwner[m.IP] = m.Name
		}
	}
	// Across pools: one cache index lookup per address.
	for i, m := range pool.Spec.Machines {
		for j, mac := range m.MACs {
			owner, err := v.otherUser(ctx, pool, IndexMAC, mac, func(o kubefarmv1.MachineEntry) bool { return slices.Contains(o.MACs, mac) })
			if err != nil {
				return err
			}
			if owner != "" && !report(machines.Index(i).Child("macs").Index(j), mac, owner) {
				return v.invalid(pool, errs, machines)
			}
		}
		owner, err := v.otherUser(ctx, pool, IndexIP, m.IP, func(o kubefarmv1.MachineEntry) bool { return o.IP == m.IP })
		if err != nil {
			return err
		}
		if owner != "" && !report(machines.Index(i).Child("ip"), m.IP, owner) {
			return v.invalid(pool, errs, machines)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return v.invalid(pool, errs, nil)
}

// invalid builds the rejection; truncated is set when the list was cut short.
func (v *AddressValidator) invalid(pool *kubefarmv1.NodePool, errs field.ErrorList, truncated *field.Path) error {
	if truncated != nil {
		errs = append(errs, field.Forbidden(truncated, fmt.Sprintf("more than %d conflicting addresses; the rest are not listed", maxReported)))
	}
	return apierrors.NewInvalid(kubefarmv1.GroupVersion.WithKind("NodePool").GroupKind(), pool.Name, errs)
}

// otherUser names the machine of another pool that uses value, or "".
func (v *AddressValidator) otherUser(ctx context.Context, pool *kubefarmv1.NodePool, index, value string, uses func(kubefarmv1.MachineEntry) bool) (string, error) {
	var pools kubefarmv1.NodePoolList
	// The list is only read, so the cache may hand out its own objects.
	if err := v.Reader.List(ctx, &pools, client.MatchingFields{index: value}, client.UnsafeDisableDeepCopy); err != nil {
		return "", fmt.Errorf("looking up NodePools by %s %q: %w", index, value, err)
	}
	for i := range pools.Items {
		other := &pools.Items[i]
		if other.Namespace == pool.Namespace && other.Name == pool.Name {
			continue
		}
		for _, m := range other.Spec.Machines {
			if uses(m) {
				return fmt.Sprintf("machine %q of NodePool %s/%s", m.Name, other.Namespace, other.Name), nil
			}
		}
	}
	return "", nil
}

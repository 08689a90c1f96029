// Package tenantcluster admits TenantCluster version changes that respect
// Kubernetes' version-skew policy (docs/versions.md). The CRD's pattern
// already checks the shape of spec.version; what it cannot see is the
// transition from the stored object, its status and the operator's own
// supported window, so those rules live here.
//
// The rules, for spec.version:
//
//   - It is v1.MINOR.PATCH without leading zeros (the images are tagged so).
//   - On CREATE, and whenever it changes, its minor lies inside the window of
//     the VersionValidator (DefaultMinVersion..DefaultMaxVersion in the
//     manager): the builders produce flags only for those minors.
//   - No downgrade: a lower minor, or the same minor with a lower patch.
//     Kubernetes does not support running an older kube-apiserver against an
//     etcd a newer one has written to.
//   - Minors may be skipped: the controller steps through every minor in
//     between (internal/upgradeplan), API server first, as kube-controller-
//     manager and kube-scheduler may be at most one minor older than it.
//     So every minor in between must lie inside the window too, and have a
//     patch kubefarm pins (internal/kubeversion): a cluster three minors
//     behind needs an earlier kubefarm release for the first steps.
//   - One rollout at a time: when status.observedVersion is set and differs
//     from the old spec.version, a rollout is in progress. Until it finishes,
//     spec.version may only stay where it is or go back to
//     status.observedVersion, the version every component still runs (a
//     rollback of an upgrade that does not come up). Any other target would
//     leave components two versions apart. A rollback is the one version
//     change exempt from the window and the downgrade rule: it returns to
//     what is running now.
//     An upgrade stepped through several minors is one rollout:
//     status.observedVersion names each step as it finishes, and going back
//     returns to the last finished step.
//   - An update that does not change spec.version is always admitted, so
//     finalizer and label edits of a cluster at an old version keep working.
//     The webhook configuration goes further (matchConditions): such
//     updates never reach the webhook, so they work even while it is down.
//
// While status.observedVersion is unset (the first rollout never finished)
// only the old spec.version is compared against.
package tenantcluster

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/kubeversion"
)

// The default window, kubeversion's (the manager passes these).
const (
	DefaultMinVersion = kubeversion.DefaultMinVersion
	DefaultMaxVersion = kubeversion.DefaultMaxVersion
)

var versionPath = field.NewPath("spec", "version")

// ValidateVersionChange checks spec.version of tc against the rules of the
// package documentation, except the supported window (see
// VersionValidator.Validate). old is nil on CREATE. It is pure: no clock, no
// reads.
func ValidateVersionChange(old, tc *kubefarmv1.TenantCluster) field.ErrorList {
	_, errs := validateChange(old, tc)
	return errs
}

// validateChange also reports whether the change is exempt from the window:
// no change at all, or a rollback to the observed version.
func validateChange(old, tc *kubefarmv1.TenantCluster) (exempt bool, errs field.ErrorList) {
	next := tc.Spec.Version
	if old != nil && next == old.Spec.Version {
		return true, nil
	}
	nv, err := kubeversion.Parse(next)
	if err != nil {
		return false, field.ErrorList{field.Invalid(versionPath, next, "must be v1.MINOR.PATCH, for example v1.34.4")}
	}
	if nv.String() != next {
		return false, field.ErrorList{field.Invalid(versionPath, next, "must be written without leading zeros: "+nv.String())}
	}
	if old == nil {
		return false, nil
	}

	prev := old.Spec.Version
	pv, err := kubeversion.Parse(prev)
	if err != nil {
		// The CRD pattern makes this unreachable; if it ever happens, the
		// skew cannot be judged, and guessing would let a downgrade in.
		return false, field.ErrorList{field.Forbidden(versionPath,
			fmt.Sprintf("the current version %q cannot be parsed, so a change to %s cannot be checked", prev, next))}
	}

	if observed := old.Status.ObservedVersion; observed != "" {
		ov, err := kubeversion.Parse(observed)
		if err != nil {
			return false, field.ErrorList{field.Forbidden(versionPath,
				fmt.Sprintf("status.observedVersion %q cannot be parsed, so a change to %s cannot be checked", observed, next))}
		}
		if ov != pv {
			if nv == ov {
				return true, nil
			}
			return false, field.ErrorList{field.Forbidden(versionPath, fmt.Sprintf(
				"the previous rollout from %s to %s is still in progress (status.observedVersion is %s): "+
					"until it finishes spec.version may only stay %s or go back to %s, not move to %s",
				observed, prev, observed, prev, observed, next))}
		}
	}

	if nv.Less(pv) {
		errs = append(errs, field.Forbidden(versionPath, fmt.Sprintf("downgrade from %s to %s is not supported", prev, next)))
	}
	return false, errs
}

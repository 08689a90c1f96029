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
//   - No skipped minor: kube-controller-manager and kube-scheduler may be at
//     most one minor older than kube-apiserver, and the controller rolls the
//     API server first, so a jump of two minors would break them mid-rollout.
//   - One rollout at a time: when status.observedVersion is set and differs
//     from the old spec.version, a rollout is in progress. Until it finishes,
//     spec.version may only stay where it is or go back to
//     status.observedVersion, the version every component still runs (a
//     rollback of an upgrade that does not come up). Any other target would
//     leave components two versions apart. A rollback is the one version
//     change exempt from the window and the downgrade rule: it returns to
//     what is running now.
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
	"regexp"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// The window of Kubernetes minors kubefarm builds control planes for. The
// upper bound is the release the project's binaries and e2e cluster run
// (hack/tools: v1.34); the lower bound is the release before it, so every
// cluster created by the previous kubefarm release can be upgraded by this
// one. Both move together with the pinned Kubernetes version.
const (
	DefaultMinVersion = "v1.33"
	DefaultMaxVersion = "v1.34"
)

// DefaultSupportedMinors are the Kubernetes minors of the default window.
func DefaultSupportedMinors() []int { return []int{33, 34} }

// Version is a parsed v1.MINOR.PATCH. Kubernetes 1.x is the only major, so
// only the minor and the patch vary.
type Version struct {
	Minor, Patch int
}

// The CRD pattern is ^v1\.[0-9]+\.[0-9]+$; this one also splits it.
var versionRE = regexp.MustCompile(`^v1\.([0-9]+)\.([0-9]+)$`)

// ParseVersion parses v1.MINOR.PATCH. Leading zeros are accepted, as the CRD
// accepts them, so stored objects always parse; Canonical tells them apart.
func ParseVersion(s string) (Version, error) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return Version{}, fmt.Errorf("%q is not of the form v1.MINOR.PATCH", s)
	}
	minor, err1 := strconv.Atoi(m[1])
	patch, err2 := strconv.Atoi(m[2])
	if err1 != nil || err2 != nil {
		return Version{}, fmt.Errorf("%q: minor or patch out of range", s)
	}
	return Version{Minor: minor, Patch: patch}, nil
}

// String is the canonical form, v1.MINOR.PATCH.
func (v Version) String() string { return fmt.Sprintf("v1.%d.%d", v.Minor, v.Patch) }

// Less orders versions by minor, then patch.
func (v Version) Less(o Version) bool {
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	return v.Patch < o.Patch
}

// parseMinor parses a window bound, v1.MINOR.
var minorRE = regexp.MustCompile(`^v1\.(0|[1-9][0-9]{0,3})$`)

func parseMinor(s string) (int, error) {
	m := minorRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not of the form v1.MINOR", s)
	}
	return strconv.Atoi(m[1])
}

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
	nv, err := ParseVersion(next)
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
	pv, err := ParseVersion(prev)
	if err != nil {
		// The CRD pattern makes this unreachable; if it ever happens, the
		// skew cannot be judged, and guessing would let a downgrade in.
		return false, field.ErrorList{field.Forbidden(versionPath,
			fmt.Sprintf("the current version %q cannot be parsed, so a change to %s cannot be checked", prev, next))}
	}

	if observed := old.Status.ObservedVersion; observed != "" {
		ov, err := ParseVersion(observed)
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

	switch {
	case nv.Less(pv):
		errs = append(errs, field.Forbidden(versionPath, fmt.Sprintf("downgrade from %s to %s is not supported", prev, next)))
	case nv.Minor > pv.Minor+1:
		errs = append(errs, field.Forbidden(versionPath, fmt.Sprintf(
			"upgrade from %s to %s skips a minor version: upgrade one minor at a time, to v1.%d first",
			prev, next, pv.Minor+1)))
	}
	return false, errs
}

// Package kubeversion is what kubefarm knows about Kubernetes versions: the
// v1.MINOR.PATCH form of a control plane's spec.version, the window of
// minors this release builds control planes for, and the patch it pins for
// each of them. The admission webhook (webhooks/tenantcluster) and the
// upgrade planner (internal/upgradeplan) both read it, so that what the
// webhook admits is what the controller can step through.
package kubeversion

import (
	"fmt"
	"regexp"
	"strconv"
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

// pinnedPatches is, for each minor of the window, the patch release the
// project builds and tests (hack/tools/go.mod for the newest minor,
// hack/tools/k8s-prev/go.mod for the one before; TestPinnedPatches holds
// the table to them). An upgrade that skips a minor runs the skipped
// minor's control plane at this patch on its way: the only one of that
// minor kubefarm has run its flags against.
var pinnedPatches = map[int]int{33: 4, 34: 4}

// Pinned is the version kubefarm pins for minor; false when it pins none.
func Pinned(minor int) (Version, bool) {
	p, ok := pinnedPatches[minor]
	return Version{Minor: minor, Patch: p}, ok
}

// Version is a parsed v1.MINOR.PATCH. Kubernetes 1.x is the only major, so
// only the minor and the patch vary.
type Version struct {
	Minor, Patch int
}

// The CRD pattern is ^v1\.[0-9]+\.[0-9]+$; this one also splits it.
var versionRE = regexp.MustCompile(`^v1\.([0-9]+)\.([0-9]+)$`)

// Parse parses v1.MINOR.PATCH. Leading zeros are accepted, as the CRD
// accepts them, so stored objects always parse; String tells them apart.
func Parse(s string) (Version, error) {
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

// reportedRE is a version as a running component reports it (a kubelet's
// nodeInfo.kubeletVersion): v1.MINOR.PATCH, often with a build suffix
// (v1.34.4+k3s1, v1.34.4-eks-1).
var reportedRE = regexp.MustCompile(`^v1\.([0-9]{1,4})\.([0-9]{1,6})(?:[-+].*)?$`)

// ParseReported parses a version a component reports, build suffix
// allowed. A component built without version ldflags reports
// v0.0.0-master, which does not parse: its version cannot be judged.
func ParseReported(s string) (Version, error) {
	m := reportedRE.FindStringSubmatch(s)
	if m == nil {
		return Version{}, fmt.Errorf("%q is not of the form v1.MINOR.PATCH[-+suffix]", s)
	}
	// At most 4 and 6 digits: they fit.
	minor, _ := strconv.Atoi(m[1])
	patch, _ := strconv.Atoi(m[2])
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

// Window is a closed range of minors, [Min, Max].
type Window struct {
	Min, Max int
}

// DefaultWindow is DefaultMinVersion..DefaultMaxVersion.
func DefaultWindow() Window {
	w, err := ParseWindow(DefaultMinVersion, DefaultMaxVersion)
	if err != nil {
		panic(err) // constants; TestDefaultWindow
	}
	return w
}

// Contains says whether minor lies inside the window.
func (w Window) Contains(minor int) bool { return minor >= w.Min && minor <= w.Max }

// String is "v1.MIN to v1.MAX", as messages name the window.
func (w Window) String() string { return fmt.Sprintf("v1.%d to v1.%d", w.Min, w.Max) }

// minorRE is a window bound, v1.MINOR.
var minorRE = regexp.MustCompile(`^v1\.(0|[1-9][0-9]{0,3})$`)

func parseMinor(s string) (int, error) {
	m := minorRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not of the form v1.MINOR", s)
	}
	return strconv.Atoi(m[1])
}

// ParseWindow parses the bounds lo..hi, each v1.MINOR. Its errors name the
// bound (MinVersion, MaxVersion), as the webhook's configuration does.
func ParseWindow(lo, hi string) (Window, error) {
	var w Window
	var err error
	if w.Min, err = parseMinor(lo); err != nil {
		return Window{}, fmt.Errorf("TenantCluster version window: MinVersion: %w", err)
	}
	if w.Max, err = parseMinor(hi); err != nil {
		return Window{}, fmt.Errorf("TenantCluster version window: MaxVersion: %w", err)
	}
	if w.Min > w.Max {
		return Window{}, fmt.Errorf("TenantCluster version window: MinVersion %s is above MaxVersion %s", lo, hi)
	}
	return w, nil
}

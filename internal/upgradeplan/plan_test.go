package upgradeplan

import (
	"fmt"
	"strings"
	"testing"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/kubeversion"
)

// window is the default one, with v1.33 and v1.34 pinned (kubeversion);
// wide is a wider one, in which pinnedWide pins v1.32 too.
var (
	window = kubeversion.Window{Min: 33, Max: 34}
	wide   = kubeversion.Window{Min: 30, Max: 40}
)

func pinnedWide(minor int) (kubeversion.Version, bool) {
	if minor == 32 {
		return kubeversion.Version{Minor: 32, Patch: 9}, true
	}
	return kubeversion.Pinned(minor)
}

func TestPlan(t *testing.T) {
	upToDate := map[string]string{"a": "v1.34.4"}
	for _, tc := range []struct {
		name                       string
		observed, desired, running string
		window                     kubeversion.Window
		pinned                     func(int) (kubeversion.Version, bool)
		kubelets                   map[string]string
		// want is the decision: version, steps left, held, reason; msg
		// is a substring of its message.
		version string
		left    int
		held    bool
		reason  string
		msg     string
	}{
		// Paths of 0, 1, 2 and 3 minors.
		{name: "nothing to do", observed: "v1.34.4", desired: "v1.34.4",
			version: "v1.34.4", reason: v1alpha1.ReasonRolledOut, msg: "every component runs v1.34.4"},
		{name: "one minor", observed: "v1.33.4", desired: "v1.34.4", kubelets: upToDate,
			version: "v1.34.4", reason: v1alpha1.ReasonUpgradingStep, msg: "v1.33.4 -> v1.34.4 (the last step)"},
		{name: "two minors step through the pinned patch", observed: "v1.32.4", desired: "v1.34.4", kubelets: upToDate,
			version: "v1.33.4", left: 1, reason: v1alpha1.ReasonUpgradingStep,
			msg: "v1.32.4 -> v1.33.4 on the way to v1.34.4 (this step and 1 more)"},
		{name: "the second of two steps", observed: "v1.33.4", desired: "v1.34.7", kubelets: upToDate,
			version: "v1.34.7", reason: v1alpha1.ReasonUpgradingStep, msg: "v1.33.4 -> v1.34.7 (the last step)"},
		{name: "three minors", observed: "v1.31.2", desired: "v1.34.4", window: wide, pinned: pinnedWide, kubelets: upToDate,
			version: "v1.32.9", left: 2, reason: v1alpha1.ReasonUpgradingStep,
			msg: "v1.31.2 -> v1.32.9 on the way to v1.34.4 (this step and 2 more)"},
		{name: "three minors through an unpinned one are refused", observed: "v1.31.2", desired: "v1.34.4", window: wide,
			version: "v1.31.2", held: true, reason: v1alpha1.ReasonVersionUnsupported,
			msg: "steps through v1.32, which this kubefarm does not run"},
		{name: "three minors below the window are refused", observed: "v1.31.2", desired: "v1.34.4",
			version: "v1.31.2", held: true, reason: v1alpha1.ReasonVersionUnsupported, msg: "upgrade to v1.32 with an earlier kubefarm release first"},

		// Patch-only: the skew does not change, the kubelets are not read.
		{name: "patch only", observed: "v1.34.1", desired: "v1.34.4", kubelets: map[string]string{"old": "v1.29.0", "bad": "?"},
			version: "v1.34.4", reason: v1alpha1.ReasonUpgradingStep, msg: "v1.34.1 -> v1.34.4 (the last step)"},

		// The first rollout.
		{name: "first rollout", desired: "v1.34.4", kubelets: map[string]string{"old": "v1.20.0"},
			version: "v1.34.4", reason: v1alpha1.ReasonRollingOut, msg: "rolling out v1.34.4"},

		// Skew.
		{name: "three minors behind is allowed", observed: "v1.33.4", desired: "v1.34.4", kubelets: map[string]string{"a": "v1.31.9", "b": "v1.34.0"},
			version: "v1.34.4", reason: v1alpha1.ReasonUpgradingStep},
		{name: "four minors behind holds", observed: "v1.33.4", desired: "v1.34.4",
			kubelets: map[string]string{"w-2": "v1.30.1", "w-1": "v1.30.9+k3s1", "ok": "v1.31.0"},
			version:  "v1.33.4", held: true, reason: v1alpha1.ReasonKubeletSkew,
			msg: "v1.33.4 -> v1.34.4 held: kube-apiserver v1.34 would be more than 3 minors ahead of the kubelet of nodes w-1 (v1.30.9+k3s1), w-2 (v1.30.1); " +
				"boot them with a kubelet of v1.31 or later first"},
		{name: "the first of two steps is judged, not the target", observed: "v1.32.4", desired: "v1.34.4",
			kubelets: map[string]string{"n": "v1.30.0"}, version: "v1.33.4", left: 1, reason: v1alpha1.ReasonUpgradingStep},
		{name: "the first of two steps holds", observed: "v1.32.4", desired: "v1.34.4",
			kubelets: map[string]string{"n": "v1.29.0"}, version: "v1.32.4", held: true, reason: v1alpha1.ReasonKubeletSkew,
			msg: "kube-apiserver v1.33 would be more than 3 minors ahead of the kubelet of node n (v1.29.0)"},
		{name: "a step the API servers already run is finished", observed: "v1.33.4", desired: "v1.34.4", running: "v1.34.4",
			kubelets: map[string]string{"n": "v1.29.0"}, version: "v1.34.4", reason: v1alpha1.ReasonUpgradingStep},
		{name: "many nodes are counted", observed: "v1.33.4", desired: "v1.34.4", kubelets: manyOld(13),
			version: "v1.33.4", held: true, reason: v1alpha1.ReasonKubeletSkew,
			msg: "nodes n00 (v1.30.0), n01 (v1.30.0), n02 (v1.30.0), n03 (v1.30.0), n04 (v1.30.0), n05 (v1.30.0), n06 (v1.30.0), n07 (v1.30.0), n08 (v1.30.0), n09 (v1.30.0) and 3 more;"},
		{name: "unparsable kubelet versions hold", observed: "v1.33.4", desired: "v1.34.4",
			kubelets: map[string]string{"b": "v0.0.0-master+$Format:%H$", "a": "", "c": "v1.34.4"},
			version:  "v1.33.4", held: true, reason: v1alpha1.ReasonKubeletVersionUnparsable,
			msg: `v1.33.4 -> v1.34.4 held: the kubelet version of nodes a (""), b ("v0.0.0-master+$Format:%H$") cannot be parsed`},
		{name: "a tenant's long kubelet version is cut in the message", observed: "v1.33.4", desired: "v1.34.4",
			kubelets: map[string]string{"x": "v9" + strings.Repeat("9", 5000)},
			version:  "v1.33.4", held: true, reason: v1alpha1.ReasonKubeletVersionUnparsable,
			msg: `node x ("v9` + strings.Repeat("9", 62) + `...") cannot`},
		{name: "a kubelet newer than the target is said, not refused", observed: "v1.32.4", desired: "v1.34.4",
			kubelets: map[string]string{"new": "v1.34.4", "mid": "v1.33.1"}, version: "v1.33.4", left: 1, reason: v1alpha1.ReasonUpgradingStep,
			msg: "; the kubelet of node new (v1.34.4) is newer than v1.33, which the skew policy never allows"},
		{name: "no nodes", observed: "v1.33.4", desired: "v1.34.4", version: "v1.34.4", reason: v1alpha1.ReasonUpgradingStep},

		// Refusals of the versions themselves.
		{name: "minor downgrade", observed: "v1.34.4", desired: "v1.33.4", version: "v1.34.4", held: true, reason: v1alpha1.ReasonDowngradeRefused,
			msg: "spec.version: downgrade from v1.34.4 to v1.33.4 is not supported; the control plane stays at v1.34.4"},
		{name: "patch downgrade", observed: "v1.34.4", desired: "v1.34.3", version: "v1.34.4", held: true, reason: v1alpha1.ReasonDowngradeRefused},
		{name: "above the window", observed: "v1.34.4", desired: "v1.35.0", version: "v1.34.4", held: true, reason: v1alpha1.ReasonVersionUnsupported,
			msg: "v1.35.0 lies outside the window of this kubefarm, Kubernetes v1.33 to v1.34"},
		{name: "below the window, unchanged", observed: "v1.32.4", desired: "v1.32.4", version: "v1.32.4", reason: v1alpha1.ReasonRolledOut},
		{name: "unparsable observed", observed: "1.34", desired: "v1.34.4", version: "1.34", held: true, reason: v1alpha1.ReasonVersionUnsupported,
			msg: `status.observedVersion: "1.34" is not of the form`},
		{name: "unparsable desired", observed: "v1.34.4", desired: "latest", version: "v1.34.4", held: true, reason: v1alpha1.ReasonVersionUnsupported,
			msg: `spec.version: "latest" is not of the form`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.window
			if w == (kubeversion.Window{}) {
				w = window
			}
			in := Input{Observed: tc.observed, Desired: tc.desired, APIServer: tc.running, Window: w, Pinned: tc.pinned, Kubelets: tc.kubelets}
			if tc.running == "" {
				in.APIServer = tc.observed
			}
			d := Plan(in)
			if d.Version != tc.version || d.StepsLeft != tc.left || d.Held != tc.held || d.Reason != tc.reason {
				t.Errorf("Plan = %+v, want version %s, %d left, held %v, reason %s", d, tc.version, tc.left, tc.held, tc.reason)
			}
			if !strings.Contains(d.Message, tc.msg) {
				t.Errorf("message %q does not contain %q", d.Message, tc.msg)
			}
			if d.Done() != (tc.reason == v1alpha1.ReasonRolledOut) {
				t.Errorf("Done = %v", d.Done())
			}
		})
	}
}

func manyOld(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("n%02d", i)] = "v1.30.0"
	}
	return m
}

// TestNeedsKubelets: the tenant's Nodes are read only for a step that
// raises the minor and has not begun.
func TestNeedsKubelets(t *testing.T) {
	for _, tc := range []struct {
		observed, desired, running string
		want                       bool
	}{
		{"v1.33.4", "v1.34.4", "v1.33.4", true},
		{"v1.32.4", "v1.34.4", "v1.32.4", true},
		{"v1.33.4", "v1.34.4", "v1.34.4", false}, // begun
		{"v1.32.4", "v1.34.4", "v1.33.4", false}, // the first step begun
		{"v1.34.1", "v1.34.4", "v1.34.1", false}, // patch
		{"v1.34.4", "v1.34.4", "v1.34.4", false},
		{"", "v1.34.4", "", false},
		{"v1.34.4", "v1.33.4", "v1.34.4", false}, // refused anyway
	} {
		in := Input{Observed: tc.observed, Desired: tc.desired, APIServer: tc.running, Window: window}
		if got := NeedsKubelets(in); got != tc.want {
			t.Errorf("NeedsKubelets(%s -> %s, running %s) = %v, want %v", tc.observed, tc.desired, tc.running, got, tc.want)
		}
	}
}

// TestStepsWalkToTheTarget follows a plan step by step, as the controller
// does when each step finishes: v1.31.2 reaches v1.34.4 in three steps.
func TestStepsWalkToTheTarget(t *testing.T) {
	observed, steps := "v1.31.2", []string{}
	for range 5 {
		d := Plan(Input{Observed: observed, Desired: "v1.34.4", APIServer: observed, Window: wide, Pinned: pinnedWide,
			Kubelets: map[string]string{"n": "v1.31.0"}})
		if d.Held {
			t.Fatalf("held at %s: %s", observed, d.Message)
		}
		if d.Done() {
			break
		}
		steps = append(steps, d.Version)
		observed = d.Version
	}
	if got := strings.Join(steps, " "); got != "v1.32.9 v1.33.4 v1.34.4" {
		t.Errorf("steps %s, want v1.32.9 v1.33.4 v1.34.4", got)
	}
}

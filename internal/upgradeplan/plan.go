// Package upgradeplan decides the next Kubernetes version a TenantCluster's
// control plane rolls to. It is pure: the controller gives it what runs
// (status.observedVersion), what is asked (spec.version), the supported
// window and, when a step raises the minor, the kubelet version of each of
// the tenant's Nodes; it returns one step and whether more follow, or a
// refusal that keeps the control plane where it is.
//
// Why steps: kube-controller-manager and kube-scheduler may be at most one
// minor older than kube-apiserver, and the controller rolls the API server
// first, so a control plane moves one minor at a time; and Kubernetes only
// promises that a release reads what the previous minor wrote to etcd. An
// upgrade across several minors therefore runs every minor in between, at
// the patch kubefarm pins for it (kubeversion.Pinned).
//
// Why the kubelets: a kubelet may be up to three minors older than
// kube-apiserver, never newer. A step that would leave some Node's kubelet
// four minors behind is refused, naming the Nodes, until their NodePools
// boot a newer kubelet.
package upgradeplan

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/conditions"
	"github.com/kubefarm/kubefarm/internal/kubeversion"
)

// MaxKubeletSkew is how many minors a kubelet may lag kube-apiserver
// (https://kubernetes.io/releases/version-skew-policy/).
const MaxKubeletSkew = 3

// maxNamed bounds the Nodes a message names; the rest are counted.
const maxNamed = 10

// maxVersionText bounds an unparsable kubelet version a message quotes: a
// Node's status is the tenant's to write.
const maxVersionText = 64

// Input is what the decision is made from.
type Input struct {
	// Observed is status.observedVersion, the version every component
	// runs; "" while the first rollout has not finished.
	Observed string
	// Desired is spec.version.
	Desired string
	// APIServer is the version the kube-apiserver Deployment's template
	// runs now ("" when there is none). A step the API servers already
	// run has begun: it is finished whatever the kubelets say, since
	// going back would be a downgrade.
	APIServer string
	// Window is the minors this kubefarm builds control planes for.
	Window kubeversion.Window
	// Pinned is the version a skipped minor runs at; nil is
	// kubeversion.Pinned, the patches the project builds and tests.
	Pinned func(minor int) (kubeversion.Version, bool)
	// Kubelets maps each tenant Node's name to its
	// status.nodeInfo.kubeletVersion. Read only when NeedsKubelets.
	Kubelets map[string]string
}

// Decision is the next step, or a refusal.
type Decision struct {
	// Version is what the control plane rolls to now: the next step, or,
	// when Held, Observed (it stays where it is).
	Version string
	// StepsLeft is how many steps follow Version before Desired (0: none).
	StepsLeft int
	// Held is true when the step is refused.
	Held bool
	// Reason and Message are the VersionRolledOut condition's.
	Reason, Message string
}

// Done says whether every component runs Desired.
func (d Decision) Done() bool { return d.Reason == v1alpha1.ReasonRolledOut }

// Steps is the path from a running version to a desired one: every minor
// in between at its pinned patch (pinned: nil is kubeversion.Pinned), then
// to. It refuses a downgrade, a target outside w and a path through a
// minor outside w or without a pinned patch. from == to is an empty path.
func Steps(from, to kubeversion.Version, w kubeversion.Window, pinned func(int) (kubeversion.Version, bool)) ([]kubeversion.Version, error) {
	if pinned == nil {
		pinned = kubeversion.Pinned
	}
	switch {
	case to == from:
		return nil, nil
	case to.Less(from):
		return nil, fmt.Errorf("downgrade from %s to %s is not supported", from, to)
	case !w.Contains(to.Minor):
		return nil, fmt.Errorf("%s lies outside the window of this kubefarm, Kubernetes %s", to, w)
	}
	var steps []kubeversion.Version
	for m := from.Minor + 1; m < to.Minor; m++ {
		v, ok := pinned(m)
		if !w.Contains(m) || !ok {
			return nil, fmt.Errorf("the upgrade from %s to %s steps through v1.%d, which this kubefarm does not run "+
				"(it runs Kubernetes %s): upgrade to v1.%d with an earlier kubefarm release first", from, to, m, w, m)
		}
		steps = append(steps, v)
	}
	return append(steps, to), nil
}

// path parses the input's versions and finds its steps; a non-empty
// reason is a refusal.
func path(in Input) (from kubeversion.Version, steps []kubeversion.Version, reason, msg string) {
	to, err := kubeversion.Parse(in.Desired)
	if err != nil {
		return from, nil, v1alpha1.ReasonVersionUnsupported, "spec.version: " + err.Error()
	}
	if from, err = kubeversion.Parse(in.Observed); err != nil {
		return from, nil, v1alpha1.ReasonVersionUnsupported, "status.observedVersion: " + err.Error()
	}
	steps, err = Steps(from, to, in.Window, in.Pinned)
	switch {
	case err == nil:
		return from, steps, "", ""
	case to.Less(from):
		return from, nil, v1alpha1.ReasonDowngradeRefused, fmt.Sprintf("spec.version: %v; the control plane stays at %s", err, in.Observed)
	default:
		return from, nil, v1alpha1.ReasonVersionUnsupported, fmt.Sprintf("spec.version: %v; the control plane stays at %s", err, in.Observed)
	}
}

// NeedsKubelets says whether Plan reads in.Kubelets: only for a step that
// raises the minor and has not begun. A patch step changes no skew.
func NeedsKubelets(in Input) bool {
	if in.Observed == "" {
		return false
	}
	from, steps, reason, _ := path(in)
	return reason == "" && len(steps) > 0 && steps[0].Minor > from.Minor && !begun(in.APIServer, steps[0])
}

func begun(apiServer string, step kubeversion.Version) bool {
	v, err := kubeversion.Parse(apiServer)
	return err == nil && v == step
}

// Plan decides the next step.
func Plan(in Input) Decision {
	if in.Observed == "" {
		// The first rollout: nothing runs to be skewed against.
		return Decision{Version: in.Desired, Reason: v1alpha1.ReasonRollingOut, Message: "rolling out " + in.Desired}
	}
	held := Decision{Version: in.Observed, Held: true}
	_, steps, reason, msg := path(in)
	switch {
	case reason != "":
		held.Reason, held.Message = reason, msg
		return held
	case len(steps) == 0:
		return Decision{Version: in.Desired, Reason: v1alpha1.ReasonRolledOut, Message: "every component runs " + in.Desired}
	}
	next := steps[0]
	// The last step is spec.version as written (it names the images).
	nextStr := next.String()
	if len(steps) == 1 {
		nextStr = in.Desired
	}
	step := fmt.Sprintf("%s -> %s", in.Observed, nextStr)
	var newer string
	if NeedsKubelets(in) {
		k := judgeKubelets(in.Kubelets, next)
		switch {
		case len(k.unparsable) > 0:
			held.Reason = v1alpha1.ReasonKubeletVersionUnparsable
			held.Message = fmt.Sprintf("%s held: the kubelet version of %s cannot be parsed as v1.MINOR.PATCH, "+
				"so the skew against kube-apiserver v1.%d cannot be checked", step, nodeList(k.unparsable), next.Minor)
			return held
		case len(k.tooOld) > 0:
			held.Reason = v1alpha1.ReasonKubeletSkew
			held.Message = fmt.Sprintf("%s held: kube-apiserver v1.%d would be more than %d minors ahead of the kubelet of %s; "+
				"boot them with a kubelet of v1.%d or later first (on the way to %s)",
				step, next.Minor, MaxKubeletSkew, nodeList(k.tooOld), next.Minor-MaxKubeletSkew, in.Desired)
			return held
		case len(k.newer) > 0:
			// Already newer than what runs: stepping up only narrows the
			// gap, so it is said, not refused.
			newer = fmt.Sprintf("; the kubelet of %s is newer than v1.%d, which the skew policy never allows", nodeList(k.newer), next.Minor)
		}
	}
	left := len(steps) - 1
	switch {
	case left == 0:
		msg = step + " (the last step)"
	case left == 1:
		msg = fmt.Sprintf("%s on the way to %s (this step and 1 more)", step, in.Desired)
	default:
		msg = fmt.Sprintf("%s on the way to %s (this step and %d more)", step, in.Desired, left)
	}
	return Decision{Version: nextStr, StepsLeft: left, Reason: v1alpha1.ReasonUpgradingStep, Message: msg + newer}
}

// kubelets sorts the Nodes by what their kubelet allows: a "name
// (version)" per Node.
type kubelets struct {
	tooOld, newer, unparsable []string
}

func judgeKubelets(nodes map[string]string, apiServer kubeversion.Version) kubelets {
	var k kubelets
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		v := nodes[name]
		kv, err := kubeversion.ParseReported(v)
		if err != nil {
			k.unparsable = append(k.unparsable, fmt.Sprintf("%s (%q)", name, conditions.Clip(v, maxVersionText)))
			continue
		}
		minor := kv.Minor
		switch {
		case apiServer.Minor-minor > MaxKubeletSkew:
			k.tooOld = append(k.tooOld, fmt.Sprintf("%s (%s)", name, v))
		case minor > apiServer.Minor:
			k.newer = append(k.newer, fmt.Sprintf("%s (%s)", name, v))
		}
	}
	return k
}

// nodeList names at most maxNamed Nodes and counts the rest.
func nodeList(nodes []string) string {
	word := "node"
	if len(nodes) > 1 {
		word = "nodes"
	}
	if len(nodes) <= maxNamed {
		return word + " " + strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("%s %s and %d more", word, strings.Join(nodes[:maxNamed], ", "), len(nodes)-maxNamed)
}

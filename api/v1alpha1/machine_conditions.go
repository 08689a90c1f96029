package v1alpha1

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BootMessage is the message of a Machine condition that holds for one
// boot (NetworkVerified, RebootRequired): "boot <id>", then ": " and the
// detail when there is one. Readers tell which boot a condition is about
// with OfBoot, so a verdict of an earlier boot never counts for this one.
func BootMessage(bootID, detail string) string {
	if detail == "" {
		return "boot " + bootID
	}
	return "boot " + bootID + ": " + detail
}

// OfBoot tells whether c's message names boot bootID as BootMessage
// writes it.
func OfBoot(c *metav1.Condition, bootID string) bool {
	rest, ok := strings.CutPrefix(c.Message, "boot "+bootID)
	return ok && (rest == "" || strings.HasPrefix(rest, ":"))
}

// Reasons of the Machine conditions written by kubefarm-pxe from the agent's
// boot report. Like the other kinds' reasons they are part of the API
// (kubectl wait, alerts, the manager's taint lifting), so they are
// constants.
const (
	// NetworkVerified.

	// ReasonCNIChainVerified: the agent found every binary the image's
	// conflist names, the conflist with the hash the image's manifest
	// records, and nothing in /etc/cni/net.d sorting before it.
	ReasonCNIChainVerified = "CNIChainVerified"
	// ReasonCNIChainInvalid: the agent's check failed; the message says
	// what it found.
	ReasonCNIChainInvalid = "CNIChainInvalid"
	// ReasonNetworkNotReported: the latest boot's report carried no
	// verdict (an agent that predates the check, or the initrd's failure
	// report). Unknown, so that a True of an earlier boot never survives a
	// reboot.
	ReasonNetworkNotReported = "NetworkNotReported"
)

// Reasons of the Machine's NodeReady condition, written by the manager from
// the tenant's Node of the machine's hostname (controllers/machinenode).
const (
	// ReasonNodeReady: the Node's Ready condition is True.
	ReasonNodeReady = "NodeReady"
	// ReasonNodeNotReady: the Node's Ready condition is False; the message
	// carries the kubelet's.
	ReasonNodeNotReady = "NodeNotReady"
	// ReasonNodeStatusUnknown: the Node exists but its Ready condition is
	// Unknown (the node controller's verdict once the kubelet stops
	// posting status) or has not been posted yet. NodeReady is Unknown.
	ReasonNodeStatusUnknown = "NodeStatusUnknown"
	// ReasonNodeNotFound: the tenant has no Node of the machine's hostname,
	// as its API server's complete list shows: never registered, or
	// deleted. NodeReady is False.
	ReasonNodeNotFound = "NodeNotFound"
)

// Reasons of the Machine's RebootRequired condition, written by
// kubefarm-pxe from kubefarm-agent's heartbeat and boot report (and one by
// kubefarm-manager).
const (
	// ReasonInteractiveLogin: someone logged in on the node at least
	// spec.rollout.rebootAfterLogin ago.
	ReasonInteractiveLogin = "InteractiveLogin"
	// ReasonRebootRequiredFile: /run/reboot-required exists on the node
	// (Debian's convention, for example after a package install).
	ReasonRebootRequiredFile = "RebootRequiredFile"
	// ReasonNewBoot: False, a new boot is pristine.
	ReasonNewBoot = "NewBoot"
	// ReasonClusterCARotation: written by kubefarm-manager, the boot
	// started before its tenant's cluster CA rotation needed it to: the
	// node trusts only the old CA and its kubelet's certificates are
	// signed by it (docs/pki.md).
	ReasonClusterCARotation = "ClusterCARotation"
)

// MachineConditionTypes are the condition types a Machine carries: NodeReady
// (kubefarm-manager, controllers/machinenode), NetworkVerified and
// RebootRequired (kubefarm-pxe), PowerControl and Removing (kubefarm-manager). A printer column or client that names
// another (Ready, the reserved Booted and UpToDate) finds nothing;
// printcolumns_test.go holds the CRDs to this list.
var MachineConditionTypes = []string{ConditionNodeReady, ConditionNetworkVerified, ConditionRebootRequired,
	ConditionPowerControl, ConditionRemoving}

// Reasons of the Machine's PowerControl condition (kubefarm-manager).
const (
	// ReasonPowerRead: the latest read or operation succeeded.
	ReasonPowerRead = "PowerRead"
	// ReasonPowerFailed: the BMC (or QMP socket) answered with an error or
	// not at all; the message carries its words.
	ReasonPowerFailed = "PowerFailed"
	// ReasonPowerAuthFailed: the BMC refused the credentials; retrying
	// waits for the Secret to change.
	ReasonPowerAuthFailed = "PowerAuthFailed"
	// ReasonPowerCredentialsMissing: spec.power names a Secret that does
	// not exist or lacks a key; the message names which.
	ReasonPowerCredentialsMissing = "PowerCredentialsMissing"
)

// Reasons of the Machine's Removing condition (kubefarm-manager,
// controllers/machineremoval; docs/nodes.md, "Removing a machine").
// Each step's reason is written before the step's side effect.
const (
	// ReasonRemovalCordoning: the node is being cordoned.
	ReasonRemovalCordoning = "Cordoning"
	// ReasonRemovalDraining: pods are being evicted or are terminating.
	ReasonRemovalDraining = "Draining"
	// ReasonRemovalDrainHeld: an eviction was refused (a
	// PodDisruptionBudget, in the API server's words), or the drain
	// outlasted drainTimeout under drainTimeoutPolicy Halt.
	ReasonRemovalDrainHeld = "DrainHeld"
	// ReasonRemovalDeleteNode: the Node is being deleted from the tenant.
	ReasonRemovalDeleteNode = "DeletingNode"
	// ReasonRemovalPowerOff: the machine is being powered off.
	ReasonRemovalPowerOff = "PoweringOff"
	// ReasonRemovalFailed: the power off failed (the driver's words); it
	// is tried again.
	ReasonRemovalFailed = "RemovalFailed"
	// ReasonRemovalTenantUnreachable (status Unknown): the tenant's API
	// server cannot be reached, so whether the machine joined is not
	// known; the Machine is held until it answers.
	ReasonRemovalTenantUnreachable = "TenantUnreachable"
)

package bootproto

// POST /report: what the node's initrd (a failed boot) and kubefarm-agent
// (a boot and its network verdict) tell kubefarm-pxe.

import (
	"errors"
	"fmt"
)

// BootReport is what the agent posts to /report after a boot.
type BootReport struct {
	MAC         string `json:"mac"`
	BootID      string `json:"bootID"`
	ImageDigest string `json:"imageDigest"`
	// Network is the agent's verdict on the node's CNI chain; absent in
	// reports of agents (or the initrd) that do not check it.
	Network *NetworkVerdict `json:"network,omitempty"`
	// Error is set by the initrd when the boot stopped before the root
	// filesystem (a digest mismatch, a download that never completed): the
	// machine did not boot the image, so the report becomes a Warning event
	// (BootFailed) and not a lastBoot record. At most MaxBootError bytes of
	// printable text.
	Error string `json:"error,omitempty"`
}

// MaxBootError bounds a failed boot's error: it becomes an event message.
const MaxBootError = 512

// NetworkVerdict is the result of the agent's CNI chain check
// (ARCHITECTURE.md, boot step 4).
type NetworkVerdict struct {
	Verified bool `json:"verified"`
	// Reason says what failed, or what was checked; at most
	// MaxNetworkReason bytes of printable text.
	Reason string `json:"reason"`
}

// MaxNetworkReason bounds a verdict's reason: it becomes a condition
// message and an event, both read by people.
const MaxNetworkReason = 512

// Validate checks the report's fields; MAC is returned normalised.
func (r BootReport) Validate() (string, error) {
	mac, err := NormalizeMAC(r.MAC)
	if err != nil {
		return "", err
	}
	if !ValidBootID(r.BootID) {
		return "", errors.New("bootID must be a UUID as in /proc/sys/kernel/random/boot_id")
	}
	if !ValidDigest(r.ImageDigest) {
		return "", errors.New("imageDigest must be sha256:<64 hex>")
	}
	if len(r.Error) > MaxBootError {
		return "", fmt.Errorf("error is %d bytes, over %d", len(r.Error), MaxBootError)
	}
	if !Printable(r.Error) {
		return "", errors.New("error must be printable text")
	}
	if r.Error != "" && r.Network != nil {
		return "", errors.New("a failed boot (error) carries no network verdict")
	}
	if n := r.Network; n != nil {
		if len(n.Reason) > MaxNetworkReason {
			return "", fmt.Errorf("network.reason is %d bytes, over %d", len(n.Reason), MaxNetworkReason)
		}
		if !n.Verified && n.Reason == "" {
			return "", errors.New("network.reason is required when network.verified is false")
		}
		if !Printable(n.Reason) {
			return "", errors.New("network.reason must be printable text")
		}
	}
	return mac, nil
}

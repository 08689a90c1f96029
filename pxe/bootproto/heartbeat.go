package bootproto

// POST /heartbeat: the running node's agent asks whether the rollout
// wants this boot replaced, and says whether it wants that itself.

import (
	"errors"
	"fmt"
)

// Heartbeat is what kubefarm-agent posts to /heartbeat while its node runs.
type Heartbeat struct {
	MAC    string `json:"mac"`
	BootID string `json:"bootID"`
	// RebootRequired is the agent's drift signal: this boot should be
	// replaced by a pristine one of the same image. Absent while there is
	// none; once raised, sent with every heartbeat of the boot.
	RebootRequired *RebootSignal `json:"rebootRequired,omitempty"`
}

// RebootSignal says why a node wants to be rebooted into its image.
type RebootSignal struct {
	// Reason is one of InteractiveLogin (someone logged in on the node,
	// and the pool's rollout.rebootAfterLogin has passed since) or
	// RebootRequiredFile (/run/reboot-required exists). It becomes the
	// reason of the Machine's RebootRequired condition.
	Reason string `json:"reason"`
	// Message says more, for people: at most MaxRebootMessage bytes of
	// printable text.
	Message string `json:"message,omitempty"`
}

// HeartbeatReply is kubefarm-pxe's answer to a heartbeat.
type HeartbeatReply struct {
	// Reboot asks the node to reboot now: the rollout is in its Rebooting
	// phase for exactly the boot the heartbeat names, so a node that has
	// already rebooted is never asked again.
	Reboot bool `json:"reboot"`
}

// The reasons a node gives for a reboot; they become the reason of the
// Machine's RebootRequired condition (kubefarmv1.ReasonInteractiveLogin and
// ReasonRebootRequiredFile have the same values, which httpboot's tests
// check).
const (
	ReasonInteractiveLogin   = "InteractiveLogin"
	ReasonRebootRequiredFile = "RebootRequiredFile"
)

// MaxRebootMessage bounds a RebootSignal's message: it becomes a condition
// message.
const MaxRebootMessage = 256

// Validate checks the heartbeat's fields; MAC is returned normalised.
func (hb Heartbeat) Validate() (string, error) {
	mac, err := NormalizeMAC(hb.MAC)
	if err != nil {
		return "", err
	}
	if !ValidBootID(hb.BootID) {
		return "", errors.New("bootID must be a UUID as in /proc/sys/kernel/random/boot_id")
	}
	if s := hb.RebootRequired; s != nil {
		if s.Reason != ReasonInteractiveLogin && s.Reason != ReasonRebootRequiredFile {
			return "", fmt.Errorf("rebootRequired.reason must be %s or %s", ReasonInteractiveLogin, ReasonRebootRequiredFile)
		}
		if len(s.Message) > MaxRebootMessage {
			return "", fmt.Errorf("rebootRequired.message is %d bytes, over %d", len(s.Message), MaxRebootMessage)
		}
		if !Printable(s.Message) {
			return "", errors.New("rebootRequired.message must be printable text")
		}
	}
	return mac, nil
}

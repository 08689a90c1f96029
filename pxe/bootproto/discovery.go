package bootproto

// POST /discovery: what kubefarm-agent in discovery mode (a machine no
// Machine claims, booted with kubefarm.mode=discover) tells kubefarm-pxe,
// and the answer it gets. The agent repeats the report every
// DiscoveryAnswer.ReportAfterSeconds until the answer says it is enrolled,
// then reboots into its pool's image.

import (
	"github.com/kubefarm/kubefarm/api/v1alpha1"
)

// The discovery mode's kernel command-line key and value: the boot script
// of an unclaimed machine passes KeyMode=ModeDiscover (and no credential).
const (
	KeyMode      = "kubefarm.mode"
	ModeDiscover = "discover"
)

// DiscoveryPath is the route of the discovery report on kubefarm-pxe.
const DiscoveryPath = "/discovery"

// MaxDiscoveryReport bounds the request body, in bytes: a report with the
// most disks and NICs the API type allows fits well inside it.
const MaxDiscoveryReport = 64 << 10

// DiscoveryReport is the agent's report: the MAC it booted from and the
// hardware it read.
type DiscoveryReport struct {
	MAC      string                 `json:"mac"`
	Hardware v1alpha1.HardwareFacts `json:"hardware"`
}

// DiscoveryAnswer is kubefarm-pxe's answer to a report.
type DiscoveryAnswer struct {
	// Enrolled: a Machine claims the MAC now; the agent reboots, and the
	// next boot is the pool's image.
	Enrolled bool `json:"enrolled"`
	// ReportAfterSeconds is when to report again (jittered by the agent).
	ReportAfterSeconds int32 `json:"reportAfterSeconds"`
}

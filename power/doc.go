// Package power drives machines' power; its first use is resetting machines that
// their own agent did not reboot.
//
// The rollout controller updates a machine by rebooting it into the image it
// now serves, and it asks the machine first: kubefarm-agent sees the
// Rebooting phase for its boot ID and reboots cleanly, with filesystems
// synced and services stopped. Power control is the fallback, used only past
// spec.rollout.powerCycleAfter, for a machine whose agent is hung, crashed or
// never started: a hard reset, after which the machine netboots again and is
// served the new image. A reset loses whatever the machine had not written,
// which is why it is never the first resort.
//
// A [Driver] is the power control of a machine (status, on, off, cycle, a
// one-time network boot) over a [Target] that carries the BMC's
// credentials: power/qmp (QEMU's machine protocol, for the test farm's
// qemu machines: status and cycle only), power/ipmi (IPMI v2.0 lanplus,
// github.com/bougou/go-ipmi) and power/redfish (Redfish over HTTPS,
// github.com/stmcginnis/gofish). package power/drivers registers them by
// spec.power.driver in [Drivers].
//
// [Control] is how controllers use them: it reads the Secrets spec.power
// names ([Resolve], uncached), calls the machine's driver and records the
// Warning event of a driver that reaches a BMC insecurely. The machinepower
// controller reads every machine's power state on a jittered poll and
// performs the operations people request with the kubefarm.io/power-request
// annotation ([Request]); the rollout power-cycles a machine its agent did
// not reboot; machine removal powers a machine off. [Reason] maps an
// error to the PowerControl condition's reason (docs/power.md).
package power

// Package power resets machines that their own agent did not reboot.
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
// Two interfaces live here. The rollout's reset goes through a [Cycler]
// registered in [Drivers] under its v1alpha1.PowerDriver name: today qmp
// (package power/qmp), QEMU's machine protocol, for the test farm's qemu
// machines and any lab of virtual machines. A [Driver] is the full power
// control of a machine (status, on, off, cycle, a one-time network boot)
// over a [Target] that carries the BMC's credentials: power/ipmi (IPMI v2.0
// lanplus, github.com/bougou/go-ipmi) and power/redfish (Redfish over
// HTTPS, github.com/stmcginnis/gofish). The rollout does not use the BMC
// drivers yet (docs/power.md).
//
// Controller tests use [Recorder], a fake that records calls and resets
// nothing.
package power

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
// A driver is a [Cycler] registered in [Drivers] under its
// v1alpha1.PowerDriver name (which the API's enum must also list). The one
// driver today is qmp (package power/qmp): QEMU's machine protocol, for the
// test farm's qemu machines and any lab of virtual machines. The next one is
// a BMC driver for bare metal speaking Redfish, to be built on a maintained
// client such as github.com/stmcginnis/gofish rather than hand-written HTTP;
// it does not exist yet.
//
// Controller tests use [Recorder], a fake that records calls and resets
// nothing.
package power

// Package machinestate is the one answer to "what image state is this
// Machine in": which image it is served, whether it booted it, whether its
// rollout record says an update is under way, whether it is up to date
// with its pool, and whether its network was verified. Every controller
// that reads a machine's image state (the rollout's planner and summary,
// the rollout's pass, the NodePool's counts) calls these functions, so the
// rules cannot drift apart.
//
// The functions are pure: they read the Machine's status (and the target
// the caller passes) and nothing else.
package machinestate

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Target is the image a machine of a pool on image should be served: the
// BootImage's name pinned to its rootfs digest (nil without a BootImage).
// A served image is pinned so that a BootImage edited in place is a new
// target, and a machine rebooting out of turn comes back on what it ran.
func Target(image *v1alpha1.BootImage) *v1alpha1.ImageRef {
	if image == nil {
		return nil
	}
	return &v1alpha1.ImageRef{Name: image.Name, Digest: image.Spec.Rootfs.Digest}
}

// Served is the image kubefarm-pxe serves the machine at its next boot
// (status.servedImage); nil before the rollout controller first pinned one
// (kubefarm-pxe then serves spec.desiredImage, unpinned).
func Served(m *v1alpha1.Machine) *v1alpha1.ImageRef {
	return m.Status.ServedImage
}

// NeedsFirstServe tells whether the machine has no served image yet: a
// Machine the NodePool controller has just made. The rollout controller
// pins the pool's image on it; nothing else about it is the rollout's.
func NeedsFirstServe(m *v1alpha1.Machine) bool {
	return m.Status.ServedImage == nil
}

// ServedIs tells whether the machine is served exactly target (name and
// rootfs digest).
func ServedIs(m *v1alpha1.Machine, target v1alpha1.ImageRef) bool {
	s := m.Status.ServedImage
	return s != nil && *s == target
}

// Booted tells whether the machine's last reported boot (status.lastBoot,
// written by kubefarm-pxe from the agent's report) ran the rootfs digest.
func Booted(m *v1alpha1.Machine, digest string) bool {
	lb := m.Status.LastBoot
	return lb != nil && lb.ImageDigest == digest
}

// Unbooted tells whether the machine never reported a boot and no update
// is in flight for it: a machine on its way to its first boot.
func Unbooted(m *v1alpha1.Machine) bool {
	return m.Status.LastBoot == nil && !InFlight(m)
}

// InFlight tells whether the machine's update is under way: recorded, and
// not ended. A Failed update keeps its record (so the operator sees it) but
// is not in flight.
func InFlight(m *v1alpha1.Machine) bool {
	r := m.Status.Rollout
	return r != nil && r.Phase != v1alpha1.RolloutFailed && r.Phase != v1alpha1.RolloutDone && r.Phase != v1alpha1.RolloutSkipped
}

// RebootRequested tells whether the machine's RebootRequired condition is
// True for the boot it last reported (kubefarm-pxe writes "boot <id>: ..."
// and clears it on a new boot; checking the ID as well keeps a condition
// that outlived its boot from rebooting the machine twice).
func RebootRequested(m *v1alpha1.Machine) bool {
	c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionRebootRequired)
	if c == nil || c.Status != metav1.ConditionTrue || m.Status.LastBoot == nil {
		return false
	}
	return v1alpha1.OfBoot(c, m.Status.LastBoot.BootID)
}

// UpToDate is the rule for "this machine runs its pool's image", the one
// behind the pool's status.updatedMachines and its Complete condition:
//
//   - it is served target (name and rootfs digest), and
//   - its last reported boot ran target's rootfs, and
//   - it did not ask for a reboot in that boot (RebootRequested): the
//     rollout will reboot it, so it is not done, and
//   - no update of the rollout is in flight for it: a machine that booted
//     the target but is still being verified or uncordoned is not done
//     either.
func UpToDate(m *v1alpha1.Machine, target v1alpha1.ImageRef) bool {
	return ServedIs(m, target) && Booted(m, target.Digest) && !RebootRequested(m) && !InFlight(m)
}

// Verified tells whether the machine's network was verified in the boot it
// last reported: NetworkVerified is True and names that boot (kubefarm-pxe
// writes it in the same status write as lastBoot). A verdict of an earlier
// boot never counts.
func Verified(m *v1alpha1.Machine) bool {
	lb := m.Status.LastBoot
	c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionNetworkVerified)
	return lb != nil && c != nil && c.Status == metav1.ConditionTrue && v1alpha1.OfBoot(c, lb.BootID)
}

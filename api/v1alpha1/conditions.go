package v1alpha1

// Condition types shared by the kinds of this API. Progress is always reported
// as metav1.Conditions, never as a phase enum, so that several independent
// facts (etcd healthy, certificates issued) can be true or false at once.
const (
	// ConditionReady summarises the object: true when everything it manages works.
	ConditionReady = "Ready"

	// TenantCluster conditions.
	ConditionEtcdReady         = "EtcdReady"
	ConditionAPIServerReady    = "APIServerReady"
	ConditionCertificatesReady = "CertificatesReady"
	ConditionAddonsReady       = "AddonsReady"
	// ConditionEncryptionKeyRotated reports the encryption key rotation
	// (docs/encryption.md).
	ConditionEncryptionKeyRotated = "EncryptionKeyRotated"
	// ConditionCARotated reports the rotation of the tenant's rotatable
	// CAs (docs/pki.md, CA rotation).
	ConditionCARotated = "CARotated"
	// ConditionEtcdBackedUp reports the scheduled etcd snapshots
	// (spec.etcd.backup): True when the newest finished run took a
	// snapshot, False when it failed or none finished yet. It is not an
	// input of Ready: a failed backup does not stop the tenant serving.
	ConditionEtcdBackedUp = "EtcdBackedUp"
	// ConditionEtcdScaling reports a change of spec.etcd.replicas: True
	// while etcd's membership is being changed, one member at a time, with
	// the last step or what the next one waits for as the reason; False
	// (ReasonMembersMatch) once etcd's members are the spec's, all voting.
	// Absent on a tenant whose member count never changed. Not an input
	// of Ready: the control plane serves throughout. See docs/etcd.md.
	ConditionEtcdScaling = "EtcdScaling"
	// ConditionVersionRolledOut reports spec.version's rollout: True once
	// status.observedVersion is spec.version; False while the control plane
	// steps towards it, one minor at a time, or while a step is refused
	// (the reason says which, docs/versions.md). Not an input of Ready: the
	// control plane serves throughout.
	ConditionVersionRolledOut = "VersionRolledOut"
	// ConditionEtcdRestored reports spec.etcd.restoreFrom: False while the
	// snapshot and its key file are checked (ReasonRestoreChecking) or
	// when the check refuses them (the reason names what is missing or
	// wrong, the message how to supply it); True once the snapshot's
	// encryption keys are the tenant's and the members may restore it.
	// Absent without restoreFrom. No etcd member is created before it is
	// True, so while False the tenant is not Ready. See docs/etcd.md.
	ConditionEtcdRestored = "EtcdRestored"

	// NodePool conditions.
	ConditionMachinesReady = "MachinesReady"
	// ConditionAddressesClaimed: True when every MAC and IP of the pool's
	// machines is claimed for the pool (an AddressClaim names the machine);
	// False (ReasonAddressConflict) when another holder has one, naming
	// the address and the holder. A machine with an address held elsewhere
	// is not created, or keeps its old addresses. See docs/addresses.md.
	ConditionAddressesClaimed = "AddressesClaimed"

	// Machine conditions.

	// ConditionBooted and ConditionUpToDate are reserved names: no
	// controller writes them yet (status.lastBoot and status.servedImage
	// carry what they would say, and status.rollout an update's progress).
	ConditionBooted   = "Booted"
	ConditionUpToDate = "UpToDate"
	// ConditionNodeReady mirrors the Ready condition of the machine's Node
	// in its tenant (kubefarm-manager, controllers/machinenode).
	ConditionNodeReady = "NodeReady"
	// ConditionNetworkVerified is what kubefarm-agent found of the node's
	// CNI chain in the boot of status.lastBoot (written in the same status
	// write, so it always refers to that boot). Only when it is True may
	// the manager lift kubefarm.io/network-unavailable from the node.
	ConditionNetworkVerified = "NetworkVerified"
	// ConditionRebootRequired is kubefarm-agent's signal that the running
	// boot should be replaced by a pristine one of the same image (an
	// interactive login some time ago, /run/reboot-required). kubefarm-pxe
	// writes it from the agent's heartbeat; the message names the boot ID
	// it was raised in, and a new boot clears it. The rollout controller
	// reboots such machines through the same budget and windows as an
	// image change.
	ConditionRebootRequired = "RebootRequired"
	// ConditionPowerControl is whether the manager can drive the machine's
	// power control (spec.power): True after a successful read or
	// operation, False with the BMC's own words when it failed (a refused
	// login, a timeout, a missing Secret).
	ConditionPowerControl = "PowerControl"
	// ConditionRemoving is a Machine's way out of its pool once it is
	// deleted (FinalizerMachineRemoval): cordon, drain, Node deleted,
	// power off; the reason says which step it is at or what holds it.
	ConditionRemoving = "Removing"
	// ConditionRolloutHeld is True while a gate of spec.rollout holds the
	// machine's update before its cordon (blocking pods on its node, a
	// kubefarm.io/reboot-hold annotation, the pool's firing alerts), the
	// reason saying which; False
	// once no gate holds it. Written by the rollout controller, only for
	// machines that wait for an update or were held before.
	ConditionRolloutHeld = "RolloutHeld"

	// NodePool rollout conditions, written by the rollout controller.
	// Progressing: machine updates are in flight or waiting for budget.
	ConditionProgressing = "Progressing"
	// Paused: spec.rollout.paused holds new updates back.
	ConditionPaused = "Paused"
	// Halted: failed updates exceeded spec.rollout.failureBudget; no new
	// update starts until an operator retries (see AnnotationRolloutRetry).
	ConditionHalted = "Halted"
	// Complete: every machine is served the pool's image and booted it, and
	// none asks for a reboot.
	ConditionComplete = "Complete"

	// BootImage conditions.
	ConditionArtifactsVerified = "ArtifactsVerified"
)

package v1alpha1

// Reasons of the NodePool conditions. Like the TenantCluster's, they are
// part of the API (kubectl wait, alerts, and the reason of the event that
// every change of a condition emits), so they are constants, never
// formatted strings.
const (
	// Ready.

	// ReasonPoolReady: every machine of the pool is a Ready node.
	ReasonPoolReady = "PoolReady"
	// ReasonBootImageNotFound: spec.bootImage names no BootImage. The
	// Machines are still written; new ones get a served image once the
	// BootImage exists.
	ReasonBootImageNotFound = "BootImageNotFound"
	// ReasonMachineConflict: a Machine of the name one of the pool's
	// entries needs exists and belongs to something else (another pool
	// whose name and entry spell the same object name); that entry is
	// left alone.
	ReasonMachineConflict = "MachineConflict"
	// ReasonAddressConflict: a MAC or IP of an entry is claimed by another
	// Machine (its AddressClaim names another holder); that entry's
	// Machine is not created, or not moved onto the address. The message
	// names each address and its holder. Also the reason of
	// AddressesClaimed=False.
	ReasonAddressConflict = "AddressConflict"
	// Ready is also False with ReasonInvalidSpec or ReasonReconcileError
	// (see tenantcluster_conditions.go), or with the reason of
	// MachinesReady when only that holds it back.

	// MachinesReady.

	// ReasonAllMachinesReady: every Machine's NodeReady condition is True.
	ReasonAllMachinesReady = "AllMachinesReady"
	// ReasonMachinesNotReady: some Machine's node is not Ready (or has not
	// joined yet); the message names up to five of them.
	ReasonMachinesNotReady = "MachinesNotReady"
	// ReasonNoMachines: the pool has no machines.
	ReasonNoMachines = "NoMachines"

	// AddressesClaimed.

	// ReasonAddressesClaimed: every address of every entry is claimed
	// for the pool.
	ReasonAddressesClaimed = "AddressesClaimed"
)

// Reasons of the rollout's NodePool conditions (Progressing, Paused,
// Halted, Complete), decided by controllers/rollout/plan (Conditions).
const (
	// Progressing.

	// ReasonMachinesUpdating: updates are in flight (True).
	ReasonMachinesUpdating = "MachinesUpdating"
	// ReasonWaitingForBudget: machines wait for room in maxUnavailable
	// (or a failure domain's own budget).
	ReasonWaitingForBudget = "WaitingForBudget"
	// ReasonWaitingForWindow: machines wait for a maintenance window.
	ReasonWaitingForWindow = "WaitingForWindow"
	// ReasonRolloutPaused: spec.rollout.paused holds machines back. Also
	// the reason of Paused=True.
	ReasonRolloutPaused = "RolloutPaused"
	// ReasonRolloutHalted: failed updates exceed the failure budget.
	ReasonRolloutHalted = "RolloutHalted"
	// ReasonRolloutComplete: no machine waits for an update.
	ReasonRolloutComplete = "RolloutComplete"
	// ReasonWaitingForFirstBoot: no update waits, but some machines have
	// not booted yet (no status.lastBoot): they get the pool's image at
	// their first boot, which the rollout does not start. Until they
	// report, the pool's rollout is not complete, only idle.
	ReasonWaitingForFirstBoot = "WaitingForFirstBoot"
	// ReasonImageNotFound: spec.bootImage names no BootImage; no update
	// starts. (The same string as ReasonBootImageNotFound of Ready.)
	ReasonImageNotFound = "BootImageNotFound"
	// ReasonImageNotReady: kubefarm-pxe has not verified the BootImage's
	// artifacts; no machine is rebooted into it.
	ReasonImageNotReady = "BootImageNotReady"
	// ReasonInvalidStrategy: spec.rollout cannot be evaluated (a bad
	// maintenance window, budget or blocking pod selector).
	ReasonInvalidStrategy = "InvalidStrategy"
	// ReasonRolloutHeld: every machine that waits is held by a gate
	// (blocking pods, kubefarm.io/reboot-hold, firing alerts); the message
	// names them.
	ReasonRolloutHeld = "RolloutHeld"

	// Paused.

	// ReasonNotPaused: new updates may start.
	ReasonNotPaused = "NotPaused"

	// Halted.

	// ReasonFailureBudgetLeft: failed updates are within the budget.
	ReasonFailureBudgetLeft = "WithinFailureBudget"
	// ReasonFailureBudgetSpent: failed updates exceed the budget (True).
	ReasonFailureBudgetSpent = "FailureBudgetExceeded"

	// Complete.

	// ReasonAllUpdated: every machine is up to date
	// (internal/machinestate.UpToDate).
	ReasonAllUpdated = "AllMachinesUpdated"
	// ReasonMachinesPending: some machine is not up to date yet.
	ReasonMachinesPending = "MachinesPending"
)

// Reasons of a Machine's RolloutHeld condition (controllers/rollout/plan,
// Hold).
const (
	// ReasonBlockingPods: pods matching spec.rollout.blockingPodSelector
	// run on the machine's node (True).
	ReasonBlockingPods = "BlockingPods"
	// ReasonBlockingPodsUnknown: the tenant's pods could not be listed, so
	// the blocking pod gate holds the machine (True; it fails closed).
	ReasonBlockingPodsUnknown = "BlockingPodsUnknown"
	// ReasonRebootHold: kubefarm.io/reboot-hold is set on the Machine or
	// its Node (True).
	ReasonRebootHold = "RebootHold"
	// ReasonFiringAlerts: alerts matching spec.rollout.alertGate fire in
	// its source; every waiting machine of the pool is held (True).
	ReasonFiringAlerts = "FiringAlerts"
	// ReasonAlertsUnknown: spec.rollout.alertGate's source could not be
	// read, so the gate holds every waiting machine (True; fails closed).
	ReasonAlertsUnknown = "AlertsUnknown"
	// ReasonNotHeld: no gate holds the machine (False).
	ReasonNotHeld = "NotHeld"
)

// NodePoolConditionTypes are the condition types a NodePool carries: Ready,
// MachinesReady and AddressesClaimed (controllers/nodepool), Progressing,
// Paused, Halted and Complete (controllers/rollout). printcolumns_test.go
// holds the CRDs' printer columns to this list.
var NodePoolConditionTypes = []string{ConditionReady, ConditionMachinesReady, ConditionAddressesClaimed,
	ConditionProgressing, ConditionPaused, ConditionHalted, ConditionComplete}

package v1alpha1

// Reasons of the TenantCluster conditions. They are part of the API: users
// script against them (kubectl wait, alerts) and every change of one is an
// event whose reason is the condition type followed by it, so they are
// constants here, never formatted strings, and renaming one is a breaking
// change.
const (
	// Ready.

	// ReasonControlPlaneReady: every other condition is True.
	ReasonControlPlaneReady = "ControlPlaneReady"
	// ReasonInvalidSpec: the spec cannot be built; nothing is written
	// until it is edited.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonReconcileError: the last pass failed; the message is the error.
	ReasonReconcileError = "ReconcileError"
	// When another condition is False, Ready's reason is that condition's
	// type followed by "False" (e.g. EtcdReadyFalse), naming the first one
	// in the order CertificatesReady, EtcdReady, APIServerReady,
	// AddonsReady; when only something without a condition of its own
	// holds it back (controller-manager, scheduler, a pending endpoint) it
	// is ReasonNotAvailable.

	// CertificatesReady.

	// ReasonIssued: every Certificate is issued for its current spec.
	ReasonIssued = "Issued"
	// ReasonIssuing: some Certificate or its Secret is not there yet.
	ReasonIssuing = "Issuing"

	// EtcdReady.

	// ReasonMembersReady: every etcd member is ready (which needs quorum).
	ReasonMembersReady = "MembersReady"
	// ReasonMembersNotReady: some member is not, or the StatefulSet has
	// not caught up with its spec.
	ReasonMembersNotReady = "MembersNotReady"

	// APIServerReady (and Ready).

	// ReasonAvailable: every API server replica is available.
	ReasonAvailable = "Available"
	// ReasonNotAvailable: some replica is not.
	ReasonNotAvailable = "NotAvailable"
	// ReasonWaitingForEtcd: the API server is created only once etcd is
	// ready.
	ReasonWaitingForEtcd = "WaitingForEtcd"

	// EtcdReady, APIServerReady and AddonsReady.

	// ReasonWaitingForCertificates: never deployed, since the certificates
	// it mounts are not issued yet.
	ReasonWaitingForCertificates = "WaitingForCertificates"
	// ReasonWaitingForRestore: never deployed, since a restore's check
	// has not passed (EtcdRestored says why).
	ReasonWaitingForRestore = "WaitingForRestore"

	// AddonsReady.

	// ReasonApplied: kubefarm's RBAC and the add-ons are applied inside
	// the tenant.
	ReasonApplied = "Applied"
	// ReasonApplyFailed: a write into the tenant failed; retried shortly.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonWaitingForAPIServer: the tenant API server is not available
	// yet.
	ReasonWaitingForAPIServer = "WaitingForAPIServer"
	// ReasonEndpointPending: the external endpoint nodes use is not known
	// yet.
	ReasonEndpointPending = "EndpointPending"

	// EncryptionKeyRotated: True when no key rotation is in progress (the
	// message names the write key); False while one is, with the stage
	// reached as the reason (KeyAdded, KeyPromoted, SecretsRewritten) or
	// what it waits for. Not an input of Ready: the control plane serves
	// throughout a rotation. See docs/encryption.md.
	ReasonKeyInUse = "KeyInUse"
	// ReasonWaitingForRollout: the next step waits until every API server
	// runs the current keys.
	ReasonWaitingForRollout = "WaitingForRollout"
	// ReasonRewriteFailed: rewriting the tenant's Secrets with the new key
	// failed; retried shortly.
	ReasonRewriteFailed = "RewriteFailed"

	// CARotated: True when no CA rotation is in progress (ReasonCAsInUse;
	// the message names the generation of each CA that signs); False while
	// one is, with the step reached or awaited as the reason: NewCAIssuing
	// (the new CA's Certificate is being issued), BothTrusted (the old and
	// the new CA are trusted; the control plane rolls), SigningWithNew (the
	// leaves are re-issued by the new CA), and for the cluster CA
	// SigningClientsWithNew (the client leaves and the kubelets'
	// certificates move first), NodesRebooting (the nodes booted before
	// are asked to reboot), WaitingForNodeReboots and ServingWithNew (the
	// leaves the nodes verify move last); OldCADropped (only the new CA
	// is trusted; the old one is deleted once the control plane rolled),
	// WaitingForRollout, or ReasonCARecordInvalid (the trust Secret's
	// record is damaged; the message names the Secret and the annotation,
	// and no step is taken). Not an input of Ready: the control plane
	// serves throughout. See docs/pki.md.
	ReasonCAsInUse        = "CAsInUse"
	ReasonCARecordInvalid = "CARecordInvalid"

	// EtcdBackedUp (spec.etcd.backup). ReasonSnapshotTaken: the newest
	// finished run took and verified a snapshot (the message names it).
	ReasonSnapshotTaken = "SnapshotTaken"
	// ReasonSnapshotFailed: the newest finished run failed; the message
	// carries the tool's error, and the run's Job is kept for its logs.
	ReasonSnapshotFailed = "SnapshotFailed"
	// ReasonNoSnapshotYet: no run has finished since backups were
	// configured.
	ReasonNoSnapshotYet = "NoSnapshotYet"
	// ReasonBackupCredentialsMissing: spec.etcd.backup.s3.credentialsSecret
	// does not exist or lacks a key, so no run could upload; the message
	// names the Secret and the key.
	ReasonBackupCredentialsMissing = "BackupCredentialsMissing"
	// ReasonBackupKeyMissing: the backup key Secret
	// (spec.etcd.backup.keys.secretName, or the default
	// "<tenant>-etcd-backup-key") does not exist, has no key recipients,
	// or its recipients are not age recipients, so no run could seal its
	// snapshot's key file; the message names the Secret and what is
	// wrong, never a key.
	ReasonBackupKeyMissing = "BackupKeyMissing"

	// EtcdRestored (spec.etcd.restoreFrom). ReasonRestoreChecking: the
	// check Job reads the snapshot and its key file. The refusals are the
	// check's verdict: ReasonBackupKeyMissing (here: the Secret with the
	// backup key's identity is missing or has no key "identity"),
	// BackupKeysMissing, BackupKeyWrong, BackupKeysDamaged,
	// BackupKeysForAnotherSnapshot, SnapshotKeyUnknown, SnapshotKeyWrong,
	// SnapshotMissing, SnapshotDamaged (internal/backupkeys and
	// internal/etcdsnapshot name them), or ReasonRestoreCheckFailed when
	// the Job failed without a verdict. ReasonKeysRestored: True, the
	// key file's keys are the tenant's encryption keys;
	// ReasonKeysProvided: True, the key Secret existed already (copied by
	// hand), so the key file was not read.
	ReasonRestoreChecking    = "RestoreChecking"
	ReasonRestoreCheckFailed = "RestoreCheckFailed"
	ReasonKeysRestored       = "KeysRestored"
	ReasonKeysProvided       = "KeysProvided"
	// ReasonSnapshotMissing and ReasonSnapshotDamaged: the check found no
	// snapshot file of that name on the claim, or one that is not whole
	// (internal/etcdsnapshot's verdicts, spelled the same).
	ReasonSnapshotMissing = "SnapshotMissing"
	ReasonSnapshotDamaged = "SnapshotDamaged"

	// EtcdScaling. While True the reason is the last step made
	// (MemberAdded, MemberPromoted, LeaderMoved, MemberRemoved), what the
	// next one waits for (WaitingForAPIServers, WaitingForLearner,
	// WaitingForMembers), or ReasonStepFailed (the message names the
	// member and the step; retried). ReasonWaitingForAPIServers: every
	// API server must run with member 0 as its only etcd server before
	// the membership changes.
	ReasonWaitingForAPIServers = "WaitingForAPIServers"
	ReasonStepFailed           = "StepFailed"
	// ReasonMembersMatch: EtcdScaling False, the change is complete.
	ReasonMembersMatch = "MembersMatch"

	// VersionRolledOut (internal/upgradeplan decides it). ReasonRolledOut:
	// True, every component runs spec.version.
	ReasonRolledOut = "RolledOut"
	// ReasonRollingOut: the first rollout, nothing ran yet.
	ReasonRollingOut = "RollingOut"
	// ReasonUpgradingStep: rolling to the next step of the upgrade, one
	// minor above what runs (or spec.version); the message names the step
	// and the steps left.
	ReasonUpgradingStep = "UpgradingStep"
	// The refusals: the control plane stays at status.observedVersion.
	// ReasonKubeletSkew: the step would put kube-apiserver more than three
	// minors ahead of some Node's kubelet; the message names the Nodes.
	ReasonKubeletSkew = "KubeletSkew"
	// ReasonKubeletVersionUnparsable: some Node's kubelet version cannot
	// be read as v1.MINOR.PATCH, so the skew cannot be checked.
	ReasonKubeletVersionUnparsable = "KubeletVersionUnparsable"
	// ReasonNodesUnreadable: the tenant's Nodes could not be read.
	ReasonNodesUnreadable = "NodesUnreadable"
	// ReasonDowngradeRefused: spec.version is below what runs.
	ReasonDowngradeRefused = "DowngradeRefused"
	// ReasonVersionUnsupported: spec.version, or a minor the upgrade would
	// step through, lies outside this kubefarm's supported window.
	ReasonVersionUnsupported = "VersionUnsupported"
)

// TenantClusterConditionTypes are the condition types a TenantCluster
// carries (controllers/tenantcluster and its etcd backup, scaling and key
// rotation). printcolumns_test.go holds the CRDs' printer columns to this
// list.
var TenantClusterConditionTypes = []string{ConditionReady, ConditionEtcdReady, ConditionAPIServerReady,
	ConditionCertificatesReady, ConditionAddonsReady, ConditionEncryptionKeyRotated, ConditionCARotated, ConditionEtcdBackedUp, ConditionEtcdScaling, ConditionVersionRolledOut, ConditionEtcdRestored}

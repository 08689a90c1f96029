package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EtcdSpec configures the tenant's etcd.
// +kubebuilder:validation:XValidation:rule="has(self.restoreFrom) == has(oldSelf.restoreFrom)",message="restoreFrom can only be set when the TenantCluster is created, and stays"
type EtcdSpec struct {
	// Replicas is 1 or 3. Three tolerates the loss of one member. It can
	// change at any time: kubefarm then changes etcd's membership one
	// member at a time through etcd's member API (a new member joins as a
	// learner and votes once it has caught up; a member leaves after the
	// leadership has moved off it), with quorum checked before each step,
	// and reports the progress in the EtcdScaling condition. During the
	// change the API servers use member 0 only, so a change rolls them
	// twice (see docs/etcd.md, Scaling).
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Enum=1;3
	Replicas int32 `json:"replicas,omitempty"`

	// Resources replace the members' default requests (docs/placement.md).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// StorageSize is the size of each member's volume.
	// +optional
	// +kubebuilder:default="2Gi"
	StorageSize *resource.Quantity `json:"storageSize,omitempty"`

	// StorageClassName of the members' volumes; empty uses the default class.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// Backup takes scheduled snapshots of etcd with a CronJob
	// (docs/etcd.md, "Backup"). Unset takes none.
	// +optional
	Backup *EtcdBackup `json:"backup,omitempty"`

	// RestoreFrom bootstraps etcd from a snapshot instead of empty: every
	// member restores it into its empty volume before it first starts. It
	// is read only while etcd has never started (no member was ever ready
	// and no member volumes exist), can only be set when the TenantCluster
	// is created, and cannot change afterwards.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="is immutable: a snapshot is restored only when the TenantCluster is created"
	RestoreFrom *EtcdRestoreSource `json:"restoreFrom,omitempty"`
}

// EtcdBackup configures scheduled etcd snapshots: a CronJob in the tenant's
// namespace streams a snapshot from a healthy member with the etcd client
// API, verifies it, writes it with its key file (see Keys) to a
// PersistentVolumeClaim (or uploads both to an S3-compatible bucket) and
// keeps the newest Retain of them.
// +kubebuilder:validation:XValidation:rule="!has(self.s3) || !has(self.volume) || !has(self.volume.claimName)",message="volume.claimName and s3 are exclusive: snapshots go to one place"
type EtcdBackup struct {
	// Schedule in cron syntax (the CronJob's), in TimeZone.
	// +optional
	// +kubebuilder:default="0 */6 * * *"
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=100
	Schedule string `json:"schedule,omitempty"`

	// TimeZone of the schedule, an IANA name such as Europe/Berlin; empty
	// is the admin cluster's kube-controller-manager's time zone.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone *string `json:"timeZone,omitempty"`

	// Suspend stops new snapshots; the existing ones are kept.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Retain is how many snapshots of this tenant are kept; older ones are
	// deleted after each successful snapshot.
	// +optional
	// +kubebuilder:default=7
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Retain *int32 `json:"retain,omitempty"`

	// Volume is where snapshots are written (unless S3 is set).
	// +optional
	Volume EtcdBackupVolume `json:"volume,omitempty"`

	// S3 uploads the snapshots to an S3-compatible bucket instead of a
	// claim; each run stages its snapshot in an emptyDir and keeps the
	// newest Retain objects of this tenant in the bucket.
	// +optional
	S3 *EtcdBackupS3 `json:"s3,omitempty"`

	// Keys is the backup key: a snapshot alone holds the tenant's Secrets
	// encrypted (docs/encryption.md), so every snapshot is stored with a
	// key file, "<snapshot>.keys.age", that holds the encryption keys
	// needed to read them, sealed to the backup key.
	// +optional
	Keys EtcdBackupKeys `json:"keys,omitempty"`
}

// EtcdBackupKeys names the backup key every snapshot's key file is sealed
// to (docs/etcd.md, "The backup key").
type EtcdBackupKeys struct {
	// SecretName is a Secret in the tenant's namespace whose key
	// "recipients" holds age X25519 recipients ("age1..."), one per line
	// ('#' comments and blank lines are skipped). Every key file is
	// encrypted to all of them, so neither the backup runs nor whoever
	// gets hold of a snapshot and its key file can read the keys: only
	// the matching identity opens it (age -d -i). The backup pod mounts
	// the key "recipients" alone.
	//
	// Empty: kubefarm creates "<tenant>-etcd-backup-key" with a fresh
	// X25519 identity (key "identity") and its recipient (key
	// "recipients"). It has no owner reference and kubefarm never updates
	// or deletes it, so it outlives the TenantCluster as the snapshots do;
	// keep a copy of its identity off the cluster, or a disaster that
	// takes the admin cluster takes the only key to the snapshots' keys.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SecretName string `json:"secretName,omitempty"`
}

// EtcdBackupS3 is an S3-compatible bucket for etcd snapshots.
type EtcdBackupS3 struct {
	// Endpoint is the S3 API's URL, https://host[:port] (http:// only for
	// a store reachable without TLS, such as one in the admin cluster;
	// requests are signed, the snapshots travel in the clear).
	// +required
	// +kubebuilder:validation:MinLength=8
	// +kubebuilder:validation:MaxLength=263
	Endpoint string `json:"endpoint"`

	// Bucket is the bucket's name; it must exist.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	Bucket string `json:"bucket"`

	// Prefix starts the objects' keys, ending in "/": empty is
	// "<namespace>/<tenant>/". Retention only ever deletes objects under
	// it whose names are exactly what kubefarm writes.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Prefix string `json:"prefix,omitempty"`

	// Region of the bucket; empty lets the client find it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`

	// CredentialsSecret names a Secret in the tenant's namespace with the
	// keys accessKeyID and secretAccessKey. They reach the backup pod as
	// environment variables only.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CredentialsSecret string `json:"credentialsSecret"`

	// CAConfigMap names a ConfigMap in the tenant's namespace whose key
	// ca.crt holds the CA certificates the endpoint's TLS certificate is
	// checked against; empty uses the tools image's system roots.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CAConfigMap string `json:"caConfigMap,omitempty"`
}

// EtcdBackupVolume is the PersistentVolumeClaim snapshots are written to.
type EtcdBackupVolume struct {
	// ClaimName of an existing claim in the tenant's namespace. Empty:
	// kubefarm creates "<tenant>-etcd-backup" of Size from
	// StorageClassName. Either way the claim is never deleted by kubefarm,
	// not even with the TenantCluster: snapshots are what a restore after
	// a deletion needs.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName,omitempty"`

	// Size of the claim kubefarm creates (ignored with ClaimName).
	// +optional
	// +kubebuilder:default="10Gi"
	Size *resource.Quantity `json:"size,omitempty"`

	// StorageClassName of the claim kubefarm creates (ignored with
	// ClaimName); empty uses the default class.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// EtcdRestoreSource names a snapshot taken by kubefarm's etcd backup, on a
// claim or in an S3-compatible bucket.
// +kubebuilder:validation:XValidation:rule="has(self.claimName) != has(self.s3)",message="exactly one of claimName and s3: the snapshot is on a claim or in a bucket"
type EtcdRestoreSource struct {
	// ClaimName is the PersistentVolumeClaim, in the tenant's namespace,
	// that holds the snapshot (for example "<tenant>-etcd-backup"). Every
	// member mounts it read-only while it restores: with several members on
	// different nodes the claim must allow that (ReadOnlyMany or
	// ReadWriteMany), or the members must share a node.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName,omitempty"`

	// S3 is the bucket the snapshot and its key file were uploaded to (as
	// spec.etcd.backup.s3 does): the restore's check and each member
	// download them into an emptyDir, with the credentials Secret's keys
	// in their environment. Its prefix defaults to that of the tenant the
	// snapshot was taken of, "<namespace>/<snapshot's tenant>/".
	// +optional
	S3 *EtcdBackupS3 `json:"s3,omitempty"`

	// Snapshot is the file name in the claim (or the object's name after
	// the prefix), as status.backup.lastSnapshot reported it (for example
	// "tenant-a-20261124T030000Z.db").
	// +required
	// +kubebuilder:validation:MinLength=4
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*\.db$`
	Snapshot string `json:"snapshot"`

	// BackupKeySecretName is the Secret, in the tenant's namespace, whose
	// key "identity" holds the backup key's age identity that opens the
	// snapshot's key file ("<snapshot>.keys.age" beside it; docs/etcd.md,
	// "Restore"). Before any etcd member starts, a check Job reads the
	// snapshot and the key file with it, and the encryption keys it holds
	// become the new tenant's, which then writes with a fresh key and
	// rotates the restored ones out. Empty: "<snapshot's tenant>-etcd-backup-key",
	// the Secret kubefarm created for the tenant the snapshot was taken of
	// (its name is the snapshot's up to the timestamp). Not read when the
	// key Secret "<tenant>-encryption" already exists (a copy made by
	// hand, or a tenant whose etcd already started).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	BackupKeySecretName string `json:"backupKeySecretName,omitempty"`
}

// EtcdBackupStatus is what the backup CronJob's runs reported.
type EtcdBackupStatus struct {
	// LastSnapshot is the newest snapshot that was taken and verified.
	// +optional
	LastSnapshot *EtcdSnapshot `json:"lastSnapshot,omitempty"`
	// LastFailureTime is when the newest failed run ended.
	// +optional
	LastFailureTime *metav1.Time `json:"lastFailureTime,omitempty"`
	// LastRunTime is when the newest run kubefarm reported on ended,
	// successful or not.
	// +optional
	LastRunTime *metav1.Time `json:"lastRunTime,omitempty"`
	// LastRunJob is that run's Job.
	// +optional
	LastRunJob string `json:"lastRunJob,omitempty"`
}

// EtcdSnapshot describes one snapshot: a file on a claim, or an object in
// a bucket.
type EtcdSnapshot struct {
	// ClaimName is the claim the file is on (empty for S3).
	// +optional
	ClaimName string `json:"claimName,omitempty"`
	// Bucket and Object locate the snapshot in S3 (spec.etcd.backup.s3).
	// +optional
	Bucket string `json:"bucket,omitempty"`
	// +optional
	Object string `json:"object,omitempty"`
	// File is the snapshot's file name in the claim: what
	// spec.etcd.restoreFrom.snapshot takes. For S3, the object's name
	// after the prefix.
	File string `json:"file"`
	// KeysFile is the key file's name beside the snapshot (in the claim;
	// for S3, the object's name after the prefix): the encryption keys
	// needed to read the snapshot's Secrets, sealed to the backup key
	// (spec.etcd.backup.keys).
	// +optional
	KeysFile string `json:"keysFile,omitempty"`
	// SizeBytes is the file's size.
	SizeBytes int64 `json:"sizeBytes"`
	// Revision is etcd's revision the snapshot holds.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// Time is when it was taken.
	Time metav1.Time `json:"time"`
	// Job is the backup run that took it.
	// +optional
	Job string `json:"job,omitempty"`
}

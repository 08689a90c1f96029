package desired

import (
	"path"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// A restore's check (spec.etcd.restoreFrom, docs/etcd.md "Restore"). Before
// any etcd member exists, one Job reads the snapshot and its key file from
// the claim with the backup key's identity (kubefarm-etcd restore-check):
// the snapshot is whole, the key file is bound to it, and its keys decrypt
// every encrypted value in it. It hands the keys to the manager sealed
// again to that identity alone, in its termination message, and the
// manager makes them the tenant's encryption keys. It is the only pod that
// ever mounts a backup key's identity, and it holds no credential to any
// API server or etcd.

// ComponentEtcdRestoreCheck is the component label and name suffix of the
// check Job.
const ComponentEtcdRestoreCheck = "etcd-restore-check"

// Where the check pod finds the backup key's identity.
const (
	restoreKeyMount     = "/etc/kubefarm/restore-key"
	volumeRestoreKey    = "restore-key"
	containerCheck      = "restore-check"
	restoreCheckTimeout = 10 * time.Minute
)

// snapshotTimeSuffix is the length of "-20261124T030000Z.db", what
// kubefarm-etcd appends to the tenant's name in a snapshot's file name.
const snapshotTimeSuffix = len("-20060102T150405Z.db")

// EtcdRestoreCheckName is the name of the check Job.
func (c *Cluster) EtcdRestoreCheckName() string { return c.prefixed(ComponentEtcdRestoreCheck) }

// resolveRestoreKey is the Secret with the backup key's identity that
// opens restoreFrom's key file: backupKeySecretName, or the default backup
// key Secret of the tenant the snapshot's name says it was taken of.
func resolveRestoreKey(r *v1alpha1.EtcdRestoreSource, fp *field.Path) (string, field.ErrorList) {
	if r.BackupKeySecretName != "" {
		return r.BackupKeySecretName, objectName(fp.Child("backupKeySecretName"), r.BackupKeySecretName)
	}
	tenant, ok := SnapshotTenant(r.Snapshot)
	if !ok {
		return "", field.ErrorList{field.Required(fp.Child("backupKeySecretName"),
			"the snapshot's name is not <tenant>-<UTC time>.db, as kubefarm's backups write it, so the tenant whose backup key opens its key file cannot be told: name the Secret")}
	}
	return EtcdBackupKeySecretName(tenant), nil
}

// SnapshotTenant is the tenant a snapshot's file name says it was taken of
// (kubefarm-etcd snapshot names it <tenant>-<20060102T150405Z>.db).
func SnapshotTenant(snapshot string) (string, bool) {
	if len(snapshot) <= snapshotTimeSuffix || !strings.HasSuffix(snapshot, ".db") {
		return "", false
	}
	cut := len(snapshot) - snapshotTimeSuffix
	stamp := strings.TrimSuffix(snapshot[cut+1:], ".db")
	if snapshot[cut] != '-' {
		return "", false
	}
	if _, err := time.Parse("20060102T150405Z", stamp); err != nil {
		return "", false
	}
	return snapshot[:cut], true
}

// EtcdRestoreCheckJob is the check Job of c.RestoreFrom, or nil without
// one: the snapshot and its key file, opened with the backup key's
// identity, the keys handed back sealed to it. One attempt: its verdicts
// are about files, which a retry does not change; the controller deletes a
// refused check after a while to read the files again (an operator may
// have fixed them).
func EtcdRestoreCheckJob(c *Cluster) *batchv1.Job {
	if c.RestoreFrom == nil {
		return nil
	}
	return c.restoreCheckJob(c.EtcdRestoreCheckName(), []string{
		"--identity=" + path.Join(restoreKeyMount, BackupKeyIdentityKey),
		"--reseal",
	}, corev1.SecretVolumeSource{
		SecretName:  c.RestoreKeySecret,
		DefaultMode: ptrTo(secretFileMode),
		Items:       []corev1.KeyToPath{{Key: BackupKeyIdentityKey, Path: BackupKeyIdentityKey}},
	})
}

// EtcdRestoreKeysCheckName is the name of the check of keys supplied by
// hand.
func (c *Cluster) EtcdRestoreKeysCheckName() string {
	return c.prefixed(ComponentEtcdRestoreCheck + "-keys")
}

// EtcdRestoreKeysCheckJob checks c.RestoreFrom's snapshot against keys
// supplied by hand (a key Secret copied before the TenantCluster), as the
// API servers will read them: the rendered configuration Secret, mounted
// like theirs. Nil without restoreFrom.
func EtcdRestoreKeysCheckJob(c *Cluster) *batchv1.Job {
	if c.RestoreFrom == nil {
		return nil
	}
	return c.restoreCheckJob(c.EtcdRestoreKeysCheckName(), []string{
		"--keys-config=" + path.Join(restoreKeyMount, EncryptionConfigKey),
	}, corev1.SecretVolumeSource{
		SecretName:  c.volumeSecretName(RoleEncryptionConfig),
		DefaultMode: ptrTo(secretFileMode),
		Items:       []corev1.KeyToPath{{Key: EncryptionConfigKey, Path: EncryptionConfigKey}},
	})
}

// restoreCheckJob is a Job of kubefarm-etcd restore-check with the
// snapshot's source, keyArgs, and keys, the one Secret it mounts.
func (c *Cluster) restoreCheckJob(name string, keyArgs []string, keys corev1.SecretVolumeSource) *batchv1.Job {
	source, env, mounts, volumes := c.restoreSource()
	args := append(append([]string{"restore-check"}, source...), keyArgs...)
	ctr := container(containerCheck, c.Images.Tools, []string{toolsBinary}, args)
	ctr.Resources = c.resources(ComponentEtcd, "50m", "64Mi")
	ctr.VolumeMounts = append([]corev1.VolumeMount{
		{Name: volumeRestoreKey, MountPath: restoreKeyMount, ReadOnly: true},
		{Name: volumeTmp, MountPath: tmpDir},
	}, mounts...)
	ctr.Env = env
	pod := c.basePodSpec(ComponentEtcdRestoreCheck)
	pod.RestartPolicy = corev1.RestartPolicyNever
	pod.Containers = []corev1.Container{ctr}
	pod.Volumes = append([]corev1.Volume{
		{Name: volumeTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: volumeRestoreKey, VolumeSource: corev1.VolumeSource{Secret: &keys}},
	}, volumes...)
	labels := c.labels(ComponentEtcdRestoreCheck)
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptrTo(int32(0)),
			ActiveDeadlineSeconds: ptrTo(int64(restoreCheckTimeout / time.Second)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       pod,
			},
		},
	}
}

// restoreSource is how the check and the members' restore reach the
// snapshot: on the claim, mounted read-only at restoreMount; or (S3) in
// the bucket, downloaded into an emptyDir there with the credentials from
// their Secret as environment variables (never arguments). It returns the
// tool's --snapshot and source arguments, in a fixed order, and the
// environment, mounts and volumes they need.
func (c *Cluster) restoreSource() (args []string, env []corev1.EnvVar, mounts []corev1.VolumeMount, volumes []corev1.Volume) {
	if s3 := c.RestoreS3; s3 != nil {
		args, env, mounts, volumes = backupS3Wiring(s3)
		args = append([]string{"--snapshot=" + c.RestoreFrom.Snapshot, "--fetch-dir=" + restoreMount}, args...)
		mounts = append(mounts, corev1.VolumeMount{Name: volumeRestore, MountPath: restoreMount})
		volumes = append(volumes, corev1.Volume{Name: volumeRestore, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		return args, env, mounts, volumes
	}
	args = []string{"--snapshot=" + path.Join(restoreMount, c.RestoreFrom.Snapshot)}
	mounts = []corev1.VolumeMount{{Name: volumeRestore, MountPath: restoreMount, ReadOnly: true}}
	volumes = []corev1.Volume{{Name: volumeRestore, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
		ClaimName: c.RestoreFrom.ClaimName, ReadOnly: true}}}}
	return args, env, mounts, volumes
}

// resolveRestoreS3 resolves restoreFrom.s3 like spec.etcd.backup.s3, the
// default prefix being that of the tenant the snapshot was taken of.
func (c *Cluster) resolveRestoreS3(r *v1alpha1.EtcdRestoreSource, fp *field.Path) (*BackupS3, field.ErrorList) {
	tenant, ok := SnapshotTenant(r.Snapshot)
	if !ok && r.S3.Prefix == "" {
		return nil, field.ErrorList{field.Required(fp.Child("prefix"),
			"the snapshot's name is not <tenant>-<UTC time>.db, so the default prefix <namespace>/<tenant>/ cannot be told: name it")}
	}
	return resolveS3(c.Namespace, tenant, r.S3, fp)
}

package desired

import (
	"path"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// The backup key (spec.etcd.backup.keys). A snapshot holds the tenant's
// Secrets encrypted with the keys of the encryption key Secret, which a
// deletion or a disaster can take with the admin cluster; so each run also
// writes a key file beside its snapshot with those keys, sealed with age to
// the backup key's recipients. The run mounts the rendered
// EncryptionConfiguration (the keys as the API servers use them, mid
// rotation too) and the recipients alone: it can seal, never open, and
// neither can whoever gets hold of the files. The identity that opens them
// stays in the backup key Secret (the default one) or with the operator;
// the one pod that mounts it is a restore's check (restore.go).

// The keys of the backup key Secret: the X25519 identity kubefarm
// generates for the default Secret (mounted only by a restore's check Job,
// EtcdRestoreCheckJob), and the age
// recipients, one per line, that every key file is sealed to.
const (
	BackupKeyIdentityKey   = "identity"
	BackupKeyRecipientsKey = "recipients"
)

// Where the snapshot container finds what it seals and to whom: two
// read-only directories, each with the one key of its Secret it needs.
const (
	backupKeysConfigMount     = "/etc/kubefarm/backup-keys/config"
	backupKeysRecipientsMount = "/etc/kubefarm/backup-keys/recipients"
	volumeBackupKeysConfig    = "backup-keys-config"
	volumeBackupKeyRecipients = "backup-key-recipients"
)

// EtcdBackupKeySecretName is the backup key Secret kubefarm creates for
// tenant when spec.etcd.backup.keys.secretName is empty.
func EtcdBackupKeySecretName(tenant string) string {
	return tenant + "-" + ComponentEtcdBackup + "-key"
}

// resolveBackupKeys resolves spec.etcd.backup.keys: the Secret named, or
// the default one, which kubefarm creates (create).
func (c *Cluster) resolveBackupKeys(k v1alpha1.EtcdBackupKeys, fp *field.Path) (name string, create bool, errs field.ErrorList) {
	if k.SecretName == "" {
		return EtcdBackupKeySecretName(c.Name), true, nil
	}
	return k.SecretName, false, objectName(fp.Child("secretName"), k.SecretName)
}

// NewEtcdBackupKeySecret is the default backup key Secret holding id (the
// caller generates it, so this stays pure) and its recipient, or nil when
// backups are off or the spec names a Secret. Like the backup claim it
// carries no owner reference (the caller must not set one): the identity
// is what opens the key files of the snapshots, which outlive the
// TenantCluster.
func NewEtcdBackupKeySecret(c *Cluster, id *age.X25519Identity) *corev1.Secret {
	if c.Backup == nil || !c.Backup.CreateKeySecret || id == nil {
		return nil
	}
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Backup.KeySecret, Namespace: c.Namespace, Labels: c.labels(ComponentEtcdBackup),
			Annotations: map[string]string{"kubernetes.io/description": "The backup key of TenantCluster " + c.Name +
				"'s etcd snapshots: their key files open with the identity only (age -d -i). Keep a copy of it off this cluster."}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			BackupKeyIdentityKey:   []byte(id.String()),
			BackupKeyRecipientsKey: []byte(id.Recipient().String() + "\n"),
		},
	}
}

// backupKeysWiring is what the snapshot container needs to write each
// snapshot's key file: its arguments, in a fixed order, the two read-only
// mounts and their volumes. The encryption configuration is the Secret the
// API servers mount (its name through volumeSecretName, as theirs), and
// the backup key Secret contributes its recipients only: the identity
// never reaches a backup pod.
func (c *Cluster) backupKeysWiring() (args []string, mounts []corev1.VolumeMount, volumes []corev1.Volume) {
	args = []string{
		"--keys-config=" + path.Join(backupKeysConfigMount, EncryptionConfigKey),
		"--keys-recipients=" + path.Join(backupKeysRecipientsMount, BackupKeyRecipientsKey),
	}
	mounts = []corev1.VolumeMount{
		{Name: volumeBackupKeysConfig, MountPath: backupKeysConfigMount, ReadOnly: true},
		{Name: volumeBackupKeyRecipients, MountPath: backupKeysRecipientsMount, ReadOnly: true},
	}
	volumes = []corev1.Volume{
		{Name: volumeBackupKeysConfig, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  c.volumeSecretName(RoleEncryptionConfig),
			DefaultMode: ptrTo(secretFileMode),
			Items:       []corev1.KeyToPath{{Key: EncryptionConfigKey, Path: EncryptionConfigKey}},
		}}},
		{Name: volumeBackupKeyRecipients, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  c.Backup.KeySecret,
			DefaultMode: ptrTo(secretFileMode),
			Items:       []corev1.KeyToPath{{Key: BackupKeyRecipientsKey, Path: BackupKeyRecipientsKey}},
		}}},
	}
	return args, mounts, volumes
}

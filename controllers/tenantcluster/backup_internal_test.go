package tenantcluster

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// TestBackupSecretsOf: the Secrets whose events start a pass of a tenant
// with backups are its S3 credentials and its backup key, named or the
// default. envtest cannot show this watch alone: other events and requeues
// bring passes too, so a fixed Secret would be noticed without it, later.
func TestBackupSecretsOf(t *testing.T) {
	s3 := &v1alpha1.EtcdBackupS3{Endpoint: "https://s3.example.com", Bucket: "b01", CredentialsSecret: "s3-creds"}
	fromClaim := &v1alpha1.EtcdRestoreSource{ClaimName: "c", Snapshot: "old-20261124T030000Z.db"}
	fromBucket := &v1alpha1.EtcdRestoreSource{Snapshot: "old-20261124T030000Z.db", BackupKeySecretName: "ops-key", S3: s3}
	renamed := &v1alpha1.EtcdRestoreSource{ClaimName: "c", Snapshot: "renamed.db"}
	for _, tt := range []struct {
		name    string
		backup  *v1alpha1.EtcdBackup
		restore *v1alpha1.EtcdRestoreSource
		want    []string
	}{
		{"no backups", nil, nil, nil},
		{"a restore: the snapshot's tenant's key", nil, fromClaim, []string{"old-etcd-backup-key"}},
		{"a restore from a bucket: its key and credentials", nil, fromBucket, []string{"ops-key", "s3-creds"}},
		{"a restore of a renamed snapshot, without a key named", nil, renamed, nil},
		{"a restore and backups", &v1alpha1.EtcdBackup{}, fromClaim, []string{"old-etcd-backup-key", "alpha-etcd-backup-key"}},
		{"a restore and backups with one key and one bucket", &v1alpha1.EtcdBackup{S3: s3, Keys: v1alpha1.EtcdBackupKeys{SecretName: "ops-key"}},
			fromBucket, []string{"ops-key", "s3-creds"}},
		{"the default key", &v1alpha1.EtcdBackup{}, nil, []string{"alpha-etcd-backup-key"}},
		{"a named key", &v1alpha1.EtcdBackup{Keys: v1alpha1.EtcdBackupKeys{SecretName: "ops-key"}}, nil, []string{"ops-key"}},
		{"the default key and S3 credentials", &v1alpha1.EtcdBackup{S3: s3}, nil, []string{"alpha-etcd-backup-key", "s3-creds"}},
		{"one Secret for both", &v1alpha1.EtcdBackup{S3: s3, Keys: v1alpha1.EtcdBackupKeys{SecretName: "s3-creds"}}, nil, []string{"s3-creds"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := &v1alpha1.TenantCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "tenants"}}
			tc.Spec.Etcd.Backup, tc.Spec.Etcd.RestoreFrom = tt.backup, tt.restore
			if got := backupSecretsOf(tc); !slices.Equal(got, tt.want) {
				t.Errorf("backupSecretsOf = %q, want %q", got, tt.want)
			}
		})
	}
}

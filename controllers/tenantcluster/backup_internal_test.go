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
	for _, tt := range []struct {
		name   string
		backup *v1alpha1.EtcdBackup
		want   []string
	}{
		{"no backups", nil, nil},
		{"the default key", &v1alpha1.EtcdBackup{}, []string{"alpha-etcd-backup-key"}},
		{"a named key", &v1alpha1.EtcdBackup{Keys: v1alpha1.EtcdBackupKeys{SecretName: "ops-key"}}, []string{"ops-key"}},
		{"the default key and S3 credentials", &v1alpha1.EtcdBackup{S3: s3}, []string{"alpha-etcd-backup-key", "s3-creds"}},
		{"one Secret for both", &v1alpha1.EtcdBackup{S3: s3, Keys: v1alpha1.EtcdBackupKeys{SecretName: "s3-creds"}}, []string{"s3-creds"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := &v1alpha1.TenantCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "tenants"}}
			tc.Spec.Etcd.Backup = tt.backup
			if got := backupSecretsOf(tc); !slices.Equal(got, tt.want) {
				t.Errorf("backupSecretsOf = %q, want %q", got, tt.want)
			}
		})
	}
}

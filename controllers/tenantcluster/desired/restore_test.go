package desired

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
)

func TestSnapshotTenant(t *testing.T) {
	for _, c := range []struct {
		name, want string
		ok         bool
	}{
		{"tenant-a-20261124T030000Z.db", "tenant-a", true},
		{"a.b-20261124T030000Z.db", "a.b", true},
		{"-20261124T030000Z.db", "", false},
		{"tenant-a-20261124T030000.db", "", false},
		{"tenant-a_20261124T030000Z.db", "", false},
		{"tenant-a-20261324T030000Z.db", "", false},
		{"tenant-a-20261124T030000Z.tar", "", false},
		{"alpha-1.db", "", false},
	} {
		got, ok := SnapshotTenant(c.name)
		if got != c.want || ok != c.ok {
			t.Errorf("SnapshotTenant(%q) = %q, %v; want %q, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestRestoreKeySecret(t *testing.T) {
	for _, c := range []struct {
		name     string
		source   v1alpha1.EtcdRestoreSource
		want     string
		errField string
	}{
		{"the snapshot's tenant's default", v1alpha1.EtcdRestoreSource{ClaimName: "b", Snapshot: "old-20261124T030000Z.db"}, "old-etcd-backup-key", ""},
		{"named", v1alpha1.EtcdRestoreSource{ClaimName: "b", Snapshot: "renamed.db", BackupKeySecretName: "mine"}, "mine", ""},
		{"a renamed file needs a name", v1alpha1.EtcdRestoreSource{ClaimName: "b", Snapshot: "renamed.db"}, "", "spec.etcd.restoreFrom.backupKeySecretName: Required"},
		{"a name that is none", v1alpha1.EtcdRestoreSource{ClaimName: "b", Snapshot: "renamed.db", BackupKeySecretName: "A/B"}, "", "spec.etcd.restoreFrom.backupKeySecretName"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := c.source
			cl, err := Resolve(newTC(func(tc *v1alpha1.TenantCluster) { tc.Spec.Etcd.RestoreFrom = &src }), toolsOptions())
			if c.errField != "" {
				if err == nil || !strings.Contains(err.Error(), c.errField) {
					t.Fatalf("err %v, want one naming %s", err, c.errField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cl.RestoreKeySecret != c.want {
				t.Errorf("RestoreKeySecret %q, want %q", cl.RestoreKeySecret, c.want)
			}
		})
	}
}

// TestEtcdRestoreCheckJob: one attempt of restore-check on the claim, with
// the backup key's identity as the only key of its Secret mounted, and no
// credential to anything.
func TestEtcdRestoreCheckJob(t *testing.T) {
	cl, err := Resolve(newTC(withRestore("backups", "old-20261124T030000Z.db")), toolsOptions())
	if err != nil {
		t.Fatal(err)
	}
	job := EtcdRestoreCheckJob(cl)
	if job == nil || job.Name != cl.Name+"-etcd-restore-check" || job.Labels[LabelName] != ComponentEtcdRestoreCheck ||
		job.Labels[v1alpha1.LabelTenantCluster] != cl.Name {
		t.Fatalf("job %+v", job)
	}
	if *job.Spec.BackoffLimit != 0 || job.Spec.ActiveDeadlineSeconds == nil {
		t.Errorf("backoffLimit %d, deadline %v: want one bounded attempt", *job.Spec.BackoffLimit, job.Spec.ActiveDeadlineSeconds)
	}
	pod := job.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("restart %s, token automount %v", pod.RestartPolicy, pod.AutomountServiceAccountToken)
	}
	ctr := pod.Containers[0]
	want := []string{"restore-check", "--snapshot=/restore/old-20261124T030000Z.db", "--identity=/etc/kubefarm/restore-key/identity", "--reseal"}
	if !slices.Equal(ctr.Args, want) || ctr.Image != cl.Images.Tools {
		t.Errorf("args %q image %s; want %q of the tools image", ctr.Args, ctr.Image, want)
	}
	secrets := 0
	for _, v := range pod.Volumes {
		switch {
		case v.Secret != nil:
			secrets++
			if v.Secret.SecretName != "old-etcd-backup-key" || len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != BackupKeyIdentityKey {
				t.Errorf("secret volume %+v: want the identity of old-etcd-backup-key alone", v.Secret)
			}
		case v.PersistentVolumeClaim != nil:
			if v.PersistentVolumeClaim.ClaimName != "backups" || !v.PersistentVolumeClaim.ReadOnly {
				t.Errorf("claim %+v: want backups read-only", v.PersistentVolumeClaim)
			}
		}
	}
	if secrets != 1 || len(ctr.Env) != 0 {
		t.Errorf("%d Secret volumes and env %v: the check holds the backup key and nothing else", secrets, ctr.Env)
	}
	for _, m := range ctr.VolumeMounts {
		if m.MountPath != tmpDir && !m.ReadOnly {
			t.Errorf("mount %s is writable", m.MountPath)
		}
	}
	cl.RestoreFrom = nil
	if EtcdRestoreCheckJob(cl) != nil {
		t.Error("a check Job without restoreFrom")
	}
}

func TestNewRestoredEncryptionKeySecret(t *testing.T) {
	cl, err := Resolve(newTC(), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]byte{"key-1": key(1), "key-4": key(4)}
	s, err := NewRestoredEncryptionKeySecret(cl, keys, "key-1", "old-20261124T030000Z.db", "r")
	if err != nil {
		t.Fatal(err)
	}
	if s.Annotations[v1alpha1.AnnotationEncryptionRestoredFrom] != "old-20261124T030000Z.db" || len(s.OwnerReferences) != 0 {
		t.Errorf("annotations %v owners %v", s.Annotations, s.OwnerReferences)
	}
	got, err := ParseEncryptionKeys(s)
	if err != nil {
		t.Fatal(err)
	}
	if got.Stage != RotationRestored || got.Write != "key-1" || len(got.Keys) != 2 || got.Handled != "r" {
		t.Errorf("parsed %+v", got)
	}
	if _, err := NewRestoredEncryptionKeySecret(cl, keys, "key-2", "s.db", ""); err == nil {
		t.Error("a write key that is not among the keys was accepted")
	}
}

// TestEtcdRestoreFromS3: with restoreFrom.s3 the check and every member's
// restore download from the bucket into an emptyDir (no claim), with the
// credentials as Secret references in their environment, never in their
// arguments; the prefix defaults to the snapshot's tenant's.
func TestEtcdRestoreFromS3(t *testing.T) {
	const snap = "old-20261124T030000Z.db"
	withS3Restore := func(tc *v1alpha1.TenantCluster) {
		tc.Spec.Etcd.RestoreFrom = &v1alpha1.EtcdRestoreSource{Snapshot: snap, S3: goodS3()}
	}
	cl := mustResolve(t, newTC(withS3Restore), toolsOptions())
	wantSource := []string{"--snapshot=" + snap, "--fetch-dir=/restore", "--s3-endpoint=https://s3.example.com",
		"--s3-bucket=etcd-backups", "--s3-prefix=tenants/old/"}
	checkPod := func(what string, args []string, env []corev1.EnvVar, mounts []corev1.VolumeMount, volumes []corev1.Volume) {
		t.Helper()
		for _, w := range wantSource {
			if !slices.Contains(args, w) {
				t.Errorf("%s: args %q lack %s", what, args, w)
			}
		}
		creds := 0
		for _, e := range env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "s3-creds" {
				creds++
			}
			if e.Value != "" && strings.Contains(e.Name, "SECRET") {
				t.Errorf("%s: %s given as a value", what, e.Name)
			}
		}
		if creds != 2 {
			t.Errorf("%s: %d variables from s3-creds, want the key ID and the secret", what, creds)
		}
		for _, m := range mounts {
			if m.Name == volumeRestore && (m.ReadOnly || m.MountPath != "/restore") {
				t.Errorf("%s: the download directory is mounted %+v", what, m)
			}
		}
		for _, v := range volumes {
			if v.PersistentVolumeClaim != nil && v.Name == volumeRestore {
				t.Errorf("%s: a claim for a restore from a bucket", what)
			}
			if v.Name == volumeRestore && v.EmptyDir == nil {
				t.Errorf("%s: the download directory is %+v, want an emptyDir", what, v.VolumeSource)
			}
		}
	}
	job := EtcdRestoreCheckJob(cl)
	pod := job.Spec.Template.Spec
	checkPod("check", pod.Containers[0].Args, pod.Containers[0].Env, pod.Containers[0].VolumeMounts, pod.Volumes)
	sts, err := EtcdStatefulSet(cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := sts.Spec.Template.Spec
	ini := spec.InitContainers[0]
	checkPod("restore", ini.Args, ini.Env, ini.VolumeMounts, spec.Volumes)
	if !slices.ContainsFunc(ini.Env, func(e corev1.EnvVar) bool { return e.Name == EtcdInitialClusterEnv }) {
		t.Errorf("the restore lost etcd's environment: %v", ini.Env)
	}

	for _, c := range []struct {
		name string
		src  v1alpha1.EtcdRestoreSource
		want string
	}{
		{"a claim and a bucket", v1alpha1.EtcdRestoreSource{ClaimName: "b", Snapshot: snap, S3: goodS3()}, "spec.etcd.restoreFrom.claimName: Invalid value"},
		{"a renamed object without a prefix", v1alpha1.EtcdRestoreSource{Snapshot: "renamed.db", BackupKeySecretName: "k", S3: goodS3()},
			"spec.etcd.restoreFrom.s3.prefix: Required"},
		{"a bad bucket", v1alpha1.EtcdRestoreSource{Snapshot: snap, S3: &v1alpha1.EtcdBackupS3{Endpoint: "https://s3.example.com", Bucket: "B",
			CredentialsSecret: "c"}}, "spec.etcd.restoreFrom.s3.bucket"},
	} {
		src := c.src
		_, err := Resolve(newTC(func(tc *v1alpha1.TenantCluster) { tc.Spec.Etcd.RestoreFrom = &src }), toolsOptions())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.want)
		}
	}
	withPrefix := mustResolve(t, newTC(func(tc *v1alpha1.TenantCluster) {
		s3 := goodS3()
		s3.Prefix = "elsewhere/"
		tc.Spec.Etcd.RestoreFrom = &v1alpha1.EtcdRestoreSource{Snapshot: "renamed.db", BackupKeySecretName: "k", S3: s3}
	}), toolsOptions())
	if withPrefix.RestoreS3.Prefix != "elsewhere/" {
		t.Errorf("prefix %q, want the one named", withPrefix.RestoreS3.Prefix)
	}
}

// TestEtcdRestoreKeysCheckJob: keys supplied by hand are checked as the API
// servers will read them (the rendered configuration), with no backup key.
func TestEtcdRestoreKeysCheckJob(t *testing.T) {
	cl := mustResolve(t, newTC(withRestore("backups", "old-20261124T030000Z.db")), toolsOptions())
	job := EtcdRestoreKeysCheckJob(cl)
	if job.Name != "alpha-etcd-restore-check-keys" || job.Labels[LabelName] != ComponentEtcdRestoreCheck {
		t.Fatalf("job %s labels %v", job.Name, job.Labels)
	}
	ctr := job.Spec.Template.Spec.Containers[0]
	want := []string{"restore-check", "--snapshot=/restore/old-20261124T030000Z.db", "--keys-config=/etc/kubefarm/restore-key/encryption-configuration.json"}
	if !slices.Equal(ctr.Args, want) {
		t.Errorf("args %q, want %q", ctr.Args, want)
	}
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.Secret != nil && (v.Secret.SecretName != "alpha-encryption-config" || len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != EncryptionConfigKey) {
			t.Errorf("secret volume %+v: want the rendered configuration alone", v.Secret)
		}
	}
	cl.RestoreFrom = nil
	if EtcdRestoreKeysCheckJob(cl) != nil {
		t.Error("a check without restoreFrom")
	}
}

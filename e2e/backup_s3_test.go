//go:build e2e

package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/minio/minio-go/v7"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/backupkeys"
	"github.com/kubefarm/kubefarm/internal/etcdsnapshot"
	"github.com/kubefarm/kubefarm/internal/testing/s3test"
)

// TestTenantBackupS3: a tenant whose spec.etcd.backup.s3 names a bucket on
// a real S3 server (versitygw, listening on the node's address, which pods
// reach) gets its snapshot uploaded by a run of its CronJob, executed by
// the real kubelet with kubefarm-etcd from the manager image. The object is
// in the bucket under the default prefix <namespace>/<tenant>/, its size is
// the one the status reports, and it is a whole etcd snapshot of the
// reported revision; no claim is made; the credentials reach the pod only
// through the Secret. Then the tenant and its key Secret are deleted, and a
// TenantCluster of another name restored straight from the bucket
// (restoreFrom.s3, no hand step) comes up Ready with the snapshot's
// ConfigMap and Secret.
func TestTenantBackupS3(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 18*time.Minute)
	defer cancel()
	_, cs, c := adminClients(t)

	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("listing nodes: %v (%d)", err, len(nodes.Items))
	}
	var nodeIP string
	for _, a := range nodes.Items[0].Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}
	if nodeIP == "" {
		t.Fatalf("node %s has no InternalIP", nodes.Items[0].Name)
	}
	srv := s3test.Start(t, s3test.Options{Host: nodeIP})
	const bucket = "etcd-backups"
	srv.MakeBucket(t, bucket)

	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "backup-s3-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	if _, err := cs.CoreV1().Secrets(ns.Name).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-creds"},
		StringData: map[string]string{"accessKeyID": srv.AccessKey, "secretAccessKey": srv.SecretKey}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	tc := backupTenant(t, ns.Name, kubefarmv1.EtcdBackup{
		S3: &kubefarmv1.EtcdBackupS3{Endpoint: srv.Endpoint, Bucket: bucket, CredentialsSecret: "s3-creds"}})
	if err := c.Create(ctx, tc); err != nil {
		t.Fatalf("creating the TenantCluster: %v", err)
	}
	key := client.ObjectKeyFromObject(tc)
	waitFor := tenantWaiter(ctx, func() string { return describeTenant(c, cs, key) + describeBackups(ctx, cs, ns.Name) })
	got := &kubefarmv1.TenantCluster{}
	waitFor(t, "the TenantCluster never became Ready", 8*time.Minute, tenantReady(c, key, got, ""))

	cj, err := cs.BatchV1().CronJobs(ns.Name).Get(ctx, tc.Name+"-etcd-backup", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The credentials are references, never values, in the objects.
	for _, ctr := range cj.Spec.JobTemplate.Spec.Template.Spec.Containers {
		for _, e := range ctr.Env {
			if e.Value != "" && strings.Contains(e.Value, srv.SecretKey) {
				t.Errorf("the CronJob's container %s has the secret key in %s", ctr.Name, e.Name)
			}
		}
		if strings.Contains(strings.Join(ctr.Args, " "), srv.SecretKey) {
			t.Errorf("the CronJob's container %s has the secret key in its arguments", ctr.Name)
		}
	}
	// What the snapshot must bring back, a Secret among it.
	tenant, err := kubernetes.NewForConfig(tenantConfig(t, ctx, cs, got))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept-s3"},
		Data: map[string]string{"answer": "42"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kept-s3"},
		StringData: map[string]string{"password": "from-the-bucket"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := cs.BatchV1().Jobs(ns.Name).Create(ctx, jobFromCronJob(cj, "manual-1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the upload was never reported", 5*time.Minute, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, got); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, kubefarmv1.ConditionEtcdBackedUp), nil
	})
	snap := got.Status.Backup.LastSnapshot
	wantObject := ns.Name + "/" + tc.Name + "/" + snap.File
	if snap.Bucket != bucket || snap.Object != wantObject || snap.ClaimName != "" || snap.SizeBytes < 1<<10 || snap.Revision <= 0 {
		t.Fatalf("status.backup.lastSnapshot = %+v, want object %s in bucket %s, no claim", snap, wantObject, bucket)
	}
	t.Logf("snapshot %s: %d bytes, revision %d, reported %.1fs after the Job was created", snap.Object, snap.SizeBytes, snap.Revision,
		time.Since(start).Seconds())
	if cond := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionEtcdBackedUp); !strings.Contains(cond.Message, "s3://"+bucket+"/"+wantObject) {
		t.Errorf("EtcdBackedUp message %q does not say where the snapshot is", cond.Message)
	}

	info, err := srv.Client.StatObject(ctx, bucket, snap.Object, minio.StatObjectOptions{})
	if err != nil || info.Size != snap.SizeBytes {
		t.Fatalf("the object %s: size %d, %v; the status says %d bytes", snap.Object, info.Size, err, snap.SizeBytes)
	}
	file := filepath.Join(t.TempDir(), snap.File)
	if err := srv.Client.FGetObject(ctx, bucket, snap.Object, file, minio.GetObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := etcdsnapshot.Verify(file, zap.NewNop())
	if err != nil || st.Revision != snap.Revision {
		t.Errorf("the downloaded object: revision %d, %v; want a whole snapshot of revision %d", st.Revision, err, snap.Revision)
	}
	wantKeys := ns.Name + "/" + tc.Name + "/" + etcdsnapshot.KeysName(snap.File)
	if keys := srv.Keys(t, bucket); !slices.Equal(keys, []string{wantObject, wantKeys}) || snap.KeysFile != etcdsnapshot.KeysName(snap.File) {
		t.Errorf("bucket holds %v, status keysFile %q; want only %s and its key file %s", keys, snap.KeysFile, wantObject, wantKeys)
	}
	checkKeyFile(t, ctx, cs, srv.Client, bucket, wantKeys, file, ns.Name, tc.Name)
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns.Name).Get(ctx, tc.Name+"-etcd-backup", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a backup claim for an S3 target: %v", err)
	}
	waitEventFor(t, ctx, cs, ns.Name, tc.Name, "EtcdSnapshotTaken")

	if err := c.Delete(ctx, tc); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the TenantCluster was never deleted", 2*time.Minute, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(c.Get(ctx, key, &kubefarmv1.TenantCluster{})), nil
	})
	// Nothing of the old tenant is left to copy but its backup key.
	_ = cs.CoreV1().Secrets(ns.Name).Delete(ctx, tc.Name+"-encryption", metav1.DeleteOptions{})
	_ = os.Remove(file)
	restoreFromBucket(t, ctx, cs, c, ns.Name, tc.Name, kubefarmv1.EtcdRestoreSource{Snapshot: snap.File,
		S3: &kubefarmv1.EtcdBackupS3{Endpoint: srv.Endpoint, Bucket: bucket, CredentialsSecret: "s3-creds"}})
	_ = cs.CoreV1().Secrets(ns.Name).Delete(ctx, tc.Name+"-etcd-backup-key", metav1.DeleteOptions{})
}

// restoreFromBucket: a TenantCluster of another name restored straight
// from the bucket, with no hand step, comes up Ready with the snapshot's
// ConfigMap and Secret; then it is deleted with what it left.
func restoreFromBucket(t *testing.T, ctx context.Context, cs kubernetes.Interface, c client.Client, ns, old string, from kubefarmv1.EtcdRestoreSource) {
	t.Helper()
	tc := backupTenant(t, ns, kubefarmv1.EtcdBackup{})
	tc.Name, tc.Spec.Etcd.Backup, tc.Spec.Etcd.RestoreFrom = old+"-from-s3", nil, &from
	if err := c.Create(ctx, tc); err != nil {
		t.Fatalf("creating the TenantCluster restored from the bucket: %v", err)
	}
	key := client.ObjectKeyFromObject(tc)
	waitFor := tenantWaiter(ctx, func() string { return describeTenant(c, cs, key) + describeBackups(ctx, cs, key.Namespace) })
	got := &kubefarmv1.TenantCluster{}
	start := time.Now()
	waitFor(t, "the TenantCluster restored from the bucket never became Ready", 8*time.Minute, tenantReady(c, key, got, ""))
	t.Logf("restored from the bucket and Ready %.1fs after its creation", time.Since(start).Seconds())
	if cond := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionEtcdRestored); cond == nil || cond.Reason != kubefarmv1.ReasonKeysRestored {
		t.Errorf("EtcdRestored %+v, want True %s", cond, kubefarmv1.ReasonKeysRestored)
	}
	tenant, err := kubernetes.NewForConfig(tenantConfig(t, ctx, cs, got))
	if err != nil {
		t.Fatal(err)
	}
	if cm, err := tenant.CoreV1().ConfigMaps("default").Get(ctx, "kept-s3", metav1.GetOptions{}); err != nil || cm.Data["answer"] != "42" {
		t.Errorf("ConfigMap kept-s3 after the restore from the bucket: %v %v", cm, err)
	}
	if s, err := tenant.CoreV1().Secrets("default").Get(ctx, "kept-s3", metav1.GetOptions{}); err != nil || string(s.Data["password"]) != "from-the-bucket" {
		t.Errorf("Secret kept-s3 after the restore from the bucket: %v, want its value back", err)
	}
	if err := c.Delete(ctx, tc); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the TenantCluster restored from the bucket was never deleted", 2*time.Minute, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(c.Get(ctx, key, &kubefarmv1.TenantCluster{})), nil
	})
}

// checkKeyFile downloads the key file stored beside the snapshot and opens
// it as a restore would, with the identity of the backup key kubefarm made
// (<tenant>-etcd-backup-key): bound to the downloaded snapshot, its keys
// decrypt the snapshot's Secrets and its write key is the tenant's. Another
// identity does not open it.
func checkKeyFile(t *testing.T, ctx context.Context, cs kubernetes.Interface, s3 *minio.Client, bucket, object, snapshot, ns, tenant string) {
	t.Helper()
	sealed := filepath.Join(t.TempDir(), filepath.Base(object))
	if err := s3.FGetObject(ctx, bucket, object, sealed, minio.GetObjectOptions{}); err != nil {
		t.Fatalf("the key file %s: %v", object, err)
	}
	secret, err := cs.CoreV1().Secrets(ns).Get(ctx, tenant+"-etcd-backup-key", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the backup key Secret kubefarm makes: %v", err)
	}
	idFile := filepath.Join(t.TempDir(), "identity")
	if err := os.WriteFile(idFile, secret.Data["identity"], 0o600); err != nil {
		t.Fatal(err)
	}
	ids, err := etcdsnapshot.ReadIdentities(idFile)
	if err != nil {
		t.Fatal(err)
	}
	k, err := etcdsnapshot.Preflight(snapshot, sealed, zap.NewNop(), ids...)
	if err != nil {
		t.Fatalf("the snapshot and its key file do not make a restorable pair: %v", err)
	}
	enc, err := cs.CoreV1().Secrets(ns).Get(ctx, tenant+"-encryption", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w := enc.Annotations[kubefarmv1.AnnotationEncryptionWriteKey]; k.Write != w {
		t.Errorf("the key file's write key is %q, the tenant writes with %q", k.Write, w)
	}
	other, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	var refused *backupkeys.Error
	if _, err := etcdsnapshot.Preflight(snapshot, sealed, zap.NewNop(), other); !errors.As(err, &refused) || refused.Reason != backupkeys.ReasonBackupKeyWrong {
		t.Errorf("opened with another identity: %v, want %s", err, backupkeys.ReasonBackupKeyWrong)
	}
	t.Logf("key file %s: write key %s of %v, bound to the snapshot; another backup key is refused", object, k.Write, k.Names())
}

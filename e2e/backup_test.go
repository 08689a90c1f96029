//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/etcdsnapshot"
)

// TestTenantBackupRestore: a tenant with spec.etcd.backup gets a snapshot
// from its CronJob's Job (started the way `kubectl create job
// --from=cronjob/...` does, not waiting for the schedule), run by the real
// kubelet with kubefarm-etcd from the manager image; the tenant is deleted
// (volumeReclaimPolicy Delete: its etcd volume goes, the backup claim and the
// encryption keys stay); a restore whose backup key is withheld is refused
// with EtcdRestored False BackupKeyMissing and starts no member; with the
// old tenant's key Secret deleted too (nothing to copy by hand), a
// TenantCluster of another name created with spec.etcd.restoreFrom comes up
// Ready with the objects the snapshot held, Secrets readable (the check Job
// opened the key file with the old tenant's backup key), without the one
// written after the snapshot, and then rotates to a fresh key.
func TestTenantBackupRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	_, cs, c := adminClients(t)
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "backup-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })

	small := resource.MustParse("1Gi")
	newTenant := func() *kubefarmv1.TenantCluster {
		return backupTenant(t, ns.Name, kubefarmv1.EtcdBackup{Volume: kubefarmv1.EtcdBackupVolume{Size: &small}})
	}
	tc := newTenant()
	if err := c.Create(ctx, tc); err != nil {
		t.Fatalf("creating the TenantCluster: %v", err)
	}
	key := client.ObjectKeyFromObject(tc)
	waitFor := tenantWaiter(ctx, func() string { return describeTenant(c, cs, key) + describeBackups(ctx, cs, ns.Name) })
	got := &kubefarmv1.TenantCluster{}
	ready := tenantReady(c, key, got, "")
	waitFor(t, "the TenantCluster never became Ready", 8*time.Minute, ready)
	if cond := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionEtcdBackedUp); cond == nil ||
		cond.Status != metav1.ConditionFalse || cond.Reason != kubefarmv1.ReasonNoSnapshotYet {
		t.Errorf("before any run EtcdBackedUp is %+v, want False %s", cond, kubefarmv1.ReasonNoSnapshotYet)
	}

	tenant, err := kubernetes.NewForConfig(tenantConfig(t, ctx, cs, got))
	if err != nil {
		t.Fatal(err)
	}
	const keepNS, secretValue = "backup-check", "s3cr3t-in-the-snapshot"
	if _, err := tenant.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: keepNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.CoreV1().ConfigMaps(keepNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"},
		Data: map[string]string{"answer": "42"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.CoreV1().Secrets(keepNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kept"},
		StringData: map[string]string{"password": secretValue}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("a backup run takes a snapshot", func(t *testing.T) {
		cj, err := cs.BatchV1().CronJobs(ns.Name).Get(ctx, tc.Name+"-etcd-backup", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		job := jobFromCronJob(cj, "manual-1")
		if _, err := cs.BatchV1().Jobs(ns.Name).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		waitFor(t, "the backup was never reported", 5*time.Minute, func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, key, got); err != nil {
				return false, nil
			}
			return meta.IsStatusConditionTrue(got.Status.Conditions, kubefarmv1.ConditionEtcdBackedUp), nil
		})
		snap := got.Status.Backup.LastSnapshot
		if snap == nil || snap.SizeBytes < 1<<10 || snap.Revision <= 0 || snap.ClaimName != tc.Name+"-etcd-backup" ||
			!strings.HasPrefix(snap.File, tc.Name+"-") || !strings.HasSuffix(snap.File, ".db") {
			t.Fatalf("status.backup.lastSnapshot = %+v, want a file %s-*.db of at least 1 KiB on claim %s-etcd-backup", snap, tc.Name, tc.Name)
		}
		if snap.KeysFile != etcdsnapshot.KeysName(snap.File) {
			t.Errorf("status.backup.lastSnapshot.keysFile = %q, want %q beside the snapshot", snap.KeysFile, etcdsnapshot.KeysName(snap.File))
		}
		t.Logf("snapshot %s: %d bytes, revision %d, reported %.1fs after the Job was created", snap.File, snap.SizeBytes, snap.Revision,
			time.Since(start).Seconds())
		waitEventFor(t, ctx, cs, ns.Name, tc.Name, "EtcdSnapshotTaken")
	})
	snapshot := got.Status.Backup.LastSnapshot.File

	// Written after the snapshot: a restore must not bring it back.
	if _, err := tenant.CoreV1().ConfigMaps(keepNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-snapshot"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("deleting the tenant keeps the snapshots and the encryption keys", func(t *testing.T) {
		if err := c.Delete(ctx, tc); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the TenantCluster was never deleted", 2*time.Minute, func(ctx context.Context) (bool, error) {
			return apierrors.IsNotFound(c.Get(ctx, key, &kubefarmv1.TenantCluster{})), nil
		})
		want := []string{"PersistentVolumeClaim/" + tc.Name + "-etcd-backup", "Secret/" + tc.Name + "-encryption",
			"Secret/" + tc.Name + "-etcd-backup-key"}
		var left []string
		waitFor(t, "the namespace never held only the backup claim and the keys", 3*time.Minute, func(ctx context.Context) (bool, error) {
			left = append(leftovers(ctx, c, ns.Name), backupLeftovers(ctx, cs, ns.Name)...)
			slices.Sort(left)
			return slices.Equal(left, want), nil
		})
	})

	t.Run("a restore without the backup key says so and starts nothing", func(t *testing.T) {
		withheld := newTenant()
		withheld.Name, withheld.Spec.Etcd.Backup = tc.Name+"-nokey", nil
		withheld.Spec.Etcd.RestoreFrom = &kubefarmv1.EtcdRestoreSource{ClaimName: tc.Name + "-etcd-backup", Snapshot: snapshot,
			BackupKeySecretName: "withheld-backup-key"}
		if err := c.Create(ctx, withheld); err != nil {
			t.Fatal(err)
		}
		wkey := client.ObjectKeyFromObject(withheld)
		w := &kubefarmv1.TenantCluster{}
		waitFor(t, "EtcdRestored never said the backup key is missing", 3*time.Minute, func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, wkey, w); err != nil {
				return false, nil
			}
			cond := meta.FindStatusCondition(w.Status.Conditions, kubefarmv1.ConditionEtcdRestored)
			return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == kubefarmv1.ReasonBackupKeyMissing &&
				strings.Contains(cond.Message, "withheld-backup-key"), nil
		})
		waitEventFor(t, ctx, cs, ns.Name, withheld.Name, "EtcdRestoreRefused")
		if _, err := cs.AppsV1().StatefulSets(ns.Name).Get(ctx, withheld.Name+"-etcd", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("etcd of a restore without its backup key: %v, want none", err)
		}
		if err := c.Delete(ctx, withheld); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the refused TenantCluster was never deleted", 2*time.Minute, func(ctx context.Context) (bool, error) {
			return apierrors.IsNotFound(c.Get(ctx, wkey, &kubefarmv1.TenantCluster{})), nil
		})
	})

	// Restored under another name with no hand step: the check opens the
	// key file with the old tenant's backup key, and the old tenant's key
	// Secret is not there to copy.
	_ = cs.CoreV1().Secrets(ns.Name).Delete(ctx, tc.Name+"-encryption", metav1.DeleteOptions{})
	t.Run("a TenantCluster of another name restored from the snapshot has its objects back", func(t *testing.T) {
		tc := newTenant()
		tc.Name += "-restored"
		tc.Spec.Etcd.RestoreFrom = &kubefarmv1.EtcdRestoreSource{ClaimName: key.Name + "-etcd-backup", Snapshot: snapshot}
		start := time.Now()
		if err := c.Create(ctx, tc); err != nil {
			t.Fatalf("creating the restored TenantCluster: %v", err)
		}
		key := client.ObjectKeyFromObject(tc)
		ready := tenantReady(c, key, got, "")
		waitFor(t, "the restored TenantCluster never became Ready", 8*time.Minute, ready)
		if cond := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionEtcdRestored); cond == nil ||
			cond.Status != metav1.ConditionTrue || cond.Reason != kubefarmv1.ReasonKeysRestored {
			t.Errorf("EtcdRestored %+v, want True %s", cond, kubefarmv1.ReasonKeysRestored)
		}
		waitEventFor(t, ctx, cs, ns.Name, tc.Name, "EncryptionKeysRestored")
		// Once etcd exists the members drop the restore; Ready again after
		// that one restart.
		waitFor(t, "the etcd members kept the restore", 3*time.Minute, func(ctx context.Context) (bool, error) {
			sts, err := cs.AppsV1().StatefulSets(ns.Name).Get(ctx, tc.Name+"-etcd", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			return len(sts.Spec.Template.Spec.InitContainers) == 0 && sts.Status.ObservedGeneration == sts.Generation &&
				sts.Status.UpdatedReplicas == 1 && sts.Status.ReadyReplicas == 1 && sts.Status.CurrentRevision == sts.Status.UpdateRevision, nil
		})
		waitFor(t, "the restored TenantCluster is not Ready after the members dropped the restore", 3*time.Minute, ready)
		t.Logf("restored and Ready %.1fs after its creation", time.Since(start).Seconds())

		tenant, err := kubernetes.NewForConfig(tenantConfig(t, ctx, cs, got))
		if err != nil {
			t.Fatal(err)
		}
		cm, err := tenant.CoreV1().ConfigMaps(keepNS).Get(ctx, "kept", metav1.GetOptions{})
		if err != nil || cm.Data["answer"] != "42" {
			t.Errorf("ConfigMap %s/kept after the restore: %v %v, want answer=42", keepNS, cm.Data, err)
		}
		secret, err := tenant.CoreV1().Secrets(keepNS).Get(ctx, "kept", metav1.GetOptions{})
		if err != nil || string(secret.Data["password"]) != secretValue {
			t.Errorf("Secret %s/kept after the restore: %v, want its value back (decrypted with the kept keys)", keepNS, err)
		}
		if _, err := tenant.CoreV1().ConfigMaps(keepNS).Get(ctx, "after-snapshot", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ConfigMap %s/after-snapshot, written after the snapshot, after the restore: %v, want NotFound", keepNS, err)
		}
		checkRestoredKeysRotated(ctx, t, cs, c, key, tenant, keepNS, secretValue)
	})
	key.Name += "-restored"

	// Cleanup: the TenantCluster, then what it deliberately left.
	if err := c.Delete(ctx, &kubefarmv1.TenantCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: key.Name}}); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	waitFor(t, "the restored TenantCluster was never deleted", 2*time.Minute, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(c.Get(ctx, key, &kubefarmv1.TenantCluster{})), nil
	})
	for _, name := range []string{tc.Name + "-etcd-backup", key.Name + "-etcd-backup"} {
		_ = cs.CoreV1().PersistentVolumeClaims(ns.Name).Delete(ctx, name, metav1.DeleteOptions{})
	}
	for _, name := range []string{tc.Name + "-encryption", tc.Name + "-etcd-backup-key", key.Name + "-encryption", key.Name + "-etcd-backup-key"} {
		_ = cs.CoreV1().Secrets(ns.Name).Delete(ctx, name, metav1.DeleteOptions{})
	}
}

// checkRestoredKeysRotated: after a restore the tenant writes with a fresh
// key and the restored ones go (EncryptionKeyRotated True with one key
// that the snapshot's key file did not hold), and the restored Secret
// still reads.
func checkRestoredKeysRotated(ctx context.Context, t *testing.T, cs kubernetes.Interface, c client.Client, key client.ObjectKey,
	tenant kubernetes.Interface, keepNS, secretValue string) {
	t.Helper()
	var sec *corev1.Secret
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, time.Second, 6*time.Minute, true, func(ctx context.Context) (bool, error) {
		got := &kubefarmv1.TenantCluster{}
		if err := c.Get(ctx, key, got); err != nil {
			return false, nil
		}
		var err error
		if sec, err = cs.CoreV1().Secrets(key.Namespace).Get(ctx, key.Name+"-encryption", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionEncryptionKeyRotated)
		return cond != nil && cond.Status == metav1.ConditionTrue && len(sec.Data) == 1 &&
			sec.Annotations[kubefarmv1.AnnotationEncryptionRotation] == "", nil
	})
	if err != nil {
		t.Fatalf("the restored keys were never rotated out: %v; key Secret annotations %v", err, sec.GetAnnotations())
	}
	write := sec.Annotations[kubefarmv1.AnnotationEncryptionWriteKey]
	t.Logf("the restored keys rotated out for %s %.1fs after Ready", write, time.Since(start).Seconds())
	if _, ok := sec.Data[write]; !ok || write == "key-1" {
		t.Errorf("after the restore the tenant writes with %q of %d keys, want one fresh key", write, len(sec.Data))
	}
	s, err := tenant.CoreV1().Secrets(keepNS).Get(ctx, "kept", metav1.GetOptions{})
	if err != nil || string(s.Data["password"]) != secretValue {
		t.Errorf("Secret %s/kept after the rotation: %v, want its value", keepNS, err)
	}
}

// backupTenant is the backup scenarios' tenant: one API server, one etcd
// member on a small volume, volumes deleted with it, and backup b with a
// schedule that never fires during a test (runs are started by hand, as an
// operator would before a risky change) and two snapshots kept.
func backupTenant(t *testing.T, ns string, b kubefarmv1.EtcdBackup) *kubefarmv1.TenantCluster {
	small := resource.MustParse("1Gi")
	tc := exampleTenantCluster(t)
	tc.Namespace = ns
	tc.Spec.APIServer.Expose = kubefarmv1.APIServerExpose{Type: kubefarmv1.ExposeNodePort}
	tc.Spec.APIServer.Replicas = ptr.To[int32](1)
	tc.Spec.Etcd.Replicas = 1
	tc.Spec.Etcd.StorageSize = &small
	tc.Spec.VolumeReclaimPolicy = kubefarmv1.VolumeReclaimDelete
	b.Schedule, b.Retain = "0 0 1 1 *", ptr.To[int32](2)
	tc.Spec.Etcd.Backup = &b
	return tc
}

// waitEventFor waits for an Event of reason about the TenantCluster name.
func waitEventFor(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name, reason string) {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "TenantCluster", "involvedObject.name": name, "reason": reason}.String()
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		return err == nil && len(list.Items) > 0, nil
	}); err != nil {
		t.Errorf("no %s Event for TenantCluster %s/%s: %v", reason, ns, name, err)
	}
}

// jobFromCronJob is what `kubectl create job --from=cronjob/<name>` creates:
// the CronJob's job template, owned by the CronJob.
func jobFromCronJob(cj *batchv1.CronJob, name string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: cj.Name + "-" + name, Namespace: cj.Namespace,
			Labels:      cj.Spec.JobTemplate.Labels,
			Annotations: map[string]string{"cronjob.kubernetes.io/instantiate": "manual"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: cj.Name, UID: cj.UID,
				Controller: ptr.To(true)}},
		},
		Spec: *cj.Spec.JobTemplate.Spec.DeepCopy(),
	}
}

// backupLeftovers are the CronJobs and Jobs left in ns.
func backupLeftovers(ctx context.Context, cs kubernetes.Interface, ns string) []string {
	var left []string
	cjs, err := cs.BatchV1().CronJobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"CronJob: " + err.Error()}
	}
	for _, cj := range cjs.Items {
		left = append(left, "CronJob/"+cj.Name)
	}
	jobs, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return append(left, "Job: "+err.Error())
	}
	for _, j := range jobs.Items {
		left = append(left, "Job/"+j.Name)
	}
	return left
}

// describeBackups says what the backup pods did, for a failure message.
func describeBackups(ctx context.Context, cs kubernetes.Interface, ns string) string {
	var b strings.Builder
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "\npods: " + err.Error()
	}
	for _, p := range pods.Items {
		for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if st.Name != "snapshot" && st.Name != "restore" && st.Name != "restore-check" {
				continue
			}
			fmt.Fprintf(&b, "\n  pod %s container %s: ready=%v restarts=%d", p.Name, st.Name, st.Ready, st.RestartCount)
			if term := st.State.Terminated; term != nil {
				fmt.Fprintf(&b, " exit %d %s: %s", term.ExitCode, term.Reason, term.Message)
			}
			if w := st.State.Waiting; w != nil {
				fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
			}
		}
	}
	return b.String()
}

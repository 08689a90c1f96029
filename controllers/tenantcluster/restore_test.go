package tenantcluster_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/backupkeys"
)

// TestEtcdRestoreCheck: a TenantCluster restoring another tenant's
// snapshot gets no etcd member, and no encryption keys, before the
// restore's check passed. Without the backup key Secret (the snapshot's
// tenant's default) EtcdRestored is False BackupKeyMissing naming it and
// how to supply it, with an Event; once it exists the check Job runs
// (owned by the TenantCluster, mounting the identity alone). envtest runs
// no Job controller or kubelet, so the test plays them (named stand-ins)
// with the termination messages kubefarm-etcd restore-check writes; the
// e2e scenario TestTenantBackupRestore runs the real ones. A refusal names
// the verdict and how to supply what is missing, and holds etcd back; keys
// handed back that the backup key does not open are refused too; a check
// that passes makes the key file's keys the tenant's, at stage Restored,
// and only then is etcd created.
func TestEtcdRestoreCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	const snapshot = "old-20261124T030000Z.db"
	ns, key := restoringTenant(ctx, t, "rs", "203.0.113.31", v1alpha1.EtcdRestoreSource{ClaimName: "old-etcd-backup", Snapshot: snapshot})
	restored := func(reason string, status metav1.ConditionStatus, contains ...string) *v1alpha1.TenantCluster {
		t.Helper()
		var got *v1alpha1.TenantCluster
		poll(ctx, t, "EtcdRestored "+reason, 2*time.Minute, func(ctx context.Context) (bool, string, error) {
			var err error
			if got, err = getTC(ctx, key); err != nil {
				return false, "", err
			}
			c := condition(got, v1alpha1.ConditionEtcdRestored)
			ok := c != nil && c.Reason == reason && c.Status == status
			for _, s := range contains {
				ok = ok && strings.Contains(c.Message, s)
			}
			return ok, conditionsString(got), nil
		})
		return got
	}
	noEtcd := func(when string) {
		t.Helper()
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rs-etcd"}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: the etcd StatefulSet exists (err %v): a member would start before the check passed", when, err)
		}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rs-encryption"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: the encryption key Secret exists (err %v) before the check passed", when, err)
		}
	}

	got := restored(v1alpha1.ReasonBackupKeyMissing, metav1.ConditionFalse, "old-etcd-backup-key", "does not exist", "backupKeySecretName")
	if r := condition(got, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse || r.Reason != "EtcdRestoredFalse" ||
		!strings.Contains(r.Message, "old-etcd-backup-key") {
		t.Errorf("Ready while the restore is refused: %s", conditionsString(got))
	}
	if !hasCondition(got, v1alpha1.ConditionEtcdReady, metav1.ConditionFalse, v1alpha1.ReasonWaitingForRestore) ||
		!hasCondition(got, v1alpha1.ConditionAPIServerReady, metav1.ConditionFalse, v1alpha1.ReasonWaitingForRestore) {
		t.Errorf("etcd and the API server while the restore is refused: %s", conditionsString(got))
	}
	waitTenantEvent(ctx, t, ns, got.UID, "EtcdRestoreRefused", corev1.EventTypeWarning)
	noEtcd("without the backup key")

	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	backupKey := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "old-etcd-backup-key", Namespace: ns},
		Data: map[string][]byte{desired.BackupKeyIdentityKey: []byte(id.String()), desired.BackupKeyRecipientsKey: []byte(id.Recipient().String())}}
	if err := env.Client.Create(ctx, backupKey); err != nil {
		t.Fatal(err)
	}
	job := checkJob(ctx, t, ns, got)
	restored(v1alpha1.ReasonRestoreChecking, metav1.ConditionFalse, "rs-etcd-restore-check", snapshot)

	// Refused: the verdict and what to do are said, and etcd waits.
	finishStandIn(ctx, t, job, false, `{"snapshot":"/restore/`+snapshot+`","keys":"/restore/`+snapshot+`.keys.age","reason":"BackupKeysMissing","error":"no key file"}`)
	restored(backupkeys.ReasonKeysMissing, metav1.ConditionFalse, "no key file", "put the key file "+snapshot+".keys.age beside the snapshot on claim old-etcd-backup")
	noEtcd("after a refusal")

	// Deleting the check runs it again (kubefarm does so itself 2
	// minutes after a refusal). Keys handed back that the backup key does
	// not open are not installed.
	other, _ := age.GenerateX25519Identity()
	keys := backupkeys.Keys{Tenant: "old", SnapshotSHA256: strings.Repeat("ab", 32), TakenAt: time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC),
		Write: "key-2", Keys: map[string][]byte{"key-1": bytes.Repeat([]byte{1}, 32), "key-2": bytes.Repeat([]byte{2}, 32)}}
	job = recheck(ctx, t, job, got)
	finishStandIn(ctx, t, job, true, passedCheck(t, snapshot, keys, other.Recipient()))
	restored(v1alpha1.ReasonRestoreCheckFailed, metav1.ConditionFalse, "do not open with Secret old-etcd-backup-key")
	noEtcd("after keys sealed to another identity")

	job = recheck(ctx, t, job, got)
	finishStandIn(ctx, t, job, true, passedCheck(t, snapshot, keys, id.Recipient()))
	got = restored(v1alpha1.ReasonKeysRestored, metav1.ConditionTrue, snapshot, "rs-encryption")
	waitTenantEvent(ctx, t, ns, got.UID, "EncryptionKeysRestored", corev1.EventTypeNormal)
	sec := &corev1.Secret{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rs-encryption"}, sec); err != nil {
		t.Fatal(err)
	}
	k, err := desired.ParseEncryptionKeys(sec)
	if err != nil {
		t.Fatal(err)
	}
	if k.Write != "key-2" || len(k.Keys) != 2 || !bytes.Equal(k.Keys["key-1"], keys.Keys["key-1"]) || k.Stage != desired.RotationRestored ||
		sec.Annotations[v1alpha1.AnnotationEncryptionRestoredFrom] != snapshot || len(sec.OwnerReferences) != 0 {
		t.Errorf("key Secret: write %s, %d keys, stage %q, annotations %v, owners %v", k.Write, len(k.Keys), k.Stage, sec.Annotations, sec.OwnerReferences)
	}
	sts := &appsv1.StatefulSet{}
	poll(ctx, t, "etcd created after the check", time.Minute, func(ctx context.Context) (bool, string, error) {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rs-etcd"}, sts)
		return err == nil, fmt.Sprint(err), client.IgnoreNotFound(err)
	})
	if ini := sts.Spec.Template.Spec.InitContainers; len(ini) != 1 || !strings.Contains(strings.Join(ini[0].Args, " "), "--snapshot=/restore/"+snapshot) {
		t.Errorf("etcd's init containers %v: want the restore of %s", ini, snapshot)
	}
	cfg := &corev1.Secret{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rs-encryption-config"}, cfg); err != nil {
		t.Fatal(err)
	}
	if c := string(cfg.Data[desired.EncryptionConfigKey]); !strings.Contains(c, `"name":"key-2"`) || !strings.Contains(c, `"name":"key-1"`) {
		t.Errorf("the rendered configuration does not list both restored keys: %.300s", c)
	}
}

// TestEtcdRestoreFromS3Credentials: a restore from a bucket whose
// credentials Secret is missing is refused before any pod would wait on
// it (BackupCredentialsMissing, naming the Secret and the field); once the
// Secret exists the check Job runs with the credentials as Secret
// references in its environment and no claim.
func TestEtcdRestoreFromS3Credentials(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns, key := restoringTenant(ctx, t, "rs3", "203.0.113.32", v1alpha1.EtcdRestoreSource{Snapshot: "old-20261124T030000Z.db",
		S3: &v1alpha1.EtcdBackupS3{Endpoint: "https://s3.example.com", Bucket: "etcd-backups", CredentialsSecret: "s3-creds"}})
	id, _ := age.GenerateX25519Identity()
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "old-etcd-backup-key", Namespace: ns},
		Data: map[string][]byte{desired.BackupKeyIdentityKey: []byte(id.String())}}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "EtcdRestored BackupCredentialsMissing", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		c := condition(got, v1alpha1.ConditionEtcdRestored)
		return c != nil && c.Reason == v1alpha1.ReasonBackupCredentialsMissing && strings.Contains(c.Message, ns+"/s3-creds") &&
			strings.Contains(c.Message, "spec.etcd.restoreFrom.s3.credentialsSecret"), conditionsString(got), nil
	})
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rs3-etcd-restore-check"}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Errorf("a check Job without the credentials: %v", err)
	}
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-creds", Namespace: ns},
		Data: map[string][]byte{desired.S3AccessKeyIDKey: []byte("AKIA0"), desired.S3SecretAccessKeyKey: []byte("never-shown")}}); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{}
	poll(ctx, t, "the check Job once the credentials exist", time.Minute, func(ctx context.Context) (bool, string, error) {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rs3-etcd-restore-check"}, job)
		return err == nil, fmt.Sprint(err), client.IgnoreNotFound(err)
	})
	ctr := job.Spec.Template.Spec.Containers[0]
	if !strings.Contains(strings.Join(ctr.Args, " "), "--s3-bucket=etcd-backups --s3-prefix="+ns+"/old/") || len(ctr.Env) != 2 ||
		strings.Contains(fmt.Sprint(job.Spec), "never-shown") {
		t.Errorf("check Job args %q env %v", ctr.Args, ctr.Env)
	}
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			t.Errorf("a claim in a restore from a bucket: %+v", v)
		}
	}
}

// TestEtcdRestoreProvidedKeys: a key Secret copied by hand before the
// TenantCluster is used instead of the key file (no backup key needed),
// but not blindly: once rendered, a Job tries those keys on the snapshot
// (mounting the rendered configuration alone), and etcd waits for its
// verdict. Keys that do not read it are refused (the reason, and that the
// Secret was supplied by hand and how to fix it); keys that do are
// EtcdRestored True KeysProvided, and the Secret is kept as it was.
func TestEtcdRestoreProvidedKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const snapshot = "old-20261124T030000Z.db"
	ns := newNamespace(t)
	hand := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "rsk-encryption", Namespace: ns,
		Annotations: map[string]string{v1alpha1.AnnotationEncryptionWriteKey: "key-1"}},
		Data: map[string][]byte{"key-1": bytes.Repeat([]byte{7}, 32)}}
	if err := env.Client.Create(ctx, hand); err != nil {
		t.Fatal(err)
	}
	tc := exampleTenantCluster(t, ns)
	tc.Name, tc.Annotations = "rsk", map[string]string{"test/hand-keys": ""}
	tc.Spec.APIServer.Expose = v1alpha1.APIServerExpose{Type: v1alpha1.ExposeExternalIP, ExternalIP: "203.0.113.33", Port: 443}
	tc.Spec.Etcd.Replicas = 1
	tc.Spec.Etcd.RestoreFrom = &v1alpha1.EtcdRestoreSource{ClaimName: "old-etcd-backup", Snapshot: snapshot}
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tc)
	noEtcd := func(when string) {
		t.Helper()
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rsk-etcd"}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: the etcd StatefulSet exists (err %v)", when, err)
		}
	}
	job := checkJob(ctx, t, ns, mustTC(ctx, t, key))
	noEtcd("while the keys are checked")
	finishStandIn(ctx, t, job, false, `{"snapshot":"/restore/`+snapshot+`","keys":"/etc/kubefarm/restore-key/encryption-configuration.json",`+
		`"reason":"SnapshotKeyWrong","error":"the key key-1 does not decrypt /registry/secrets/default/precious"}`)
	poll(ctx, t, "EtcdRestored SnapshotKeyWrong", time.Minute, func(ctx context.Context) (bool, string, error) {
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		c := condition(got, v1alpha1.ConditionEtcdRestored)
		return c != nil && c.Reason == backupkeys.ReasonSnapshotKeyWrong && strings.Contains(c.Message, "rsk-encryption, supplied by hand, does not read this snapshot") &&
			strings.Contains(c.Message, "does not decrypt"), conditionsString(got), nil
	})
	noEtcd("after the keys were refused")

	job = recheck(ctx, t, job, mustTC(ctx, t, key))
	finishStandIn(ctx, t, job, true, `{"snapshot":"/restore/`+snapshot+`","write":"key-1","keyNames":["key-1"]}`)
	poll(ctx, t, "EtcdRestored True KeysProvided, then etcd", time.Minute, func(ctx context.Context) (bool, string, error) {
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		stsErr := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rsk-etcd"}, &appsv1.StatefulSet{})
		return hasCondition(got, v1alpha1.ConditionEtcdRestored, metav1.ConditionTrue, v1alpha1.ReasonKeysProvided) && stsErr == nil,
			conditionsString(got), client.IgnoreNotFound(stsErr)
	})
	waitTenantEvent(ctx, t, ns, mustTC(ctx, t, key).UID, "EncryptionKeysChecked", corev1.EventTypeNormal)

	// The pass that found the keys good also created etcd; had its status
	// write been lost (a conflict), the condition, the verdict's only
	// record, would say the check still runs. The next pass reads the
	// verdict again from the Job.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got, err := getTC(ctx, key)
		if err != nil {
			return err
		}
		meta.SetStatusCondition(&got.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionEtcdRestored, Status: metav1.ConditionFalse,
			Reason: v1alpha1.ReasonRestoreChecking, Message: "as an earlier pass left it", ObservedGeneration: got.Generation})
		return env.Client.Status().Update(ctx, got)
	}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "EtcdRestored True KeysProvided again after a lost status write", time.Minute, func(ctx context.Context) (bool, string, error) {
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		return hasCondition(got, v1alpha1.ConditionEtcdRestored, metav1.ConditionTrue, v1alpha1.ReasonKeysProvided), conditionsString(got), nil
	})
	after := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(hand), after); err != nil || !bytes.Equal(after.Data["key-1"], hand.Data["key-1"]) ||
		after.Annotations[v1alpha1.AnnotationEncryptionRestoredFrom] != "" {
		t.Errorf("the key Secret supplied by hand changed: %v %v", err, after.Annotations)
	}
}

// TestEtcdRestoreSkippedForKeptVolumes: volumes of an earlier TenantCluster
// of the name win over restoreFrom (RestoreSkipped), and so does its kept
// key Secret: no check holds etcd back, which starts on its own data.
func TestEtcdRestoreSkippedForKeptVolumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := newNamespace(t)
	kept := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "rsv-encryption", Namespace: ns,
		Annotations: map[string]string{v1alpha1.AnnotationEncryptionWriteKey: "key-3"}},
		Data: map[string][]byte{"key-3": bytes.Repeat([]byte{3}, 32)}}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-rsv-etcd-0", Namespace: ns, Labels: map[string]string{
		desired.LabelInstance: "rsv", desired.LabelName: desired.ComponentEtcd, v1alpha1.LabelTenantCluster: "rsv"}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	for _, o := range []client.Object{kept, pvc} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tc := exampleTenantCluster(t, ns)
	tc.Name = "rsv"
	tc.Spec.APIServer.Expose = v1alpha1.APIServerExpose{Type: v1alpha1.ExposeExternalIP, ExternalIP: "203.0.113.34", Port: 443}
	tc.Spec.Etcd.Replicas = 1
	tc.Spec.Etcd.RestoreFrom = &v1alpha1.EtcdRestoreSource{ClaimName: "old-etcd-backup", Snapshot: "old-20261124T030000Z.db"}
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	poll(ctx, t, "etcd on the kept volumes", time.Minute, func(ctx context.Context) (bool, string, error) {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rsv-etcd"}, sts)
		got, _ := getTC(ctx, client.ObjectKeyFromObject(tc))
		return err == nil, conditionsString(got), client.IgnoreNotFound(err)
	})
	if n := len(sts.Spec.Template.Spec.InitContainers); n != 0 {
		t.Errorf("%d init containers: the snapshot would be restored over kept volumes", n)
	}
	for _, name := range []string{"rsv-etcd-restore-check", "rsv-etcd-restore-check-keys"} {
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
			t.Errorf("Job %s for a restore that is skipped: %v", name, err)
		}
	}
	waitTenantEvent(ctx, t, ns, mustTC(ctx, t, client.ObjectKeyFromObject(tc)).UID, "RestoreSkipped", corev1.EventTypeWarning)
}

// restoringTenant creates, in a new namespace, a one-member TenantCluster
// name exposed on ip that restores from.
func restoringTenant(ctx context.Context, t *testing.T, name, ip string, from v1alpha1.EtcdRestoreSource) (string, client.ObjectKey) {
	t.Helper()
	ns := newNamespace(t)
	tc := exampleTenantCluster(t, ns)
	tc.Name = name
	tc.Spec.APIServer.Expose = v1alpha1.APIServerExpose{Type: v1alpha1.ExposeExternalIP, ExternalIP: ip, Port: 443}
	tc.Spec.Etcd.Replicas = 1
	tc.Spec.Etcd.RestoreFrom = &from
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	return ns, client.ObjectKeyFromObject(tc)
}

// checkJob waits for the restore's check Job, <tenant>-etcd-restore-check
// (or, for keys supplied by hand, <tenant>-etcd-restore-check-keys), and
// checks that it mounts one key of one Secret, the backup key (or the
// rendered configuration).
func checkJob(ctx context.Context, t *testing.T, ns string, tc *v1alpha1.TenantCluster) *batchv1.Job {
	t.Helper()
	name, secret := tc.Name+"-etcd-restore-check", "old-etcd-backup-key"
	if _, hand := tc.Annotations["test/hand-keys"]; hand {
		name, secret = name+"-keys", tc.Name+"-encryption-config"
	}
	job := &batchv1.Job{}
	poll(ctx, t, "the restore check Job", time.Minute, func(ctx context.Context) (bool, string, error) {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, job)
		return err == nil && job.DeletionTimestamp.IsZero(), fmt.Sprint(err), client.IgnoreNotFound(err)
	})
	if !metav1.IsControlledBy(job, tc) {
		t.Errorf("check Job owners %v", job.OwnerReferences)
	}
	vols := job.Spec.Template.Spec.Volumes
	for _, v := range vols {
		if v.Secret != nil && (v.Secret.SecretName != secret || len(v.Secret.Items) != 1) {
			t.Errorf("check Job mounts Secret %+v", v.Secret)
		}
	}
	return job
}

// recheck deletes a finished check, as the controller does after a while,
// and returns the one it creates again.
func recheck(ctx context.Context, t *testing.T, job *batchv1.Job, tc *v1alpha1.TenantCluster) *batchv1.Job {
	t.Helper()
	old := job.UID
	if err := env.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	// The stand-in pods are not garbage-collected without the Job
	// controller's cleanup; their names must be free for the next run.
	if err := env.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(job.Namespace),
		client.MatchingLabels{batchv1.JobNameLabel: job.Name}, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	var next *batchv1.Job
	poll(ctx, t, "the check created again", time.Minute, func(ctx context.Context) (bool, string, error) {
		next = checkJob(ctx, t, job.Namespace, tc)
		return next.UID != old, string(next.UID), nil
	})
	return next
}

// passedCheck is restore-check's line for a pair that passed, with keys
// sealed to r.
func passedCheck(t *testing.T, snapshot string, k backupkeys.Keys, r age.Recipient) string {
	t.Helper()
	var sealed bytes.Buffer
	if err := backupkeys.Seal(&sealed, k, r); err != nil {
		t.Fatal(err)
	}
	line, err := json.Marshal(map[string]any{"snapshot": "/restore/" + snapshot, "tenant": k.Tenant, "write": k.Write,
		"keyNames": k.Names(), "sealed": base64.StdEncoding.EncodeToString(sealed.Bytes())})
	if err != nil {
		t.Fatal(err)
	}
	return string(line)
}

package tenantcluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// TestEtcdBackupReported: a TenantCluster with spec.etcd.backup gets its
// claim (not owned), CronJob and backup client certificate (issued by the
// real cert-manager). envtest runs no Job controller and no kubelet, so the
// test plays both for the runs (named stand-ins: it creates the Job and its
// pod and writes their status with the termination message kubefarm-etcd
// writes); the e2e scenario TestTenantBackupRestore runs the real ones.
// A successful run is reported in status.backup and EtcdBackedUp=True with
// an Event; a later failed run turns the condition False with the tool's
// error and keeps the last snapshot; removing spec.etcd.backup deletes the
// CronJob and the certificate and keeps the claim.
func TestEtcdBackupReported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ns, key, cj := backupTenant(ctx, t, "bk", "203.0.113.9", nil)
	if cj.Spec.Schedule != "15 3 * * *" || !metav1.IsControlledBy(cj, mustTC(ctx, t, key)) {
		t.Errorf("CronJob schedule %q, owners %v", cj.Spec.Schedule, cj.OwnerReferences)
	}
	if cj.Labels[desired.LabelName] != desired.ComponentEtcdBackup || cj.Spec.JobTemplate.Labels[v1alpha1.LabelTenantCluster] != "bk" {
		t.Errorf("CronJob labels %v, job template labels %v: the runs are watched by them", cj.Labels, cj.Spec.JobTemplate.Labels)
	}
	if img := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image; img != testToolsImage {
		t.Errorf("backup image %s, want the manager's --etcd-tools-image %s", img, testToolsImage)
	}
	claim := &corev1.PersistentVolumeClaim{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bk-etcd-backup"}, claim); err != nil {
		t.Fatalf("backup claim: %v", err)
	}
	if len(claim.OwnerReferences) != 0 {
		t.Errorf("the backup claim has owners %v: garbage collection would take the snapshots with the tenant", claim.OwnerReferences)
	}
	cert := &cmapi.Certificate{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bk-etcd-backup-client"}, cert); err != nil {
		t.Fatalf("backup client certificate: %v", err)
	}
	poll(ctx, t, "EtcdBackedUp False NoSnapshotYet", time.Minute, func(ctx context.Context) (bool, string, error) {
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		return hasCondition(got, v1alpha1.ConditionEtcdBackedUp, metav1.ConditionFalse, v1alpha1.ReasonNoSnapshotYet), conditionsString(got), nil
	})

	run := func(name string, ok bool, message string) {
		t.Helper()
		standInRun(ctx, t, cj, name, ok, message)
	}

	taken := time.Date(2026, 11, 24, 3, 15, 2, 0, time.UTC)
	run("bk-etcd-backup-1", true, fmt.Sprintf(`{"file":"bk-20261124T031502Z.db","size":2129952,"revision":431,"time":%q,"kept":1,"deleted":[]}`,
		taken.Format(time.RFC3339)))
	var got *v1alpha1.TenantCluster
	poll(ctx, t, "the snapshot reported", time.Minute, func(ctx context.Context) (bool, string, error) {
		var err error
		got, err = getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		return hasCondition(got, v1alpha1.ConditionEtcdBackedUp, metav1.ConditionTrue, v1alpha1.ReasonSnapshotTaken), conditionsString(got), nil
	})
	want := v1alpha1.EtcdSnapshot{ClaimName: "bk-etcd-backup", File: "bk-20261124T031502Z.db", SizeBytes: 2129952, Revision: 431, Time: metav1.Time{Time: taken}}
	if s := got.Status.Backup.LastSnapshot; s == nil || s.ClaimName != want.ClaimName || s.File != want.File || s.SizeBytes != want.SizeBytes ||
		s.Revision != want.Revision || !s.Time.Equal(&want.Time) {
		t.Errorf("lastSnapshot = %+v, want %+v", s, want)
	}
	if c := condition(got, v1alpha1.ConditionEtcdBackedUp); !strings.Contains(c.Message, "bk-20261124T031502Z.db") {
		t.Errorf("EtcdBackedUp message %q does not name the snapshot", c.Message)
	}
	if hasCondition(got, v1alpha1.ConditionReady, metav1.ConditionFalse, "") && strings.Contains(condition(got, v1alpha1.ConditionReady).Message, "backup") {
		t.Errorf("Ready depends on the backup: %s", conditionsString(got))
	}
	waitTenantEvent(ctx, t, ns, got.UID, "EtcdSnapshotTaken", corev1.EventTypeNormal)

	run("bk-etcd-backup-2", false, `{"error":"snapshot from https://bk-etcd-0.bk-etcd:2379: verifying: hash mismatch"}`)
	poll(ctx, t, "the failed run reported", time.Minute, func(ctx context.Context) (bool, string, error) {
		var err error
		got, err = getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		return hasCondition(got, v1alpha1.ConditionEtcdBackedUp, metav1.ConditionFalse, v1alpha1.ReasonSnapshotFailed), conditionsString(got), nil
	})
	if c := condition(got, v1alpha1.ConditionEtcdBackedUp); !strings.Contains(c.Message, "hash mismatch") || !strings.Contains(c.Message, "bk-etcd-backup-2") {
		t.Errorf("EtcdBackedUp message %q does not carry the tool's error and the Job", c.Message)
	}
	if s := got.Status.Backup.LastSnapshot; s == nil || s.File != want.File || s.Job != "bk-etcd-backup-1" {
		t.Errorf("a failed run lost the last good snapshot (or its Job): %+v", s)
	}
	if got.Status.Backup.LastFailureTime == nil {
		t.Error("no lastFailureTime after a failed run")
	}
	waitTenantEvent(ctx, t, ns, got.UID, "EtcdBackupFailed", corev1.EventTypeWarning)

	// The API server refuses a claim and a bucket at once (the CRD's rule).
	both := got.DeepCopy()
	both.Spec.Etcd.Backup = &v1alpha1.EtcdBackup{Volume: v1alpha1.EtcdBackupVolume{ClaimName: "nfs"},
		S3: &v1alpha1.EtcdBackupS3{Endpoint: "https://s3.example.com", Bucket: "etcd-backups", CredentialsSecret: "s3-creds"}}
	if err := env.Client.Update(ctx, both); err == nil || !strings.Contains(err.Error(), "volume.claimName and s3 are exclusive") {
		t.Errorf("a claim and a bucket at once: %v, want the CRD's refusal", err)
	}

	// To a bucket: the CronJob stages in an emptyDir and takes the
	// credentials from the Secret; a run's object is the last snapshot.
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.Etcd.Backup = &v1alpha1.EtcdBackup{Schedule: "15 3 * * *",
		S3: &v1alpha1.EtcdBackupS3{Endpoint: "https://s3.example.com", Bucket: "etcd-backups", CredentialsSecret: "s3-creds"}}
	if err := env.Client.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	// Without the credentials Secret no run can upload: said at once.
	poll(ctx, t, "EtcdBackedUp False BackupCredentialsMissing", time.Minute, func(ctx context.Context) (bool, string, error) {
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		c := condition(got, v1alpha1.ConditionEtcdBackedUp)
		return hasCondition(got, v1alpha1.ConditionEtcdBackedUp, metav1.ConditionFalse, v1alpha1.ReasonBackupCredentialsMissing) &&
			strings.Contains(c.Message, ns+"/s3-creds") && strings.Contains(c.Message, "does not exist"), conditionsString(got), nil
	})
	waitTenantEvent(ctx, t, ns, got.UID, "EtcdBackupCredentialsMissing", corev1.EventTypeWarning)
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-creds", Namespace: ns}, Data: map[string][]byte{"accessKeyID": []byte("AKIA0")}}
	if err := env.Client.Create(ctx, creds); err != nil {
		t.Fatal(err)
	}
	// The Secret's events start a pass of the tenants that name it.
	poll(ctx, t, "the missing key named", 30*time.Second, func(ctx context.Context) (bool, string, error) {
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		c := condition(got, v1alpha1.ConditionEtcdBackedUp)
		return c != nil && c.Reason == v1alpha1.ReasonBackupCredentialsMissing && strings.Contains(c.Message, "has no key secretAccessKey"), conditionsString(got), nil
	})
	creds.Data["secretAccessKey"] = []byte("never-shown")
	if err := env.Client.Update(ctx, creds); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "the CronJob of the S3 target", 30*time.Second, func(ctx context.Context) (bool, string, error) {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bk-etcd-backup"}, cj)
		ctr := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
		return err == nil && slices.Contains(ctr.Args, "--s3-bucket=etcd-backups") && len(ctr.Env) == 2, strings.Join(ctr.Args, " "), err
	})
	takenS3 := taken.Add(24 * time.Hour)
	run("bk-etcd-backup-3", true, fmt.Sprintf(`{"file":"bk-20261125T031502Z.db","size":2130000,"revision":500,"time":%q,"kept":2,"deleted":[],`+
		`"bucket":"etcd-backups","object":"%s/bk/bk-20261125T031502Z.db"}`, takenS3.Format(time.RFC3339), ns))
	poll(ctx, t, "the S3 snapshot reported", 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		var err error
		got, err = getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		s := got.Status.Backup.LastSnapshot
		return s != nil && s.Job == "bk-etcd-backup-3" && hasCondition(got, v1alpha1.ConditionEtcdBackedUp, metav1.ConditionTrue, v1alpha1.ReasonSnapshotTaken),
			conditionsString(got), nil
	})
	if s := got.Status.Backup.LastSnapshot; s.Bucket != "etcd-backups" || s.Object != ns+"/bk/bk-20261125T031502Z.db" || s.ClaimName != "" || s.Revision != 500 {
		t.Errorf("lastSnapshot of the S3 run = %+v", s)
	}
	if c := condition(got, v1alpha1.ConditionEtcdBackedUp); !strings.Contains(c.Message, "in s3://etcd-backups/"+ns+"/bk/bk-20261125T031502Z.db") {
		t.Errorf("EtcdBackedUp message %q does not say where in S3", c.Message)
	}

	// Backups off: the CronJob and the certificate go, the claim stays.
	patch = client.MergeFrom(got.DeepCopy())
	got.Spec.Etcd.Backup = nil
	if err := env.Client.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "the backup removed", time.Minute, func(ctx context.Context) (bool, string, error) {
		cjErr := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bk-etcd-backup"}, &batchv1.CronJob{})
		c := &cmapi.Certificate{}
		certErr := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bk-etcd-backup-client"}, c)
		gone := apierrors.IsNotFound(cjErr) && (apierrors.IsNotFound(certErr) || !c.DeletionTimestamp.IsZero())
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		return gone && condition(got, v1alpha1.ConditionEtcdBackedUp) == nil, fmt.Sprintf("CronJob %v, Certificate %v; %s", cjErr, certErr, conditionsString(got)), nil
	})
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bk-etcd-backup"}, claim); err != nil || !claim.DeletionTimestamp.IsZero() {
		t.Errorf("the backup claim went with the backup (err %v)", err)
	}
}

// TestEtcdBackupKey: with spec.etcd.backup.keys empty kubefarm creates the
// backup key Secret <tenant>-etcd-backup-key once, with a fresh X25519
// identity and its recipient, unowned; later passes leave it alone, and it
// survives the TenantCluster's deletion (volumeReclaimPolicy Delete). The
// CronJob seals each key file to its recipients alone. A run's key file is
// reported in status.backup.lastSnapshot.keysFile. An operator's Secret
// that is missing, or whose recipients are not age recipients, turns
// EtcdBackedUp False BackupKeyMissing naming the Secret and the field
// (never a value), and fixing it recovers the condition.
func TestEtcdBackupKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ns, key, cj := backupTenant(ctx, t, "bkk", "203.0.113.10", func(tc *v1alpha1.TenantCluster) {
		tc.Spec.VolumeReclaimPolicy = v1alpha1.VolumeReclaimDelete
	})
	checkKeyWiring(t, cj, "bkk-etcd-backup-key")

	// The default Secret: there before the CronJob, a parseable identity
	// and its recipient, no owner.
	secret := &corev1.Secret{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bkk-etcd-backup-key"}, secret); err != nil {
		t.Fatalf("the default backup key Secret: %v", err)
	}
	id, err := age.ParseX25519Identity(string(secret.Data[desired.BackupKeyIdentityKey]))
	if err != nil {
		t.Fatalf("the default backup key's identity does not parse: %v", err)
	}
	if got := string(secret.Data[desired.BackupKeyRecipientsKey]); got != id.Recipient().String()+"\n" {
		t.Errorf("recipients %q, want the identity's recipient", got)
	}
	if len(secret.OwnerReferences) != 0 {
		t.Errorf("the backup key Secret has owners %v: garbage collection would take the only key to the snapshots' keys", secret.OwnerReferences)
	}
	waitTenantEvent(ctx, t, ns, mustTC(ctx, t, key).UID, "EtcdBackupKeyCreated", corev1.EventTypeNormal)

	// A later pass (it applies the new schedule) does not touch it.
	got := mustTC(ctx, t, key)
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.Etcd.Backup.Schedule = "45 3 * * *"
	if err := env.Client.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "the new schedule applied", time.Minute, func(ctx context.Context) (bool, string, error) {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bkk-etcd-backup"}, cj)
		return err == nil && cj.Spec.Schedule == "45 3 * * *", cj.Spec.Schedule, err
	})
	again := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(secret), again); err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != secret.ResourceVersion || again.UID != secret.UID ||
		string(again.Data[desired.BackupKeyIdentityKey]) != id.String() {
		t.Error("a later pass changed the backup key Secret")
	}

	// A run's key file is reported with its snapshot.
	taken := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	standInRun(ctx, t, cj, "bkk-etcd-backup-1", true, fmt.Sprintf(`{"file":"bkk-20261128T120000Z.db","size":2129952,"revision":77,`+
		`"time":%q,"keys":"bkk-20261128T120000Z.db.keys.age","kept":1,"deleted":[]}`, taken.Format(time.RFC3339)))
	poll(ctx, t, "the snapshot and its key file reported", time.Minute, func(ctx context.Context) (bool, string, error) {
		var err error
		if got, err = getTC(ctx, key); err != nil {
			return false, "", err
		}
		return hasCondition(got, v1alpha1.ConditionEtcdBackedUp, metav1.ConditionTrue, v1alpha1.ReasonSnapshotTaken), conditionsString(got), nil
	})
	if s := got.Status.Backup.LastSnapshot; s == nil || s.File != "bkk-20261128T120000Z.db" || s.KeysFile != "bkk-20261128T120000Z.db.keys.age" {
		t.Errorf("lastSnapshot = %+v, want the key file bkk-20261128T120000Z.db.keys.age", s)
	}
	if c := condition(got, v1alpha1.ConditionEtcdBackedUp); !strings.Contains(c.Message, "with its key file bkk-20261128T120000Z.db.keys.age") {
		t.Errorf("EtcdBackedUp message %q does not name the key file", c.Message)
	}

	// The operator's Secret, missing: said at once, naming it and the field.
	patch = client.MergeFrom(got.DeepCopy())
	got.Spec.Etcd.Backup.Keys.SecretName = "ops-backup-key"
	if err := env.Client.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	waitBackupKeyMissing(ctx, t, key, ns+"/ops-backup-key", "does not exist")
	waitTenantEvent(ctx, t, ns, got.UID, "EtcdBackupKeyMissing", corev1.EventTypeWarning)
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bkk-etcd-backup"}, cj); err != nil {
		t.Fatal(err)
	}
	checkKeyWiring(t, cj, "ops-backup-key")
	// An identity where a recipient belongs: named by line, never shown.
	other, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	ops := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ops-backup-key", Namespace: ns},
		Data: map[string][]byte{desired.BackupKeyRecipientsKey: []byte("# ops\n" + other.String() + "\n")}}
	if err := env.Client.Create(ctx, ops); err != nil {
		t.Fatal(err)
	}
	msg := waitBackupKeyMissing(ctx, t, key, ns+"/ops-backup-key", "line 2 is not an age recipient")
	if strings.Contains(msg, "AGE-SECRET-KEY") {
		t.Errorf("EtcdBackedUp message %q carries the pasted identity", msg)
	}
	ops.Data[desired.BackupKeyRecipientsKey] = []byte("# ops\n" + other.Recipient().String() + "\n")
	if err := env.Client.Update(ctx, ops); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "EtcdBackedUp recovered", 30*time.Second, func(ctx context.Context) (bool, string, error) {
		var err error
		if got, err = getTC(ctx, key); err != nil {
			return false, "", err
		}
		c := condition(got, v1alpha1.ConditionEtcdBackedUp)
		return c != nil && c.Reason != v1alpha1.ReasonBackupKeyMissing, conditionsString(got), nil
	})
	if !hasCondition(got, v1alpha1.ConditionEtcdBackedUp, metav1.ConditionTrue, v1alpha1.ReasonSnapshotTaken) {
		t.Errorf("after the fix EtcdBackedUp is %s, want the last run reported again", conditionsString(got))
	}

	// Deleted with volumeReclaimPolicy Delete: the default Secret stays.
	if err := env.Client.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "TenantCluster gone", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		_, err := getTC(ctx, key)
		return apierrors.IsNotFound(err), fmt.Sprint(err), client.IgnoreNotFound(err)
	})
	after := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(secret), after); err != nil || !after.DeletionTimestamp.IsZero() {
		t.Fatalf("the backup key Secret went with the TenantCluster (err %v)", err)
	}
	if after.UID != secret.UID || string(after.Data[desired.BackupKeyIdentityKey]) != id.String() {
		t.Error("the backup key Secret was replaced")
	}
}

// checkKeyWiring checks the CronJob's key file flags and that it mounts
// the backup key Secret keySecret's recipients alone.
func checkKeyWiring(t *testing.T, cj *batchv1.CronJob, keySecret string) {
	t.Helper()
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	args := pod.Containers[0].Args
	for _, want := range []string{"--keys-config=/etc/kubefarm/backup-keys/config/encryption-configuration.json",
		"--keys-recipients=/etc/kubefarm/backup-keys/recipients/recipients"} {
		if !slices.Contains(args, want) {
			t.Errorf("CronJob args %q lack %s", args, want)
		}
	}
	found := false
	for _, v := range pod.Volumes {
		if v.Secret == nil || v.Secret.SecretName != keySecret {
			continue
		}
		found = true
		if len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != desired.BackupKeyRecipientsKey {
			t.Errorf("the backup key Secret is mounted with %+v, want its recipients alone", v.Secret.Items)
		}
	}
	if !found {
		t.Errorf("no volume of the backup key Secret %s", keySecret)
	}
}

// waitBackupKeyMissing waits for EtcdBackedUp False BackupKeyMissing with
// a message naming secret, the field and what; it returns the message.
func waitBackupKeyMissing(ctx context.Context, t *testing.T, key types.NamespacedName, secret, what string) string {
	t.Helper()
	var msg string
	poll(ctx, t, "EtcdBackedUp False BackupKeyMissing: "+what, time.Minute, func(ctx context.Context) (bool, string, error) {
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		c := condition(got, v1alpha1.ConditionEtcdBackedUp)
		if c == nil {
			return false, conditionsString(got), nil
		}
		msg = c.Message
		named := strings.Contains(msg, secret) && strings.Contains(msg, "spec.etcd.backup.keys.secretName") && strings.Contains(msg, what)
		return named && hasCondition(got, v1alpha1.ConditionEtcdBackedUp, metav1.ConditionFalse, v1alpha1.ReasonBackupKeyMissing),
			conditionsString(got), nil
	})
	return msg
}

// standInRun stands in for the CronJob controller, the Job controller and
// the kubelet: one finished run of cj named name, with its pod's
// termination message.
func standInRun(ctx context.Context, t *testing.T, cj *batchv1.CronJob, name string, ok bool, message string) {
	t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cj.Namespace, Labels: cj.Spec.JobTemplate.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: cj.Name, UID: cj.UID, Controller: ptrTo(true)}}},
		Spec: *cj.Spec.JobTemplate.Spec.DeepCopy(),
	}
	// envtest's API server requires what the Job controller's
	// defaulting would add.
	job.Spec.Template.Labels = map[string]string{"batch.kubernetes.io/controller-uid": "x", "batch.kubernetes.io/job-name": name}
	for k, v := range cj.Spec.JobTemplate.Spec.Template.Labels {
		job.Spec.Template.Labels[k] = v
	}
	job.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"batch.kubernetes.io/controller-uid": "x"}}
	job.Spec.ManualSelector = ptrTo(true)
	if err := env.Client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	finishStandIn(ctx, t, job, ok, message)
}

// finishStandIn plays the kubelet and the Job controller for job: one pod
// that ended with message as its termination message, and the Job's
// status.
func finishStandIn(ctx context.Context, t *testing.T, job *batchv1.Job, ok bool, message string) {
	t.Helper()
	name := job.Name
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-abcde", Namespace: job.Namespace, Labels: job.Spec.Template.Labels},
		Spec:       *job.Spec.Template.Spec.DeepCopy(),
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	phase, code := corev1.PodSucceeded, int32(0)
	if !ok {
		phase, code = corev1.PodFailed, 1
	}
	pod.Status = corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{Name: "snapshot", Image: testToolsImage,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: message, FinishedAt: now, StartedAt: now}}}}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	cond := batchv1.JobComplete
	job.Status = batchv1.JobStatus{StartTime: &now, Succeeded: 1}
	if !ok {
		cond = batchv1.JobFailed
		job.Status = batchv1.JobStatus{StartTime: &now, Failed: 1}
		job.Status.Conditions = append(job.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue,
			Reason: "BackoffLimitExceeded", LastTransitionTime: now})
	} else {
		job.Status.CompletionTime = &now
		job.Status.Conditions = append(job.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue,
			Reason: "CompletionsReached", LastTransitionTime: now})
	}
	job.Status.Conditions = append(job.Status.Conditions, batchv1.JobCondition{Type: cond, Status: corev1.ConditionTrue, Reason: "Stand-in",
		LastTransitionTime: now})
	if err := env.Client.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
}

func mustTC(ctx context.Context, t *testing.T, key types.NamespacedName) *v1alpha1.TenantCluster {
	t.Helper()
	tc, err := getTC(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

func condition(tc *v1alpha1.TenantCluster, typ string) *metav1.Condition {
	for i := range tc.Status.Conditions {
		if tc.Status.Conditions[i].Type == typ {
			return &tc.Status.Conditions[i]
		}
	}
	return nil
}

// waitTenantEvent waits for an Event of reason about the object uid.
func waitTenantEvent(ctx context.Context, t *testing.T, ns string, uid types.UID, reason, typ string) {
	t.Helper()
	poll(ctx, t, "Event "+reason, time.Minute, func(ctx context.Context) (bool, string, error) {
		events := &eventsv1.EventList{}
		if err := env.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		return slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool {
			return e.Regarding.UID == uid && e.Reason == reason && e.Type == typ
		}), fmt.Sprintf("%d events", len(events.Items)), nil
	})
}

// backupTenant creates, in a new namespace, a one-member TenantCluster name
// exposed on ip with daily backups (changed by mutate, if given) and waits
// for its backup CronJob.
func backupTenant(ctx context.Context, t *testing.T, name, ip string, mutate func(*v1alpha1.TenantCluster)) (string, client.ObjectKey, *batchv1.CronJob) {
	t.Helper()
	ns := newNamespace(t)
	tc := exampleTenantCluster(t, ns)
	tc.Name = name
	tc.Spec.APIServer.Expose = v1alpha1.APIServerExpose{Type: v1alpha1.ExposeExternalIP, ExternalIP: ip, Port: 443}
	tc.Spec.Etcd.Replicas = 1
	tc.Spec.Etcd.Backup = &v1alpha1.EtcdBackup{Schedule: "15 3 * * *"}
	if mutate != nil {
		mutate(tc)
	}
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tc)
	cj := &batchv1.CronJob{}
	poll(ctx, t, "the backup CronJob", 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-etcd-backup"}, cj)
		got, _ := getTC(ctx, key)
		return err == nil, conditionsString(got), client.IgnoreNotFound(err)
	})
	return ns, key, cj
}

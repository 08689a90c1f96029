package tenantcluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"filippo.io/age"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/backupkeys"
	"github.com/kubefarm/kubefarm/internal/conditions"
)

// The restore's check (spec.etcd.restoreFrom; desired/restore.go): before
// the tenant's encryption keys exist, and so before any etcd member or API
// server, a Job checks the snapshot and its key file; the keys it hands
// back become the key Secret, from which everything else follows as for
// any tenant. A refusal stops the pass with EtcdRestored False, naming
// what is missing and how to supply it.

// restoreRecheck is how long a refused check's Job is kept (its pod's
// log is the detail) before it is deleted and the files read again: an
// operator who fixes them sees the tenant go on without touching it.
const restoreRecheck = 2 * time.Minute

// restoreCheckResult is what the controller reads of the JSON line
// kubefarm-etcd restore-check writes to its termination message
// (etcdsnapshot.CheckResult): the verdict and the resealed keys.
type restoreCheckResult struct {
	Reason string `json:"reason"`
	Error  string `json:"error"`
	Sealed string `json:"sealed"`
}

// reconcileRestore runs the restore's check and installs the keys it
// returns. It does nothing without restoreFrom, once the key Secret exists
// (installed by an earlier pass, or copied by hand), or once etcd exists.
func (r *Reconciler) reconcileRestore(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.cluster
	if c.RestoreFrom == nil {
		return ctrl.Result{}, nil
	}
	if done := meta.FindStatusCondition(s.tc.Status.Conditions, v1alpha1.ConditionEtcdRestored); done != nil && done.Status == metav1.ConditionTrue {
		// restoreFrom stays in the spec for good: once the keys were in
		// place, later passes read nothing for it.
		s.observe(r, *done)
		return ctrl.Result{}, nil
	}
	keys := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.EncryptionKeySecretName()}, keys)
	switch {
	case err == nil && keys.Annotations[v1alpha1.AnnotationEncryptionRestoredFrom] != "":
		s.observe(r, restoredCondition(keys))
		return ctrl.Result{}, nil
	case err == nil:
		return ctrl.Result{}, nil // supplied by hand: checked once rendered (reconcileProvidedKeys)
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	}
	if pending, err := r.restorePending(ctx, s); err != nil || !pending {
		return ctrl.Result{}, err
	}
	ids, why := r.restoreIdentities(ctx, c)
	if why != "" {
		return r.refuseRestore(s, v1alpha1.ReasonBackupKeyMissing, why, nil), nil
	}
	run, res, err := r.restoreCheckRun(ctx, s, desired.EtcdRestoreCheckJob(c),
		fmt.Sprintf("its key file with the backup key in Secret %s", c.RestoreKeySecret))
	if err != nil || run == nil {
		return res, err
	}
	sealed, reason, why := r.restoreVerdict(ctx, run, true)
	if reason != "" {
		return r.refuseRestore(s, reason, why, run), r.recheckRestore(ctx, run)
	}
	opened, err := backupkeys.Open(bytes.NewReader(sealed), ids...)
	if err != nil {
		return r.refuseRestore(s, v1alpha1.ReasonRestoreCheckFailed,
			fmt.Sprintf("the keys Job %s handed back do not open with Secret %s: %v", run.job.Name, c.RestoreKeySecret, err), run), nil
	}
	return r.installRestoredKeys(ctx, s, opened)
}

// reconcileProvidedKeys checks a restore's snapshot against a key Secret
// supplied by hand (copied before the TenantCluster, no key file read):
// once reconcileEncryption rendered it, a Job tries those keys on the
// snapshot, and etcd waits for its verdict like for a key file's, so keys
// that cannot read the snapshot are named before an API server fails on
// them.
func (r *Reconciler) reconcileProvidedKeys(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.cluster
	if c.RestoreFrom == nil || s.encryptionSecret == nil || s.encryptionSecret.Annotations[v1alpha1.AnnotationEncryptionRestoredFrom] != "" ||
		meta.IsStatusConditionTrue(s.tc.Status.Conditions, v1alpha1.ConditionEtcdRestored) {
		return ctrl.Result{}, nil
	}
	pending, err := r.restorePending(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !pending {
		// etcd exists, so a pass found the keys good and went on; its
		// status write can still have been lost (a conflict), and the
		// condition is the verdict's only record: the Job says it again.
		return ctrl.Result{}, r.providedKeysPassed(ctx, s)
	}
	run, res, err := r.restoreCheckRun(ctx, s, desired.EtcdRestoreKeysCheckJob(c),
		fmt.Sprintf("the keys of %s, supplied by hand", c.EncryptionKeySecretName()))
	if err != nil || run == nil {
		return res, err
	}
	if _, reason, why := r.restoreVerdict(ctx, run, false); reason != "" {
		return r.refuseRestore(s, reason, why, run), r.recheckRestore(ctx, run)
	}
	msg := providedKeysMessage(c, run)
	r.Recorder.Eventf(s.tc, run.job, corev1.EventTypeNormal, "EncryptionKeysChecked", "Restore", "%s", msg)
	s.observe(r, conditions.New(v1alpha1.ConditionEtcdRestored, true, v1alpha1.ReasonKeysProvided, msg))
	return ctrl.Result{}, nil
}

// providedKeysPassed observes EtcdRestored True KeysProvided once etcd
// exists when the check Job of the keys supplied by hand passed; with no
// such Job (the restore was skipped for kept volumes), or one that did not
// pass, it observes nothing.
func (r *Reconciler) providedKeysPassed(ctx context.Context, s *scope) error {
	c := s.cluster
	job := &batchv1.Job{}
	found, err := r.getLive(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.EtcdRestoreKeysCheckName()}, job)
	if err != nil || !found {
		return err
	}
	run := newestFinishedRun([]batchv1.Job{*job}, false)
	if run == nil {
		return nil
	}
	if _, reason, _ := r.restoreVerdict(ctx, run, false); reason != "" {
		return nil
	}
	s.observe(r, conditions.New(v1alpha1.ConditionEtcdRestored, true, v1alpha1.ReasonKeysProvided, providedKeysMessage(c, run)))
	return nil
}

func providedKeysMessage(c *desired.Cluster, run *backupRun) string {
	return fmt.Sprintf("the key Secret %s, supplied by hand, decrypts snapshot %s (Job %s); the key file was not read",
		c.EncryptionKeySecretName(), c.RestoreFrom.Snapshot, run.job.Name)
}

// restorePending says a restore is still ahead: no etcd StatefulSet and
// no members' volumes yet (those of an earlier TenantCluster of the name
// win over the snapshot, reconcileEtcd's RestoreSkipped). Once etcd
// exists, keys are not a restore's to check or install.
func (r *Reconciler) restorePending(ctx context.Context, s *scope) (bool, error) {
	c := s.cluster
	found, err := r.getLive(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.EtcdServiceName()}, &appsv1.StatefulSet{})
	if err != nil || found {
		return false, err
	}
	volumes, err := r.etcdVolumes(ctx, s.tc)
	return len(volumes) == 0, err
}

// restoreCheckRun makes sure the check Job want exists and returns its
// finished run; nil while it runs (reported as RestoreChecking, checking
// what), or when a restore from a bucket lacks its credentials (refused:
// without them the check's pod, and every member's, would wait in
// CreateContainerConfigError, saying so nowhere).
func (r *Reconciler) restoreCheckRun(ctx context.Context, s *scope, want *batchv1.Job, what string) (*backupRun, ctrl.Result, error) {
	c := s.cluster
	if c.RestoreS3 != nil {
		why, err := r.missingS3Credentials(ctx, c.Namespace, c.RestoreS3.CredentialsSecret, "spec.etcd.restoreFrom.s3.credentialsSecret")
		if err != nil || why != "" {
			return nil, r.refuseRestore(s, v1alpha1.ReasonBackupCredentialsMissing, why, nil), err
		}
	}
	job := &batchv1.Job{}
	if found, err := r.getLive(ctx, client.ObjectKeyFromObject(want), job); err != nil {
		return nil, ctrl.Result{}, err
	} else if !found {
		if err := r.apply(ctx, s.tc, want, job); err != nil {
			return nil, ctrl.Result{}, err
		}
	}
	run := newestFinishedRun([]batchv1.Job{*job}, false)
	if run == nil {
		s.observe(r, notReady(v1alpha1.ConditionEtcdRestored, v1alpha1.ReasonRestoreChecking,
			fmt.Sprintf("Job %s checks snapshot %s %s and %s", job.Name, c.RestoreFrom.Snapshot, restoreSourceName(c), what)))
		waitForRestore(r, s)
	}
	return run, ctrl.Result{}, nil
}

// restoreVerdict reads a finished check: the sealed keys it handed back,
// or the reason and message of its refusal.
func (r *Reconciler) restoreVerdict(ctx context.Context, run *backupRun, wantKeys bool) (sealed []byte, reason, why string) {
	msg, failure, err := r.runMessage(ctx, run)
	switch {
	case err != nil:
		return nil, v1alpha1.ReasonRestoreCheckFailed, err.Error()
	case failure != "":
		return nil, v1alpha1.ReasonRestoreCheckFailed, "Job " + run.job.Name + " failed: " + failure
	}
	return parseRestoreVerdict(run.job.Name, run.ok, msg, wantKeys)
}

// parseRestoreVerdict reads the termination message of a check Job's pod
// (ok: the Job completed; wantKeys: a key file's check, which hands the
// keys back). A reason is taken only if it looks like one, and the
// messages are cut: the pod's output is input like any other.
func parseRestoreVerdict(job string, ok bool, msg string, wantKeys bool) (sealed []byte, reason, why string) {
	var res restoreCheckResult
	if len(msg) > maxResultMessage || json.Unmarshal([]byte(strings.TrimSpace(msg)), &res) != nil {
		return nil, v1alpha1.ReasonRestoreCheckFailed, "Job " + job + " left no verdict: " + truncate(msg, 500)
	}
	if res.Reason != "" || res.Error != "" || !ok {
		reason = res.Reason
		if !conditionReason(reason) {
			reason = v1alpha1.ReasonRestoreCheckFailed
		}
		why = truncate(res.Error, 1000)
		if why == "" {
			why = "Job " + job + " failed"
		}
		return nil, reason, why
	}
	if !wantKeys {
		return nil, "", ""
	}
	sealed, err := base64.StdEncoding.DecodeString(res.Sealed)
	if err != nil || len(sealed) == 0 {
		return nil, v1alpha1.ReasonRestoreCheckFailed, "Job " + job + " passed the snapshot but handed back no keys"
	}
	return sealed, "", ""
}

// conditionReason accepts what a condition's reason may be (CamelCase
// letters), so a verdict from a pod cannot write anything else there.
func conditionReason(s string) bool {
	if len(s) > 64 || s == "" || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// restoreIdentities reads the backup key's identity; why says what is
// missing, naming the Secret and how to supply it.
func (r *Reconciler) restoreIdentities(ctx context.Context, c *desired.Cluster) ([]age.Identity, string) {
	sec := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.RestoreKeySecret}, sec)
	how := fmt.Sprintf("create it from the copy kept off the cluster (kubectl -n %s create secret generic %s --from-file=%s=<file>), or name another in spec.etcd.restoreFrom.backupKeySecretName",
		c.Namespace, c.RestoreKeySecret, desired.BackupKeyIdentityKey)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Sprintf("Secret %s, the backup key that opens the snapshot's key file, does not exist: %s", c.RestoreKeySecret, how)
	case err != nil:
		return nil, fmt.Sprintf("reading Secret %s: %v", c.RestoreKeySecret, err)
	}
	raw := sec.Data[desired.BackupKeyIdentityKey]
	if len(raw) == 0 || len(raw) > backupkeys.MaxRecipientsFile {
		return nil, fmt.Sprintf("Secret %s has no key %q with the backup key's identity: %s", c.RestoreKeySecret, desired.BackupKeyIdentityKey, how)
	}
	ids, err := age.ParseIdentities(bytes.NewReader(raw))
	if err != nil {
		// age's error may quote the line: never repeated.
		return nil, fmt.Sprintf("Secret %s key %q holds no age identity (AGE-SECRET-KEY-1...): %s", c.RestoreKeySecret, desired.BackupKeyIdentityKey, how)
	}
	return ids, ""
}

// refuseRestore reports a refusal (an Event when it is new) and stops the
// pass: no member may start on a snapshot that cannot be read.
func (r *Reconciler) refuseRestore(s *scope, reason, why string, run *backupRun) ctrl.Result {
	msg := why
	handKeys := run != nil && run.job.Name == s.cluster.EtcdRestoreKeysCheckName()
	if hint := restoreHint(s.cluster, reason, handKeys); hint != "" {
		msg += "; " + hint
	}
	prev := meta.FindStatusCondition(s.tc.Status.Conditions, v1alpha1.ConditionEtcdRestored)
	if prev == nil || prev.Reason != reason || prev.Message != msg {
		var regarding runtime.Object // an untyped nil: a nil *Job is no reference
		if run != nil {
			regarding = run.job
		}
		r.Recorder.Eventf(s.tc, regarding, corev1.EventTypeWarning, "EtcdRestoreRefused", "Restore", "%s: %s", reason, msg)
	}
	s.observe(r, notReady(v1alpha1.ConditionEtcdRestored, reason, msg))
	waitForRestore(r, s)
	if run == nil {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: max(time.Until(run.finished.Add(restoreRecheck)), time.Second)}
}

// waitForRestore ends the pass before etcd, and says so in the conditions
// of what was never deployed.
func waitForRestore(r *Reconciler, s *scope) {
	const waiting = "waiting for the restore's check (EtcdRestored)"
	s.observe(r, notReady(v1alpha1.ConditionEtcdReady, v1alpha1.ReasonWaitingForRestore, waiting))
	s.observe(r, notReady(v1alpha1.ConditionAPIServerReady, v1alpha1.ReasonWaitingForRestore, waiting))
	s.waitingFor = waitingForRestore
}

// restoreHint says how to supply what a refusal found missing; handKeys:
// the check was of a key Secret supplied by hand.
func restoreHint(c *desired.Cluster, reason string, handKeys bool) string {
	keyFile := c.RestoreFrom.Snapshot + backupkeys.FileSuffix
	switch {
	case handKeys && reason != v1alpha1.ReasonSnapshotMissing && reason != v1alpha1.ReasonSnapshotDamaged && reason != v1alpha1.ReasonRestoreCheckFailed:
		return fmt.Sprintf("the key Secret %s, supplied by hand, does not read this snapshot: replace it with the old tenant's key Secret (with its annotations), or delete it to have the key file %s read with the backup key",
			c.EncryptionKeySecretName(), keyFile)
	}
	switch reason {
	case backupkeys.ReasonKeysMissing:
		return fmt.Sprintf("put the key file %s beside the snapshot %s, or copy the old tenant's key Secret to %s with its annotations (docs/encryption.md)",
			keyFile, restoreSourceName(c), c.EncryptionKeySecretName())
	case backupkeys.ReasonBackupKeyWrong:
		return fmt.Sprintf("Secret %s does not hold the backup key %s was sealed to: name the right one in spec.etcd.restoreFrom.backupKeySecretName", c.RestoreKeySecret, keyFile)
	case backupkeys.ReasonKeysDamaged, backupkeys.ReasonKeysForAnotherSnapshot, backupkeys.ReasonSnapshotKeyUnknown, backupkeys.ReasonSnapshotKeyWrong:
		return fmt.Sprintf("%s cannot read this snapshot: restore an older snapshot, or copy the old tenant's key Secret to %s with its annotations", keyFile, c.EncryptionKeySecretName())
	case v1alpha1.ReasonSnapshotMissing, v1alpha1.ReasonSnapshotDamaged:
		return fmt.Sprintf("restore another snapshot %s (status.backup.lastSnapshot of the old tenant named the newest)", restoreSourceName(c))
	case v1alpha1.ReasonBackupCredentialsMissing:
		return fmt.Sprintf("create it with the keys %s and %s of a user that may read the bucket", desired.S3AccessKeyIDKey, desired.S3SecretAccessKeyKey)
	}
	return "the check runs again " + restoreRecheck.String() + " after it finished"
}

// restoreSourceName says where the snapshot is, for messages: "on claim
// <name>" or "in s3://<bucket>/<prefix>".
func restoreSourceName(c *desired.Cluster) string {
	if s3 := c.RestoreS3; s3 != nil {
		return "in s3://" + s3.Bucket + "/" + s3.Prefix
	}
	return "on claim " + c.RestoreFrom.ClaimName
}

// recheckRestore deletes a refused check once restoreRecheck has passed,
// so that the next pass reads the files again.
func (r *Reconciler) recheckRestore(ctx context.Context, run *backupRun) error {
	if time.Since(run.finished) < restoreRecheck {
		return nil
	}
	err := r.Client.Delete(ctx, run.job, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// installRestoredKeys creates the tenant's key Secret from the key file's
// keys; reconcileEncryption renders it like any other.
func (r *Reconciler) installRestoredKeys(ctx context.Context, s *scope, k backupkeys.Keys) (ctrl.Result, error) {
	c := s.cluster
	secret, err := desired.NewRestoredEncryptionKeySecret(c, k.Keys, k.Write, c.RestoreFrom.Snapshot, s.tc.Annotations[v1alpha1.AnnotationRotateEncryptionKey])
	if err != nil {
		return r.refuseRestore(s, backupkeys.ReasonKeysDamaged, err.Error(), nil), nil
	}
	if err := r.Client.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, fmt.Errorf("creating the encryption key Secret from snapshot %s: %w", c.RestoreFrom.Snapshot, err)
	}
	r.Recorder.Eventf(s.tc, nil, corev1.EventTypeNormal, "EncryptionKeysRestored", "Restore",
		"snapshot %s of %s and its key file passed the check; its keys %s (write key %s) are the encryption keys in %s until a fresh key replaces them",
		c.RestoreFrom.Snapshot, k.Tenant, strings.Join(k.Names(), ", "), k.Write, secret.Name)
	s.observe(r, restoredCondition(secret))
	return ctrl.Result{}, nil
}

// restoredCondition is EtcdRestored once the key file's keys are the key
// Secret (its restored-from annotation names the snapshot).
func restoredCondition(keys *corev1.Secret) metav1.Condition {
	return conditions.New(v1alpha1.ConditionEtcdRestored, true, v1alpha1.ReasonKeysRestored,
		fmt.Sprintf("snapshot %s and its key file passed the check; its keys are in %s, and a fresh key replaces them once the API servers run",
			keys.Annotations[v1alpha1.AnnotationEncryptionRestoredFrom], keys.Name))
}

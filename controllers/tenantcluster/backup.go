package tenantcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"filippo.io/age"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/backupkeys"
	"github.com/kubefarm/kubefarm/internal/conditions"
)

// reconcileBackup applies the etcd backup (the claim and the backup key
// Secret kubefarm creates, which it never owns, and the CronJob) and
// reports the newest finished run; with spec.etcd.backup unset it removes
// the CronJob and the backup's client certificate, and keeps the snapshots
// and the backup key.
func (r *Reconciler) reconcileBackup(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.cluster
	cj, err := desired.EtcdBackupCronJob(c)
	if err != nil {
		return ctrl.Result{}, err
	}
	if cj == nil {
		return ctrl.Result{}, r.removeBackup(ctx, s)
	}
	if claim := desired.EtcdBackupClaim(c); claim != nil {
		// No owner reference: the snapshots must outlive the TenantCluster.
		if err := r.applyUnowned(ctx, claim, nil); err != nil {
			return ctrl.Result{}, fmt.Errorf("applying the etcd backup claim %s: %w", claim.Name, err)
		}
	}
	// Before the CronJob, so that its first run finds the key.
	key, err := r.backupKeySecret(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.apply(ctx, s.tc, cj, nil); err != nil {
		return ctrl.Result{}, err
	}
	was := backupBlockedBy(s.tc)
	if err := r.observeBackups(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	// One blocker at a time, the key's first (every run needs it): two
	// would take turns in the condition, each with an Event every pass.
	if r.checkBackupKey(s, key, was) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.checkBackupCredentials(ctx, s, was == v1alpha1.ReasonBackupCredentialsMissing)
}

// backupKeySecret reads the backup key Secret, or nil when it does not
// exist. The default one is created when absent, with a fresh X25519
// identity, and never written over afterwards: its identity is the only
// one that opens the key files of the snapshots taken so far (the pattern
// of encryptionKeySecret, whose Create also fails on an existing Secret).
// The default one carries kubefarm's labels, so it is read from the
// manager's cache (a pass that misses a Secret just created gets
// AlreadyExists below, and reads it back); the operator's, like the S3
// credentials, is not in the cache and is read from the API server.
func (r *Reconciler) backupKeySecret(ctx context.Context, s *scope) (*corev1.Secret, error) {
	c := s.cluster
	key := client.ObjectKey{Namespace: c.Namespace, Name: c.Backup.KeySecret}
	secret := &corev1.Secret{}
	var reader client.Reader = r.APIReader
	if c.Backup.CreateKeySecret {
		reader = r.Client
	}
	err := reader.Get(ctx, key, secret)
	switch {
	case err == nil:
		return secret, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading the etcd backup key Secret %s: %w", key.Name, err)
	case !c.Backup.CreateKeySecret:
		return nil, nil // the operator's: checkBackupKey says it is missing
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		return nil, fmt.Errorf("generating the etcd backup key: %w", err)
	}
	// No owner reference: the snapshots it opens outlive the TenantCluster.
	secret = desired.NewEtcdBackupKeySecret(c, id)
	err = r.Client.Create(ctx, secret)
	switch {
	case err == nil:
		r.Recorder.Eventf(s.tc, nil, corev1.EventTypeNormal, "EtcdBackupKeyCreated", "Create",
			"created the etcd backup key Secret %s: keep a copy of its key %s off this cluster, it alone opens the snapshots' key files",
			secret.Name, desired.BackupKeyIdentityKey)
		return secret, nil
	case apierrors.IsAlreadyExists(err):
		// Another pass won; its identity is the one.
		secret = &corev1.Secret{}
		if err := r.APIReader.Get(ctx, key, secret); err != nil {
			return nil, fmt.Errorf("reading the etcd backup key Secret %s: %w", key.Name, err)
		}
		return secret, nil
	default:
		return nil, fmt.Errorf("creating the etcd backup key Secret %s: %w", key.Name, err)
	}
}

// checkBackupKey turns EtcdBackedUp False while the backup key Secret is
// missing, has no recipients or recipients no run can read: every run
// would fail (CreateContainerConfigError, or the tool's refusal) until its
// deadline. It says whether it did. The message names the Secret, the
// field and what is wrong, by line number at most: never a value.
func (r *Reconciler) checkBackupKey(s *scope, secret *corev1.Secret, was string) bool {
	c := s.cluster
	what := fmt.Sprintf("the etcd backup key Secret %s/%s (spec.etcd.backup.keys.secretName)", c.Namespace, c.Backup.KeySecret)
	var msg string
	switch {
	case secret == nil:
		msg = what + " does not exist"
	case len(secret.Data[desired.BackupKeyRecipientsKey]) == 0:
		msg = fmt.Sprintf("%s has no key %s", what, desired.BackupKeyRecipientsKey)
	default:
		if _, err := backupkeys.ParseRecipients(secret.Data[desired.BackupKeyRecipientsKey]); err != nil {
			msg = fmt.Sprintf("%s: its key %s %v", what, desired.BackupKeyRecipientsKey, err)
		}
	}
	if msg == "" {
		return false
	}
	r.setCondition(s.tc, conditions.New(v1alpha1.ConditionEtcdBackedUp, false, v1alpha1.ReasonBackupKeyMissing, msg))
	if was != v1alpha1.ReasonBackupKeyMissing {
		r.Recorder.Eventf(s.tc, nil, corev1.EventTypeWarning, "EtcdBackupKeyMissing", "Backup", "%s", msg)
	}
	return true
}

// checkBackupCredentials turns EtcdBackedUp False while the S3 credentials
// Secret is missing or lacks a key: every run would sit in
// CreateContainerConfigError until its deadline, which says it half an
// hour late and only on the pod. The Secret is the operator's, not one the
// manager caches (internal/manager caches only kubefarm's): it is read from
// the API server, once a pass of a tenant with S3 backups (a change of it
// starts a pass, see tenantsOfCredentials); its values are only tested for
// presence, never kept, logged or reported.
func (r *Reconciler) checkBackupCredentials(ctx context.Context, s *scope, wasMissing bool) error {
	s3 := s.cluster.Backup.S3
	if s3 == nil {
		return nil
	}
	msg, err := r.missingS3Credentials(ctx, s.cluster.Namespace, s3.CredentialsSecret, "spec.etcd.backup.s3.credentialsSecret")
	if err != nil {
		return err
	}
	if msg != "" {
		r.setCondition(s.tc, conditions.New(v1alpha1.ConditionEtcdBackedUp, false, v1alpha1.ReasonBackupCredentialsMissing, msg))
		if !wasMissing {
			r.Recorder.Eventf(s.tc, nil, corev1.EventTypeWarning, "EtcdBackupCredentialsMissing", "Backup", "%s", msg)
		}
	}
	return nil
}

// missingS3Credentials says what is missing of the S3 credentials Secret
// name (the spec's field), or "": the Secret, or one of its two keys. Its
// values are only tested for presence, never kept, logged or reported.
func (r *Reconciler) missingS3Credentials(ctx context.Context, namespace, name, field string) (string, error) {
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("the S3 credentials Secret %s/%s (%s) does not exist", namespace, name, field), nil
	case err != nil:
		return "", fmt.Errorf("reading the S3 credentials Secret %s: %w", name, err)
	}
	for _, key := range []string{desired.S3AccessKeyIDKey, desired.S3SecretAccessKeyKey} {
		if len(secret.Data[key]) == 0 {
			return fmt.Sprintf("the S3 credentials Secret %s/%s (%s) has no key %s", namespace, name, field, key), nil
		}
	}
	return "", nil
}

// backupBlockedBy is the reason EtcdBackedUp reports a Secret no run can
// do without (the S3 credentials, the backup key), or "": a pass with the
// Secret fixed reports the runs again instead of keeping it.
func backupBlockedBy(tc *v1alpha1.TenantCluster) string {
	c := meta.FindStatusCondition(tc.Status.Conditions, v1alpha1.ConditionEtcdBackedUp)
	if c != nil && (c.Reason == v1alpha1.ReasonBackupCredentialsMissing || c.Reason == v1alpha1.ReasonBackupKeyMissing) {
		return c.Reason
	}
	return ""
}

// removeBackup deletes what backups alone needed. The claim and its
// snapshots stay.
func (r *Reconciler) removeBackup(ctx context.Context, s *scope) error {
	c := s.cluster
	meta.RemoveStatusCondition(&s.tc.Status.Conditions, v1alpha1.ConditionEtcdBackedUp)
	cj := &batchv1.CronJob{}
	if found, err := r.getLive(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.EtcdBackupName()}, cj); err != nil {
		return err
	} else if found && metav1.IsControlledBy(cj, s.tc) {
		if err := r.Client.Delete(ctx, cj, client.Preconditions{UID: &cj.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting the etcd backup CronJob %s: %w", cj.Name, err)
		}
	}
	cert := &cmapi.Certificate{}
	name := c.SecretName(desired.RoleEtcdBackupClient)
	if found, err := r.getLive(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, cert); err != nil {
		return err
	} else if found && metav1.IsControlledBy(cert, s.tc) {
		if err := r.Client.Delete(ctx, cert, client.Preconditions{UID: &cert.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Certificate %s: %w", name, err)
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name}}
	if found, err := r.getLive(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
		return err
	} else if found && secret.Labels[v1alpha1.LabelTenantCluster] == c.Name {
		if err := r.Client.Delete(ctx, secret, client.Preconditions{UID: &secret.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Secret %s: %w", name, err)
		}
	}
	return nil
}

// backupRun is a finished backup Job.
type backupRun struct {
	job      *batchv1.Job
	finished time.Time
	ok       bool
}

// newestFinishedRun is the backup Job that finished last (with onlyOK, the
// last that succeeded), or nil.
func newestFinishedRun(jobs []batchv1.Job, onlyOK bool) *backupRun {
	var out *backupRun
	for i := range jobs {
		j := &jobs[i]
		for _, cond := range j.Status.Conditions {
			if cond.Status != corev1.ConditionTrue || (cond.Type != batchv1.JobComplete && cond.Type != batchv1.JobFailed) ||
				(onlyOK && cond.Type != batchv1.JobComplete) {
				continue
			}
			at := cond.LastTransitionTime.Time
			if out == nil || at.After(out.finished) || (at.Equal(out.finished) && j.Name > out.job.Name) {
				out = &backupRun{job: j, finished: at, ok: cond.Type == batchv1.JobComplete}
			}
		}
	}
	return out
}

// snapshotResult is the JSON line kubefarm-etcd snapshot writes to its
// termination message.
type snapshotResult struct {
	File     string    `json:"file"`
	Size     int64     `json:"size"`
	Revision int64     `json:"revision"`
	Time     time.Time `json:"time"`
	Bucket   string    `json:"bucket"`
	Object   string    `json:"object"`
	// Keys is the key file's name beside the snapshot, KeysObject its
	// object's key in the bucket (with S3).
	Keys       string `json:"keys"`
	KeysObject string `json:"keysObject"`
	Error      string `json:"error"`
}

// maxResultMessage bounds what is parsed and reported of a run's message;
// the kubelet keeps at most 4096 bytes of it anyway.
const maxResultMessage = 4096

// parseSnapshotResult reads a run's termination message.
func parseSnapshotResult(msg string) (snapshotResult, error) {
	var res snapshotResult
	if len(msg) > maxResultMessage {
		return res, fmt.Errorf("the result is %d bytes, more than %d", len(msg), maxResultMessage)
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(msg)), &res); err != nil {
		return res, fmt.Errorf("the result is not kubefarm-etcd's JSON: %w", err)
	}
	if res.Error == "" && (res.File == "" || res.Size <= 0 || res.Time.IsZero()) {
		return res, fmt.Errorf("the result names no file, size and time")
	}
	return res, nil
}

// observeBackups reports the newest finished run in the EtcdBackedUp
// condition, with an Event when it is new, and the newest successful one in
// status.backup.lastSnapshot. Both are derived from the runs every pass, not
// carried over from the status read: that comes from the cache and can be a
// pass behind, and a status applied from a stale copy must not lose the last
// good snapshot (envtest caught a failed run doing that). Runs are read
// from the cache; a run's pods (for its result) only when the run is new to
// the status.
func (r *Reconciler) observeBackups(ctx context.Context, s *scope) error {
	c := s.cluster
	jobs := &batchv1.JobList{}
	if err := r.Client.List(ctx, jobs, client.InNamespace(c.Namespace),
		client.MatchingLabels{desired.LabelName: desired.ComponentEtcdBackup, desired.LabelInstance: c.Name}); err != nil {
		return fmt.Errorf("listing the etcd backup Jobs: %w", err)
	}
	st := &v1alpha1.EtcdBackupStatus{}
	if s.tc.Status.Backup != nil {
		st = s.tc.Status.Backup.DeepCopy()
	}
	good := newestFinishedRun(jobs.Items, true)
	var goodErr error
	if good != nil && (st.LastSnapshot == nil || st.LastSnapshot.Job != good.job.Name) {
		var res snapshotResult
		if res, goodErr = r.runResult(ctx, good); goodErr == nil && res.Error == "" {
			claim := c.Backup.ClaimName
			if res.Bucket != "" {
				claim = "" // a run of the S3 target: the file was only staged
			}
			st.LastSnapshot = &v1alpha1.EtcdSnapshot{ClaimName: claim, Bucket: res.Bucket, Object: res.Object, File: res.File,
				KeysFile: res.Keys, SizeBytes: res.Size, Revision: res.Revision, Time: metav1.Time{Time: res.Time}, Job: good.job.Name}
		} else if goodErr == nil {
			goodErr = errors.New(res.Error)
		}
	}
	if st.LastSnapshot != nil || st.LastRunJob != "" {
		s.tc.Status.Backup = st
	}
	run := newestFinishedRun(jobs.Items, false)
	if run == nil {
		if meta.FindStatusCondition(s.tc.Status.Conditions, v1alpha1.ConditionEtcdBackedUp) == nil || backupBlockedBy(s.tc) != "" {
			r.setCondition(s.tc, conditions.New(v1alpha1.ConditionEtcdBackedUp, false, v1alpha1.ReasonNoSnapshotYet,
				fmt.Sprintf("no backup run has finished yet (schedule %q, CronJob %s)", c.Backup.Schedule, c.EtcdBackupName())))
		}
		return nil
	}
	if st.LastRunJob == run.job.Name && backupBlockedBy(s.tc) == "" {
		return nil // reported already: a Job finishes once
	}
	st.LastRunTime, st.LastRunJob = &metav1.Time{Time: run.finished}, run.job.Name
	s.tc.Status.Backup = st
	if run.ok && goodErr == nil && st.LastSnapshot != nil && st.LastSnapshot.Job == run.job.Name {
		snap := st.LastSnapshot
		msg := fmt.Sprintf("snapshot %s (%.1f MiB, revision %d) taken at %s %s", snap.File,
			float64(snap.SizeBytes)/(1<<20), snap.Revision, snap.Time.UTC().Format(time.RFC3339), snapshotPlace(snap))
		if snap.KeysFile != "" {
			msg += " with its key file " + snap.KeysFile
		}
		r.setCondition(s.tc, conditions.New(v1alpha1.ConditionEtcdBackedUp, true, v1alpha1.ReasonSnapshotTaken, msg))
		r.Recorder.Eventf(s.tc, run.job, corev1.EventTypeNormal, "EtcdSnapshotTaken", "Backup", "%s", msg)
		return nil
	}
	why := "the run failed"
	if run.ok {
		why = "the run succeeded but its result cannot be read"
		if goodErr != nil {
			why += ": " + goodErr.Error()
		}
	} else {
		res, err := r.runResult(ctx, run)
		switch {
		case err != nil:
			why = err.Error()
		case res.Error != "":
			why = res.Error
		}
	}
	st.LastFailureTime = &metav1.Time{Time: run.finished}
	msg := fmt.Sprintf("backup Job %s failed: %s", run.job.Name, truncate(why, 1000))
	r.setCondition(s.tc, conditions.New(v1alpha1.ConditionEtcdBackedUp, false, v1alpha1.ReasonSnapshotFailed, msg))
	r.Recorder.Eventf(s.tc, run.job, corev1.EventTypeWarning, "EtcdBackupFailed", "Backup", "%s", msg)
	return nil
}

// runResult reads the result a run's last pod left in its termination
// message: the succeeded pod's for a completed run, else the newest failed
// one's. The pods are read directly: they are not worth a cluster-wide
// cache, and are read once per finished run.
func (r *Reconciler) runResult(ctx context.Context, run *backupRun) (snapshotResult, error) {
	msg, failure, err := r.runMessage(ctx, run)
	switch {
	case err != nil:
		return snapshotResult{}, err
	case failure != "":
		return snapshotResult{Error: failure}, nil
	}
	res, err := parseSnapshotResult(msg)
	if err != nil && !run.ok {
		// A failure before the tool could write its JSON: the kubelet's
		// message (or the log's tail) is the best explanation there is.
		return snapshotResult{Error: msg}, nil
	}
	return res, err
}

// runMessage is the termination message of a run's last pod (see
// runResult), or, for a failed run whose pods left none (killed by its
// deadline, or gone), the Job's failure condition as failure.
func (r *Reconciler) runMessage(ctx context.Context, run *backupRun) (msg, failure string, err error) {
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(run.job.Namespace),
		client.MatchingLabels{batchv1.JobNameLabel: run.job.Name}); err != nil {
		return "", "", fmt.Errorf("listing the pods of Job %s: %w", run.job.Name, err)
	}
	want := corev1.PodFailed
	if run.ok {
		want = corev1.PodSucceeded
	}
	var newest time.Time
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase != want {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && (msg == "" || t.FinishedAt.After(newest)) {
				msg, newest = t.Message, t.FinishedAt.Time
				if msg == "" {
					msg = t.Reason
				}
			}
		}
	}
	if msg == "" {
		if !run.ok {
			// A run killed by its deadline, or whose pods are gone, leaves
			// only the Job's own condition.
			for _, cond := range run.job.Status.Conditions {
				if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
					return "", cond.Reason + ": " + cond.Message, nil
				}
			}
		}
		return "", "", fmt.Errorf("no pod of Job %s left a result", run.job.Name)
	}
	return msg, "", nil
}

func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// isBackupJob selects the backup runs and restore checks of every
// tenant, for the watch.
func isBackupJob(o client.Object) bool {
	c := o.GetLabels()[desired.LabelName]
	return c == desired.ComponentEtcdBackup || c == desired.ComponentEtcdRestoreCheck
}

// snapshotPlace says where a snapshot is, for messages.
func snapshotPlace(snap *v1alpha1.EtcdSnapshot) string {
	if snap.Bucket != "" {
		return "in s3://" + snap.Bucket + "/" + snap.Object
	}
	return "on claim " + snap.ClaimName
}

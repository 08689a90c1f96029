package tenantcluster

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// Encryption at rest of the tenant's Secrets (docs/encryption.md): the key
// Secret, the configuration rendered from it, and the rotation steps that
// desired.DecideRotation chooses. Key material never enters a log line, an
// Event or a condition: they name keys (key-<n>), never their bytes.

// encryptionRetry is how soon a failed rewrite of the tenant's Secrets is
// tried again.
const encryptionRetry = tenantRetry

// newEncryptionKey draws a secretbox key.
func newEncryptionKey() ([]byte, error) {
	key := make([]byte, desired.EncryptionKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("drawing an encryption key: %w", err)
	}
	return key, nil
}

// encryptionKeySecret reads the key Secret, creating it with a fresh key
// when it does not exist. It never writes over one that exists: that
// Secret is the only copy of the keys, and without them every encrypted
// Secret in the tenant's etcd is lost; Create fails on an existing one.
//
// It is read from the API server, not the cache: a pass that rendered the
// configuration from a copy one rotation step old would roll the API
// servers back a step. One GET per pass is cheap next to the pass.
func (r *Reconciler) encryptionKeySecret(ctx context.Context, s *scope) (*corev1.Secret, error) {
	c := s.cluster
	key := client.ObjectKey{Namespace: c.Namespace, Name: c.EncryptionKeySecretName()}
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, key, secret)
	if err == nil || !apierrors.IsNotFound(err) {
		return secret, err
	}
	raw, err := newEncryptionKey()
	if err != nil {
		return nil, err
	}
	secret, err = desired.NewEncryptionKeySecret(c, raw, s.tc.Annotations[v1alpha1.AnnotationRotateEncryptionKey])
	if err != nil {
		return nil, err
	}
	err = r.Client.Create(ctx, secret)
	switch {
	case err == nil:
		r.Recorder.Eventf(s.tc, nil, corev1.EventTypeNormal, "EncryptionKeyCreated", "Create",
			"created the encryption key Secret %s with key %s", secret.Name, desired.EncryptionKeyPrefix+"1")
		return secret, nil
	case apierrors.IsAlreadyExists(err):
		secret = &corev1.Secret{}
		return secret, r.APIReader.Get(ctx, key, secret)
	default:
		return nil, fmt.Errorf("creating the encryption key Secret: %w", err)
	}
}

// reconcileEncryption renders the EncryptionConfiguration from the key
// Secret into the Secret kube-apiserver mounts, and adds it to the Secret
// data the API server pods' checksum covers, so a change of keys rolls
// them. It runs before the API servers are applied: their first pod
// already encrypts.
func (r *Reconciler) reconcileEncryption(ctx context.Context, s *scope) (ctrl.Result, error) {
	secret, err := r.encryptionKeySecret(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	keys, err := desired.ParseEncryptionKeys(secret)
	if err != nil {
		// Never repaired by generating a key: a damaged key Secret needs a
		// person with the backup (docs/encryption.md).
		return ctrl.Result{}, err
	}
	cfg, err := desired.EncryptionConfigSecret(s.cluster, keys)
	if err != nil {
		return ctrl.Result{}, err
	}
	applied := &corev1.Secret{}
	if err := r.apply(ctx, s.tc, cfg, applied); err != nil {
		return ctrl.Result{}, err
	}
	s.encryptionSecret, s.encryptionKeys = secret, keys
	if s.secrets == nil {
		s.secrets = desired.SecretData{}
	}
	s.secrets[applied.Name] = applied.Data
	return ctrl.Result{}, nil
}

// reconcileEncryptionRotation takes the next step of a key rotation (see
// desired.DecideRotation), once the API servers were applied with the
// configuration of the current keys. The state is written to the key
// Secret with optimistic locking: two passes that read the same version
// cannot both take a step.
func (r *Reconciler) reconcileEncryptionRotation(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.encryptionSecret == nil || s.apiServer == nil {
		return ctrl.Result{}, nil
	}
	tc, keys := s.tc, s.encryptionKeys
	request := tc.Annotations[v1alpha1.AnnotationRotateEncryptionKey]
	step := desired.DecideRotation(keys, request, rolledOut(s.apiServer))
	switch step {
	case desired.StepNone:
		r.setCondition(tc, metav1.Condition{Type: v1alpha1.ConditionEncryptionKeyRotated, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonKeyInUse, Message: fmt.Sprintf("Secrets are encrypted with %s", keys.Write)})
		return ctrl.Result{}, nil
	case desired.StepWaitRollout:
		r.setCondition(tc, notReady(v1alpha1.ConditionEncryptionKeyRotated, v1alpha1.ReasonWaitingForRollout,
			fmt.Sprintf("rotation %s: waiting for every API server to run the current keys", stageOrRequested(keys))))
		return ctrl.Result{}, nil
	case desired.StepRewrite:
		n, err := r.rewriteTenantSecrets(ctx, s)
		if err != nil {
			log.FromContext(ctx).Info("rewriting the tenant's Secrets failed", "error", err.Error())
			r.setCondition(tc, notReady(v1alpha1.ConditionEncryptionKeyRotated, v1alpha1.ReasonRewriteFailed,
				fmt.Sprintf("rewriting the tenant's Secrets with %s: %v", keys.Write, err)))
			return ctrl.Result{RequeueAfter: encryptionRetry}, nil
		}
		r.Recorder.Eventf(tc, nil, corev1.EventTypeNormal, "EncryptionSecretsRewritten", "Rotate",
			"rewrote %d Secrets with %s", n, keys.Write)
	}
	var newKey []byte
	if step == desired.StepAddKey {
		var err error
		if newKey, err = newEncryptionKey(); err != nil {
			return ctrl.Result{}, err
		}
	}
	next, err := keys.Advance(step, newKey, request)
	if err != nil {
		return ctrl.Result{}, err
	}
	updated := s.encryptionSecret.DeepCopy()
	next.WriteTo(updated)
	if err := r.Client.Update(ctx, updated); err != nil {
		if apierrors.IsConflict(err) {
			// Read stale; the Secret's newer version (its event) brings
			// the next pass.
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, fmt.Errorf("writing the encryption key Secret: %w", err)
	}
	msg := rotationMessage(step, keys, next)
	r.Recorder.Eventf(tc, nil, corev1.EventTypeNormal, "EncryptionKeyRotation", string(step), "%s", msg)
	cond := notReady(v1alpha1.ConditionEncryptionKeyRotated, string(next.Stage), msg)
	if next.Stage == desired.RotationNone {
		cond = metav1.Condition{Type: v1alpha1.ConditionEncryptionKeyRotated, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonKeyInUse, Message: msg}
	}
	r.setCondition(tc, cond)
	return ctrl.Result{}, nil
}

func stageOrRequested(k desired.EncryptionKeys) string {
	if k.Stage == desired.RotationNone {
		return "requested"
	}
	return string(k.Stage)
}

// rotationMessage says what a step did, naming keys only.
func rotationMessage(step desired.RotationStep, before, after desired.EncryptionKeys) string {
	switch step {
	case desired.StepAddKey:
		return fmt.Sprintf("added %s after the write key %s; the API servers roll", after.Newest(), after.Write)
	case desired.StepPromote:
		return fmt.Sprintf("%s is the write key, %s still reads; the API servers roll", after.Write, before.Write)
	case desired.StepRewrite:
		return fmt.Sprintf("every Secret was rewritten with %s", after.Write)
	case desired.StepDropOld:
		return fmt.Sprintf("rotation done: Secrets are encrypted with %s, the old keys are removed; the API servers roll", after.Write)
	}
	return string(step)
}

// rewriteTenantSecrets rewrites the tenant's Secrets through its client.
func (r *Reconciler) rewriteTenantSecrets(ctx context.Context, s *scope) (int, error) {
	cfg, err := tenantRESTConfig(s.cluster, s.secrets)
	if err != nil {
		return 0, err
	}
	tenant, err := r.TenantClients.Get(s.key(), cfg)
	if err != nil {
		return 0, fmt.Errorf("tenant client: %w", err)
	}
	return RewriteSecrets(ctx, tenant)
}

// RewriteSecrets writes every Secret of a cluster back unchanged, a page
// at a time, which is what re-encrypts them: kube-apiserver skips an
// update that changes nothing, except when the stored value was read with
// a key other than the write key, which it then writes with the write key
// (the upstream procedure is `kubectl get secrets -A -o json | kubectl
// replace -f -`). A Secret changed or deleted meanwhile was written by
// someone else, with the write key too, and is skipped. It returns how
// many Secrets were written.
func RewriteSecrets(ctx context.Context, c client.Client) (int, error) {
	n := 0
	list := &corev1.SecretList{}
	opts := []client.ListOption{client.Limit(250)}
	for {
		if err := c.List(ctx, list, opts...); err != nil {
			return n, fmt.Errorf("listing Secrets: %w", err)
		}
		for i := range list.Items {
			err := c.Update(ctx, &list.Items[i])
			switch {
			case err == nil:
				n++
			case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			default:
				return n, fmt.Errorf("rewriting Secret %s/%s: %w", list.Items[i].Namespace, list.Items[i].Name, err)
			}
		}
		if list.Continue == "" {
			return n, nil
		}
		opts = []client.ListOption{client.Limit(250), client.Continue(list.Continue)}
	}
}

// deleteEncryptionKeys deletes the key Secret (volumeReclaimPolicy
// Delete: the etcd data it decrypts goes too). With Retain it stays with
// the volumes, or the retained data could never be read again.
func (r *Reconciler) deleteEncryptionKeys(ctx context.Context, tc *v1alpha1.TenantCluster) error {
	s := &corev1.Secret{}
	s.Namespace, s.Name = tc.Namespace, desired.EncryptionKeySecretName(tc.Name)
	err := r.Client.Delete(ctx, s)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting the encryption key Secret %s: %w", s.Name, err)
	}
	r.Recorder.Eventf(tc, nil, corev1.EventTypeNormal, "EncryptionKeyDeleted", "Delete",
		"deleted the encryption key Secret %s (volumeReclaimPolicy Delete)", s.Name)
	return nil
}

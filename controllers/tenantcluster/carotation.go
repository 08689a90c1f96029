package tenantcluster

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// CA rotation (docs/pki.md, desired/catrust.go): readCATrust feeds each
// rotated CA's record into the builders before the PKI is applied,
// syncCATrust keeps each trust Secret's bundle equal to the certificates
// of the generations it names (a CA renewal changes them) and hands it to
// the checksums, and reconcileCARotation takes the next step once the
// workloads of this pass rolled out. Each record change is an Update of
// the trust Secret with its resourceVersion: two passes that read the
// same record cannot both advance it.

// readCATrust reads the trust Secret of every rotatable CA. One that
// exists is read from the API server, not the cache: a record one step
// old would render the previous step's Certificates and pods. Whether it
// exists is asked of the cache, so that a CA never rotated (most of them)
// costs no request per pass; the cache can only miss a trust Secret just
// created, whose record then still equals the first in everything it
// renders (generation 1 trusted and signing), and whose creation event
// brings the next pass.
func (r *Reconciler) readCATrust(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.cluster
	s.caTrust = map[desired.PKIRole]*corev1.Secret{}
	for _, ca := range desired.RotatableCAs {
		key := client.ObjectKey{Namespace: c.Namespace, Name: c.TrustSecretName(ca)}
		secret := &corev1.Secret{}
		if found, err := r.getLive(ctx, key, secret); err != nil || !found {
			if err != nil {
				return ctrl.Result{}, fmt.Errorf("reading the trust Secret of %s: %w", ca, err)
			}
			continue
		}
		if err := r.APIReader.Get(ctx, key, secret); err != nil {
			return ctrl.Result{}, fmt.Errorf("reading the trust Secret of %s: %w", ca, err)
		}
		t, err := desired.ParseCATrust(secret)
		if err != nil {
			// Never guessed: a record read wrong could delete a CA that
			// still signs. The Secret's next edit brings the next pass.
			r.setCondition(s.tc, notReady(v1alpha1.ConditionCARotated, v1alpha1.ReasonCARecordInvalid, err.Error()))
			return ctrl.Result{}, err
		}
		if c.CATrust == nil {
			c.CATrust = map[desired.PKIRole]desired.CATrust{}
		}
		c.CATrust[ca], s.caTrust[ca] = t, secret
	}
	// Written from the records every pass, so that a pass which stops
	// before the late phase (while a re-issued leaf is pending, say) does
	// not carry a CARotated of an earlier step read from the cache.
	var outcomes []caOutcome
	for _, ca := range desired.RotatableCAs {
		t := c.CATrustOf(ca)
		outcomes = append(outcomes, caOutcome{step: recordStep(t, s.tc.Annotations[desired.RotateCAAnnotation(ca)]), msg: caSteadyMessage(ca, t)})
	}
	r.setCondition(s.tc, caRotatedCondition(outcomes))
	return ctrl.Result{}, nil
}

// recordStep is the step a record stands at, for the condition of a pass
// that may not reach the late phase.
func recordStep(t desired.CATrust, request string) desired.CAStep {
	switch {
	case t.Pending != 0:
		return desired.CAStepIssue
	case len(t.Trusted) == 2 && t.Signer == t.Trusted[0]:
		return desired.CAStepTrust
	case len(t.Trusted) == 2 && t.Serving != 0 && t.NodesSince.IsZero():
		return desired.CAStepSignClients
	case len(t.Trusted) == 2 && t.Serving != 0:
		return desired.CAStepRebootNodes
	case len(t.Trusted) == 2:
		return desired.CAStepSign
	case request != "" && request != t.Handled:
		return desired.CAStepIssue
	}
	return desired.CAStepNone
}

// syncCATrust brings each trust Secret's bundle up to date with the CA
// Secrets just read, and adds it to the data the checksums hash.
func (r *Reconciler) syncCATrust(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.cluster
	for ca, live := range s.caTrust {
		t := c.CATrust[ca]
		bundle, err := desired.TrustBundle(c, ca, t, s.secrets)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !bytes.Equal(live.Data[desired.TrustBundleKey], bundle) {
			updated := live.DeepCopy()
			updated.Data = map[string][]byte{desired.TrustBundleKey: bundle}
			if err := r.Client.Update(ctx, updated); err != nil {
				return ctrl.Result{}, fmt.Errorf("updating the bundle of %s: %w", live.Name, err)
			}
			s.caTrust[ca] = updated
		}
		s.secrets[live.Name] = s.caTrust[ca].Data
	}
	return ctrl.Result{}, nil
}

// caOutcome is one CA's step in this pass, for the condition.
type caOutcome struct {
	step desired.CAStep
	msg  string
	// poll: the step waits for something no watch brings (the nodes'
	// reboots); look again after nodeRebootPoll.
	poll bool
}

// reconcileCARotation takes the next step of every rotatable CA and
// writes CARotated.
func (r *Reconciler) reconcileCARotation(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.apiServer == nil {
		return ctrl.Result{}, nil
	}
	var outcomes []caOutcome
	result := ctrl.Result{}
	for _, ca := range desired.RotatableCAs {
		o, err := r.rotateCA(ctx, s, ca)
		if apierrors.IsConflict(err) {
			// Read stale; the Secret's newer version brings the next pass.
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		if o.poll {
			result.RequeueAfter = nodeRebootPoll
		}
		outcomes = append(outcomes, o)
	}
	r.setCondition(s.tc, caRotatedCondition(outcomes))
	return result, nil
}

func (r *Reconciler) rotateCA(ctx context.Context, s *scope, ca desired.PKIRole) (caOutcome, error) {
	c := s.cluster
	t := c.CATrustOf(ca)
	old, err := r.oldCALeft(ctx, c, ca, t)
	if err != nil {
		return caOutcome{}, err
	}
	// The leaves are checked only between the switch and the drop, the one
	// stage that asks (DecideCAStep): not in every pass of every tenant.
	var leaves error
	if len(t.Trusted) == 2 && t.Signer == t.Trusted[1] && t.Serving == 0 {
		leaves = leavesSignedBy(c, ca, t.Signer, s.secrets)
	}
	facts := desired.CAFacts{
		Request:        s.tc.Annotations[desired.RotateCAAnnotation(ca)],
		LeavesBySigner: leaves == nil,
		RolledOut:      s.controlPlaneRolledOut(),
		OldLeft:        old,
		NodesTrust:     ca == desired.RoleCA,
	}
	// The Machines are read (and asked to reboot) only while the
	// rotation waits for them.
	var waiting []string
	if !t.NodesSince.IsZero() {
		if waiting, err = r.nodesRebootedSince(ctx, s, t.NodesSince); err != nil {
			return caOutcome{}, err
		}
		facts.NodesRebooted = len(waiting) == 0
	}
	step := desired.DecideCAStep(t, facts)
	out := caOutcome{step: step, msg: caSteadyMessage(ca, t)}
	switch step {
	case desired.CAStepNone:
		return out, nil
	case desired.CAStepWaitNodes:
		out.msg, out.poll = waitingNodesMessage(ca, waiting), true
		return out, nil
	case desired.CAStepWaitRollout:
		out.msg = fmt.Sprintf("%s: waiting for the control plane to roll out (%s)", ca, caStage(t))
		if leaves != nil {
			out.msg = fmt.Sprintf("%s: waiting for its leaves: %v", ca, leaves)
		}
		return out, nil
	case desired.CAStepDelete:
		return out, r.deleteCAGeneration(ctx, s, ca, t.Signer-1)
	}
	next := t.Advance(step, facts.Request, time.Now())
	bundle, err := desired.TrustBundle(c, ca, next, s.secrets)
	if err != nil {
		return caOutcome{}, err
	}
	if err := r.writeCATrust(ctx, s, ca, next, bundle); err != nil {
		return caOutcome{}, err
	}
	out.msg = fmt.Sprintf("%s: %s", ca, caStage(next))
	r.Recorder.Eventf(s.tc, nil, corev1.EventTypeNormal, "CARotation", string(step), "%s", out.msg)
	return out, nil
}

// writeCATrust creates the trust Secret (the first rotation of the CA) or
// updates the one read this pass. It has no owner, as the CA Secrets
// cert-manager writes have none: garbage collection would delete it with
// the TenantCluster, and under volumeReclaimPolicy Retain a TenantCluster
// recreated on the kept PKI must find the record that says which
// generation signs. deletePKI deletes it under Delete (its pki-role
// label), and that label's watch brings its events.
func (r *Reconciler) writeCATrust(ctx context.Context, s *scope, ca desired.PKIRole, t desired.CATrust, bundle []byte) error {
	want := desired.TrustSecret(s.cluster, ca, t, bundle)
	live := s.caTrust[ca]
	if live == nil {
		if err := r.Client.Create(ctx, want); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("secrets"), want.Name, err)
			}
			return fmt.Errorf("creating the trust Secret %s: %w", want.Name, err)
		}
		return nil
	}
	updated := live.DeepCopy()
	updated.Annotations, updated.Data = want.Annotations, want.Data
	if err := r.Client.Update(ctx, updated); err != nil {
		// Still a Conflict to the caller (apierrors unwraps).
		return fmt.Errorf("updating the trust Secret %s: %w", want.Name, err)
	}
	return nil
}

// oldCALeft tells whether the generation below the signer still has its
// Certificate or its Secret (its Issuer goes first, see
// deleteCAGeneration, and is not read: the controller only writes
// Issuers).
func (r *Reconciler) oldCALeft(ctx context.Context, c *desired.Cluster, ca desired.PKIRole, t desired.CATrust) (bool, error) {
	if !t.Steady() || t.Signer < 2 {
		return false, nil
	}
	key := client.ObjectKey{Namespace: c.Namespace, Name: c.CAName(ca, t.Signer-1)}
	for _, obj := range []client.Object{&cmapi.Certificate{}, &corev1.Secret{}} {
		found, err := r.getLive(ctx, key, obj)
		if err != nil || found {
			return found, err
		}
	}
	return false, nil
}

// deleteCAGeneration deletes a retired generation's Issuer, Certificate
// and Secret (its private key).
func (r *Reconciler) deleteCAGeneration(ctx context.Context, s *scope, ca desired.PKIRole, gen int) error {
	name := s.cluster.CAName(ca, gen)
	meta := metav1.ObjectMeta{Namespace: s.cluster.Namespace, Name: name}
	for _, obj := range []client.Object{&cmapi.Issuer{ObjectMeta: meta}, &cmapi.Certificate{ObjectMeta: meta}, &corev1.Secret{ObjectMeta: meta}} {
		if err := r.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %s of %s generation %d: %w", name, ca, gen, err)
		}
	}
	r.Recorder.Eventf(s.tc, nil, corev1.EventTypeNormal, "CARotation", string(desired.CAStepDelete),
		"%s: generation %d is no longer trusted; deleted its Issuer, Certificate and Secret %s", ca, gen, name)
	return nil
}

// controlPlaneRolledOut: etcd, the API servers and the followers run the
// pod templates this pass applied. Every step of every CA waits for all
// of them, not only for the pods that trust that CA: one rule, and a step
// is never taken while any control-plane pod is being replaced.
func (s *scope) controlPlaneRolledOut() bool {
	if !rolledOut(s.apiServer) || len(s.followers) == 0 || !etcdRolledOut(s.etcd) {
		return false
	}
	for _, d := range s.followers {
		if !rolledOut(d) {
			return false
		}
	}
	return true
}

// etcdRolledOut: every member runs the StatefulSet's current template and
// is ready.
func etcdRolledOut(sts *appsv1.StatefulSet) bool {
	if sts == nil || sts.Status.ObservedGeneration < sts.Generation {
		return false
	}
	want := int32(1)
	if sts.Spec.Replicas != nil {
		want = *sts.Spec.Replicas
	}
	st := sts.Status
	return st.UpdatedReplicas == want && st.ReadyReplicas == want && st.Replicas == want &&
		(st.UpdateRevision == "" || st.CurrentRevision == st.UpdateRevision)
}

// leavesSignedBy checks that every leaf of ca in secrets is signed by
// generation gen's certificate; the error names the first that is not.
func leavesSignedBy(c *desired.Cluster, ca desired.PKIRole, gen int, secrets desired.SecretData) error {
	caCert, err := firstCert(secrets[c.CAName(ca, gen)][desired.CertificateKey])
	if err != nil {
		return fmt.Errorf("secret %s: %w", c.CAName(ca, gen), err)
	}
	for _, leaf := range desired.LeafRoles(c, ca) {
		name := c.SecretName(leaf)
		cert, err := firstCert(secrets[name][desired.CertificateKey])
		if err != nil {
			return fmt.Errorf("secret %s: %w", name, err)
		}
		if err := cert.CheckSignatureFrom(caCert); err != nil {
			return fmt.Errorf("secret %s is not signed by %s yet", name, c.CAName(ca, gen))
		}
	}
	return nil
}

func firstCert(data []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, fmt.Errorf("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

// caStage says where a record stands, naming generations.
func caStage(t desired.CATrust) string {
	switch {
	case t.Pending != 0:
		return fmt.Sprintf("generation %d is being issued; generation %d signs and is trusted", t.Pending, t.Signer)
	case len(t.Trusted) == 2 && !t.NodesSince.IsZero():
		return fmt.Sprintf("generations %d and %d are trusted, %d signs, %d serves; the nodes booted before %s reboot",
			t.Trusted[0], t.Trusted[1], t.Signer, t.ServingGen(), t.NodesSince.UTC().Format(time.RFC3339))
	case len(t.Trusted) == 2 && t.Serving != 0:
		return fmt.Sprintf("generations %d and %d are trusted, %d signs the clients and kubelets, %d serves", t.Trusted[0], t.Trusted[1], t.Signer, t.ServingGen())
	case len(t.Trusted) == 2:
		return fmt.Sprintf("generations %d and %d are trusted, %d signs", t.Trusted[0], t.Trusted[1], t.Signer)
	}
	return fmt.Sprintf("generation %d signs and is the only one trusted", t.Signer)
}

func caSteadyMessage(ca desired.PKIRole, t desired.CATrust) string {
	return fmt.Sprintf("%s: %s", ca, caStage(t))
}

// caRotatedCondition is CARotated from every CA's outcome: True when no
// CA is in a rotation.
func caRotatedCondition(outcomes []caOutcome) metav1.Condition {
	var msgs []string
	reason := ""
	for _, o := range outcomes {
		msgs = append(msgs, o.msg)
		if o.step != desired.CAStepNone && o.step != desired.CAStepDelete && reason == "" {
			reason = string(o.step)
		}
	}
	msg := strings.Join(msgs, "; ")
	if reason == "" {
		return metav1.Condition{Type: v1alpha1.ConditionCARotated, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonCAsInUse, Message: msg}
	}
	return notReady(v1alpha1.ConditionCARotated, reason, msg)
}

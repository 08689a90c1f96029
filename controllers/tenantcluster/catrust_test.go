package tenantcluster_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// pemCerts parses every certificate of a PEM bundle.
func pemCerts(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

func secretData(ctx context.Context, ns, name string) (map[string][]byte, error) {
	s := &corev1.Secret{}
	err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s)
	return s.Data, err
}

// caRecord reads a CA's trust record; nil when the CA was never rotated.
func caRecord(ctx context.Context, key types.NamespacedName, ca desired.PKIRole) (*desired.CATrust, *corev1.Secret, error) {
	s := &corev1.Secret{}
	err := env.Client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name + "-" + string(ca) + "-trust"}, s)
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	t, err := desired.ParseCATrust(s)
	return &t, s, err
}

// apiServerVolume is the Secret the API servers' template mounts for ca,
// and whether the Deployment still rolls out.
func apiServerVolume(ctx context.Context, key types.NamespacedName, ca desired.PKIRole) (string, bool, error) {
	d := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name + "-apiserver"}, d); err != nil {
		return "", false, err
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "pki-"+string(ca) {
			return v.Secret.SecretName, d.Status.ObservedGeneration != d.Generation, nil
		}
	}
	return "", false, fmt.Errorf("no %s volume", ca)
}

// checkCARotation rotates ca, whose leaf is one it signs: the new CA is issued and
// trusted beside the old before any leaf it signs exists, it signs only
// once the control plane rolled out with both (held while it has not),
// the old CA leaves the bundle only once the leaf is re-issued, and its
// Certificate, Issuer and Secret are deleted at the end.
func checkCARotation(ctx context.Context, t *testing.T, key types.NamespacedName, ca, leafRole desired.PKIRole, markReady func(context.Context) error) {
	ns := key.Namespace
	caName, leafName := key.Name+"-"+string(ca), key.Name+"-"+string(leafRole)
	oldCA, err := secretData(ctx, ns, caName)
	if err != nil {
		t.Fatal(err)
	}
	oldCert := pemCerts(t, oldCA["tls.crt"])[0]
	if rec, _, err := caRecord(ctx, key, ca); err != nil || rec != nil {
		t.Fatalf("a tenant never rotated has a trust record %+v (%v)", rec, err)
	}
	if got, _ := getTC(ctx, key); !hasCondition(got, v1alpha1.ConditionCARotated, metav1.ConditionTrue, v1alpha1.ReasonCAsInUse) {
		t.Fatalf("before a rotation: %s", conditionsString(got))
	}
	cur, err := getTC(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Annotations[desired.RotateCAAnnotation(ca)] = "2026-11-28"
	if err := env.Client.Patch(ctx, cur, patch); err != nil {
		t.Fatal(err)
	}

	// Both trusted: with the control plane held back (no markReady), the
	// new CA must not sign.
	var newCert *x509.Certificate
	poll(ctx, t, "both CAs trusted, the switch held by the rollout", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		rec, s, err := caRecord(ctx, key, ca)
		if err != nil || rec == nil {
			return false, "no record yet", err
		}
		if rec.Signer != 1 {
			return false, "", fmt.Errorf("the new CA signs before the control plane rolled out with both: %+v", rec)
		}
		vol, rolling, err := apiServerVolume(ctx, key, ca)
		if err != nil {
			return false, "", err
		}
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionCARotated)
		if len(rec.Trusted) != 2 || !rolling || c == nil || c.Reason != string(desired.CAStepWaitRollout) {
			if !rolling && len(rec.Trusted) < 2 {
				// Issue and trust roll the control plane each time.
				return false, fmt.Sprintf("record %+v", *rec), markReady(ctx)
			}
			return false, fmt.Sprintf("record %+v rolling %v volume %s %s", *rec, rolling, vol, conditionsString(got)), nil
		}
		bundle := pemCerts(t, s.Data["tls.crt"])
		if len(bundle) != 2 || !bundle[0].Equal(oldCert) || vol != caName+"-trust" || rec.Handled != "2026-11-28" {
			return false, "", fmt.Errorf("both trusted: bundle of %d, volume %s, record %+v", len(bundle), vol, *rec)
		}
		if len(s.OwnerReferences) != 0 {
			return false, "", fmt.Errorf("trust Secret has owners %v: garbage collection would delete it under Retain", s.OwnerReferences)
		}
		newCert = bundle[1]
		return true, "", nil
	})
	leaf, err := secretData(ctx, ns, leafName)
	if err != nil {
		t.Fatal(err)
	}
	if pemCerts(t, leaf["tls.crt"])[0].CheckSignatureFrom(oldCert) != nil {
		t.Error("the leaf was re-issued before the control plane trusted the new CA")
	}
	if newCert.Subject.CommonName != oldCert.Subject.CommonName+"-2" || !newCert.IsCA {
		t.Errorf("the new CA is %s (CA %v)", newCert.Subject.CommonName, newCert.IsCA)
	}

	// Released: the rotation runs to its end.
	seen := map[string]bool{}
	poll(ctx, t, "rotation finished", 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := markReady(ctx); err != nil {
			return false, "", err
		}
		rec, s, err := caRecord(ctx, key, ca)
		if err != nil {
			return false, "", err
		}
		seen[fmt.Sprint(rec.Trusted, rec.Signer)] = true
		leaf, err := secretData(ctx, ns, leafName)
		if err != nil {
			return false, "", err
		}
		byNew := pemCerts(t, leaf["tls.crt"])[0].CheckSignatureFrom(newCert) == nil
		if byNew && len(pemCerts(t, s.Data["tls.crt"])) != 2 && !slices.Equal(rec.Trusted, []int{2}) {
			return false, "", fmt.Errorf("a leaf of the new CA while the bundle holds %d certificates", len(pemCerts(t, s.Data["tls.crt"])))
		}
		if !byNew && !slices.Equal(rec.Trusted, []int{1, 2}) && !slices.Equal(rec.Trusted, []int{1}) {
			return false, "", fmt.Errorf("the old CA dropped while the leaf is still its: %+v", *rec)
		}
		_, oldErr := secretData(ctx, ns, caName)
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		done := slices.Equal(rec.Trusted, []int{2}) && rec.Signer == 2 && byNew && apierrors.IsNotFound(oldErr) &&
			hasCondition(got, v1alpha1.ConditionCARotated, metav1.ConditionTrue, v1alpha1.ReasonCAsInUse)
		return done, fmt.Sprintf("record %+v leaf by new %v old Secret %v %s", *rec, byNew, oldErr, conditionsString(got)), nil
	})
	if !seen["[1 2] 2"] {
		t.Errorf("no pass saw both trusted with the new CA signing: %v", seen)
	}
	_, s, err := caRecord(ctx, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	if b := pemCerts(t, s.Data["tls.crt"]); len(b) != 1 || !b[0].Equal(newCert) {
		t.Errorf("the bundle after the rotation holds %d certificates", len(b))
	}
	for _, obj := range []client.Object{&cmapi.Certificate{}, &cmapi.Issuer{}} {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: caName}, obj)
		if !apierrors.IsNotFound(err) {
			t.Errorf("the old CA's %T is still there: %v", obj, err)
		}
	}
}

package power

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
)

// The keys of the Secrets spec.power names.
const (
	// KeyUsername and KeyPassword are the BMC's credentials in
	// spec.power.credentialsSecret.
	KeyUsername = "username"
	KeyPassword = "password"
	// KeyCA is the PEM CA bundle in spec.power.caSecret.
	KeyCA = "ca.crt"
)

// ErrCredentialsMissing is wrapped by Resolve's error when a Secret that
// spec.power names does not exist or lacks a key (an empty value counts
// as missing): the PowerControl condition's PowerCredentialsMissing.
var ErrCredentialsMissing = errors.New("power credentials missing")

// Resolve builds the Target of m's spec.power: the spec, and the
// credentials and CA read from the Secrets it names in m's namespace.
// reader should be uncached (the manager's API reader): these Secrets are
// the operator's, and the manager's cache holds only kubefarm's own.
//
// A missing Secret or key, or a credentials Secret without
// LabelBMCCredentials=true, is an error wrapping ErrCredentialsMissing that
// names the Machine, the field, the Secret and the key or label. No error carries a
// value read from a Secret.
func Resolve(ctx context.Context, reader client.Reader, m *v1alpha1.Machine) (Target, error) {
	name := m.Namespace + "/" + m.Name
	if m.Spec.Power == nil {
		return Target{}, fmt.Errorf("power control of Machine %s: %w", name, ErrNoPowerControl)
	}
	t := Target{Machine: name, Spec: *m.Spec.Power}
	if s := t.Spec.CredentialsSecret; s != "" {
		data, err := secretKeys(ctx, reader, m, "spec.power.credentialsSecret", s, true, KeyUsername, KeyPassword)
		if err != nil {
			return Target{}, err
		}
		t.Username, t.Password = string(data[0]), string(data[1])
	}
	if s := t.Spec.CASecret; s != "" {
		data, err := secretKeys(ctx, reader, m, "spec.power.caSecret", s, false, KeyCA)
		if err != nil {
			return Target{}, err
		}
		t.CA = data[0]
	}
	return t, nil
}

// secretKeys reads the Secret named by field and returns the values of
// keys, in order. A Secret whose values go to the BMC (credentials) must
// carry LabelBMCCredentials=true: the BMC's address is the pool author's
// choice, the Secret's contents are not.
func secretKeys(ctx context.Context, reader client.Reader, m *v1alpha1.Machine, field, secret string, sent bool, keys ...string) ([][]byte, error) {
	s := &corev1.Secret{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: secret}, s)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%s of Machine %s/%s: Secret %s/%s does not exist: %w", field, m.Namespace, m.Name, m.Namespace, secret, ErrCredentialsMissing)
	case err != nil:
		return nil, fmt.Errorf("%s of Machine %s/%s: reading Secret %s/%s: %w", field, m.Namespace, m.Name, m.Namespace, secret, err)
	}
	if sent && s.Labels[v1alpha1.LabelBMCCredentials] != "true" {
		return nil, fmt.Errorf("%s of Machine %s/%s: Secret %s/%s lacks the label %s=true that lets the manager send it to a BMC (docs/power.md): %w",
			field, m.Namespace, m.Name, m.Namespace, secret, v1alpha1.LabelBMCCredentials, ErrCredentialsMissing)
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		if len(s.Data[k]) == 0 {
			return nil, fmt.Errorf("%s of Machine %s/%s: Secret %s/%s has no key %q (or it is empty): %w",
				field, m.Namespace, m.Name, m.Namespace, secret, k, ErrCredentialsMissing)
		}
		out[i] = s.Data[k]
	}
	return out, nil
}

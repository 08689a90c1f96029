// Package machine is the admission webhook of Machines: a Machine may use a
// boot MAC or a static IP only while the AddressClaim of that address names
// it (docs/addresses.md).
//
// Creating the claim is the atomic step, done by whoever makes the Machine
// (the NodePool controller, or an administrator by hand) before the
// Machine: of two creates of one claim the API server admits one. This
// webhook holds every Machine to the claims, reading them from the API
// server, never a cache: a claim created a moment ago counts at once, and
// one still in a cache but deleted does not. It applies to every writer,
// kubefarm-manager included, so there is no identity to trust and no
// Machine that skips the claims.
package machine

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// ClaimValidator refuses a Machine whose MACs or IP are not claimed for it.
type ClaimValidator struct {
	// Reader must read from the API server (the manager's APIReader), not
	// from a cache.
	Reader client.Reader
}

var _ admission.Validator[*kubefarmv1.Machine] = &ClaimValidator{}

// The matchConditions keep the updates that leave spec.macs and spec.ip
// alone (labels, owner references, the controllers' spec writes of other
// fields) away from the webhook, so they do not depend on it being up;
// status writes go to the status subresource, which the rule does not
// name. failurePolicy Fail still applies to every Machine created and every
// address changed.
//
// +kubebuilder:webhook:path=/validate-kubefarm-io-v1alpha1-machine,mutating=false,failurePolicy=fail,sideEffects=None,groups=kubefarm.io,resources=machines,verbs=create;update,versions=v1alpha1,name=machine-addresses.kubefarm.io,admissionReviewVersions=v1,timeoutSeconds=10,patch=`{"matchConditions":[{"name":"addresses-set-or-changed","expression":"request.operation != 'UPDATE' || object.spec.macs != oldObject.spec.macs || object.spec.ip != oldObject.spec.ip"}]}`
// +kubebuilder:rbac:groups=kubefarm.io,resources=addressclaims,verbs=get

// ValidateCreate checks a new Machine's addresses.
func (v *ClaimValidator) ValidateCreate(ctx context.Context, m *kubefarmv1.Machine) (admission.Warnings, error) {
	return nil, v.validate(ctx, m)
}

// ValidateUpdate checks a Machine's new addresses.
func (v *ClaimValidator) ValidateUpdate(ctx context.Context, _, m *kubefarmv1.Machine) (admission.Warnings, error) {
	return nil, v.validate(ctx, m)
}

// ValidateDelete allows every deletion (the configuration does not ask).
func (v *ClaimValidator) ValidateDelete(context.Context, *kubefarmv1.Machine) (admission.Warnings, error) {
	return nil, nil
}

func (v *ClaimValidator) validate(ctx context.Context, m *kubefarmv1.Machine) error {
	holder := kubefarmv1.HolderOf(m)
	var errs field.ErrorList
	check := func(path *field.Path, kind kubefarmv1.AddressKind, addr string) error {
		msg, err := v.check(ctx, holder, kind, addr)
		if err != nil {
			return err
		}
		if msg != "" {
			errs = append(errs, field.Invalid(path, addr, msg))
		}
		return nil
	}
	spec := field.NewPath("spec")
	for i, mac := range m.Spec.MACs {
		if err := check(spec.Child("macs").Index(i), kubefarmv1.AddressMAC, mac); err != nil {
			return err
		}
	}
	if err := check(spec.Child("ip"), kubefarmv1.AddressIPv4, m.Spec.IP); err != nil {
		return err
	}
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(kubefarmv1.GroupVersion.WithKind("Machine").GroupKind(), m.Name, errs)
}

// check says what is wrong with the claim of one address for holder, or ""
// when it is held for it. A failed read is an error: the webhook then
// refuses (fails closed) rather than admit an address it could not check.
func (v *ClaimValidator) check(ctx context.Context, holder kubefarmv1.AddressHolder, kind kubefarmv1.AddressKind, addr string) (string, error) {
	name := kubefarmv1.AddressClaimName(kind, addr)
	claim := &kubefarmv1.AddressClaim{}
	switch err := v.Reader.Get(ctx, client.ObjectKey{Name: name}, claim); {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("not claimed: create AddressClaim %s for %s first (the NodePool controller does so for its pools)", name, holder), nil
	case err != nil:
		return "", apierrors.NewInternalError(fmt.Errorf("reading AddressClaim %s: %w", name, err))
	}
	if claim.Spec.Holder != holder {
		return fmt.Sprintf("claimed by %s (AddressClaim %s)", claim.Spec.Holder, name), nil
	}
	return "", nil
}

package tenantcluster

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/kubeversion"
	"github.com/kubefarm/kubefarm/internal/upgradeplan"
)

// VersionValidator admits TenantCluster versions per the package
// documentation. It reads nothing but the request, so it needs no cache.
type VersionValidator struct {
	// MinVersion and MaxVersion bound, as v1.MINOR, the minors a
	// TenantCluster may be created at or moved to.
	MinVersion, MaxVersion string
}

var _ admission.Validator[*kubefarmv1.TenantCluster] = &VersionValidator{}

// The matchConditions patch keeps updates that leave spec.version alone away
// from the webhook: they are always admitted, and without the call a
// finalizer removal (and so a deletion) does not depend on the webhook being
// up. failurePolicy Fail still applies to every version change.
//
// +kubebuilder:webhook:path=/validate-kubefarm-io-v1alpha1-tenantcluster,mutating=false,failurePolicy=fail,sideEffects=None,groups=kubefarm.io,resources=tenantclusters,verbs=create;update,versions=v1alpha1,name=tenantcluster-version.kubefarm.io,admissionReviewVersions=v1,timeoutSeconds=10,patch=`{"matchConditions":[{"name":"version-set-or-changed","expression":"request.operation != 'UPDATE' || object.spec.version != oldObject.spec.version"}]}`

// SetupWithManager checks the window and registers the webhook at
// /validate-kubefarm-io-v1alpha1-tenantcluster.
func (v *VersionValidator) SetupWithManager(mgr ctrl.Manager) error {
	if _, err := v.window(); err != nil {
		return err
	}
	return ctrl.NewWebhookManagedBy(mgr, &kubefarmv1.TenantCluster{}).WithValidator(v).Complete()
}

// window parses the bounds; a bad window is a programming error that
// SetupWithManager reports at start-up.
func (v *VersionValidator) window() (kubeversion.Window, error) {
	return kubeversion.ParseWindow(v.MinVersion, v.MaxVersion)
}

// Validate is ValidateVersionChange plus the window, for the new version
// and every minor an upgrade steps through. old is nil on CREATE.
func (v *VersionValidator) Validate(old, tc *kubefarmv1.TenantCluster) field.ErrorList {
	exempt, errs := validateChange(old, tc)
	if exempt || len(errs) > 0 {
		return errs
	}
	w, err := v.window()
	if err != nil {
		// Fail closed: an unknown window admits nothing new.
		return field.ErrorList{field.InternalError(versionPath, err)}
	}
	nv, _ := kubeversion.Parse(tc.Spec.Version) // validateChange parsed it
	if !w.Contains(nv.Minor) {
		return field.ErrorList{field.Invalid(versionPath, tc.Spec.Version,
			fmt.Sprintf("this kubefarm supports Kubernetes %s to %s", v.MinVersion, v.MaxVersion))}
	}
	if old == nil {
		return nil
	}
	// No rollout is in progress (validateChange), so the old spec.version
	// is what runs, or what the first rollout is still rolling out.
	pv, _ := kubeversion.Parse(old.Spec.Version)
	if _, err := upgradeplan.Steps(pv, nv, w, nil); err != nil {
		return field.ErrorList{field.Forbidden(versionPath, err.Error())}
	}
	return nil
}

// ValidateCreate checks a new cluster's version.
func (v *VersionValidator) ValidateCreate(_ context.Context, tc *kubefarmv1.TenantCluster) (admission.Warnings, error) {
	return nil, invalid(tc, v.Validate(nil, tc))
}

// ValidateUpdate checks a version change.
func (v *VersionValidator) ValidateUpdate(_ context.Context, old, tc *kubefarmv1.TenantCluster) (admission.Warnings, error) {
	return nil, invalid(tc, v.Validate(old, tc))
}

// ValidateDelete allows every deletion (the configuration does not even ask).
func (v *VersionValidator) ValidateDelete(context.Context, *kubefarmv1.TenantCluster) (admission.Warnings, error) {
	return nil, nil
}

func invalid(tc *kubefarmv1.TenantCluster, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(kubefarmv1.GroupVersion.WithKind("TenantCluster").GroupKind(), tc.Name, errs)
}

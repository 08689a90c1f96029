package nodepool

import (
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// validateBlockingPodSelector checks spec.rollout.blockingPodSelector as
// the API server checks a Deployment's selector (label keys and values, the
// operators and their values), so a pool author learns of a bad selector at
// apply time instead of from the rollout's InvalidStrategy.
func validateBlockingPodSelector(pool *kubefarmv1.NodePool) field.ErrorList {
	sel := pool.Spec.Rollout.BlockingPodSelector
	if sel == nil {
		return nil
	}
	return metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{},
		field.NewPath("spec", "rollout", "blockingPodSelector"))
}

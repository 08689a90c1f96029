package nodepool

import (
	"strings"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/alertgate"
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

// validateAlertGate compiles spec.rollout.alertGate's include and exclude
// patterns as the rollout will (anchored RE2). Whether the source exists
// is the manager's configuration, not the pool's: an unknown source shows
// as the rollout's InvalidStrategy, so a pool applied before the flag is
// set is not refused.
func validateAlertGate(pool *kubefarmv1.NodePool) field.ErrorList {
	g := pool.Spec.Rollout.AlertGate
	if g == nil {
		return nil
	}
	if _, err := alertgate.Compile(g.Include, g.Exclude); err != nil {
		name, _, _ := strings.Cut(err.Error(), ":")
		value := g.Include
		if name == "exclude" {
			value = g.Exclude
		}
		return field.ErrorList{field.Invalid(field.NewPath("spec", "rollout", "alertGate", name), value, err.Error())}
	}
	return nil
}

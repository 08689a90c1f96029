package nodepool

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func TestValidateBlockingPodSelector(t *testing.T) {
	for _, tc := range []struct {
		name string
		sel  *metav1.LabelSelector
		want string // "" : valid
	}{
		{name: "none"},
		{name: "labels", sel: &metav1.LabelSelector{MatchLabels: map[string]string{"kured.io/blocks-reboot": "true"}}},
		{name: "an expression", sel: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"etl", "backup"}}}}},
		{name: "a bad key", sel: &metav1.LabelSelector{MatchLabels: map[string]string{"not a key": "x"}},
			want: "spec.rollout.blockingPodSelector.matchLabels"},
		{name: "In without values", sel: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: metav1.LabelSelectorOpIn}}},
			want: "spec.rollout.blockingPodSelector.matchExpressions[0].values"},
		{name: "an unknown operator", sel: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: "Near", Values: []string{"x"}}}},
			want: "spec.rollout.blockingPodSelector.matchExpressions[0].operator"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := &kubefarmv1.NodePool{}
			pool.Spec.Rollout.BlockingPodSelector = tc.sel
			errs := validateBlockingPodSelector(pool)
			if tc.want == "" {
				if len(errs) != 0 {
					t.Fatalf("rejected: %v", errs)
				}
				return
			}
			if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Fatalf("errors %v, want one naming %s", errs, tc.want)
			}
		})
	}
}

func TestValidateAlertGate(t *testing.T) {
	for _, tc := range []struct {
		name, include, exclude, want string
	}{
		{name: "no patterns"},
		{name: "both", include: "Node.*|Kube.*", exclude: "Watchdog"},
		{name: "a bad include", include: "(", want: "spec.rollout.alertGate.include"},
		{name: "a bad exclude", exclude: "[a-", want: "spec.rollout.alertGate.exclude"},
		{name: "a Perl-only construct", include: "(?=x)", want: "spec.rollout.alertGate.include"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := &kubefarmv1.NodePool{}
			pool.Spec.Rollout.AlertGate = &kubefarmv1.AlertGate{Source: "prod", Include: tc.include, Exclude: tc.exclude}
			errs := validateAlertGate(pool)
			if tc.want == "" {
				if len(errs) != 0 {
					t.Fatalf("rejected: %v", errs)
				}
				return
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
				t.Fatalf("errors %v, want one naming %s", errs, tc.want)
			}
		})
	}
}

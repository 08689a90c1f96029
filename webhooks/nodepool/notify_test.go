package nodepool

import (
	"strings"
	"testing"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func TestValidateNotify(t *testing.T) {
	for _, tc := range []struct {
		name, tmpl, want string
	}{
		{name: "the default template"},
		{name: "a custom template", tmpl: `{{.Event}}: {{.Machine}} {{if .Detail}}({{.Detail}}){{end}}`},
		{name: "an unknown field", tmpl: `{{.Password}}`, want: "Password"},
		{name: "a parse error", tmpl: `{{if .Event}}`, want: "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := &kubefarmv1.NodePool{}
			pool.Name = "workers"
			pool.Spec.Rollout.Notify = &kubefarmv1.RolloutNotify{URLSecret: "chat", Template: tc.tmpl}
			errs := validateNotify(pool)
			if tc.want == "" {
				if len(errs) != 0 {
					t.Fatalf("rejected: %v", errs)
				}
				return
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), "spec.rollout.notify.template") || !strings.Contains(errs[0].Error(), tc.want) {
				t.Fatalf("errors %v, want one on spec.rollout.notify.template saying %q", errs, tc.want)
			}
		})
	}
	if errs := validateNotify(&kubefarmv1.NodePool{}); errs != nil {
		t.Errorf("a pool without notify: %v", errs)
	}
}

package nodepool

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func TestValidateDynamicRange(t *testing.T) {
	tests := []struct {
		name       string
		pool       string
		start, end string
		want       []string // each must appear in the single error; nil = valid
	}{
		{"one address", "p", "10.0.0.5", "10.0.0.5", nil},
		{"ordinary", "p", "10.0.0.100", "10.0.0.199", nil},
		{"largest", "p", "10.0.0.0", "10.0.255.255", nil},
		{"end below start", "p", "10.0.0.200", "10.0.0.100",
			[]string{"spec.network.dynamicRange.end", `"10.0.0.100"`, "must not be below spec.network.dynamicRange.start 10.0.0.200"}},
		{"end below start in another octet", "p", "10.0.1.0", "10.0.0.255",
			[]string{"spec.network.dynamicRange.end", "must not be below"}},
		{"one too many", "p", "10.0.0.0", "10.1.0.0",
			[]string{"spec.network.dynamicRange.end", "holds 65537 addresses; at most 65536"}},
		{"whole IPv4 space", "p", "0.0.0.0", "255.255.255.255",
			[]string{"spec.network.dynamicRange.end", "holds 4294967296 addresses"}},
		{"unparsable is left to the CRD", "p", "10.0.0.x", "10.0.0.1", nil},
		{"pool name too long for lease names", strings.Repeat("p", 238), "10.0.0.1", "10.0.0.2",
			[]string{"spec.network.dynamicRange", "at most 237 characters"}},
		{"longest pool name", strings.Repeat("p", 237), "10.0.0.1", "10.0.0.2", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := &kubefarmv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: tt.pool}}
			pool.Spec.Network.DynamicRange = &kubefarmv1.DynamicRange{Start: tt.start, End: tt.end}
			errs := validateDynamicRange(pool)
			if tt.want == nil {
				if len(errs) != 0 {
					t.Fatalf("rejected: %v", errs)
				}
				return
			}
			if len(errs) != 1 {
				t.Fatalf("got %d errors (%v), want 1", len(errs), errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(errs[0].Error(), w) {
					t.Errorf("%q does not mention %q", errs[0].Error(), w)
				}
			}
		})
	}
	if errs := validateDynamicRange(&kubefarmv1.NodePool{}); errs != nil {
		t.Errorf("a pool without a range got %v", errs)
	}
}

package v1alpha1_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// TestRegistryMirrorPatterns: the patterns kubefarm-agent checks mirrors
// with are the ones the API server enforces (the markers cannot name the
// constants, so a changed marker must fail here).
func TestRegistryMirrorPatterns(t *testing.T) {
	b, err := os.ReadFile("../../config/crd/bases/kubefarm.io_nodepools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := string(b)
	for _, p := range []string{kubefarmv1.RegistryPattern, kubefarmv1.MirrorEndpointPattern} {
		if !strings.Contains(crd, "pattern: "+p+"\n") {
			t.Errorf("the NodePool CRD has no pattern %s", p)
		}
	}
	// registryMirrors[].endpoints: its block up to the next field.
	_, endpoints, _ := strings.Cut(crd, "registryMirrors:")
	_, endpoints, _ = strings.Cut(endpoints, "endpoints:")
	endpoints, _, _ = strings.Cut(endpoints, "registry:")
	if want := fmt.Sprintf("maxItems: %d\n", kubefarmv1.MaxMirrorEndpoints); !strings.Contains(endpoints, want) {
		t.Errorf("the CRD's registryMirrors[].endpoints has no %q:%s", strings.TrimSpace(want), endpoints)
	}
}

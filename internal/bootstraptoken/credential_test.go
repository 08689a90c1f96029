package bootstraptoken_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

// TestCredentialSecretName: valid, readable, and distinct for pairs whose
// joined names are the same.
func TestCredentialSecretName(t *testing.T) {
	a, b := bootstraptoken.CredentialSecretName("a-b", "c"), bootstraptoken.CredentialSecretName("a", "b-c")
	if a == b {
		t.Errorf("a-b/c and a/b-c share the credential name %s", a)
	}
	if !strings.HasPrefix(a, "token-issuer-a-b-c-") {
		t.Errorf("name %q does not start with token-issuer-<namespace>-<cluster>-", a)
	}
	if bootstraptoken.CredentialSecretName("a-b", "c") != a {
		t.Error("the name is not deterministic")
	}
	long := bootstraptoken.CredentialSecretName(strings.Repeat("n", 63), strings.Repeat("c", 200))
	for _, n := range []string{a, b, long} {
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			t.Errorf("%q is not a valid Secret name: %v", n, msgs)
		}
	}
	if long == bootstraptoken.CredentialSecretName(strings.Repeat("n", 63), strings.Repeat("c", 201)) {
		t.Error("names cut to length collide")
	}
}

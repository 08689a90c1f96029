//go:build e2e

package e2e

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func runtimeScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := kubefarmv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

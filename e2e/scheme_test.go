//go:build e2e

package e2e

import (
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// The scenarios' controller-runtime clients log nothing worth reading (their
// errors are returned); without a logger controller-runtime prints a stack
// trace into the test output saying none was set.
func init() { ctrllog.SetLogger(logr.Discard()) }

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

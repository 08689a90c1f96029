package v1alpha1_test

import (
	"testing"

	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// env is one real etcd + kube-apiserver with the CRDs installed, shared by the
// package's tests; each test works in its own namespace.
var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, &env) }

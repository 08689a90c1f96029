package v1alpha1_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/kubefarm/kubefarm/internal/testenv"
)

// env is one real etcd + kube-apiserver with the CRDs installed, shared by the
// package's tests; each test works in its own namespace.
var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start(testenv.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration environment:", err)
		if env != nil {
			_ = env.Stop()
		}
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the integration environment:", err)
	}
	os.Exit(code)
}

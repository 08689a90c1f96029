// Package examples loads the objects in examples/, which the tests and the
// benchmarks start from, so that they exercise what an operator would write
// rather than a shape of their own, and fail when an example stops being
// valid.
package examples

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"sigs.k8s.io/yaml"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// TenantCluster reads examples/tenantcluster.yaml.
func TenantCluster() (*kubefarmv1.TenantCluster, error) {
	tc := &kubefarmv1.TenantCluster{}
	return tc, load("tenantcluster.yaml", tc)
}

// NodePool reads examples/nodepool.yaml.
func NodePool() (*kubefarmv1.NodePool, error) {
	p := &kubefarmv1.NodePool{}
	return p, load("nodepool.yaml", p)
}

// BootImage reads examples/bootimage.yaml.
func BootImage() (*kubefarmv1.BootImage, error) {
	img := &kubefarmv1.BootImage{}
	return img, load("bootimage.yaml", img)
}

// load decodes one example strictly: a field the API does not know is an
// error, not silently dropped. The folder is found from this source file's
// place in the repository, so tests and benchmarks built from the checkout
// read the checkout's examples wherever they run.
func load(name string, into any) error {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return errors.New("cannot locate the examples package's source")
	}
	rel := filepath.Join("examples", name)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "..", rel))
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

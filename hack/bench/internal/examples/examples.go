// Package examples loads the objects in examples/ that the benchmarks start
// from, so that they measure what an operator would write rather than a
// shape of their own.
package examples

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// TenantCluster reads examples/tenantcluster.yaml below the repository root,
// strictly: a field the API does not know is an error, not silently dropped.
func TenantCluster(root string) (*kubefarmv1.TenantCluster, error) {
	const rel = "examples/tenantcluster.yaml"
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	tc := &kubefarmv1.TenantCluster{}
	if err := yaml.UnmarshalStrict(data, tc); err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	return tc, nil
}

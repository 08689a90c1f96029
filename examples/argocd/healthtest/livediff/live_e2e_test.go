//go:build e2e

package livediff

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestRenderedMatchesLive diffs the release manifest kubefarm's e2e test
// installed (desired.yaml) with the live objects after the controllers ran
// (live.yaml), both written into $KUBEFARM_ARGO_DIFF_DIR by the e2e test.
// `make e2e` runs it after the e2e tests.
func TestRenderedMatchesLive(t *testing.T) {
	dir := os.Getenv("KUBEFARM_ARGO_DIFF_DIR")
	if dir == "" {
		t.Fatal("KUBEFARM_ARGO_DIFF_DIR is not set: it names the directory the e2e test writes desired.yaml and live.yaml into")
	}
	desired := readE2E(t, filepath.Join(dir, "desired.yaml"))
	live := readE2E(t, filepath.Join(dir, "live.yaml"))
	managed := Managed(desired)
	if len(managed) == 0 {
		t.Fatalf("%s renders no object ArgoCD would compare", filepath.Join(dir, "desired.yaml"))
	}
	drifts, err := Check(desired, live)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compared %d rendered objects with %d live objects using argo-cd's StateDiffs", len(managed), len(live))
	if len(drifts) > 0 {
		t.Fatalf("ArgoCD would show %d of %d objects OutOfSync:\n%s", len(drifts), len(managed), Describe(drifts))
	}
}

func readE2E(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (the e2e test writes it after the controllers ran)", err)
	}
	objs, err := Parse(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(objs) == 0 {
		t.Fatalf("%s holds no objects", path)
	}
	return objs
}

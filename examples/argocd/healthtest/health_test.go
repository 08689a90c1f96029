// Package healthtest runs kubefarm's ArgoCD health checks
// (../resource_customizations/kubefarm.io/<Kind>/health.lua) through
// ArgoCD's own code: the argocd-cm patch is read by ArgoCD's settings
// manager into resource overrides, and each sample object is judged by
// lua.ResourceHealthOverrides, which is what the application controller
// calls. It is a module of its own so that argo-cd's Kubernetes pins stay
// out of kubefarm's go.mod.
package healthtest

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/argoproj/argo-cd/v3/util/lua"
	"github.com/argoproj/argo-cd/v3/util/settings"
	"github.com/argoproj/gitops-engine/pkg/health"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"
)

const (
	group         = "kubefarm.io"
	customization = "../resource_customizations/" + group
	patchPath     = "../argocd-cm-patch.yaml"
	// crdDir is where controller-gen writes kubefarm's CRDs: every kind
	// there must have a health check.
	crdDir = "../../../config/crd/bases"
)

var update = flag.Bool("update", false, "rewrite ../argocd-cm-patch.yaml from the health.lua files")

// kinds are the directories under resource_customizations/kubefarm.io.
func kinds(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(customization)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		t.Fatalf("no kinds under %s", customization)
	}
	return out
}

func script(t *testing.T, kind string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(customization, kind, "health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// configMapKey is the argocd-cm key ArgoCD reads a kind's health check
// from (resource.customizations.health.<group>_<kind>).
func configMapKey(kind string) string {
	return "resource.customizations.health." + group + "_" + kind
}

// renderPatch is argocd-cm-patch.yaml for the scripts, written by hand
// rather than by a YAML encoder so that each script stays a readable
// literal block.
func renderPatch(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(`# Generated from resource_customizations/kubefarm.io/*/health.lua by
#   cd examples/argocd/healthtest && go test -run TestConfigMapPatch -update
# Do not edit: TestConfigMapPatch fails when this file and the scripts differ.
#
# kubefarm's resource health checks for ArgoCD. Apply as a patch of the
# argocd-cm ConfigMap, e.g.
#   kubectl -n argocd patch configmap argocd-cm --patch-file argocd-cm-patch.yaml
# or list it under "patches" in the kustomization that installs ArgoCD.
apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cm
  labels:
    app.kubernetes.io/name: argocd-cm
    app.kubernetes.io/part-of: argocd
data:
`)
	for _, k := range kinds(t) {
		b.WriteString("  " + configMapKey(k) + ": |\n")
		for _, line := range strings.SplitAfter(strings.TrimSuffix(script(t, k), "\n"), "\n") {
			if strings.TrimSpace(line) == "" {
				b.WriteString("\n")
				continue
			}
			b.WriteString("    " + line)
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

// TestConfigMapPatch keeps argocd-cm-patch.yaml identical to what the
// scripts render to, and checks that it parses back to the scripts byte
// for byte (a YAML literal block can lose trailing blank lines or tabs).
func TestConfigMapPatch(t *testing.T) {
	want := renderPatch(t)
	if *update {
		if err := os.WriteFile(patchPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(patchPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the health.lua files; run: cd examples/argocd/healthtest && go test -run TestConfigMapPatch -update", patchPath)
	}
	cm := readPatch(t)
	var keys []string
	for _, k := range kinds(t) {
		keys = append(keys, configMapKey(k))
		if cm.Data[configMapKey(k)] != script(t, k) {
			t.Errorf("%s: the YAML value is not %s/health.lua byte for byte", configMapKey(k), k)
		}
	}
	for k := range cm.Data {
		if !slices.Contains(keys, k) {
			t.Errorf("%s: key without a health.lua", k)
		}
	}
}

func readPatch(t *testing.T) *corev1.ConfigMap {
	t.Helper()
	b, err := os.ReadFile(patchPath)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := yaml.UnmarshalStrict(b, cm); err != nil {
		t.Fatalf("%s: %v", patchPath, err)
	}
	return cm
}

// overrides are the resource overrides ArgoCD's settings manager makes of
// argocd-cm once the patch is applied, from a fake API server holding it.
func overrides(t *testing.T) lua.ResourceHealthOverrides {
	t.Helper()
	cm := readPatch(t)
	cm.Namespace = "argocd"
	mgr := settings.NewSettingsManager(context.Background(), fake.NewClientset(cm), "argocd")
	o, err := mgr.GetResourceOverrides()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

type healthTests struct {
	Tests []struct {
		InputPath    string              `json:"inputPath"`
		HealthStatus health.HealthStatus `json:"healthStatus"`
	} `json:"tests"`
}

func readTests(t *testing.T, kind string) healthTests {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(customization, kind, "health_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ht healthTests
	if err := yaml.UnmarshalStrict(b, &ht); err != nil {
		t.Fatalf("%s/health_test.yaml: %v", kind, err)
	}
	if len(ht.Tests) == 0 {
		t.Fatalf("%s/health_test.yaml lists no tests", kind)
	}
	return ht
}

func readObject(t *testing.T, kind, path string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(customization, kind, path))
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &obj.Object); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	// A sample in the wrong directory would be judged by the wrong script
	// and could pass by accident.
	if gvk := obj.GroupVersionKind(); gvk.Group != group || gvk.Kind != kind {
		t.Fatalf("%s/%s is a %s, not a %s/%s", kind, path, gvk, group, kind)
	}
	return obj
}

// TestHealth judges every sample of every kind's health_test.yaml (the
// layout of ArgoCD's resource_customizations) twice:
//   - as the application controller does with argocd-cm: the overrides the
//     settings manager read from the patch, through
//     ResourceHealthOverrides.GetResourceHealth, whose VM runs without the
//     open Lua libraries (argocd-cm's default, since the patch sets no
//     useOpenLibs);
//   - as ArgoCD's own TestLuaHealthScript runs a built-in script of the
//     resource_customizations tree: the file, with the open libraries.
func TestHealth(t *testing.T) {
	ov := overrides(t)
	for _, kind := range kinds(t) {
		ht := readTests(t, kind)
		src := script(t, kind)
		for _, tc := range ht.Tests {
			t.Run(kind+"/"+strings.TrimSuffix(filepath.Base(tc.InputPath), ".yaml"), func(t *testing.T) {
				obj := readObject(t, kind, tc.InputPath)

				s, openLibs, err := lua.VM{ResourceOverrides: ov}.GetHealthScript(obj)
				if err != nil {
					t.Fatal(err)
				}
				if s != src || openLibs {
					t.Fatalf("argocd-cm gives %s/%s a script other than health.lua (open libraries %v)", group, kind, openLibs)
				}
				got, err := ov.GetResourceHealth(obj)
				if err != nil {
					t.Fatalf("argocd-cm path: %v", err)
				}
				if got == nil || *got != tc.HealthStatus {
					t.Errorf("argocd-cm path: got %+v, want %+v", got, tc.HealthStatus)
				}

				got, err = lua.VM{UseOpenLibs: true}.ExecuteHealthLua(obj, src)
				if err != nil {
					t.Fatalf("resource_customizations path: %v", err)
				}
				if *got != tc.HealthStatus {
					t.Errorf("resource_customizations path: got %+v, want %+v", got, tc.HealthStatus)
				}
			})
		}
	}
}

// naive is the check these scripts replace: Ready=True means Healthy.
const naive = `
hs = {status = "Progressing", message = "naive"}
if obj.status ~= nil and obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if (c.type == "Ready" or c.type == "NodeReady") and c.status == "True" then
      hs.status = "Healthy"
    end
  end
end
return hs
`

// TestStaleSamplesFoolANaiveCheck proves that the samples named
// *stale* test what they are meant to: a Ready=True check calls each of
// them Healthy, so a script that forgot observedGeneration would fail
// TestHealth on them.
func TestStaleSamplesFoolANaiveCheck(t *testing.T) {
	n := 0
	for _, kind := range kinds(t) {
		for _, tc := range readTests(t, kind).Tests {
			if !strings.Contains(strings.ToLower(tc.InputPath), "stale") {
				continue
			}
			n++
			got, err := lua.VM{}.ExecuteHealthLua(readObject(t, kind, tc.InputPath), naive)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != health.HealthStatusHealthy || tc.HealthStatus.Status != health.HealthStatusProgressing {
				t.Errorf("%s/%s: a naive check says %s and the expected verdict is %s; the sample does not catch a missing generation check",
					kind, tc.InputPath, got.Status, tc.HealthStatus.Status)
			}
		}
	}
	if n < 4 {
		t.Errorf("%d stale samples; want one per kind with a generation (TenantCluster, NodePool twice, Machine, BootImage)", n)
	}
}

// TestEveryKindHasACheck fails when kubefarm gains a kind (a CRD under
// config/crd/bases) without a health check here, and when a check is
// left for a kind that no longer exists.
func TestEveryKindHasACheck(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(crdDir, group+"_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s (%v)", crdDir, err)
	}
	var crdKinds []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd struct {
			Spec struct {
				Group string `json:"group"`
				Names struct {
					Kind string `json:"kind"`
				} `json:"names"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if crd.Spec.Group == group {
			crdKinds = append(crdKinds, crd.Spec.Names.Kind)
		}
	}
	slices.Sort(crdKinds)
	if have := kinds(t); !slices.Equal(have, crdKinds) {
		t.Errorf("health checks for %v, CRDs for %v", have, crdKinds)
	}
}

package livediff

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// golden is what charts/kubefarm renders for charts/testdata/cluster/generic.yaml's
// values (TestClusterChart in the main module keeps it current).
const golden = "../../../../charts/testdata/cluster/generic.yaml"

func read(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
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

func readCase(t *testing.T, name string) (desired, live []*unstructured.Unstructured) {
	t.Helper()
	dir := filepath.Join("testdata", name)
	return read(t, filepath.Join(dir, "desired.yaml")), read(t, filepath.Join(dir, "live.yaml"))
}

func check(t *testing.T, desired, live []*unstructured.Unstructured) []Drift {
	t.Helper()
	drifts, err := Check(desired, live)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range drifts {
		t.Logf("drift: %s", d)
	}
	return drifts
}

// withLastApplied is live as `kubectl apply` of desired (what ArgoCD's
// default client-side sync runs) would leave it: the same objects with
// kubectl's last-applied-configuration annotation holding desired.
func withLastApplied(t *testing.T, desired, live []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	byName := map[string]*unstructured.Unstructured{}
	for _, d := range desired {
		byName[d.GetKind()+"/"+d.GetName()] = d
	}
	var out []*unstructured.Unstructured
	for _, l := range live {
		l = l.DeepCopy()
		d := byName[l.GetKind()+"/"+l.GetName()]
		if d == nil {
			t.Fatalf("no desired %s %s", l.GetKind(), l.GetName())
		}
		b, err := json.Marshal(d.Object)
		if err != nil {
			t.Fatal(err)
		}
		a := l.GetAnnotations()
		a[corev1.LastAppliedConfigAnnotation] = string(b)
		l.SetAnnotations(a)
		out = append(out, l)
	}
	return out
}

// TestDesiredIsTheChartGolden keeps every testdata/*/desired.yaml equal to
// the chart's golden render, so the cases test what the chart renders
// today.
func TestDesiredIsTheChartGolden(t *testing.T) {
	b, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	// The golden file is `helm template` output with the NOTES: drop the
	// NOTES and make every "# Source:" line a document separator.
	var lines []string
	notes := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "# Source:") {
			notes = strings.HasSuffix(line, "/NOTES.txt")
			lines = append(lines, "---")
			continue
		}
		if !notes {
			lines = append(lines, line)
		}
	}
	want, err := Parse([]byte(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatalf("%s: %v", golden, err)
	}
	wantByKey := keyed(want)
	if len(wantByKey) != 3 {
		t.Fatalf("%s renders %d objects, the testdata has 3 (a TenantCluster and two NodePools)", golden, len(wantByKey))
	}
	dirs, err := filepath.Glob("testdata/*/desired.yaml")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no testdata/*/desired.yaml: %v", err)
	}
	for _, p := range dirs {
		got := keyed(read(t, p))
		if !reflect.DeepEqual(got, wantByKey) {
			t.Errorf("%s is not %s's objects; regenerate it from the golden file", p, golden)
		}
	}
}

func keyed(objs []*unstructured.Unstructured) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, o := range objs {
		out[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = o.Object
	}
	return out
}

func TestInSync(t *testing.T) {
	desired, live := readCase(t, "insync")
	if d := check(t, desired, live); len(d) != 0 {
		t.Errorf("%d drifts between the chart's render and live objects that differ only in what the API server and the controllers write:\n%s", len(d), Describe(d))
	}
}

// wantDrifted are the drifts testdata/drifted/live.yaml holds.
var wantDrifted = []Drift{
	{Group: "kubefarm.io", Kind: "TenantCluster", Namespace: "farm1", Name: "farm1", Fields: []Field{
		{Path: "spec.apiServer.certSANs", Live: Absent, Desired: `["10.28.36.72"]`},
	}},
	{Group: "kubefarm.io", Kind: "NodePool", Namespace: "farm1", Name: "farm1-pool0", Fields: []Field{
		{Path: "spec.bootImage", Live: `"kubefarm-node-old"`, Desired: `"kubefarm-node"`},
	}},
	{Group: "kubefarm.io", Kind: "NodePool", Namespace: "farm1", Name: "farm1-pool1", Fields: []Field{
		{Path: "spec.machines[0].macs[1]", Live: `"94:57:a5:d3:ee:5c"`, Desired: `"94:57:a5:d3:ee:5b"`},
	}},
}

func TestDrifted(t *testing.T) {
	desired, live := readCase(t, "drifted")
	got := check(t, desired, live)
	if !reflect.DeepEqual(got, wantDrifted) {
		t.Errorf("drifts:\n%s\nwant:\n%s", Describe(got), Describe(wantDrifted))
	}
}

func TestMissingLiveObject(t *testing.T) {
	desired, live := readCase(t, "missing")
	got := check(t, desired, live)
	want := []Drift{{Group: "kubefarm.io", Kind: "NodePool", Namespace: "farm1", Name: "farm1-pool1", Missing: true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("drifts:\n%s\nwant:\n%s", Describe(got), Describe(want))
	}
	if s := got[0].String(); !strings.Contains(s, "kubefarm.io/NodePool farm1/farm1-pool1") || !strings.Contains(s, "no live object") {
		t.Errorf("the drift reads %q: it should name the object and say it is missing", s)
	}
}

// TestLastAppliedAnnotationGivesTheSameResult: once ArgoCD has synced the
// Application with client-side apply, the live objects carry kubectl's
// last-applied-configuration annotation and gitops-engine runs its
// three-way diff instead of the two-way one. The verdicts stay the same.
func TestLastAppliedAnnotationGivesTheSameResult(t *testing.T) {
	desired, live := readCase(t, "insync")
	if d := check(t, desired, withLastApplied(t, desired, live)); len(d) != 0 {
		t.Errorf("three-way diff: %d drifts on the in-sync objects:\n%s", len(d), Describe(d))
	}
	desired, live = readCase(t, "drifted")
	got := check(t, desired, withLastApplied(t, desired, live))
	if !reflect.DeepEqual(got, wantDrifted) {
		t.Errorf("three-way diff: drifts:\n%s\nwant:\n%s", Describe(got), Describe(wantDrifted))
	}
}

// TestListItems: gitops-engine drops the fields the rendered object does
// not have from the live one before it diffs, inside list items too, item
// by item. A default the API server fills in inside a list item (a NodePool
// maintenance window's timeZone) is no drift; a live list with an item
// more than the rendered one is.
func TestListItems(t *testing.T) {
	desired, live := readCase(t, "insync")
	pool := func(objs []*unstructured.Unstructured) *unstructured.Unstructured {
		for _, o := range objs {
			if o.GetName() == "farm1-pool0" {
				return o
			}
		}
		t.Fatal("no farm1-pool0")
		return nil
	}
	set := func(o *unstructured.Unstructured, v []any, fields ...string) {
		t.Helper()
		if err := unstructured.SetNestedSlice(o.Object, v, fields...); err != nil {
			t.Fatal(err)
		}
	}
	set(pool(desired), []any{map[string]any{"start": "02:00", "duration": "4h"}}, "spec", "rollout", "maintenanceWindows")
	set(pool(live), []any{map[string]any{"start": "02:00", "duration": "4h", "timeZone": "UTC"}}, "spec", "rollout", "maintenanceWindows")
	if d := check(t, desired, live); len(d) != 0 {
		t.Errorf("a default inside a list item: %d drifts:\n%s", len(d), Describe(d))
	}

	args, _, _ := unstructured.NestedStringSlice(pool(live).Object, "spec", "kernelArgs")
	more := make([]any, 0, len(args)+1)
	for _, a := range args {
		more = append(more, a)
	}
	set(pool(live), append(more, "nomodeset"), "spec", "kernelArgs")
	got := check(t, desired, live)
	want := []Drift{{Group: "kubefarm.io", Kind: "NodePool", Namespace: "farm1", Name: "farm1-pool0", Fields: []Field{
		{Path: "spec.kernelArgs[4]", Live: `"nomodeset"`, Desired: Absent},
	}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("a live list with one item more: drifts:\n%s\nwant:\n%s", Describe(got), Describe(want))
	}
}

// TestParseHelmManifest: a release manifest as `helm get manifest` prints
// it, with "# Source:" comments, separators and empty documents; objects
// without a namespace take the live object's (ArgoCD's destination
// namespace); Helm hooks are not compared, as ArgoCD does not count them
// in the sync status.
func TestParseHelmManifest(t *testing.T) {
	manifest := `---
# Source: kubefarm/templates/tenantcluster.yaml
apiVersion: kubefarm.io/v1alpha1
kind: TenantCluster
metadata:
  name: farm1
spec:
  version: v1.34.4
---
# Source: kubefarm/templates/nodepools.yaml
---
---
# Source: kubefarm/templates/hook.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: farm1-hook
  annotations:
    helm.sh/hook: pre-install
`
	desired, err := Parse([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	if len(desired) != 2 {
		t.Fatalf("parsed %d objects, want 2 (the empty documents dropped)", len(desired))
	}
	if n := len(Managed(desired)); n != 1 {
		t.Fatalf("%d managed objects, want 1 (the hook left out)", n)
	}
	_, live := readCase(t, "insync")
	var tc []*unstructured.Unstructured
	for _, o := range live {
		if o.GetKind() == "TenantCluster" {
			tc = append(tc, o)
		}
	}
	if d := check(t, desired, tc); len(d) != 0 {
		t.Errorf("%d drifts:\n%s", len(d), Describe(d))
	}
	// The same with another version: found, and named with the namespace
	// it took from the live object.
	if err := unstructured.SetNestedField(desired[0].Object, "v1.35.0", "spec", "version"); err != nil {
		t.Fatal(err)
	}
	got := check(t, desired, tc)
	if len(got) != 1 || got[0].Object() != "kubefarm.io/TenantCluster farm1/farm1" {
		t.Fatalf("drifts:\n%s\nwant one, of kubefarm.io/TenantCluster farm1/farm1", Describe(got))
	}
}

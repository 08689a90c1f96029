package v1alpha1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// conditionTypes are the conditions each kind carries, as its
// *_conditions.go declares them; a kind missing here carries none.
var conditionTypes = map[string][]string{
	"Machine":       kubefarmv1.MachineConditionTypes,
	"NodePool":      kubefarmv1.NodePoolConditionTypes,
	"BootImage":     kubefarmv1.BootImageConditionTypes,
	"TenantCluster": kubefarmv1.TenantClusterConditionTypes,
}

func generatedCRDs(t *testing.T) []apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd/bases (%v): run make generate", err)
	}
	var crds []apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(b, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		crds = append(crds, crd)
	}
	return crds
}

// pathStep is one step of a printer column's JSONPath: .field or [...].
var pathStep = regexp.MustCompile(`^(?:\.([A-Za-z0-9_]+)|\[([^\]]*)\])`)

// conditionFilter is the filter a column uses to pick one condition.
var conditionFilter = regexp.MustCompile(`^\?\(@\.type=="([^"]+)"\)$`)

// checkColumnPath walks path through the kind's schema: every field must
// be in the schema, and every condition filter must name a condition type
// the kind carries. It returns what is wrong, or "".
func checkColumnPath(kind, path string, schema *apiextensionsv1.JSONSchemaProps) string {
	// The CRD's schema leaves metadata to the API server's ObjectMeta.
	if field, ok := strings.CutPrefix(path, ".metadata."); ok {
		if !slices.Contains(objectMetaFields(), field) {
			return fmt.Sprintf("metadata has no field %q", field)
		}
		return ""
	}
	for rest := path; rest != ""; {
		m := pathStep.FindStringSubmatch(rest)
		if m == nil {
			return fmt.Sprintf("cannot read %q of %q", rest, path)
		}
		rest = rest[len(m[0]):]
		if m[1] != "" {
			p, ok := schema.Properties[m[1]]
			if !ok {
				return fmt.Sprintf("%s has no field %q", kind, m[1])
			}
			schema = &p
			continue
		}
		if schema.Items == nil || schema.Items.Schema == nil {
			return fmt.Sprintf("%q indexes a field of %s that is not a list", path, kind)
		}
		schema = schema.Items.Schema
		if c := conditionFilter.FindStringSubmatch(m[2]); c != nil && !slices.Contains(conditionTypes[kind], c[1]) {
			return fmt.Sprintf("%s carries no %s condition (it carries %v)", kind, c[1], conditionTypes[kind])
		}
	}
	return ""
}

// objectMetaFields are the JSON names of metav1.ObjectMeta's fields.
func objectMetaFields() []string {
	var names []string
	t := reflect.TypeFor[metav1.ObjectMeta]()
	for i := range t.NumField() {
		names = append(names, strings.Split(t.Field(i).Tag.Get("json"), ",")[0])
	}
	return names
}

// TestCheckColumnPath: the check finds the mistake it is for.
func TestCheckColumnPath(t *testing.T) {
	crds := generatedCRDs(t)
	var machine *apiextensionsv1.JSONSchemaProps
	for _, crd := range crds {
		if crd.Spec.Names.Kind == "Machine" {
			machine = crd.Spec.Versions[0].Schema.OpenAPIV3Schema
		}
	}
	if machine == nil {
		t.Fatal("no Machine CRD")
	}
	for _, tc := range []struct{ path, want string }{
		{`.status.conditions[?(@.type=="NodeReady")].status`, ""},
		{`.spec.macs[0]`, ""},
		{`.status.conditions[?(@.type=="Ready")].status`, "Machine carries no Ready condition"},
		{`.status.lastBoot.when`, `Machine has no field "when"`},
		{`.spec.pool[0]`, "is not a list"},
		{`.metadata.creationTimestamp`, ""},
		{`.metadata.created`, `metadata has no field "created"`},
	} {
		if got := checkColumnPath("Machine", tc.path, machine); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.path, got, tc.want)
		}
	}
}

// TestPrinterColumnsNameWhatTheKindCarries: every printer column of every
// kind reads a field of the kind's schema, and a column that picks a
// condition picks one the kind carries. A Machine's Ready column read a
// Ready condition no Machine ever has, and kubectl get showed it empty.
func TestPrinterColumnsNameWhatTheKindCarries(t *testing.T) {
	for _, crd := range generatedCRDs(t) {
		kind := crd.Spec.Names.Kind
		for _, v := range crd.Spec.Versions {
			for _, col := range v.AdditionalPrinterColumns {
				if msg := checkColumnPath(kind, col.JSONPath, v.Schema.OpenAPIV3Schema); msg != "" {
					t.Errorf("%s %s column %s (%s): %s", kind, v.Name, col.Name, col.JSONPath, msg)
				}
				// kubectl parses it with client-go's jsonpath, wrapped in
				// braces.
				if err := jsonpath.New(col.Name).Parse("{" + col.JSONPath + "}"); err != nil {
					t.Errorf("%s column %s: %v", kind, col.Name, err)
				}
			}
		}
	}
}

// TestMachineColumnsShowValues asks the API server for the table kubectl get
// prints of a Machine with a Ready node and a boot: Ready and Booted show
// them.
func TestMachineColumnsShowValues(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	m := &kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workers-m1"},
		Spec: kubefarmv1.MachineSpec{Pool: "workers", Cluster: "cluster1", Hostname: "workers-m1",
			MACs: []string{"02:00:00:00:00:01"}, IP: "10.28.0.11", DesiredImage: "img"},
	}
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	booted := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	m.Status.ServedImage = &kubefarmv1.ImageRef{Name: "img", Digest: "sha256:" + strings.Repeat("a", 64)}
	m.Status.LastBoot = &kubefarmv1.BootRecord{BootID: "b1", ImageDigest: m.Status.ServedImage.Digest, Time: booted}
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: kubefarmv1.ConditionNodeReady,
		Status: metav1.ConditionTrue, Reason: kubefarmv1.ReasonNodeReady, Message: "kubelet is posting ready status"})
	if err := env.Client.Status().Update(ctx, m); err != nil {
		t.Fatal(err)
	}

	table := getTable(t, fmt.Sprintf("/apis/kubefarm.io/v1alpha1/namespaces/%s/machines/%s", ns, m.Name))
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(table.Rows))
	}
	cells := map[string]any{}
	for i, c := range table.ColumnDefinitions {
		cells[c.Name] = table.Rows[0].Cells[i]
	}
	for col, want := range map[string]any{"Ready": "True", "Image": "img", "Pool": "workers"} {
		if cells[col] != want {
			t.Errorf("column %s = %#v, want %#v (row %v)", col, cells[col], want, cells)
		}
	}
	// A date column is served as the time since (kubectl's Age).
	if b, _ := cells["Booted"].(string); b == "" || b == "<unknown>" {
		t.Errorf("column Booted = %#v, want the time since %s (row %v)", cells["Booted"], booted, cells)
	}
}

// getTable GETs path as the meta.k8s.io Table kubectl get asks for.
func getTable(t *testing.T, path string) *metav1.Table {
	t.Helper()
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(env.Config.Host, "/")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s %v", path, resp.StatusCode, body, err)
	}
	table := &metav1.Table{}
	if err := json.Unmarshal(body, table); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, body)
	}
	return table
}

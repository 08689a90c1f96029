package kubeversion

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

func TestParse(t *testing.T) {
	v, err := Parse("v1.34.4")
	if err != nil || v != (Version{Minor: 34, Patch: 4}) || v.String() != "v1.34.4" {
		t.Errorf("Parse(v1.34.4) = %+v, %v", v, err)
	}
	if v, err := Parse("v1.034.4"); err != nil || v.String() != "v1.34.4" {
		t.Errorf("Parse(v1.034.4) = %v, %v: a stored leading zero must parse", v, err)
	}
	for _, bad := range []string{"", "v2.1.0", "v1.34.4-rc.0", "v1.34.4 ", "V1.34.4", "v1.-1.0", "v1.99999999999999999999.0"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
	if !(Version{Minor: 33, Patch: 9}).Less(Version{Minor: 34}) || (Version{Minor: 34, Patch: 1}).Less(Version{Minor: 34, Patch: 1}) {
		t.Error("Less orders wrongly")
	}
}

func TestParseWindow(t *testing.T) {
	if w, err := ParseWindow("v1.33", "v1.34"); err != nil || w != (Window{33, 34}) || w.String() != "v1.33 to v1.34" {
		t.Errorf("ParseWindow = %+v, %v", w, err)
	}
	for _, bad := range [][2]string{{"v1.34", "v1.33"}, {"1.33", "v1.34"}, {"v1.33", "v1.34.1"}, {"", ""}} {
		if _, err := ParseWindow(bad[0], bad[1]); err == nil {
			t.Errorf("ParseWindow(%q, %q) succeeded", bad[0], bad[1])
		}
	}
	if w := (Window{33, 34}); w.Contains(32) || !w.Contains(33) || !w.Contains(34) || w.Contains(35) {
		t.Error("Contains is wrong at the bounds")
	}
}

func TestDefaultWindow(t *testing.T) {
	minors := DefaultSupportedMinors()
	w := DefaultWindow()
	if len(minors) == 0 || minors[0] != w.Min || minors[len(minors)-1] != w.Max || len(minors) != w.Max-w.Min+1 {
		t.Errorf("DefaultSupportedMinors %v disagrees with %s..%s", minors, DefaultMinVersion, DefaultMaxVersion)
	}
	for _, m := range minors {
		if _, ok := Pinned(m); !ok {
			t.Errorf("no pinned patch for v1.%d, a minor of the default window", m)
		}
	}
}

// TestPinnedPatches holds the table to the Kubernetes releases the project
// builds (hack/tools for the newest minor, hack/tools/k8s-prev for the one
// before): moving a pin without the table fails here.
func TestPinnedPatches(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s\.io/kubernetes\s+v1\.([0-9]+)\.([0-9]+)\s*$`)
	for _, mod := range []string{"hack/tools/go.mod", "hack/tools/k8s-prev/go.mod"} {
		b, err := os.ReadFile(filepath.Join(root, mod))
		if err != nil {
			t.Fatal(err)
		}
		m := re.FindStringSubmatch(string(b))
		if m == nil {
			t.Fatalf("%s requires no k8s.io/kubernetes v1.MINOR.PATCH", mod)
		}
		pinned, err := Parse("v1." + m[1] + "." + m[2])
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := Pinned(pinned.Minor); !ok || got != pinned {
			t.Errorf("%s builds %s; Pinned(%d) = %s, %v", mod, pinned, pinned.Minor, got, ok)
		}
	}
}

func TestParseReported(t *testing.T) {
	for s, want := range map[string]string{
		"v1.34.4":       "v1.34.4",
		"v1.34.4+k3s1":  "v1.34.4",
		"v1.31.2-eks-1": "v1.31.2",
		"v0.0.0-master": "",
		"1.34.4":        "",
		"":              "",
		"v1.34":         "",
		"v1.34.4junk":   "",
	} {
		v, err := ParseReported(s)
		if want == "" {
			if err == nil {
				t.Errorf("ParseReported(%q) = %v, want an error", s, v)
			}
			continue
		}
		if err != nil || v.String() != want {
			t.Errorf("ParseReported(%q) = %v, %v; want %s", s, v, err, want)
		}
	}
}

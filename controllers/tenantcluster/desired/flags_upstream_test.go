package desired

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestFlagsKnownToUpstreamBinaries runs every pinned upstream binary the
// control plane uses with --help and checks that each flag the builders
// emit exists in that binary. A flag a component does not know makes it
// exit at start (a crash loop no unit test of the builders would notice),
// and flags come and go between minors, so both Kubernetes versions kubefarm
// supports are checked: the current one (bin/) and the previous minor that
// upgrades start from (bin/k8s-prev/).
func TestFlagsKnownToUpstreamBinaries(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(filepath.Dir(file), "..", "..", "..", "bin")
	c := resolveTC(t, konnectivity(true))
	etcd, err := EtcdFlags(c)
	if err != nil {
		t.Fatal(err)
	}
	konn, err := KonnectivityServerFlags(c)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Addons(c, AddonInputs{Endpoint: "https://192.0.2.1:6443", CACert: []byte(testCAPEM), ProbeHostPolicy: true})
	if err != nil {
		t.Fatal(err)
	}
	var agent []string
	for _, o := range objs {
		if ds, ok := o.(*appsv1.DaemonSet); ok && ds.Name == "konnectivity-agent" {
			agent = ds.Spec.Template.Spec.Containers[0].Args
		}
	}
	if agent == nil {
		t.Fatal("no konnectivity-agent DaemonSet among the add-ons")
	}
	type check struct {
		binary string
		flags  func() ([]string, error)
	}
	fixed := func(f []string) func() ([]string, error) { return func() ([]string, error) { return f, nil } }
	checks := []check{
		{"etcd", fixed(etcd)},
		{"konnectivity-server", fixed(konn)},
		{"konnectivity-agent", fixed(agent)},
	}
	for _, dir := range []string{"", "k8s-prev"} {
		checks = append(checks,
			check{filepath.Join(dir, "kube-apiserver"), func() ([]string, error) { return APIServerFlags(c) }},
			check{filepath.Join(dir, "kube-controller-manager"), func() ([]string, error) { return ControllerManagerFlags(c) }},
			check{filepath.Join(dir, "kube-scheduler"), func() ([]string, error) { return SchedulerFlags(c) }},
		)
	}
	for _, ck := range checks {
		t.Run(ck.binary, func(t *testing.T) {
			path := filepath.Join(bin, ck.binary)
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("%s is missing: run `make tools` (%v)", path, err)
			}
			known := upstreamFlags(t, path)
			flags, err := ck.flags()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range flags {
				name := strings.SplitN(strings.TrimPrefix(f, "--"), "=", 2)[0]
				if !known[name] {
					t.Errorf("%s does not know --%s (from %s)", ck.binary, name, f)
				}
			}
		})
	}
}

var helpFlag = regexp.MustCompile(`(?m)^\s+(?:-[a-zA-Z], )?--([a-z0-9][a-z0-9-]*)`)

// upstreamFlags are the flag names a binary lists in its --help.
func upstreamFlags(t *testing.T, path string) map[string]bool {
	t.Helper()
	// Some binaries exit non-zero after printing help; the output decides.
	out, _ := exec.Command(path, "--help").CombinedOutput()
	known := map[string]bool{}
	for _, m := range helpFlag.FindAllSubmatch(out, -1) {
		known[string(m[1])] = true
	}
	if len(known) < 10 {
		t.Fatalf("%s --help listed %d flags:\n%s", path, len(known), out)
	}
	return known
}

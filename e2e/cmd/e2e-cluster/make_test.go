package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// makePlan is what make would run for target with everything out of date
// (-B), without running it (-n): every build the target can cause.
func makePlan(t *testing.T, target string) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("SKIPPED, NOT PASSED: make is not installed")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-n", "-B", "--no-print-directory", target)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n -B %s: %v\n%s", target, err, out)
	}
	return string(out)
}

// TestDemoBuildsOnlyWhatItRuns: make demo builds the admin cluster's and
// the demo's binaries and none that only tests run (the previous minor's
// control plane, the S3 server of kubefarm-etcd's tests), and brings the
// cluster up without the previous minor's images; make e2e-up, which the
// upgrade scenario needs, still builds and pushes them.
func TestDemoBuildsOnlyWhatItRuns(t *testing.T) {
	demo := makePlan(t, "demo")
	for _, want := range []string{"bin/kubelet", "bin/kube-apiserver", "bin/etcd", "bin/coredns", "bin/konnectivity-server",
		"bin/cert-manager-controller", "bin/kubefarm-agent", "e2e-cluster up", "--previous-minor=false", "e2e-cluster demo"} {
		if !strings.Contains(demo, want) {
			t.Errorf("make demo would not run anything with %q", want)
		}
	}
	for _, unwanted := range []string{"k8s-prev", "versitygw"} {
		if strings.Contains(demo, unwanted) {
			t.Errorf("make demo would build %s, which the demo never runs", unwanted)
		}
	}
	up := makePlan(t, "e2e-up")
	for _, want := range []string{"bin/k8s-prev/kube-apiserver", "bin/versitygw", "e2e-cluster up"} {
		if !strings.Contains(up, want) {
			t.Errorf("make e2e-up would not build %q, which the scenarios need", want)
		}
	}
	if strings.Contains(up, "--previous-minor=false") {
		t.Errorf("make e2e-up leaves out the previous minor's images, which the upgrade scenario runs")
	}
}

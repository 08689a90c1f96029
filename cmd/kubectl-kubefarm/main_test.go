package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// TestBinary runs the binary that ships, without a server: the help, and
// that a usage error reaches the exit status and stderr the way cli.Main
// reports it. The commands against a real API server are tested in
// internal/cli.
func TestBinary(t *testing.T) {
	bin := testenv.BuildBinary(t, "kubectl-kubefarm")

	out, err := exec.Command(bin, "--help").Output()
	if err != nil {
		t.Fatalf("--help: %v", err)
	}
	for _, s := range []string{"kubectl kubefarm [command]", "kubeconfig", "status", "rollout", "--kubeconfig", "--namespace"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("--help lacks %q:\n%s", s, out)
		}
	}

	cmd := exec.Command(bin, "rollout", "status")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("rollout status without a pool: %v, want exit status 1", err)
	}
	if want := "error: accepts 1 arg(s), received 0\n"; stderr.String() != want {
		t.Errorf("stderr = %q, want %q", stderr.String(), want)
	}
}

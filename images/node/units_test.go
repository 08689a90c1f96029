package nodeimage

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// unitSection returns the keys and values of a unit file's [Unit]
// section, in order.
func unitSection(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("rootfs/etc/systemd/system", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Unit]":
			out = append(out, line)
		}
	}
	return out
}

// TestDiscoveryBootStartsNothingOfAJoin: in a discovery boot
// (kubefarm.mode=discover, docs/agent.md) the units of a joining node are
// skipped by systemd itself, whatever starts them, and kubefarm-agent,
// which runs discovery mode, is not.
func TestDiscoveryBootStartsNothingOfAJoin(t *testing.T) {
	const cond = "ConditionKernelCommandLine=!kubefarm.mode"
	for _, u := range []string{"containerd.service", "kubefarm-preload-images.service", "kubelet.service", "flanneld.service"} {
		found := false
		for _, l := range unitSection(t, u) {
			found = found || l == cond
		}
		if !found {
			t.Errorf("%s: no %s in [Unit]: it would start in a discovery boot", u, cond)
		}
	}
	for _, l := range unitSection(t, "kubefarm-agent.service") {
		if strings.HasPrefix(l, "ConditionKernelCommandLine=") {
			t.Errorf("kubefarm-agent.service: %s: the agent runs discovery mode", l)
		}
	}
}

// TestFlanneldResyncsRarely: flanneld's periodic check of its iptables
// rules runs iptables once per rule and chain; every 5 s (its default) it
// took more of a TCG node's CPU than anything else (docs/nodes.md).
func TestFlanneldResyncsRarely(t *testing.T) {
	b, err := os.ReadFile("rootfs/etc/systemd/system/flanneld.service")
	if err != nil {
		t.Fatal(err)
	}
	var exec string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "ExecStart=") {
			exec = l
		}
	}
	const want = " --iptables-resync=60"
	if !strings.Contains(exec+" ", want+" ") {
		t.Errorf("flanneld.service: %q has no%s", exec, want)
	}
}

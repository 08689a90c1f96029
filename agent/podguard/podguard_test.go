package podguard_test

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kubefarm/kubefarm/agent/podguard"
)

func TestRules(t *testing.T) {
	got, err := podguard.Rules([]netip.Addr{netip.MustParseAddr("10.123.0.1")}, 8080)
	if err != nil {
		t.Fatal(err)
	}
	want := `table inet kubefarm-podguard
delete table inet kubefarm-podguard
table inet kubefarm-podguard {
	chain forward {
		type filter hook forward priority -10; policy accept;
		ip daddr 10.123.0.1 tcp dport 8080 counter drop
		ip daddr 10.123.0.1 udp dport { 67, 69, 4011 } counter drop
	}
}
`
	if got != want {
		t.Errorf("rules:\n%s\nwant:\n%s", got, want)
	}
	if _, err := podguard.Rules(nil, 80); err == nil {
		t.Error("no address accepted")
	}
	v6, err := podguard.Rules([]netip.Addr{netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("fd00::1")}, 80)
	if err != nil || !strings.Contains(v6, "ip6 daddr fd00::1 tcp dport 80 counter drop") || !strings.Contains(v6, "ip daddr 10.0.0.7 udp") ||
		strings.Count(v6, "chain forward") != 1 {
		t.Errorf("two addresses: %v\n%s", err, v6)
	}
	mapped, err := podguard.Rules([]netip.Addr{netip.MustParseAddr("::ffff:10.0.0.1")}, 80)
	if err != nil || !strings.Contains(mapped, "ip daddr 10.0.0.1 tcp") {
		t.Errorf("IPv4-mapped: %v\n%s", err, mapped)
	}
	for name, tc := range map[string]struct {
		addr netip.Addr
		port int
	}{
		"no address":  {netip.Addr{}, 80},
		"unspecified": {netip.MustParseAddr("0.0.0.0"), 80},
		"port 0":      {netip.MustParseAddr("10.0.0.1"), 0},
		"port 65536":  {netip.MustParseAddr("10.0.0.1"), 65536},
	} {
		if _, err := podguard.Rules([]netip.Addr{tc.addr}, tc.port); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestRulesLoad loads the script into a kernel, in a network namespace of
// its own (unshare -n), twice, as an agent that restarts does: nft accepts
// it, and the table is there once with both drops.
func TestRulesLoad(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (CAP_NET_ADMIN) to load nftables rules: run make test as root")
	}
	for _, bin := range []string{"nft", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not installed (make deps installs nftables and util-linux): %v", bin, err)
		}
	}
	rules, err := podguard.Rules([]netip.Addr{netip.MustParseAddr("10.123.0.1")}, 8080)
	if err != nil {
		t.Fatal(err)
	}
	script := "set -e\nnft -f - <<'EOF'\n" + rules + "EOF\nnft -f - <<'EOF'\n" + rules + "EOF\nnft list ruleset\n"
	out, err := exec.Command("unshare", "-n", "sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("loading the rules: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "table inet "+podguard.Table); n != 1 {
		t.Errorf("%d tables after loading twice, want 1:\n%s", n, out)
	}
	for _, want := range []string{"hook forward priority", "ip daddr 10.123.0.1 tcp dport 8080", "udp dport { 67, 69, 4011 }"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ruleset lacks %q:\n%s", want, out)
		}
	}
}

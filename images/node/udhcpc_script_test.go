package nodeimage

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubefarm/kubefarm/internal/testing/netnstest"
)

// TestUdhcpcScriptDNS runs the initrd's udhcpc hook as busybox udhcpc
// does on a lease (the environment it sets, "bound"), in a network
// namespace of its own with a veth interface, and checks the address it
// configures and the DNS servers and domain it leaves for resolved: only
// addresses and a domain name, whatever else the DHCP reply carried.
func TestUdhcpcScriptDNS(t *testing.T) {
	ns := netnstest.New(t, "kfinitrd")
	netnstest.Run(t, "ip", "-n", ns, "link", "add", "boot0", "type", "veth", "peer", "name", "boot1")
	netnstest.Run(t, "ip", "-n", ns, "link", "set", "boot0", "up")
	script, err := filepath.Abs(filepath.Join("initrd", "udhcpc.script"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dns, domain, want string
	}{
		{"servers and domain", "10.123.0.53 10.123.0.54", "farm.test", "DNS=10.123.0.53 10.123.0.54\nDomains=farm.test\n"},
		{"no DNS in the lease", "", "", ""},
		{"hostile values", "10.0.0.1 $(reboot) 10.0.0.2;x 10.0.0.3", "farm.test\nDNS=6.6.6.6", "DNS=10.0.0.1 10.0.0.3\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "kubefarm", "lease-dns")
			cmd := exec.Command("ip", "netns", "exec", ns, "sh", script, "bound")
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "interface=boot0", "ip=10.123.0.61", "mask=24",
				"router=10.123.0.1", "serverid=10.123.0.1", "dns=" + tc.dns, "domain=" + tc.domain, "lease_dns=" + out}
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("udhcpc.script bound: %v\n%s", err, b)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("lease DNS file %q, want %q", got, tc.want)
			}
			addr, err := exec.Command("ip", "-n", ns, "-4", "-o", "addr", "show", "dev", "boot0").CombinedOutput()
			if err != nil || !strings.Contains(string(addr), "10.123.0.61/24") {
				t.Errorf("boot0 after the hook: %s %v", addr, err)
			}
		})
	}
}

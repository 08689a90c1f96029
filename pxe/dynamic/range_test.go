package dynamic

import (
	"errors"
	"net"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func rangePool(subnet, start, end string) *kubefarmv1.NodePool {
	p := &kubefarmv1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rack1"}}
	p.Spec.Network.Subnet = subnet
	if start != "" || end != "" {
		p.Spec.Network.DynamicRange = &kubefarmv1.DynamicRange{Start: start, End: end}
	}
	return p
}

func TestParseRange(t *testing.T) {
	tests := []struct {
		name               string
		subnet, start, end string
		size               int
		wantErr            string
	}{
		{"ordinary", "10.0.0.0/24", "10.0.0.100", "10.0.0.199", 100, ""},
		{"single", "10.0.0.0/24", "10.0.0.7", "10.0.0.7", 1, ""},
		{"largest", "10.0.0.0/15", "10.0.0.0", "10.0.255.255", 65536, ""},
		{"too large", "10.0.0.0/15", "10.0.0.0", "10.1.0.0", 0, "farm/rack1: spec.network.dynamicRange.end 10.1.0.0: the range holds 65537"},
		{"reversed", "10.0.0.0/24", "10.0.0.9", "10.0.0.8", 0, "farm/rack1: spec.network.dynamicRange.end 10.0.0.8 is below start"},
		{"start outside", "10.0.0.0/24", "10.0.1.1", "10.0.0.8", 0, "spec.network.dynamicRange.start 10.0.1.1 is outside spec.network.subnet"},
		{"end not IPv4", "10.0.0.0/24", "10.0.0.1", "fe80::1", 0, `spec.network.dynamicRange.end "fe80::1" is not an IPv4`},
		{"bad subnet", "nope", "10.0.0.1", "10.0.0.2", 0, `pool farm/rack1: spec.network.subnet "nope"`},
		{"no range", "10.0.0.0/24", "", "", 0, "pool farm/rack1: spec.network.dynamicRange is not set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRange(rangePool(tt.subnet, tt.start, tt.end))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Size() != tt.size {
				t.Fatalf("Size = %d, want %d", r.Size(), tt.size)
			}
		})
	}
}

func collect(r Range, mac net.HardwareAddr, skip func(net.IP) bool) []string {
	var out []string
	for ip := range r.Candidates(mac, skip) {
		out = append(out, ip.String())
	}
	return out
}

func TestCandidates(t *testing.T) {
	mac := net.HardwareAddr{0x52, 0x54, 0, 0x12, 0x34, 0x56}
	tests := []struct {
		name               string
		subnet, start, end string
		skip               []string
		want               []string // in order, rotated to mac's First
	}{
		{"whole range once", "10.0.0.0/24", "10.0.0.10", "10.0.0.13", nil,
			[]string{"10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.13"}},
		{"static IP skipped", "10.0.0.0/24", "10.0.0.10", "10.0.0.13", []string{"10.0.0.12"},
			[]string{"10.0.0.10", "10.0.0.11", "10.0.0.13"}},
		{"network and broadcast skipped", "10.0.0.0/30", "10.0.0.0", "10.0.0.3", nil,
			[]string{"10.0.0.1", "10.0.0.2"}},
		{"/31 has no network or broadcast address", "10.0.0.0/31", "10.0.0.0", "10.0.0.1", nil,
			[]string{"10.0.0.0", "10.0.0.1"}},
		{"range inside a larger subnet keeps .0 and .255", "10.0.0.0/16", "10.0.0.255", "10.0.1.0", nil,
			[]string{"10.0.0.255", "10.0.1.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRange(rangePool(tt.subnet, tt.start, tt.end))
			if err != nil {
				t.Fatal(err)
			}
			skip := func(ip net.IP) bool {
				for _, s := range tt.skip {
					if ip.Equal(net.ParseIP(s)) {
						return true
					}
				}
				return false
			}
			got := collect(r, mac, skip)
			// The order is tt.want rotated so that it starts at First(mac)
			// (or the next address that is not skipped).
			first := ipOf(r.start + uint32(r.First(mac))).String()
			start := -1
			for i := 0; i < r.Size() && start < 0; i++ {
				cand := ipOf(r.start + (uint32(r.First(mac))+uint32(i))%uint32(r.Size())).String()
				for j, w := range tt.want {
					if w == cand {
						start = j
					}
				}
			}
			want := append(append([]string{}, tt.want[start:]...), tt.want[:start]...)
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("candidates %v, want %v (First at %s)", got, want, first)
			}
			for _, ip := range got {
				if !r.Contains(net.ParseIP(ip)) {
					t.Errorf("candidate %s not Contained", ip)
				}
			}
		})
	}
}

// TestFirstIsStable pins the hash: replicas of different builds must agree,
// so a change of First is a change of the protocol.
func TestFirstIsStable(t *testing.T) {
	r, err := ParseRange(rangePool("10.0.0.0/16", "10.0.1.0", "10.0.4.255"))
	if err != nil {
		t.Fatal(err)
	}
	macs := map[string]int{}
	for _, m := range []string{"52:54:00:00:00:01", "52:54:00:00:00:02", "02:00:00:00:00:00"} {
		hw, _ := net.ParseMAC(m)
		if a, b := r.First(hw), r.First(append(net.HardwareAddr{}, hw...)); a != b {
			t.Fatalf("%s: First not deterministic: %d, %d", m, a, b)
		}
		macs[m] = r.First(hw)
	}
	if macs["52:54:00:00:00:01"] == macs["52:54:00:00:00:02"] {
		t.Error("neighbouring MACs start at the same offset")
	}
	// Spread: 1024 MACs over 1024 addresses hit several hundred distinct
	// first candidates (a constant or a poor hash would not).
	seen := map[int]bool{}
	for i := 0; i < 1024; i++ {
		seen[r.First(net.HardwareAddr{0x52, 0x54, 0, 0, byte(i >> 8), byte(i)})] = true
	}
	if len(seen) < 500 {
		t.Errorf("1024 MACs start at only %d distinct offsets", len(seen))
	}
}

func TestContains(t *testing.T) {
	r, _ := ParseRange(rangePool("10.0.0.0/24", "10.0.0.0", "10.0.0.20"))
	for ip, want := range map[string]bool{"10.0.0.0": false, "10.0.0.1": true, "10.0.0.20": true, "10.0.0.21": false, "fe80::1": false} {
		if got := r.Contains(net.ParseIP(ip)); got != want {
			t.Errorf("Contains(%s) = %v", ip, got)
		}
	}
}

func TestLeaseName(t *testing.T) {
	if got := LeaseName("rack1", net.ParseIP("10.28.3.4")); got != "rack1-10-28-3-4" {
		t.Fatal(got)
	}
}

func TestSelectPool(t *testing.T) {
	mk := func(ns, name, subnet string) *pool {
		_, n, _ := net.ParseCIDR(subnet)
		ones, _ := n.Mask.Size()
		p := &pool{namespace: ns, name: name, prefix: ones}
		p.netw.Subnet = n
		return p
	}
	pools := []*pool{mk("b", "wide", "10.0.0.0/16"), mk("a", "wide", "10.0.0.0/16"), mk("z", "narrow", "10.0.5.0/24"), mk("x", "other", "192.168.0.0/24")}
	tests := []struct {
		name         string
		relay, local string
		want         string
	}{
		{"relayed: giaddr decides", "192.168.0.1", "10.0.0.2", "x/other"},
		{"not relayed: own address", "", "192.168.0.2", "x/other"},
		{"zero giaddr is not relayed", "0.0.0.0", "192.168.0.2", "x/other"},
		{"tie by namespace/name", "10.0.9.1", "", "a/wide"},
		{"longest prefix first", "10.0.5.1", "", "z/narrow"},
		{"no pool", "172.16.0.1", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := selectPool(pools, net.ParseIP(tt.relay), net.ParseIP(tt.local))
			if tt.want == "" {
				if !errors.Is(err, ErrNoPool) {
					t.Fatalf("got %v, %v; want ErrNoPool", p, err)
				}
				return
			}
			if err != nil || p.key() != tt.want {
				t.Fatalf("got %v, %v; want %s", p, err, tt.want)
			}
		})
	}
}

func TestValidHostname(t *testing.T) {
	for in, want := range map[string]string{
		"node-1": "node-1", "Node-1": "node-1", "": "", "-node": "", "node-": "", "no_de": "", "a.b": "",
		strings.Repeat("a", 63): strings.Repeat("a", 63), strings.Repeat("a", 64): "", "x\x00": "", "ü": "",
	} {
		if got := ValidHostname(in); got != want {
			t.Errorf("ValidHostname(%q) = %q, want %q", in, got, want)
		}
	}
}

package fetchguard

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func prefixes(t *testing.T, s string) []netip.Prefix {
	t.Helper()
	p, err := ParsePrefixes("test", s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDecide is the pure verdict: the built-in classes for IPv4, IPv6 and
// IPv4-mapped IPv6, the edges of each prefix, the operator's deny list,
// allow overriding deny, and the API server refused whatever is allowed.
// Nothing here is dialed.
func TestDecide(t *testing.T) {
	guard := New(Options{
		Denied:    prefixes(t, "10.96.0.0/12, 10.244.0.0/16, fd10::/64"),
		Allowed:   prefixes(t, "10.244.7.0/24, 127.0.0.53, ::ffff:10.100.0.0/120, 10.96.0.0/24"),
		APIServer: []netip.Addr{netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("::ffff:192.168.1.10"), netip.MustParseAddr("2001:db8::6443")},
	})
	for _, tc := range []struct {
		addr    string
		allowed bool
		class   string
		reason  string
	}{
		// Loopback, both families, both edges of 127/8.
		{"127.0.0.1", false, ClassLoopback, "127.0.0.1 is a loopback address (127.0.0.0/8)"},
		{"127.0.0.0", false, ClassLoopback, ""},
		{"127.255.255.255", false, ClassLoopback, ""},
		{"126.255.255.255", true, "", ""},
		{"128.0.0.0", true, "", ""},
		{"::1", false, ClassLoopback, "::1 is a loopback address (::1/128)"},
		{"::2", true, "", ""},
		{"::ffff:127.0.0.1", false, ClassLoopback, "127.0.0.1 is a loopback address"},
		// The allow list opens one loopback host, not its neighbours.
		{"127.0.0.53", true, "", ""},
		{"127.0.0.54", false, ClassLoopback, ""},
		// Link-local, the cloud metadata address among them.
		{"169.254.169.254", false, ClassLinkLocal, "169.254.169.254 is a link-local address (169.254.0.0/16)"},
		{"::ffff:169.254.169.254", false, ClassLinkLocal, ""},
		{"169.254.0.0", false, ClassLinkLocal, ""},
		{"169.254.255.255", false, ClassLinkLocal, ""},
		{"169.253.255.255", true, "", ""},
		{"169.255.0.0", true, "", ""},
		{"fe80::1", false, ClassLinkLocal, ""},
		{"fe80::1%eth0", false, ClassLinkLocal, "fe80::1 is a link-local address (fe80::/10)"},
		{"febf:ffff::1", false, ClassLinkLocal, ""},
		{"fec0::1", true, "", ""},
		{"fd00:ec2::254", false, ClassMetadata, "fd00:ec2::254 is a cloud metadata service address"},
		{"100.100.100.200", false, ClassMetadata, ""},
		// Unspecified and "this network".
		{"0.0.0.0", false, ClassUnspecified, "0.0.0.0 is an unspecified address (0.0.0.0/8)"},
		{"0.1.2.3", false, ClassUnspecified, ""},
		{"::", false, ClassUnspecified, ""},
		{"::ffff:0.0.0.0", false, ClassUnspecified, ""},
		// Multicast.
		{"224.0.0.1", false, ClassMulticast, ""},
		{"239.255.255.255", false, ClassMulticast, ""},
		{"223.255.255.255", true, "", ""},
		{"240.0.0.0", true, "", ""},
		{"ff02::1", false, ClassMulticast, ""},
		// The operator's deny list, its edges, and allow winning over it.
		{"10.96.0.5", true, "", ""}, // in the allowed 10.96.0.0/24
		{"10.96.1.0", false, ClassDenied, "10.96.1.0 is in a denied range (10.96.0.0/12)"},
		{"10.111.255.255", false, ClassDenied, ""},
		{"10.112.0.0", true, "", ""},
		{"10.95.255.255", true, "", ""},
		{"10.244.6.255", false, ClassDenied, ""},
		{"10.244.7.0", true, "", ""},
		{"10.244.7.255", true, "", ""},
		{"10.244.8.0", false, ClassDenied, ""},
		{"::ffff:10.244.8.0", false, ClassDenied, ""},
		// An IPv4-mapped allow prefix means its IPv4 prefix.
		{"10.100.0.9", true, "", ""},
		{"10.100.1.0", false, ClassDenied, ""},
		{"fd10::1", false, ClassDenied, ""},
		{"fd10:0:0:1::1", true, "", ""},
		// The API server: refused although 10.96.0.0/24 is allowed, in
		// either family spelling.
		{"10.96.0.1", false, ClassAPIServer, "10.96.0.1 is the admin cluster's API server"},
		{"::ffff:10.96.0.1", false, ClassAPIServer, ""},
		{"192.168.1.10", false, ClassAPIServer, ""},
		{"192.168.1.11", true, "", ""},
		{"2001:db8::6443", false, ClassAPIServer, ""},
		// Ordinary public addresses.
		{"93.184.215.14", true, "", ""},
		{"2606:4700::1111", true, "", ""},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			d := Decide(netip.MustParseAddr(tc.addr), guard.Policy())
			if d.Allowed != tc.allowed || d.Rule.Class != tc.class {
				t.Fatalf("Decide(%s) = allowed %t class %q (%s), want %t %q", tc.addr, d.Allowed, d.Rule.Class, d.Reason(), tc.allowed, tc.class)
			}
			if !strings.HasPrefix(d.Reason(), tc.reason) {
				t.Errorf("reason %q, want it to start with %q", d.Reason(), tc.reason)
			}
			if tc.allowed != (d.Reason() == "") {
				t.Errorf("reason %q for allowed=%t", d.Reason(), d.Allowed)
			}
			err := guard.Check(netip.MustParseAddr(tc.addr))
			if (err == nil) != tc.allowed {
				t.Errorf("Check = %v, want allowed %t", err, tc.allowed)
			}
		})
	}
}

// TestDecideDefaults: with no options the built-in classes alone apply,
// an empty policy allows everything, and an invalid address is refused.
func TestDecideDefaults(t *testing.T) {
	p := New(Options{}).Policy()
	for addr, want := range map[string]bool{"127.0.0.1": false, "169.254.169.254": false, "10.96.0.1": true, "192.168.0.1": true} {
		if d := Decide(netip.MustParseAddr(addr), p); d.Allowed != want {
			t.Errorf("default policy: %s allowed %t, want %t", addr, d.Allowed, want)
		}
	}
	if d := Decide(netip.MustParseAddr("127.0.0.1"), Policy{}); !d.Allowed {
		t.Error("an empty policy refuses loopback")
	}
	if d := Decide(netip.Addr{}, p); d.Allowed || d.Reason() != "not an IP address" {
		t.Errorf("invalid address: %+v %q", d, d.Reason())
	}
	// The zero Decision is a refusal, so a forgotten check refuses.
	if (Decision{}).Allowed {
		t.Error("the zero Decision allows")
	}
}

// TestControlParsesTheDialedAddress: Control decides on the numeric
// address:port the dialer hands it; anything unparsable is refused.
func TestControlParsesTheDialedAddress(t *testing.T) {
	g := New(Options{Allowed: prefixes(t, "127.0.0.2")})
	for addr, allowed := range map[string]bool{
		"127.0.0.1:80": false, "[::1]:443": false, "[::ffff:127.0.0.1]:80": false, "127.0.0.2:8080": true,
		"[fe80::1%eth0]:80": false, "192.0.2.1:80": true, "example.com:80": false, "/run/sock": false, "": false,
	} {
		if err := g.Control("tcp", addr, nil); (err == nil) != allowed {
			t.Errorf("Control(%q) = %v, want allowed %t", addr, err, allowed)
		}
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes("--fetch-denied-cidrs", " 10.96.0.0/12,,fd00::/8 , 192.0.2.7, 2001:db8::1 ")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.96.0.0/12", "fd00::/8", "192.0.2.7/32", "2001:db8::1/128"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("prefix %d = %s, want %s", i, got[i], want[i])
		}
	}
	if got, err := ParsePrefixes("x", ""); err != nil || len(got) != 0 {
		t.Errorf("empty list: %v, %v", got, err)
	}
	for _, bad := range []string{"10.0.0.0/33", "cluster", "10.0.0.0/8/1", "10.0.0/8"} {
		if _, err := ParsePrefixes("--fetch-allowed-cidrs", bad); err == nil || !strings.Contains(err.Error(), "--fetch-allowed-cidrs") || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParsePrefixes(%q) = %v, want an error naming the flag and the entry", bad, err)
		}
	}
	// A prefix with host bits set is masked when it becomes a rule.
	g := New(Options{Denied: prefixes(t, "10.1.2.3/16")})
	if r := g.Policy().Denied[len(g.Policy().Denied)-1]; r.Prefix.String() != "10.1.0.0/16" {
		t.Errorf("denied rule %s, want 10.1.0.0/16", r.Prefix)
	}
}

type hosts map[string][]netip.Addr

func (h hosts) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := h[host]; ok {
		return append([]netip.Addr(nil), a...), nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestHostAddrs(t *testing.T) {
	for host, want := range map[string]string{
		"https://10.96.0.1:443":     "10.96.0.1",
		"https://10.96.0.1":         "10.96.0.1",
		"10.96.0.1:6443":            "10.96.0.1",
		"10.96.0.1":                 "10.96.0.1",
		"https://[2001:db8::1]:443": "2001:db8::1",
		"[2001:db8::1]:443":         "2001:db8::1",
		"2001:db8::1":               "2001:db8::1",
		"https://[::ffff:10.0.0.1]": "10.0.0.1",
	} {
		got, err := HostAddrs(context.Background(), nil, host)
		if err != nil || len(got) != 1 || got[0].String() != want {
			t.Errorf("HostAddrs(%q) = %v, %v; want %s", host, got, err, want)
		}
	}
	// A name is looked up (by a table here: tests resolve nothing) and
	// every address kept, IPv4-mapped ones unmapped.
	r := hosts{"api.example.com": {netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("::ffff:192.0.2.11"), netip.MustParseAddr("2001:db8::10")}}
	got, err := HostAddrs(context.Background(), r, "https://api.example.com:6443")
	if err != nil || len(got) != 3 || got[0].String() != "192.0.2.10" || got[1].String() != "192.0.2.11" || got[2].String() != "2001:db8::10" {
		t.Errorf("api.example.com: %v, %v", got, err)
	}
	if _, err := HostAddrs(context.Background(), r, "unknown.example.com:6443"); err == nil || !strings.Contains(err.Error(), "unknown.example.com") {
		t.Errorf("an unknown name: %v, want an error naming it", err)
	}
	if _, err := HostAddrs(context.Background(), nil, "https://:443"); err == nil {
		t.Error("a host without a name was accepted")
	}
}

package bootpaths

import (
	"net"
	"strings"
	"testing"
)

func TestBinaries(t *testing.T) {
	want := []string{"undionly.kpxe", "ipxe.efi", "snponly.efi", "ipxe-arm64.efi"}
	got := Binaries()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("Binaries() = %q, want %q", got, want)
	}
	got[0] = "changed"
	if Binaries()[0] != "undionly.kpxe" {
		t.Fatal("changing the returned slice changed the allow-list")
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"undionly.kpxe", true}, {"ipxe.efi", true}, {"snponly.efi", true}, {"ipxe-arm64.efi", true},
		{"", false}, {"IPXE.EFI", false}, {"ipxe.pxe", false}, {"../ipxe.efi", false}, {"ipxe.efi/", false},
		{"/ipxe.efi", false}, {"ipxe.efi\x00", false},
	} {
		if IsBinary(tc.name) != tc.ok {
			t.Errorf("IsBinary(%q) = %v, want %v", tc.name, !tc.ok, tc.ok)
		}
	}
}

func TestMachineKey(t *testing.T) {
	if got := MachineKey("t1", "m7"); got != "t1/m7" {
		t.Fatalf("MachineKey = %q", got)
	}
}

func TestBase(t *testing.T) {
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0xAB, 0xCD, 0xEF}
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name                       string
		base                       Base
		wantBase, script, artifact string
		binary                     string
	}{
		{"port 8080", NewBase(net.IPv4(10, 28, 0, 2), 8080), "http://10.28.0.2:8080",
			"http://10.28.0.2:8080/boot/52:54:00:ab:cd:ef.ipxe", "http://10.28.0.2:8080/artifacts/" + digest,
			"http://10.28.0.2:8080/ipxe/ipxe.efi"},
		{"port 80 is left out", NewBase(net.IPv4(10, 28, 0, 2), 80), "http://10.28.0.2",
			"http://10.28.0.2/boot/52:54:00:ab:cd:ef.ipxe", "http://10.28.0.2/artifacts/" + digest,
			"http://10.28.0.2/ipxe/ipxe.efi"},
		{"port 0 is left out", NewBase(net.IPv4(10, 28, 0, 2), 0), "http://10.28.0.2",
			"http://10.28.0.2/boot/52:54:00:ab:cd:ef.ipxe", "http://10.28.0.2/artifacts/" + digest,
			"http://10.28.0.2/ipxe/ipxe.efi"},
		{"4-byte address", NewBase(net.IPv4(10, 28, 0, 2).To4(), 8080), "http://10.28.0.2:8080",
			"http://10.28.0.2:8080/boot/52:54:00:ab:cd:ef.ipxe", "http://10.28.0.2:8080/artifacts/" + digest,
			"http://10.28.0.2:8080/ipxe/ipxe.efi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.base.String() != tc.wantBase {
				t.Errorf("base %q, want %q", tc.base, tc.wantBase)
			}
			if got := tc.base.Script(mac); got != tc.script {
				t.Errorf("Script = %q, want %q", got, tc.script)
			}
			if got := tc.base.Artifact(digest); got != tc.artifact {
				t.Errorf("Artifact = %q, want %q", got, tc.artifact)
			}
			if got := tc.base.Binary(BinaryUEFIx64); got != tc.binary {
				t.Errorf("Binary = %q, want %q", got, tc.binary)
			}
			config, report, heartbeat := tc.base.Config(mac.String()), tc.base.Report(), tc.base.Heartbeat()
			if config != tc.wantBase+"/config/52:54:00:ab:cd:ef" || report != tc.wantBase+"/report" || heartbeat != tc.wantBase+"/heartbeat" {
				t.Errorf("Config, Report, Heartbeat = %q, %q, %q", config, report, heartbeat)
			}
			// Each URL's path routes back to what built it.
			for _, u := range []struct {
				url   string
				route Route
				arg   string
			}{{tc.script, RouteScript, mac.String()}, {tc.artifact, RouteArtifact, digest}, {tc.binary, RouteBinary, BinaryUEFIx64},
				{config, RouteConfig, mac.String()}, {report, RouteReport, ""}, {heartbeat, RouteHeartbeat, ""}} {
				path := strings.TrimPrefix(u.url, tc.wantBase)
				if r, arg := Parse(path); r != u.route || arg != u.arg {
					t.Errorf("Parse(%q) = %q, %q; want %q, %q", path, r, arg, u.route, u.arg)
				}
			}
		})
	}
}

func TestParseBase(t *testing.T) {
	for _, tc := range []struct {
		in      string
		wantErr string
	}{
		{"http://10.0.0.2:8080", ""},
		{"http://10.0.0.2", ""},
		{"http://pxe-1.example", ""},
		{"https://10.0.0.2", "must be http://host[:port]"},
		{"http://", "must be http://host[:port]"},
		{"10.0.0.2", "must be http://host[:port]"},
		{"http://10.0.0.2/", "must be http://host[:port]"},
		{"http://10.0.0.2/\nshell", "must be http://host[:port]"},
		{"http://10.0.0.2:80a", "bad port"},
		{"http://10.0.0.2:", "bad port"},
		{"http://user@10.0.0.2", "must be http://host[:port]"},
		{"http://10.0.0.2:8080 initrd=x", "bad port"},
		{"http://10.0.0.2 initrd=x", "must be http://host[:port]"},
	} {
		b, err := ParseBase(tc.in)
		if tc.wantErr == "" {
			if err != nil || b.String() != tc.in {
				t.Errorf("ParseBase(%q) = %q, %v; want it back", tc.in, b, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ParseBase(%q) = %q, %v; want an error containing %q", tc.in, b, err, tc.wantErr)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		path  string
		route Route
		arg   string
	}{
		{"/healthz", RouteHealthz, ""},
		{"/metrics", RouteMetrics, ""},
		{"/report", RouteReport, ""},
		{"/heartbeat", RouteHeartbeat, ""},
		{"/discovery", RouteDiscovery, ""},
		{"/discovery/", RouteOther, ""},
		{"/discovery/02:00:00:00:00:01", RouteOther, ""},
		{"/heartbeat/", RouteOther, ""},
		{"/heartbeat/02:00:00:00:00:01", RouteOther, ""},
		{"/Heartbeat", RouteOther, ""},
		{"/boot/02:00:00:00:00:01.ipxe", RouteScript, "02:00:00:00:00:01"},
		{"/boot/02-00-00-00-00-01.ipxe", RouteScript, "02-00-00-00-00-01"},
		{"/boot/.ipxe", RouteScript, ""},
		{"/boot//x.ipxe", RouteScript, "/x"},
		{"/boot/02:00:00:00:00:01", RouteOther, ""},
		{"/boot/x.ipxe/", RouteOther, ""},
		{"/boot.ipxe", RouteOther, ""},
		{"/artifacts/sha256:abc", RouteArtifact, "sha256:abc"},
		{"/artifacts/../secret", RouteArtifact, "../secret"},
		{"/artifacts/", RouteArtifact, ""},
		{"/artifacts", RouteOther, ""},
		{"/config/02:00:00:00:00:01", RouteConfig, "02:00:00:00:00:01"},
		{"/config", RouteOther, ""},
		{"/ipxe/ipxe.efi", RouteBinary, "ipxe.efi"},
		{"/ipxe/../../secret", RouteBinary, "../../secret"},
		{"/ipxe", RouteOther, ""},
		{"/healthz/", RouteOther, ""},
		{"/metrics/x", RouteOther, ""},
		{"/report/", RouteOther, ""},
		{"/REPORT", RouteOther, ""},
		{"//", RouteOther, ""},
		{"/", RouteOther, ""},
		{"", RouteOther, ""},
	} {
		if r, arg := Parse(tc.path); r != tc.route || arg != tc.arg {
			t.Errorf("Parse(%q) = %q, %q; want %q, %q", tc.path, r, arg, tc.route, tc.arg)
		}
	}
}

// FuzzParse checks that a routed path is exactly its route's shape around
// its argument: nothing is dropped or added on the way.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"/boot/02:00:00:00:00:01.ipxe", "/artifacts/sha256:00", "/ipxe/ipxe.efi", "/config/x", "/report", "/heartbeat", "/discovery", "/healthz", "/metrics", "/boot/.ipxe", "//"} {
		f.Add(s)
	}
	shapes := map[Route]func(string) string{
		RouteScript:    func(a string) string { return "/boot/" + a + ".ipxe" },
		RouteArtifact:  func(a string) string { return "/artifacts/" + a },
		RouteBinary:    func(a string) string { return "/ipxe/" + a },
		RouteConfig:    func(a string) string { return "/config/" + a },
		RouteReport:    func(string) string { return "/report" },
		RouteHeartbeat: func(string) string { return "/heartbeat" },
		RouteDiscovery: func(string) string { return "/discovery" },
		RouteHealthz:   func(string) string { return "/healthz" },
		RouteMetrics:   func(string) string { return "/metrics" },
	}
	f.Fuzz(func(t *testing.T, path string) {
		r, arg := Parse(path)
		if r == RouteOther {
			if arg != "" {
				t.Fatalf("Parse(%q): other route with argument %q", path, arg)
			}
			return
		}
		shape, ok := shapes[r]
		if !ok {
			t.Fatalf("Parse(%q): unknown route %q", path, r)
		}
		if got := shape(arg); got != path {
			t.Fatalf("Parse(%q) = %q, %q, which spells %q", path, r, arg, got)
		}
	})
}

package bootfile

import (
	"net"
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0xAB, 0xCD, 0xEF}
	server := net.IPv4(10, 28, 0, 2)
	cfg := Config{Server: server, HTTPPort: 8080}
	snp := Config{Server: server, HTTPPort: 8080, UEFIx64Binary: BinarySNPOnly}
	port80 := Config{Server: server, HTTPPort: 80}

	arch := func(a ...uint16) Request { return Request{MAC: mac, Arches: a, HasArch: true} }
	withVendor := func(r Request, v string) Request { r.VendorClass = v; return r }
	withUser := func(r Request, u ...string) Request { r.UserClasses = u; return r }

	tests := []struct {
		name    string
		req     Request
		cfg     Config
		want    Result
		wantWhy string // substring of Reason for None results
	}{
		{"bios", arch(ArchBIOS), cfg, Result{Protocol: TFTP, File: "undionly.kpxe", NextServer: server.To4()}, ""},
		{"efi bc x86-64", arch(ArchEFIBC), cfg, Result{Protocol: TFTP, File: "ipxe.efi", NextServer: server.To4()}, ""},
		{"efi x86-64", arch(ArchEFIx8664), cfg, Result{Protocol: TFTP, File: "ipxe.efi", NextServer: server.To4()}, ""},
		{"efi x86-64 snponly", arch(ArchEFIx8664), snp, Result{Protocol: TFTP, File: "snponly.efi", NextServer: server.To4()}, ""},
		{"efi arm64", arch(ArchEFIARM64), cfg, Result{Protocol: TFTP, File: "ipxe-arm64.efi", NextServer: server.To4()}, ""},
		{"first arch wins", arch(ArchEFIARM64, ArchBIOS), cfg, Result{Protocol: TFTP, File: "ipxe-arm64.efi", NextServer: server.To4()}, ""},
		{"x86-64 http boot", withVendor(arch(ArchEFIx8664HTTP), "HTTPClient:Arch:00016:UNDI:003016"), cfg,
			Result{Protocol: HTTP, File: "http://10.28.0.2:8080/ipxe/ipxe.efi", VendorClass: "HTTPClient"}, ""},
		{"x86-64 http boot snponly", arch(ArchEFIx8664HTTP), snp,
			Result{Protocol: HTTP, File: "http://10.28.0.2:8080/ipxe/snponly.efi", VendorClass: "HTTPClient"}, ""},
		{"arm64 http boot", withVendor(arch(ArchEFIARM64HTTP), "HTTPClient"), port80,
			Result{Protocol: HTTP, File: "http://10.28.0.2/ipxe/ipxe-arm64.efi", VendorClass: "HTTPClient"}, ""},
		{"arm64 with HTTPClient vendor", withVendor(arch(ArchEFIARM64), "HTTPClient:Arch:00011"), cfg,
			Result{Protocol: HTTP, File: "http://10.28.0.2:8080/ipxe/ipxe-arm64.efi", VendorClass: "HTTPClient"}, ""},
		{"x86-64 with HTTPClient vendor", withVendor(arch(ArchEFIx8664), "HTTPClient:Arch:00009"), cfg,
			Result{Protocol: HTTP, File: "http://10.28.0.2:8080/ipxe/ipxe.efi", VendorClass: "HTTPClient"}, ""},
		{"pxe vendor stays tftp", withVendor(arch(ArchEFIx8664), "PXEClient:Arch:00007"), cfg,
			Result{Protocol: TFTP, File: "ipxe.efi", NextServer: server.To4()}, ""},
		{"ipxe gets its script, lowercase mac", withUser(arch(ArchBIOS), "iPXE"), cfg,
			Result{Protocol: HTTP, File: "http://10.28.0.2:8080/boot/52:54:00:ab:cd:ef.ipxe"}, ""},
		{"ipxe among several user classes", withUser(Request{MAC: mac}, "foo", "iPXE"), port80,
			Result{Protocol: HTTP, File: "http://10.28.0.2/boot/52:54:00:ab:cd:ef.ipxe"}, ""},
		{"ipxe without ethernet mac", withUser(Request{MAC: net.HardwareAddr{1, 2}}, "iPXE"), cfg, Result{}, "MAC"},
		{"user class is case sensitive", withUser(arch(ArchBIOS), "ipxe"), cfg,
			Result{Protocol: TFTP, File: "undionly.kpxe", NextServer: server.To4()}, ""},
		{"unknown arch", arch(2), cfg, Result{}, "unsupported client architecture 2"},
		{"efi ia32 unsupported", arch(ArchEFIIA32), cfg, Result{}, "unsupported client architecture 6"},
		{"no arch", Request{MAC: mac}, cfg, Result{}, "option 93"},
		{"has arch but empty", Request{MAC: mac, HasArch: true}, cfg, Result{}, "option 93"},
		{"no server", arch(ArchBIOS), Config{}, Result{}, "boot server"},
		{"ipv6 server", arch(ArchBIOS), Config{Server: net.ParseIP("fe80::1")}, Result{}, "boot server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.req, tt.cfg)
			if tt.want.Protocol == None {
				if got.Protocol != None || got.File != "" || !strings.Contains(got.Reason, tt.wantWhy) {
					t.Fatalf("got %+v, want no boot file with reason containing %q", got, tt.wantWhy)
				}
				return
			}
			if got.Protocol != tt.want.Protocol || got.File != tt.want.File || !got.NextServer.Equal(tt.want.NextServer) ||
				got.VendorClass != tt.want.VendorClass || got.Reason != "" {
				t.Fatalf("got %+v (%s), want %+v (%s)", got, got.Protocol, tt.want, tt.want.Protocol)
			}
		})
	}
}

func TestProtocolString(t *testing.T) {
	for p, want := range map[Protocol]string{None: "none", TFTP: "tftp", HTTP: "http"} {
		if p.String() != want {
			t.Errorf("%d: got %q want %q", p, p.String(), want)
		}
	}
}

package bootproto

import (
	"strings"
	"testing"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, cmdline string
		want          Params
		err           string
	}{
		{name: "what the script passes",
			cmdline: "console=ttyS0 quiet initrd=initrd kubefarm.image=" + digest + " kubefarm.rootfs=http://10.0.0.2:8080/artifacts/" + digest + " kubefarm.server=http://10.0.0.2:8080\n",
			want:    Params{Server: "http://10.0.0.2:8080", Image: digest}},
		{name: "with BOOTIF",
			cmdline: "BOOTIF=01-02-00-00-AB-CD-EF kubefarm.image=" + digest + " kubefarm.server=http://pxe",
			want:    Params{Server: "http://pxe", Image: digest, BootIF: "02:00:00:ab:cd:ef"}},
		{name: "last wins", cmdline: "kubefarm.server=http://a kubefarm.server=http://b kubefarm.image=" + digest,
			want: Params{Server: "http://b", Image: digest}},
		{name: "discovery boot",
			cmdline: "console=ttyS0 initrd=initrd kubefarm.image=" + digest + " kubefarm.rootfs=http://10.0.0.2:8080/artifacts/" + digest + " kubefarm.server=http://10.0.0.2:8080 BOOTIF=01-52-54-00-12-34-56 kubefarm.mode=discover",
			want:    Params{Server: "http://10.0.0.2:8080", Image: digest, BootIF: "52:54:00:12:34:56", Mode: ModeDiscover}},
		{name: "mode emptied by a later one", cmdline: "kubefarm.mode=discover kubefarm.mode= kubefarm.server=http://x kubefarm.image=" + digest,
			err: "kubefarm.mode"},
		{name: "mode without a value", cmdline: "kubefarm.mode kubefarm.server=http://x kubefarm.image=" + digest, err: "kubefarm.mode"},
		{name: "unknown mode", cmdline: "kubefarm.mode=rescue kubefarm.server=http://x kubefarm.image=" + digest, err: "kubefarm.mode"},
		{name: "mode is case-sensitive", cmdline: "kubefarm.mode=Discover kubefarm.server=http://x kubefarm.image=" + digest, err: "kubefarm.mode"},
		{name: "no server", cmdline: "kubefarm.image=" + digest, err: "kubefarm.server= is missing"},
		{name: "server not http", cmdline: "kubefarm.server=https://x kubefarm.image=" + digest, err: "kubefarm.server"},
		{name: "no image", cmdline: "kubefarm.server=http://x", err: "kubefarm.image"},
		{name: "short image", cmdline: "kubefarm.server=http://x kubefarm.image=sha256:abc", err: "kubefarm.image"},
		{name: "bad BOOTIF", cmdline: "kubefarm.server=http://x kubefarm.image=" + digest + " BOOTIF=06-02-00-00-ab-cd-ef", err: "BOOTIF"},
	} {
		got, err := Parse(tc.cmdline)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want one naming %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func TestParseBootIDAndIface(t *testing.T) {
	if id, err := ParseBootID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\n"); err != nil || id != "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0" {
		t.Errorf("boot ID: %q, %v", id, err)
	}
	for _, bad := range []string{"", "0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0", "0f1e2d3c04b5a-6978-8796-a5b4c3d2e1f0"} {
		if _, err := ParseBootID(bad); err == nil {
			t.Errorf("boot ID %q accepted", bad)
		}
	}
	if n, err := ParseBootIface("enp1s0\n"); err != nil || n != "enp1s0" {
		t.Errorf("iface: %q, %v", n, err)
	}
	for _, bad := range []string{"", "..", "a/b", "averyverylongname0"} {
		if _, err := ParseBootIface(bad); err == nil {
			t.Errorf("iface %q accepted", bad)
		}
	}
}

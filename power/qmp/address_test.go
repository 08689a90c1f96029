package qmp

import (
	"strings"
	"testing"
)

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		in            string
		network, addr string
	}{
		{"unix:///run/qemu/m1.qmp", "unix", "/run/qemu/m1.qmp"},
		{"unix:///tmp/a b?c#d", "unix", "/tmp/a b?c#d"},
		{"tcp://127.0.0.1:4444", "tcp", "127.0.0.1:4444"},
		{"tcp://qemu-host.lab:1", "tcp", "qemu-host.lab:1"},
		{"tcp://m1:65535", "tcp", "m1:65535"},
		{"tcp://[::1]:4444", "tcp", "[::1]:4444"},
	} {
		network, addr, err := parseAddress(tc.in)
		if err != nil || network != tc.network || addr != tc.addr {
			t.Errorf("parseAddress(%q) = %q, %q, %v; want %q, %q", tc.in, network, addr, err, tc.network, tc.addr)
		}
	}
}

func TestParseAddressRejects(t *testing.T) {
	for _, in := range []string{
		"",
		"/run/qemu/m1.qmp",
		"unix:/run/qemu/m1.qmp",
		"unix://run/qemu/m1.qmp",
		"unix:///",
		"unix://",
		"tcp://",
		"tcp://127.0.0.1",
		"tcp://:4444",
		"tcp://127.0.0.1:",
		"tcp://127.0.0.1:0",
		"tcp://127.0.0.1:65536",
		"tcp://127.0.0.1:+80",
		"tcp://127.0.0.1:qmp",
		"tcp://127.0.0.1:4444/path",
		"tcp://user@host:4444",
		"TCP://127.0.0.1:4444",
		"http://127.0.0.1:4444",
		"https://bmc.lab/redfish/v1",
		"127.0.0.1:4444",
	} {
		_, _, err := parseAddress(in)
		if err == nil {
			t.Errorf("parseAddress(%q) accepted it", in)
			continue
		}
		if !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("parseAddress(%q): error %q does not name the address", in, err)
		}
	}
}

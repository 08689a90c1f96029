package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kubefarm/kubefarm/pxe/server"
)

func newFlagSet(t *testing.T, o *server.Options) *flag.FlagSet {
	t.Helper()
	fs := flag.NewFlagSet("kubefarm-pxe", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bindFlags(fs, o)
	return fs
}

// TestFlagDefaults pins every flag's name and default: the chart, the e2e
// scenario and operators' manifests rely on them.
func TestFlagDefaults(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "kubefarm-system")
	t.Setenv("NODE_NAME", "node-1")
	var o server.Options
	fs := newFlagSet(t, &o)
	want := map[string]string{
		"interface":                   "",
		"dhcp-listen":                 "",
		"server-ip":                   "",
		"http-addr":                   ":8080",
		"http-port":                   "0",
		"tftp-addr":                   ":69",
		"ipxe-dir":                    "/usr/lib/ipxe",
		"uefi-binary":                 "ipxe.efi",
		"cache-dir":                   "/var/cache/kubefarm-pxe",
		"proxy-dhcp":                  "false",
		"answer-router-solicitations": "true",
		"workers":                     "0",
		"queue":                       "1024",
		"tftp-timeout":                "2s",
		"tftp-retries":                "5",
		"tftp-max-transfers":          "64",
		"tftp-max-windowsize":         "16",
		"tftp-spin-wait":              "50µs",
		"max-artifact-size":           "4294967296",
		"artifact-wait":               "2m0s",
		"insecure-registry":           "false",
		"fetch-denied-cidrs":          "",
		"fetch-allowed-cidrs":         "",
		"verify-images":               "true",
		"namespace":                   "",
		"boot-window":                 "10m0s",
		"pod-namespace":               "kubefarm-system",
		"join-token-ttl":              "15m0s",
		"dynamic-ranges":              "true",
		"dynamic-workers":             "4",
		"discovery":                   "false",
		"discovery-max-machines":      "1000",
		"discovery-rate":              "5",
		"discovery-burst":             "20",
		"event-interval":              "1m0s",
		"event-qps":                   "5",
		"event-burst":                 "50",
		"node-name":                   "node-1",
		"shutdown-timeout":            "30s",
		"metrics-addr":                "127.0.0.1:9090",
		"http-read-header-timeout":    "10s",
		"http-read-timeout":           "30s",
		"http-write-timeout":          "1m0s",
		"http-idle-timeout":           "2m0s",
		"http-max-header-bytes":       "8192",
		"http-max-conns-per-ip":       "16",
	}
	seen := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		seen[f.Name] = true
		d, ok := want[f.Name]
		if !ok {
			t.Errorf("unexpected flag --%s", f.Name)
			return
		}
		if f.DefValue != d {
			t.Errorf("--%s defaults to %q, want %q", f.Name, f.DefValue, d)
		}
		if f.Usage == "" {
			t.Errorf("--%s has no help text", f.Name)
		}
	})
	for n := range want {
		if !seen[n] {
			t.Errorf("flag --%s is missing", n)
		}
	}
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if o.PodNamespace != "kubefarm-system" || o.NodeName != "node-1" || o.HTTPAddr != ":8080" || o.BootWindow != 10*time.Minute || !o.DynamicRanges || !o.VerifyImages {
		t.Errorf("defaults not set on the struct: %+v", o)
	}
}

func TestFlagParse(t *testing.T) {
	var o server.Options
	fs := newFlagSet(t, &o)
	err := fs.Parse([]string{
		"--dhcp-listen", "eth1", "--server-ip", "10.28.0.2", "--http-port", "80", "--proxy-dhcp",
		"--tftp-timeout", "500ms", "--uefi-binary", "snponly.efi", "--dynamic-ranges=false", "--event-interval", "0",
		"--verify-images=false",
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.Interface != "eth1" {
		t.Errorf("--dhcp-listen is not an alias of --interface: %q", o.Interface)
	}
	if o.ServerIP != "10.28.0.2" || o.HTTPPort != 80 || !o.ProxyDHCP || o.TFTPTimeout != 500*time.Millisecond ||
		o.UEFIBinary != "snponly.efi" || o.DynamicRanges || o.EventInterval != 0 || o.VerifyImages {
		t.Errorf("parsed %+v", o)
	}
	if err := newFlagSet(t, &server.Options{}).Parse([]string{"--no-such-flag"}); err == nil {
		t.Error("an unknown flag was accepted")
	}
}

func TestHTTPLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{nil, ""},
		{[]string{"--http-max-conns-per-ip=0"}, ""},
		{[]string{"--http-read-timeout=0s"}, "--http-read-timeout (0s) must be positive"},
		{[]string{"--http-write-timeout=-1s"}, "--http-write-timeout (-1s) must be positive"},
		{[]string{"--http-read-header-timeout=0s"}, "--http-read-header-timeout"},
		{[]string{"--http-idle-timeout=0s"}, "--http-idle-timeout"},
		{[]string{"--http-max-header-bytes=100"}, "--http-max-header-bytes (100) must be at least 1024"},
		{[]string{"--http-max-conns-per-ip=-1"}, "--http-max-conns-per-ip (-1) must not be negative"},
	} {
		var o server.Options
		if err := newFlagSet(t, &o).Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.HTTP.Validate()
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: error %v, want one with %q", tc.args, err, tc.err)
		}
	}
}

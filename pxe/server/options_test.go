package server

import (
	"strings"
	"testing"
	"time"
)

// TestValidate: every option New can check without the cluster is
// refused with its flag named; defaults with a server IP pass.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Options)
		err  string
	}{
		{"defaults", func(*Options) {}, ""},
		{"no server IP", func(o *Options) { o.ServerIP = "" }, `--server-ip "" is not an IPv4 address`},
		{"http-addr without a port", func(o *Options) { o.HTTPAddr = "8080" }, "--http-addr: "},
		{"http-addr port 0, no http-port", func(o *Options) { o.HTTPAddr = ":0" }, `--http-addr ":0" needs an explicit port`},
		{"http-addr port 0 with http-port", func(o *Options) { o.HTTPAddr, o.HTTPPort = ":0", 80 }, ""},
		{"denied prefix", func(o *Options) { o.FetchDeniedCIDRs = "10.0.0.0/33" }, "--fetch-denied-cidrs"},
		{"allowed prefix", func(o *Options) { o.FetchAllowedCIDRs = "registry.example.com" }, "--fetch-allowed-cidrs"},
		{"no event budget", func(o *Options) { o.EventQPS = 0 }, "--event-qps (0) and --event-burst (50) must be positive"},
		{"no event burst", func(o *Options) { o.EventBurst = -1 }, "--event-burst (-1)"},
		{"events off need no budget", func(o *Options) { o.EventInterval, o.EventQPS, o.EventBurst = 0, 0, 0 }, ""},
		{"http limit", func(o *Options) { o.HTTP.ReadTimeout = 0 }, "--http-read-timeout (0s) must be positive"},
		{"header limit", func(o *Options) { o.HTTP.MaxHeaderBytes = 100 }, "--http-max-header-bytes (100)"},
		{"discovery", func(o *Options) { o.Discovery = true }, ""},
		{"discovery without ranges", func(o *Options) { o.Discovery, o.DynamicRanges = true, false }, "--discovery needs --dynamic-ranges"},
		{"discovery cap", func(o *Options) { o.Discovery, o.DiscoveryMaxMachines = true, 0 }, "--discovery-max-machines (0)"},
		{"discovery rate", func(o *Options) { o.Discovery, o.DiscoveryRate = true, 0 }, "--discovery-rate (0)"},
		{"discovery burst", func(o *Options) { o.Discovery, o.DiscoveryBurst = true, 0 }, "--discovery-burst (0)"},
		{"discovery off needs no bounds", func(o *Options) { o.DiscoveryMaxMachines, o.DiscoveryRate = 0, 0 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			o.ServerIP = "10.28.0.2"
			tc.set(&o)
			err := o.Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one with %q", err, tc.err)
			}
		})
	}
}

// TestNewValidatesFirst: New refuses bad options before it reaches for a
// kubeconfig (there is none here) or opens a socket.
func TestNewValidatesFirst(t *testing.T) {
	t.Setenv("KUBECONFIG", "/nonexistent/kubeconfig")
	o := DefaultOptions()
	o.HTTP.IdleTimeout = -time.Second
	o.ServerIP = "10.28.0.2"
	if s, err := New(o); err == nil || !strings.Contains(err.Error(), "--http-idle-timeout") {
		t.Fatalf("New: %v, %v; want the error naming --http-idle-timeout", s, err)
	}
}

// TestDefaultOptions: the defaults pass validation once a server IP is
// set, and leave nothing a replica needs unset.
func TestDefaultOptions(t *testing.T) {
	o := DefaultOptions()
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--server-ip") {
		t.Errorf("defaults without a server IP: %v, want --server-ip refused", err)
	}
	o.ServerIP = "10.28.0.2"
	if err := o.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if o.HTTPAddr == "" || o.TFTPAddr == "" || o.MetricsAddr != DefaultMetricsAddr || o.ShutdownTimeout <= 0 || o.CacheDir == "" {
		t.Errorf("defaults leave a service off: %+v", o)
	}
}

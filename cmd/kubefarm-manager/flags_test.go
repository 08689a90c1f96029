package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kubefarm/kubefarm/internal/manager"
)

// TestBMCTimeoutFlag: --bmc-timeout reaches manager.Options.BMCTimeout;
// unset is 0 (each driver's default); a negative value, one above 5
// minutes and a non-duration are refused at parsing, naming the flag.
func TestBMCTimeoutFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    time.Duration
		wantErr string
	}{
		{args: nil, want: 0},
		{args: []string{"--bmc-timeout=0"}, want: 0},
		{args: []string{"--bmc-timeout=45s"}, want: 45 * time.Second},
		{args: []string{"--bmc-timeout", "2m"}, want: 2 * time.Minute},
		{args: []string{"--bmc-timeout=5m"}, want: 5 * time.Minute},
		{args: []string{"--bmc-timeout=-1s"}, wantErr: "negative"},
		{args: []string{"--bmc-timeout=5m1s"}, wantErr: "above the maximum 5m0s"},
		{args: []string{"--bmc-timeout=1h"}, wantErr: "above the maximum 5m0s"},
		{args: []string{"--bmc-timeout=30"}, wantErr: "not a duration"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("kubefarm-manager", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var o manager.Options
			bindFlags(fs, &o)
			err := fs.Parse(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), "-bmc-timeout") || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) = %v, want an error naming -bmc-timeout and saying %q", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.args, err)
			}
			if o.BMCTimeout != tc.want {
				t.Errorf("Parse(%q): BMCTimeout = %s, want %s", tc.args, o.BMCTimeout, tc.want)
			}
		})
	}
}

// TestNotifyFlags: --notify-denied-cidrs and --notify-allowed-cidrs reach
// manager.Options as given (checked when the manager is built).
func TestNotifyFlags(t *testing.T) {
	fs := flag.NewFlagSet("kubefarm-manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o manager.Options
	bindFlags(fs, &o)
	if err := fs.Parse([]string{"--notify-denied-cidrs=10.96.0.0/12,10.244.0.0/16", "--notify-allowed-cidrs", "10.96.10.0/24"}); err != nil {
		t.Fatal(err)
	}
	if o.NotifyDeniedCIDRs != "10.96.0.0/12,10.244.0.0/16" || o.NotifyAllowedCIDRs != "10.96.10.0/24" {
		t.Errorf("Options %q %q", o.NotifyDeniedCIDRs, o.NotifyAllowedCIDRs)
	}
}

// TestAlertSourceFlag: --alert-source is repeatable and refuses a value
// that is not name=URL, naming the flag.
func TestAlertSourceFlag(t *testing.T) {
	fs := flag.NewFlagSet("kubefarm-manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o manager.Options
	bindFlags(fs, &o)
	if err := fs.Parse([]string{"--alert-source=prod=http://prometheus.monitoring.svc:9090", "--alert-source", "thanos=https://thanos.example.com"}); err != nil {
		t.Fatal(err)
	}
	if len(o.AlertSources) != 2 || o.AlertSources[1] != "thanos=https://thanos.example.com" {
		t.Errorf("AlertSources = %q", o.AlertSources)
	}
	fs = flag.NewFlagSet("kubefarm-manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bindFlags(fs, &manager.Options{})
	if err := fs.Parse([]string{"--alert-source=http://prometheus:9090"}); err == nil || !strings.Contains(err.Error(), "-alert-source") {
		t.Errorf("a source without a name: %v", err)
	}
	fs = flag.NewFlagSet("kubefarm-manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o = manager.Options{}
	bindFlags(fs, &o)
	if err := fs.Parse([]string{"--alert-source-auth=prod=/etc/kubefarm/alert-sources/prod"}); err != nil || len(o.AlertSourceAuth) != 1 {
		t.Errorf("--alert-source-auth: %v, %q", err, o.AlertSourceAuth)
	}
	if err := fs.Parse([]string{"--alert-source-auth=prod=relative"}); err == nil || !strings.Contains(err.Error(), "-alert-source-auth") {
		t.Errorf("a relative directory: %v", err)
	}
}

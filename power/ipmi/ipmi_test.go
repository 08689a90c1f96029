package ipmi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/chassis"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/kubefarm/kubefarm/power"
)

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		in       string
		host     string
		port     int
		errMatch string
	}{
		{in: "bmc1.rack1", host: "bmc1.rack1", port: 623},
		{in: "10.0.0.5", host: "10.0.0.5", port: 623},
		{in: "10.0.0.5:6230", host: "10.0.0.5", port: 6230},
		{in: "", errMatch: "empty"},
		{in: "10.0.0.5:", errMatch: "port"},
		{in: "10.0.0.5:0", errMatch: "port"},
		{in: "10.0.0.5:70000", errMatch: "port"},
		{in: "10.0.0.5:abc", errMatch: "port"},
		{in: ":623", errMatch: "no host"},
		{in: "https://10.0.0.5", errMatch: "URL"},
		{in: "tcp://10.0.0.5:4444", errMatch: "URL"},
		{in: "fe80::1", errMatch: "IPv6"},
	} {
		host, port, err := ParseAddress(tc.in)
		if tc.errMatch != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errMatch) {
				t.Errorf("ParseAddress(%q) = %q, %d, %v; want an error with %q", tc.in, host, port, err, tc.errMatch)
			}
			continue
		}
		if err != nil || host != tc.host || port != tc.port {
			t.Errorf("ParseAddress(%q) = %q, %d, %v; want %q, %d", tc.in, host, port, err, tc.host, tc.port)
		}
	}
}

func TestCycleControl(t *testing.T) {
	for _, tc := range []struct {
		on   bool
		want chassis.ChassisControl
	}{
		{on: true, want: chassis.ChassisControlPowerCycle},
		// A machine that is off is powered on: a BMC may ignore a cycle
		// of a machine that is off.
		{on: false, want: chassis.ChassisControlPowerUp},
	} {
		if got := cycleControl(tc.on); got != tc.want {
			t.Errorf("cycleControl(on=%v) = %s, want %s", tc.on, controlName(got), controlName(tc.want))
		}
	}
}

func TestTransient(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "udp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"read timeout", fmt.Errorf("exchange: %w", timeout), true},
		{"port unreachable", fmt.Errorf("read: %w", &net.OpError{Op: "read", Err: syscall.ECONNREFUSED}), true},
		{"completion code", types.NewResponseError(0xc1, "Invalid Command"), false},
		{"wrong password", fmt.Errorf("rakp2: %w", client.ErrRAKPAuthentication), false},
		{"unknown user", types.NewRmcpStatusError(types.RmcpStatusCodeUnauthorizedName), false},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{"canceled", context.Canceled, false},
		{"other", errors.New("malformed answer"), false},
		{"nothing matched", errors.New("udp exchange: no datagram matched before deadline"), true},
		{"refused credentials, flattened", errors.New("connect20 failed: RAKP authentication failed (no datagram matched)"), false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("%s: transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestWrapError(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		auth  bool
		words []string
	}{
		{"wrong password", fmt.Errorf("rakp2: %w", client.ErrRAKPAuthentication), true,
			[]string{"wrong password", "RAKP authentication failed"}},
		{"unknown user", types.NewRmcpStatusError(types.RmcpStatusCodeUnauthorizedName), true,
			[]string{"unknown user name", "RMCP+ status 0x0d"}},
		{"role refused", types.NewRmcpStatusError(types.RmcpStatusCodeUnauthorizedRoleOfPriLevel), true,
			[]string{"privilege"}},
		{"privilege too low", fmt.Errorf("cmd: %w", types.NewResponseError(0xd4, "Insufficient privilege level")), true,
			[]string{"privilege", "Insufficient privilege level"}},
		{"invalid data field", types.NewResponseError(0xcc, "Invalid data field in Request"), false,
			[]string{"completion code 0xcc", "Invalid data field in Request"}},
		// go-ipmi v0.9.1's session setup flattens its errors to text.
		{"wrong password, flattened", errors.New("connect20 failed after try all cipher suite ids ([3]), errs: \n" +
			"cmd: rakp1 failed with cipher suite id (3), err: validate rakp2 message failed, err: RAKP2 authentication code mismatch: RAKP authentication failed"), true,
			[]string{"wrong password", "RAKP2 authentication code mismatch"}},
		{"unknown user, flattened", errors.New("connect20 failed after try all cipher suite ids ([3]), errs: \n" +
			"cmd: rakp1 failed with cipher suite id (3), err: validate rakp2 message failed, err: " +
			types.NewRmcpStatusError(types.RmcpStatusCodeUnauthorizedName).Error()), true,
			[]string{"unknown user name", "Unauthorized name"}},
		{"lost during setup, flattened", errors.New("connect20 failed after try all cipher suite ids ([3]), errs: \n" +
			"cmd: RMCP+ Open Session failed with cipher suite id (3), err: IPMI LAN: no matching IPMI response before UDP read deadline: udp exchange: no datagram matched before deadline"), false,
			[]string{"did not answer (tried 3 times)"}},
		{"no answer in time", fmt.Errorf("x: %w", context.DeadlineExceeded), false,
			[]string{"no answer before the deadline (driver timeout 15s", "reachable"}},
		{"refused datagrams", &net.OpError{Op: "read", Err: syscall.ECONNREFUSED}, false,
			[]string{"did not answer (tried 3 times)", "connection refused"}},
	} {
		err := wrapError("farm/m1", "power on", "10.0.0.5:623", 15*time.Second, tc.err)
		msg := err.Error()
		if !strings.HasPrefix(msg, "ipmi power on of Machine farm/m1 (BMC 10.0.0.5:623): ") {
			t.Errorf("%s: %q does not name the operation, the Machine and the BMC", tc.name, msg)
		}
		if got := errors.Is(err, power.ErrAuth); got != tc.auth {
			t.Errorf("%s: errors.Is(%q, power.ErrAuth) = %v, want %v", tc.name, msg, got, tc.auth)
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: %q does not wrap the client's error", tc.name, msg)
		}
		for _, w := range tc.words {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q lacks %q", tc.name, msg, w)
			}
		}
	}
}

func TestRunRefusesBadTargetsWithoutNetwork(t *testing.T) {
	d := Driver{}
	_, err := d.Status(context.Background(), power.Target{Machine: "farm/m1",
		Spec: specOf("https://bmc"), Username: "admin", Password: "x"})
	if err == nil || !strings.Contains(err.Error(), "Machine farm/m1") || !strings.Contains(err.Error(), "spec.power.address") {
		t.Errorf("a URL address: %v, want an error naming the Machine and spec.power.address", err)
	}
	err = d.Off(context.Background(), power.Target{Machine: "farm/m1", Spec: specOf("bmc")})
	if !errors.Is(err, power.ErrAuth) || !strings.Contains(err.Error(), "no username") {
		t.Errorf("no username: %v, want power.ErrAuth saying so", err)
	}
}

func TestRetryStopsAtTwoRetries(t *testing.T) {
	calls := 0
	lost := &net.OpError{Op: "read", Err: syscall.ECONNREFUSED}
	err := retry(context.Background(), "step", func() error { calls++; return lost })
	if calls != 3 || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a step lost to the network ran %d times (%v), want 3", calls, err)
	}
	calls = 0
	_ = retry(context.Background(), "step", func() error { calls++; return client.ErrRAKPAuthentication })
	if calls != 1 {
		t.Errorf("a refused step ran %d times, want 1", calls)
	}
	calls = 0
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = retry(ctx, "step", func() error { calls++; return lost })
	if calls != 1 {
		t.Errorf("a step under a cancelled context ran %d times, want 1", calls)
	}
}

// TestExchangeFor: the default bound keeps the 2 s per answer; a longer
// --bmc-timeout gives each answer the same share of it.
func TestExchangeFor(t *testing.T) {
	for _, tc := range []struct {
		timeout, want time.Duration
	}{
		{0, exchangeTimeout},
		{time.Second, exchangeTimeout},
		{DefaultTimeout, exchangeTimeout},
		{30 * time.Second, 4 * time.Second},
		{time.Minute, 8 * time.Second},
		{5 * time.Minute, 40 * time.Second},
	} {
		if got := exchangeFor(tc.timeout); got != tc.want {
			t.Errorf("exchangeFor(%s) = %s, want %s", tc.timeout, got, tc.want)
		}
	}
}

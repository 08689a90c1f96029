package redfish_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/sushy"
	"github.com/kubefarm/kubefarm/power"
	"github.com/kubefarm/kubefarm/power/redfish"
)

func TestMain(m *testing.M) { sushy.Main(m) }

// TestSushy drives a qemu machine through the real sushy-tools emulator
// over TLS with basic authentication, and logs each operation's time.
func TestSushy(t *testing.T) {
	e := sushy.Start(t)
	d := redfish.Driver{}
	target := power.Target{
		Machine:  "farm/m1",
		Spec:     v1alpha1.PowerSpec{Driver: v1alpha1.PowerDriver("redfish"), Address: e.Endpoint + e.SystemPath},
		Username: e.Username, Password: e.Password, CA: e.CA,
	}
	ctx := context.Background()
	timed := func(name string, f func() error) {
		t.Helper()
		start := time.Now()
		err := f()
		t.Logf("%s: %v", name, time.Since(start).Round(time.Millisecond))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	status := func(want power.State) {
		t.Helper()
		var got power.State
		timed("Status", func() (err error) { got, err = d.Status(ctx, target); return err })
		if got != want {
			t.Fatalf("Status = %s, want %s", got, want)
		}
	}
	status(power.StateOff)

	timed("On", func() error { return d.On(ctx, target, power.Options{}) })
	status(power.StateOn)
	if got := e.DomainState(t); got != "running" {
		t.Fatalf("after On virsh domstate = %q, want running", got)
	}

	// sushy's ForceRestart destroys and creates the domain: a new qemu,
	// hence a new domain id, shows the cycle happened.
	before := e.DomainID(t)
	timed("Cycle", func() error { return d.Cycle(ctx, target, power.Options{}) })
	if after := e.DomainID(t); after == before || after == "-" {
		t.Fatalf("domain id %s before Cycle and %s after, want a new running qemu", before, after)
	}
	status(power.StateOn)

	before = e.DomainID(t)
	timed("Cycle NetbootOnce", func() error { return d.Cycle(ctx, target, power.Options{NetbootOnce: true}) })
	if after := e.DomainID(t); after == before || after == "-" {
		t.Fatalf("domain id %s before Cycle and %s after, want a new running qemu", before, after)
	}
	var sys struct {
		Boot struct{ BootSourceOverrideTarget, BootSourceOverrideEnabled string }
	}
	if err := e.Get(e.SystemPath, &sys); err != nil {
		t.Fatal(err)
	}
	// Only the target is asserted: sushy's libvirt driver accepts
	// "Once" but has no one-time boot (it rewrites the domain's boot
	// order) and reads it back as "Continuous"; a real BMC keeps Once.
	if sys.Boot.BootSourceOverrideTarget != "Pxe" {
		t.Fatalf("after Cycle with NetbootOnce Boot = %+v, want BootSourceOverrideTarget Pxe", sys.Boot)
	}
	t.Logf("Boot after NetbootOnce: %+v", sys.Boot)

	timed("Off", func() error { return d.Off(ctx, target) })
	status(power.StateOff)
	if got := e.DomainState(t); got != "shut off" {
		t.Fatalf("after Off virsh domstate = %q, want shut off", got)
	}
	timed("Off again (already off)", func() error { return d.Off(ctx, target) })

	// Cycle of a machine that is off turns it on.
	timed("Cycle from off", func() error { return d.Cycle(ctx, target, power.Options{}) })
	status(power.StateOn)
	timed("On again (already on)", func() error { return d.On(ctx, target, power.Options{}) })
	timed("Off", func() error { return d.Off(ctx, target) })

	t.Run("the only system, without a path in the address", func(t *testing.T) {
		only := target
		only.Spec.Address = e.Endpoint
		if got, err := d.Status(ctx, only); err != nil || got != power.StateOff {
			t.Fatalf("Status = %s, %v, want Off", got, err)
		}
	})

	t.Run("no CA and verification on fails with a certificate error", func(t *testing.T) {
		noCA := target
		noCA.CA = nil
		_, err := d.Status(ctx, noCA)
		var ua x509.UnknownAuthorityError
		var cv *tls.CertificateVerificationError
		if err == nil || !(errors.As(err, &ua) || errors.As(err, &cv)) {
			t.Fatalf("err = %v, want a certificate verification error", err)
		}
		for _, want := range []string{"farm/m1", "status", "spec.power.caSecret"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q lacks %q", err, want)
			}
		}
		t.Log(err)
	})

	t.Run("insecureSkipVerify works and warns", func(t *testing.T) {
		insecure := target
		insecure.CA = nil
		insecure.Spec.InsecureSkipVerify = true
		if got, err := d.Status(ctx, insecure); err != nil || got != power.StateOff {
			t.Fatalf("Status = %s, %v, want Off", got, err)
		}
		if w := redfish.Warning(insecure); !strings.Contains(w, "verification off") {
			t.Errorf("Warning = %q, want it to say verification is off", w)
		}
		if w := redfish.Warning(target); w != "" {
			t.Errorf("verified target: Warning = %q", w)
		}
	})

	t.Run("a wrong password wraps ErrAuth", func(t *testing.T) {
		wrong := target
		wrong.Password = "not-" + e.Password
		err := d.On(ctx, wrong, power.Options{})
		if !errors.Is(err, power.ErrAuth) {
			t.Fatalf("err = %v, want power.ErrAuth", err)
		}
		if strings.Contains(err.Error(), wrong.Password) {
			t.Errorf("the error shows the password: %q", err)
		}
		if !strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "power on") {
			t.Errorf("%q lacks the status or the operation", err)
		}
		if got := e.DomainState(t); got != "shut off" {
			t.Errorf("a refused On changed the machine: %q", got)
		}
		t.Log(err)
	})

	t.Run("a port nobody listens on fails within the timeout", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		dead := target
		dead.Spec.Address = fmt.Sprintf("https://127.0.0.1:%d", port)
		short := redfish.Driver{Timeout: 3 * time.Second}
		start := time.Now()
		_, err = short.Status(ctx, dead)
		took := time.Since(start)
		t.Logf("refused: %v after %v", err, took.Round(time.Millisecond))
		if err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("err = %v, want connection refused", err)
		}
		if took > 3*time.Second+500*time.Millisecond {
			t.Fatalf("took %v, want within the 3 s timeout", took)
		}
		// Two retries after 300 and 600 ms of backoff.
		if took < 900*time.Millisecond {
			t.Errorf("took %v: the refused connection was not retried twice", took)
		}
	})

	t.Run("a BMC that accepts but never answers fails at the timeout", func(t *testing.T) {
		// The kernel completes the TCP handshake into the backlog;
		// nothing reads, so the TLS handshake waits.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		hung := target
		hung.Spec.Address = "https://" + l.Addr().String()
		short := redfish.Driver{Timeout: time.Second}
		start := time.Now()
		_, err = short.Status(ctx, hung)
		took := time.Since(start)
		t.Logf("hung: %v after %v", err, took.Round(time.Millisecond))
		if err == nil || took < time.Second || took > 2*time.Second {
			t.Fatalf("err = %v after %v, want a failure at the 1 s timeout", err, took)
		}
	})
}

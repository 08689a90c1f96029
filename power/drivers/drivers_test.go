package drivers_test

import (
	"context"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/power"
	"github.com/kubefarm/kubefarm/power/drivers"
	"github.com/kubefarm/kubefarm/power/ipmi"
	"github.com/kubefarm/kubefarm/power/qmp"
	"github.com/kubefarm/kubefarm/power/redfish"
)

// TestNewHasEveryDriverOfTheAPI: every name the API's enum admits has its
// driver, of the right package; only redfish warns.
func TestNewHasEveryDriverOfTheAPI(t *testing.T) {
	d := drivers.New()
	for name, want := range map[v1alpha1.PowerDriver]power.Driver{
		v1alpha1.PowerQMP: qmp.Driver{}, v1alpha1.PowerIPMI: ipmi.Driver{}, v1alpha1.PowerRedfish: redfish.Driver{},
	} {
		got, err := d.For(name)
		if err != nil || got != want {
			t.Errorf("For(%s) = %T, %v; want %T", name, got, err, want)
		}
		_, warns := got.(power.Warner)
		if warns != (name == v1alpha1.PowerRedfish) {
			t.Errorf("%s: warns %t", name, warns)
		}
	}
	if len(d) != 3 {
		t.Errorf("%d drivers, want 3", len(d))
	}
}

// TestNewWithPassesTheTimeoutToTheBMCDrivers: ipmi and redfish get
// Options.Timeout; qmp keeps its own; zero Options are New's drivers.
func TestNewWithPassesTheTimeoutToTheBMCDrivers(t *testing.T) {
	d := drivers.NewWith(drivers.Options{Timeout: 90 * time.Second})
	want := power.Drivers{
		v1alpha1.PowerQMP:     qmp.Driver{},
		v1alpha1.PowerIPMI:    ipmi.Driver{Timeout: 90 * time.Second},
		v1alpha1.PowerRedfish: redfish.Driver{Timeout: 90 * time.Second},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("NewWith(90s) = %#v, want %#v", d, want)
	}
	if zero := drivers.NewWith(drivers.Options{}); !reflect.DeepEqual(zero, drivers.New()) {
		t.Errorf("NewWith(zero) = %#v, want New() = %#v", zero, drivers.New())
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		timeout time.Duration
		wantErr string
	}{
		{0, ""},
		{time.Second, ""},
		{90 * time.Second, ""},
		{drivers.MaxTimeout, ""},
		{-time.Second, "timeout -1s is negative"},
		{drivers.MaxTimeout + time.Second, "timeout 5m1s is above the maximum 5m0s"},
	} {
		err := drivers.Options{Timeout: tc.timeout}.Validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("Validate(%s) = %v, want nil", tc.timeout, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("Validate(%s) = %v, want an error saying %q", tc.timeout, err, tc.wantErr)
		}
	}
}

func TestOptionsCallerBound(t *testing.T) {
	for _, tc := range []struct {
		timeout, callerDefault, want time.Duration
	}{
		{0, time.Minute, time.Minute},                     // the drivers' defaults fit the caller's
		{30 * time.Second, time.Minute, time.Minute},      // 30 s + margin is still a minute
		{45 * time.Second, time.Minute, 75 * time.Second}, // longer: the caller's bound follows
		{drivers.MaxTimeout, time.Minute, 5*time.Minute + drivers.CallerMargin},
		{time.Minute, 2 * time.Minute, 2 * time.Minute}, // machine removal's own 2 min suffices
		{3 * time.Minute, 2 * time.Minute, 3*time.Minute + drivers.CallerMargin},
	} {
		if got := (drivers.Options{Timeout: tc.timeout}).CallerBound(tc.callerDefault); got != tc.want {
			t.Errorf("CallerBound(timeout %s, caller %s) = %s, want %s", tc.timeout, tc.callerDefault, got, tc.want)
		}
	}
}

// TestTimeoutBoundsTheBMCDrivers: with a 1 s timeout, an ipmi operation
// against a UDP port that takes datagrams and never answers, and a redfish
// one against a TCP listener that accepts and never answers, each fail
// well before their defaults (ipmi would give up after its three 2 s
// exchanges, ~7 s, without a deadline error; redfish after 20 s). The
// caller's context (30 s) is not what ends them.
func TestTimeoutBoundsTheBMCDrivers(t *testing.T) {
	const timeout = time.Second
	d := drivers.NewWith(drivers.Options{Timeout: timeout})
	for _, tc := range []struct {
		driver  v1alpha1.PowerDriver
		address string
		wantErr string
	}{
		{v1alpha1.PowerIPMI, silentUDP(t), "driver timeout 1s"},
		{v1alpha1.PowerRedfish, "https://" + silentTCP(t), "reading the service root"},
	} {
		t.Run(string(tc.driver), func(t *testing.T) {
			drv, err := d.For(tc.driver)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			target := power.Target{Machine: "ns/m", Username: "admin", Password: "secret",
				Spec: v1alpha1.PowerSpec{Driver: tc.driver, Address: tc.address}}
			start := time.Now()
			_, err = drv.Status(ctx, target)
			elapsed := time.Since(start)
			if err == nil {
				t.Fatal("Status of a BMC that never answers succeeded")
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error does not say %q: %v", tc.wantErr, err)
			}
			if elapsed < timeout || elapsed > 5*time.Second {
				t.Errorf("Status failed after %s, want from %s to 5s (the driver's timeout, not its default): %v", elapsed, timeout, err)
			}
			if ctx.Err() != nil {
				t.Errorf("the caller's context ended first: %v", err)
			}
		})
	}
}

// silentUDP is host:port of a loopback UDP socket that takes datagrams and
// never answers (a closed port would refuse at once, which fails fast
// without any timeout).
func silentUDP(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc.LocalAddr().String()
}

// silentTCP is host:port of a loopback TCP listener that accepts every
// connection and never writes (a TLS handshake waits for its hello).
func silentTCP(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by the cleanup
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

package ipmi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/ipmisim"
	"github.com/kubefarm/kubefarm/power"
)

func specOf(addr string) v1alpha1.PowerSpec {
	return v1alpha1.PowerSpec{Driver: v1alpha1.PowerIPMI, Address: addr, CredentialsSecret: "bmc"}
}

// timed runs op and logs how long it took against the emulator.
func timed(t *testing.T, name string, op func() error) {
	t.Helper()
	start := time.Now()
	err := op()
	t.Logf("%-28s %v", name, time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// startedLogged: the hook has logged the start of qemu pid (it does so
// after qemu writes its pid file).
func startedLogged(sim *ipmisim.Sim, pid int) bool {
	return slices.ContainsFunc(sim.HookLog(), func(l string) bool {
		return strings.HasPrefix(l, fmt.Sprintf("qemu-started pid=%d ", pid))
	})
}

func TestAgainstIPMISim(t *testing.T) {
	sim := ipmisim.Start(t)
	d := Driver{}
	ctx := context.Background()
	target := power.Target{Machine: "farm/m1", Spec: specOf(sim.Addr), Username: sim.Username, Password: sim.Password}

	status := func(want power.State) {
		t.Helper()
		var got power.State
		timed(t, "status", func() (err error) { got, err = d.Status(ctx, target); return err })
		if got != want {
			t.Fatalf("Status = %s, want %s", got, want)
		}
	}

	status(power.StateOff)
	if pid := sim.QemuPID(); pid != 0 {
		t.Fatalf("a qemu (pid %d) runs before power on", pid)
	}

	timed(t, "on", func() error { return d.On(ctx, target, power.Options{}) })
	first := sim.QemuPID()
	if first == 0 {
		t.Fatal("no qemu runs after On")
	}
	status(power.StateOn)

	timed(t, "cycle", func() error { return d.Cycle(ctx, target, power.Options{}) })
	// ipmi_sim powers off at once and on again a second later.
	var second int
	took := waitFor(t, "a new qemu after Cycle", 15*time.Second, func() bool {
		second = sim.QemuPID()
		return second != 0 && second != first && startedLogged(sim, second)
	})
	t.Logf("%-28s %v", "cycle: new qemu running after", took.Round(time.Millisecond))
	status(power.StateOn)
	if slices.Contains(sim.HookLog(), "set boot pxe") {
		t.Fatalf("the boot device was set without NetbootOnce: %q", sim.HookLog())
	}

	timed(t, "cycle with netboot once", func() error { return d.Cycle(ctx, target, power.Options{NetbootOnce: true}) })
	var third int
	took = waitFor(t, "a new qemu after the netboot Cycle", 15*time.Second, func() bool {
		third = sim.QemuPID()
		return third != 0 && third != second && startedLogged(sim, third)
	})
	t.Logf("%-28s %v", "cycle: new qemu running after", took.Round(time.Millisecond))
	log := sim.HookLog()
	setPXE := slices.Index(log, "set boot pxe")
	started := slices.Index(log, fmt.Sprintf("qemu-started pid=%d args=-boot once=n", third))
	if setPXE < 0 || started < setPXE {
		t.Fatalf("the BMC was not asked for a PXE boot before the machine started with -boot once=n: %q", log)
	}

	timed(t, "off", func() error { return d.Off(ctx, target) })
	if pid := sim.QemuPID(); pid != 0 {
		t.Fatalf("qemu (pid %d) still runs after Off", pid)
	}
	status(power.StateOff)

	// Cycle of a machine that is off powers it on.
	timed(t, "cycle of a machine that is off", func() error { return d.Cycle(ctx, target, power.Options{}) })
	if sim.QemuPID() == 0 {
		t.Fatal("no qemu runs after the Cycle of a machine that was off")
	}
	timed(t, "off", func() error { return d.Off(ctx, target) })

	t.Run("wrong password", func(t *testing.T) {
		bad := target
		bad.Password = sim.Password + "x"
		start := time.Now()
		_, err := d.Status(ctx, bad)
		t.Logf("%-28s %v: %v", "status, wrong password", time.Since(start).Round(time.Millisecond), err)
		if !errors.Is(err, power.ErrAuth) || !strings.Contains(err.Error(), "Machine farm/m1") {
			t.Fatalf("wrong password: %v, want an error wrapping power.ErrAuth naming Machine farm/m1", err)
		}
	})

	t.Run("operator privilege suffices", func(t *testing.T) {
		op := target
		op.Username = sim.Operator
		timed(t, "on, as an operator", func() error { return d.On(ctx, op, power.Options{NetbootOnce: true}) })
		if sim.QemuPID() == 0 {
			t.Fatal("no qemu runs after On by an operator")
		}
		timed(t, "off, as an operator", func() error { return d.Off(ctx, op) })
	})

	t.Run("unknown user", func(t *testing.T) {
		bad := target
		bad.Username = "nobody"
		_, err := d.Status(ctx, bad)
		if !errors.Is(err, power.ErrAuth) || !strings.Contains(err.Error(), "Machine farm/m1") {
			t.Fatalf("unknown user: %v, want an error wrapping power.ErrAuth naming Machine farm/m1", err)
		}
	})
}

func TestNobodyAnswers(t *testing.T) {
	port := ipmisim.FreeUDPPort(t)
	target := power.Target{Machine: "farm/m2", Spec: specOf(net.JoinHostPort("127.0.0.1", strconv.Itoa(port))),
		Username: "admin", Password: "x"}
	d := Driver{Timeout: 2 * time.Second}
	start := time.Now()
	err := d.On(context.Background(), target, power.Options{NetbootOnce: true})
	took := time.Since(start)
	t.Logf("%-28s %v: %v", "on, nobody answers", took.Round(time.Millisecond), err)
	if err == nil || !strings.Contains(err.Error(), "Machine farm/m2") || errors.Is(err, power.ErrAuth) {
		t.Fatalf("On with nobody answering: %v, want an error naming Machine farm/m2 (not an auth error)", err)
	}
	if took > 2*time.Second+500*time.Millisecond {
		t.Fatalf("On with nobody answering took %v, want at most the 2 s timeout", took)
	}
}

func TestContextBoundsTheOperation(t *testing.T) {
	// A BMC that swallows every datagram: the caller's deadline, shorter
	// than the driver's, ends the operation.
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	target := power.Target{Machine: "farm/m3", Spec: specOf(pc.LocalAddr().String()), Username: "admin", Password: "x"}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = Driver{}.Status(ctx, target)
	took := time.Since(start)
	t.Logf("%-28s %v: %v", "status, BMC silent", took.Round(time.Millisecond), err)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Machine farm/m3") {
		t.Fatalf("Status against a silent BMC: %v, want a deadline error naming Machine farm/m3", err)
	}
	if took > 1500*time.Millisecond {
		t.Fatalf("Status against a silent BMC took %v, want about the caller's 700 ms", took)
	}

	// Without a caller's deadline, the driver's Timeout ends it.
	start = time.Now()
	err = Driver{Timeout: time.Second}.Off(context.Background(), target)
	took = time.Since(start)
	t.Logf("%-28s %v: %v", "off, BMC silent, 1s timeout", took.Round(time.Millisecond), err)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "driver timeout 1s") {
		t.Fatalf("Off against a silent BMC: %v, want a deadline error naming the 1s timeout", err)
	}
	if took > 1800*time.Millisecond {
		t.Fatalf("Off against a silent BMC took %v, want about the driver's 1 s", took)
	}
}

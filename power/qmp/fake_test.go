package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/power"
)

const greeting = `{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": ""}, "capabilities": ["oob"]}}`

// fakeMonitor listens on a unix socket and runs serve on the one connection
// it accepts; done reports what serve returned once the connection ended.
func fakeMonitor(t *testing.T, serve func(r *bufio.Reader, w net.Conn) error) (spec v1alpha1.PowerSpec, done <-chan error) {
	t.Helper()
	dir, err := os.MkdirTemp("", "qmp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "m.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	result := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			result <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		result <- serve(bufio.NewReader(c), c)
	}()
	return v1alpha1.PowerSpec{Driver: v1alpha1.PowerQMP, Address: "unix://" + path}, result
}

// expect reads one command and checks it executes name.
func expect(r *bufio.Reader, name string) (id string, err error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return "", err
	}
	var cmd struct{ Execute, ID string }
	if err := json.Unmarshal(line, &cmd); err != nil {
		return "", err
	}
	if cmd.Execute != name {
		return "", errors.New("got command " + string(line) + ", want " + name)
	}
	return cmd.ID, nil
}

func handshake(r *bufio.Reader, w net.Conn) error {
	if _, err := io.WriteString(w, greeting+"\r\n"); err != nil {
		return err
	}
	id, err := expect(r, "qmp_capabilities")
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, `{"return": {}, "id": "`+id+`"}`+"\r\n")
	return err
}

func TestEventsBeforeTheReplyAreSkipped(t *testing.T) {
	spec, done := fakeMonitor(t, func(r *bufio.Reader, w net.Conn) error {
		if err := handshake(r, w); err != nil {
			return err
		}
		id, err := expect(r, "system_reset")
		if err != nil {
			return err
		}
		io.WriteString(w, `{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "RESET", "data": {"guest": false, "reason": "host-qmp-system-reset"}}`+"\r\n")
		io.WriteString(w, `{"return": {}, "id": "`+id+`"}`+"\r\n")
		// The driver must hang up by itself: never hold a connection.
		if _, err := r.ReadByte(); err != io.EOF {
			return errors.New("the driver kept the connection open after its reply")
		}
		return nil
	})
	if err := (Driver{}).Cycle(context.Background(), power.Target{Spec: spec}, power.Options{}); err != nil {
		t.Fatalf("PowerCycle: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("monitor: %v", err)
	}
}

func TestQEMUErrorIsReported(t *testing.T) {
	spec, done := fakeMonitor(t, func(r *bufio.Reader, w net.Conn) error {
		if err := handshake(r, w); err != nil {
			return err
		}
		id, err := expect(r, "system_reset")
		if err != nil {
			return err
		}
		_, err = io.WriteString(w, `{"id": "`+id+`", "error": {"class": "GenericError", "desc": "no reset for you"}}`+"\r\n")
		return err
	})
	err := (Driver{}).Cycle(context.Background(), power.Target{Spec: spec}, power.Options{})
	if err == nil {
		t.Fatal("PowerCycle succeeded on an error reply")
	}
	for _, want := range []string{spec.Address, "system_reset", "GenericError", "no reset for you"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	<-done
}

func TestNotQMPIsRejected(t *testing.T) {
	spec, done := fakeMonitor(t, func(r *bufio.Reader, w net.Conn) error {
		_, err := io.WriteString(w, `{"hello": "world"}`+"\n")
		return err
	})
	err := (Driver{}).Cycle(context.Background(), power.Target{Spec: spec}, power.Options{})
	if err == nil || !strings.Contains(err.Error(), "not a QMP greeting") || !strings.Contains(err.Error(), spec.Address) {
		t.Fatalf("err = %v, want a non-QMP peer named", err)
	}
	<-done
}

func TestHangupAfterResetSaysItMayHaveHappened(t *testing.T) {
	spec, done := fakeMonitor(t, func(r *bufio.Reader, w net.Conn) error {
		if err := handshake(r, w); err != nil {
			return err
		}
		_, err := expect(r, "system_reset")
		return err // and hang up without a reply
	})
	err := (Driver{}).Cycle(context.Background(), power.Target{Spec: spec}, power.Options{})
	if err == nil || !strings.Contains(err.Error(), "may have been reset") || !strings.Contains(err.Error(), "closed the connection") {
		t.Fatalf("err = %v, want a lost reply after system_reset", err)
	}
	<-done
}

// silent is a monitor that accepts and says nothing, as QEMU does to a
// second client while another holds the monitor.
func silent(r *bufio.Reader, w net.Conn) error {
	_, err := r.ReadByte()
	if err == io.EOF {
		return nil
	}
	return err
}

func TestContextDeadlineBoundsTheCall(t *testing.T) {
	spec, done := fakeMonitor(t, silent)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := (Driver{}).Cycle(ctx, power.Target{Spec: spec}, power.Options{})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "greeting") || !strings.Contains(err.Error(), spec.Address) {
		t.Fatalf("err = %v, want the deadline while waiting for the greeting, naming the address", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("PowerCycle returned after %v, past its 500ms deadline", elapsed)
	}
	if err := <-done; err != nil {
		t.Fatalf("the driver did not close its connection: %v", err)
	}
}

func TestTimeoutAppliesWithoutADeadline(t *testing.T) {
	spec, done := fakeMonitor(t, silent)
	start := time.Now()
	err := (Driver{Timeout: 200 * time.Millisecond}).Cycle(context.Background(), power.Target{Spec: spec}, power.Options{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("PowerCycle returned after %v, past Driver.Timeout", elapsed)
	}
	<-done
}

func TestCancelInterruptsTheCall(t *testing.T) {
	spec, done := fakeMonitor(t, silent)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	err := (Driver{}).Cycle(ctx, power.Target{Spec: spec}, power.Options{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want Canceled", err)
	}
	<-done
}

func TestBadAddressIsNamed(t *testing.T) {
	spec := v1alpha1.PowerSpec{Driver: v1alpha1.PowerQMP, Address: "ipmi://bmc1"}
	err := (Driver{}).Cycle(context.Background(), power.Target{Spec: spec}, power.Options{})
	if err == nil || !strings.Contains(err.Error(), `"ipmi://bmc1"`) {
		t.Fatalf("err = %v, want the address rejected by name", err)
	}
}

func TestStatusReadsTheRunState(t *testing.T) {
	for runState, want := range map[string]power.State{
		"running": power.StateOn, "paused": power.StateOn, "prelaunch": power.StateOn,
		"guest-panicked": power.StateOn, "shutdown": power.StateOff,
	} {
		spec, done := fakeMonitor(t, func(r *bufio.Reader, w net.Conn) error {
			if err := handshake(r, w); err != nil {
				return err
			}
			id, err := expect(r, "query-status")
			if err != nil {
				return err
			}
			_, err = io.WriteString(w, `{"return": {"status": "`+runState+`", "running": false}, "id": "`+id+`"}`+"\r\n")
			return err
		})
		got, err := (Driver{}).Status(context.Background(), power.Target{Spec: spec})
		if err != nil || got != want {
			t.Errorf("run state %s: %s, %v; want %s", runState, got, err, want)
		}
		<-done
	}
}

func TestStatusWithoutARunStateIsAnError(t *testing.T) {
	spec, done := fakeMonitor(t, func(r *bufio.Reader, w net.Conn) error {
		if err := handshake(r, w); err != nil {
			return err
		}
		id, err := expect(r, "query-status")
		if err != nil {
			return err
		}
		_, err = io.WriteString(w, `{"return": {}, "id": "`+id+`"}`+"\r\n")
		return err
	})
	got, err := (Driver{}).Status(context.Background(), power.Target{Spec: spec})
	if err == nil || got != power.StateUnknown || !strings.Contains(err.Error(), "no run state") || !strings.Contains(err.Error(), spec.Address) {
		t.Fatalf("Status = %s, %v; want Unknown and an error naming the address", got, err)
	}
	<-done
}

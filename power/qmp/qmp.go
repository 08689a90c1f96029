// Package qmp power-cycles QEMU machines through the QEMU Machine Protocol:
// it connects to the machine's QMP monitor, sends system_reset (or
// query-status, to read the run state) and disconnects. It is the power driver of the test farm's qemu machines and
// of any lab of virtual machines (see package power for why power control is
// the rollout's fallback and which driver comes next).
//
// The client is written here rather than taken from
// github.com/digitalocean/go-qemu/qmp, although the module proxy serves it
// (v0.0.0-20250212194115-ee9b0668d242): that SocketMonitor bounds only the
// dial. Its Connect and Run take no context and expose no connection to set
// a deadline on, so a monitor that another client holds (QEMU serves one
// client per monitor; a second one connects but gets no greeting until the
// first leaves) blocks the caller for as long as the other client stays;
// abandoning the call leaves the exchange queued, and it resets the machine
// whenever the monitor frees up, after the caller was told the reset failed;
// and cutting it short with Disconnect from another goroutine races with
// Connect's own writes. QMP itself is a few lines of JSON, so this package
// speaks it directly, with the context's deadline on every read and write,
// and closes the connection when it returns, whatever happened
// (TestQEMUBusyMonitorTimesOutWithoutALateReset).
package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kubefarm/kubefarm/power"
)

// DefaultTimeout bounds an operation whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// Driver is the power.Driver of QEMU machines: spec.address is
// tcp://host:port or unix:///path of the machine's QMP monitor. It can
// reset a machine (system_reset) and read its run state (query-status); it
// cannot power a machine on (a QEMU that is not running has no monitor to
// ask) nor off (quit ends the process, after which nothing can start it
// again), and it cannot force a network boot (QEMU's boot order is fixed
// at its start): those return errors wrapping power.ErrUnsupported. The
// zero value is ready to use. A Driver holds no connection between calls.
type Driver struct {
	// Timeout bounds a call whose context has no deadline; zero means
	// DefaultTimeout. A context's own deadline always applies.
	Timeout time.Duration
}

var _ power.Driver = Driver{}

// Status asks QEMU for its run state: a machine whose guest powered
// itself off (run state shutdown, under -no-shutdown) is Off; any other
// run state (running, paused, a guest panic) is On, since the power is.
// A monitor nobody answers at is an error, not Off: the process may be
// gone or only unreachable.
func (d Driver) Status(ctx context.Context, t power.Target) (power.State, error) {
	state := power.StateUnknown
	err := d.run(ctx, t, "power status", func(dec *json.Decoder, enc *json.Encoder) error {
		ret, err := execute(dec, enc, "query-status")
		if err != nil {
			return err
		}
		var st struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(ret, &st); err != nil || st.Status == "" {
			return fmt.Errorf("query-status: QEMU's answer %s has no run state", ret)
		}
		state = stateOf(st.Status)
		return nil
	})
	return state, err
}

func stateOf(runState string) power.State {
	if runState == "shutdown" {
		return power.StateOff
	}
	return power.StateOn
}

// On is not something QMP can do.
func (d Driver) On(context.Context, power.Target, power.Options) error {
	return fmt.Errorf("qmp cannot power a machine on (a stopped QEMU has no monitor): %w", power.ErrUnsupported)
}

// Off is not something QMP can do and undo.
func (d Driver) Off(context.Context, power.Target) error {
	return fmt.Errorf("qmp cannot power a machine off and on again: %w", power.ErrUnsupported)
}

// Cycle connects to the QMP monitor, negotiates capabilities, sends
// system_reset and waits for QEMU's acknowledgement. Every error names the
// address. An error after system_reset was sent (its reply did not arrive)
// does not mean the machine was not reset. o.NetbootOnce is refused: the
// test farm's machines boot from the network anyway, and QMP has no
// one-time boot device.
func (d Driver) Cycle(ctx context.Context, t power.Target, o power.Options) error {
	if o.NetbootOnce {
		return fmt.Errorf("qmp power cycle of %s: a one-time network boot: %w", t.Spec.Address, power.ErrUnsupported)
	}
	return d.run(ctx, t, "power cycle", func(dec *json.Decoder, enc *json.Encoder) error {
		_, err := execute(dec, enc, "system_reset")
		return err
	})
}

// run bounds one session with the monitor of t and runs fn in it.
func (d Driver) run(ctx context.Context, t power.Target, op string, fn func(*json.Decoder, *json.Encoder) error) error {
	network, addr, err := parseAddress(t.Spec.Address)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		timeout := d.Timeout
		if timeout <= 0 {
			timeout = DefaultTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if err := session(ctx, network, addr, fn); err != nil {
		return fmt.Errorf("qmp %s of %s: %w", op, t.Spec.Address, err)
	}
	return nil
}

// parseAddress turns tcp://host:port or unix:///path into a network and an
// address for net.Dial.
func parseAddress(address string) (network, addr string, err error) {
	if rest, ok := strings.CutPrefix(address, "unix://"); ok {
		if !strings.HasPrefix(rest, "/") || rest == "/" {
			return "", "", fmt.Errorf("qmp address %q: want unix:///absolute/path", address)
		}
		return "unix", rest, nil
	}
	if rest, ok := strings.CutPrefix(address, "tcp://"); ok {
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return "", "", fmt.Errorf("qmp address %q: want tcp://host:port: %w", address, err)
		}
		if host == "" || strings.ContainsAny(host, "/?#@ ") {
			return "", "", fmt.Errorf("qmp address %q: want tcp://host:port with a host", address)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '+' {
			return "", "", fmt.Errorf("qmp address %q: port %q is not 1-65535", address, port)
		}
		return "tcp", rest, nil
	}
	return "", "", fmt.Errorf("qmp address %q: want tcp://host:port or unix:///path", address)
}

// message is any line QEMU sends: the greeting, a reply or an event.
type message struct {
	QMP    json.RawMessage `json:"QMP"`
	ID     string          `json:"id"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string `json:"event"`
}

// session runs one QMP session: greeting, qmp_capabilities, then fn's
// commands. The connection's deadline is the context's, and a cancelled
// context interrupts a blocked read or write at once.
func session(ctx context.Context, network, addr string, fn func(*json.Decoder, *json.Encoder) error) (err error) {
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, network, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	// A step that failed because the context ended says so: the
	// connection's deadline is only ever the context's.
	defer func() {
		if err == nil {
			return
		}
		cause := ctx.Err()
		if cause == nil && errors.Is(err, os.ErrDeadlineExceeded) {
			cause = context.DeadlineExceeded
		}
		if cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
	}()

	dec := json.NewDecoder(conn)
	enc := json.NewEncoder(conn)

	var greeting message
	if err := dec.Decode(&greeting); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// QEMU accepts a second client on a busy monitor but greets
			// it only once the first has left.
			return fmt.Errorf("waiting for the QMP greeting (a monitor serves one client at a time: is another connected?): %w", err)
		}
		return fmt.Errorf("waiting for the QMP greeting: %w", eof(err))
	}
	if len(greeting.QMP) == 0 {
		return errors.New("the peer's first message is not a QMP greeting")
	}
	if _, err := execute(dec, enc, "qmp_capabilities"); err != nil {
		return err
	}
	return fn(dec, enc)
}

// execute sends a command and waits for its reply, skipping the events that
// QEMU may send before it (system_reset's own RESET event often comes
// first), and returns the reply's return value.
func execute(dec *json.Decoder, enc *json.Encoder, command string) (json.RawMessage, error) {
	id := "kubefarm-" + command
	if err := enc.Encode(map[string]string{"execute": command, "id": id}); err != nil {
		return nil, fmt.Errorf("sending %s: %w", command, err)
	}
	for {
		var m message
		if err := dec.Decode(&m); err != nil {
			if command == "system_reset" {
				return nil, fmt.Errorf("system_reset sent, waiting for its reply (the machine may have been reset): %w", eof(err))
			}
			return nil, fmt.Errorf("waiting for the reply to %s: %w", command, eof(err))
		}
		switch {
		case m.Event != "":
			continue
		case m.Error != nil:
			return nil, fmt.Errorf("%s: QEMU answered %s: %s", command, m.Error.Class, m.Error.Desc)
		case m.Return != nil:
			if m.ID != id {
				return nil, fmt.Errorf("%s: reply carries id %q, want %q", command, m.ID, id)
			}
			return m.Return, nil
		default:
			return nil, fmt.Errorf("%s: unexpected message from QEMU", command)
		}
	}
}

// eof makes a connection closed by QEMU read as such.
func eof(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("QEMU closed the connection: %w", err)
	}
	return err
}

// Package qmp power-cycles QEMU machines through the QEMU Machine Protocol:
// it connects to the machine's QMP monitor, sends system_reset and
// disconnects. It is the power driver of the test farm's qemu machines and
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

	"github.com/kubefarm/kubefarm/api/v1alpha1"
)

// DefaultTimeout bounds a PowerCycle whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// Driver resets QEMU machines with QMP's system_reset. spec.Address is
// tcp://host:port or unix:///path of the machine's QMP monitor. The zero
// value is ready to use. A Driver holds no connection between calls.
type Driver struct {
	// Timeout bounds a call whose context has no deadline; zero means
	// DefaultTimeout. A context's own deadline always applies.
	Timeout time.Duration
}

// PowerCycle connects to the QMP monitor at spec.Address, negotiates
// capabilities, sends system_reset and waits for QEMU's acknowledgement.
// Every error names the address. An error after system_reset was sent (its
// reply did not arrive) does not mean the machine was not reset.
func (d Driver) PowerCycle(ctx context.Context, spec v1alpha1.PowerSpec) error {
	network, addr, err := parseAddress(spec.Address)
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
	if err := systemReset(ctx, network, addr); err != nil {
		return fmt.Errorf("qmp power cycle of %s: %w", spec.Address, err)
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

// systemReset runs one QMP session: greeting, qmp_capabilities,
// system_reset. The connection's deadline is the context's, and a cancelled
// context interrupts a blocked read or write at once.
func systemReset(ctx context.Context, network, addr string) (err error) {
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
	if err := execute(dec, enc, "qmp_capabilities"); err != nil {
		return err
	}
	return execute(dec, enc, "system_reset")
}

// execute sends a command and waits for its reply, skipping the events that
// QEMU may send before it (system_reset's own RESET event often comes first).
func execute(dec *json.Decoder, enc *json.Encoder, command string) error {
	id := "kubefarm-" + command
	if err := enc.Encode(map[string]string{"execute": command, "id": id}); err != nil {
		return fmt.Errorf("sending %s: %w", command, err)
	}
	for {
		var m message
		if err := dec.Decode(&m); err != nil {
			if command == "system_reset" {
				return fmt.Errorf("system_reset sent, waiting for its reply (the machine may have been reset): %w", eof(err))
			}
			return fmt.Errorf("waiting for the reply to %s: %w", command, eof(err))
		}
		switch {
		case m.Event != "":
			continue
		case m.Error != nil:
			return fmt.Errorf("%s: QEMU answered %s: %s", command, m.Error.Class, m.Error.Desc)
		case m.Return != nil:
			if m.ID != id {
				return fmt.Errorf("%s: reply carries id %q, want %q", command, m.ID, id)
			}
			return nil
		default:
			return fmt.Errorf("%s: unexpected message from QEMU", command)
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

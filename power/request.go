package power

import (
	"fmt"
	"strings"
	"time"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Op is a power operation a person can ask for in the Machine's
// kubefarm.io/power-request annotation.
type Op string

const (
	OpOn    Op = "on"
	OpOff   Op = "off"
	OpCycle Op = "cycle"
)

// netbootFlag is the annotation's word for Options.NetbootOnce.
const netbootFlag = "netboot"

// Request is one value of the kubefarm.io/power-request annotation:
// "<on|off|cycle>[,netboot]@<RFC3339 time>". The time makes each request
// distinct, so the controller performs it once: it records the time of the
// request it handled in status.power.lastOperationTime and performs only a
// request with a later time.
type Request struct {
	Op          Op
	NetbootOnce bool
	// Time is when the request was made, to the second (the precision
	// status.power.lastOperationTime keeps).
	Time time.Time
}

// ParseRequest parses an annotation value; the error names what is wrong
// with it.
func ParseRequest(v string) (Request, error) {
	what, at, ok := strings.Cut(v, "@")
	if !ok {
		return Request{}, fmt.Errorf("%q is not <on|off|cycle>[,netboot]@<RFC3339 time>: no @<time>", v)
	}
	t, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return Request{}, fmt.Errorf("%q: the time %q is not RFC3339 (2006-01-02T15:04:05Z)", v, at)
	}
	r := Request{Time: t.UTC().Truncate(time.Second)}
	op, flag, hasFlag := strings.Cut(what, ",")
	switch Op(op) {
	case OpOn, OpOff, OpCycle:
		r.Op = Op(op)
	default:
		return Request{}, fmt.Errorf("%q: the operation %q is not on, off or cycle", v, op)
	}
	if hasFlag {
		if flag != netbootFlag {
			return Request{}, fmt.Errorf("%q: %q is not a flag (only %q)", v, flag, netbootFlag)
		}
		if r.Op == OpOff {
			return Request{}, fmt.Errorf("%q: %s applies to the next boot, and off boots nothing", v, netbootFlag)
		}
		r.NetbootOnce = true
	}
	return r, nil
}

// String is the annotation value of r.
func (r Request) String() string {
	s := string(r.Op)
	if r.NetbootOnce {
		s += "," + netbootFlag
	}
	return s + "@" + r.Time.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// Options are the driver options of r.
func (r Request) Options() Options { return Options{NetbootOnce: r.NetbootOnce} }

// Operation is how status.power.lastOperation names r: On, Off, Cycle,
// with ",NetbootOnce" when the next boot is forced to the network.
func (r Request) Operation() string {
	s := strings.ToUpper(string(r.Op[:1])) + string(r.Op[1:])
	if r.NetbootOnce {
		s += ",NetbootOnce"
	}
	return s
}

// Outcome is the last word of status.power.lastOperation: where the
// request of lastOperationTime stands.
type Outcome string

const (
	// OutcomePending: recorded, and being performed now. Recorded before
	// the operation so that a manager restarted meanwhile does not
	// perform it again.
	OutcomePending Outcome = "Pending"
	// OutcomeSucceeded: the BMC acknowledged the operation.
	OutcomeSucceeded Outcome = "Succeeded"
	// OutcomeFailed: it did not; the PowerControl condition and a
	// Warning event carry the BMC's words.
	OutcomeFailed Outcome = "Failed"
	// OutcomeInterrupted: the manager stopped while the operation was
	// Pending; it may or may not have happened, and it is not repeated.
	OutcomeInterrupted Outcome = "Interrupted"
	// OutcomeSuperseded is what Handled says of a request that a later
	// one (or another in the same second) replaced before it was
	// performed; never written to status.
	OutcomeSuperseded Outcome = "Superseded"
)

// LastOperation is the value of status.power.lastOperation for r.
func LastOperation(r Request, o Outcome) string { return r.Operation() + " " + string(o) }

// Handled says whether st records r (or a later request) as handled, and
// with which outcome: Pending while it runs.
func Handled(st *v1alpha1.MachinePowerStatus, r Request) (Outcome, bool) {
	if st == nil || st.LastOperationTime == nil || st.LastOperationTime.Time.Before(r.Time) {
		return "", false
	}
	op, outcome, _ := strings.Cut(st.LastOperation, " ")
	if !st.LastOperationTime.Time.Equal(r.Time) || op != r.Operation() {
		// A later request (or another one in the same second)
		// superseded r.
		return OutcomeSuperseded, true
	}
	return Outcome(outcome), true
}

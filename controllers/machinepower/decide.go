package machinepower

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/power"
)

// JitterFraction spreads the reads of a farm's BMCs over ±20% of the
// interval, so machines enrolled together do not all ask at once.
const JitterFraction = 0.2

// Jitter is interval moved by up to ±JitterFraction of itself; r is
// uniform in [0, 1).
func Jitter(interval time.Duration, r float64) time.Duration {
	return time.Duration(float64(interval) * (1 + JitterFraction*(2*r-1)))
}

// readDue says whether m's power state should be read now: never read,
// read for an older generation of the spec (a changed address or Secret
// name), or read at least the shortest jittered interval ago.
func readDue(now time.Time, m *v1alpha1.Machine, interval time.Duration) bool {
	st := m.Status.Power
	c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionPowerControl)
	if st == nil || c == nil || c.ObservedGeneration != m.Generation {
		return true
	}
	return now.Sub(st.ReadTime.Time) >= Jitter(interval, 0)
}

// nextWait is how long until the next read of a machine read at readTime:
// a jittered interval from then, and at least a second.
func nextWait(now, readTime time.Time, interval time.Duration, r float64) time.Duration {
	return max(readTime.Add(Jitter(interval, r)).Sub(now), time.Second)
}

// Bounds on the time of a power request: a request from the future (a
// wrong clock, a typo) would stand ahead of every real one, and an old one
// never handled (a Machine restored from a backup) is no one's intent
// now.
const (
	maxRequestSkew = 5 * time.Minute
	maxRequestAge  = time.Hour
)

type requestAction int

const (
	requestNone requestAction = iota
	// requestPerform: record it Pending, perform it, record the outcome.
	requestPerform
	// requestInterrupted: recorded Pending by a manager that stopped; it
	// is recorded Interrupted, not performed again.
	requestInterrupted
	// requestRejected: an event says why; nothing is performed.
	requestRejected
)

type requestDecision struct {
	action requestAction
	req    power.Request
	// why is the rejection, naming the annotation.
	why string
}

// decideRequest decides what to do with the annotation's value (present:
// the annotation exists), given the status and the time of the latest
// request this process performed for the machine (zero: none; a Pending
// of a request this process performed is its own write, seen before the
// final one, not an interrupted one).
func decideRequest(value string, present bool, st *v1alpha1.MachinePowerStatus, performed, now time.Time) requestDecision {
	if !present {
		return requestDecision{}
	}
	r, err := power.ParseRequest(value)
	if err != nil {
		return requestDecision{action: requestRejected, why: fmt.Sprintf("annotation %s: %v", v1alpha1.AnnotationPowerRequest, err)}
	}
	mine := !performed.IsZero() && !performed.Before(r.Time)
	if outcome, handled := power.Handled(st, r); handled {
		if outcome == power.OutcomePending && !mine {
			return requestDecision{action: requestInterrupted, req: r}
		}
		return requestDecision{req: r}
	}
	switch {
	case mine:
		// Performed; the cache has not seen the record yet.
		return requestDecision{req: r}
	case r.Time.After(now.Add(maxRequestSkew)):
		return requestDecision{action: requestRejected, req: r, why: fmt.Sprintf(
			"annotation %s: %q is more than %s in the future (the manager's clock says %s); not performed",
			v1alpha1.AnnotationPowerRequest, value, maxRequestSkew, now.UTC().Format(time.RFC3339))}
	case r.Time.Before(now.Add(-maxRequestAge)):
		return requestDecision{action: requestRejected, req: r, why: fmt.Sprintf(
			"annotation %s: %q is more than %s old and was never performed; not performed now (request again)",
			v1alpha1.AnnotationPowerRequest, value, maxRequestAge)}
	}
	return requestDecision{action: requestPerform, req: r}
}

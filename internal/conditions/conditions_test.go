package conditions

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// recorder keeps the events it is given; the real recorder would send them
// to an API server, which is not what this table tests.
type recorder struct{ got []string }

func (r *recorder) Eventf(_ runtime.Object, _ runtime.Object, typ, reason, _ string, note string, args ...interface{}) {
	r.got = append(r.got, typ+" "+reason+" "+fmt.Sprintf(note, args...))
}

func TestEmitTransitions(t *testing.T) {
	ready := New("Ready", true, "Fine", "all good")
	notReady := New("Ready", false, "Broken", "etcd down")
	invalid := New("Ready", false, "InvalidSpec", "bad")
	for _, tc := range []struct {
		name          string
		before, after []metav1.Condition
		want          []string
	}{
		{"unchanged", []metav1.Condition{ready}, []metav1.Condition{ready}, nil},
		{"message only", []metav1.Condition{ready}, []metav1.Condition{New("Ready", true, "Fine", "other")}, nil},
		{"new condition is Normal even when False", nil, []metav1.Condition{notReady}, []string{"Normal ReadyBroken Ready=False: etcd down"}},
		{"fell from True is a Warning", []metav1.Condition{ready}, []metav1.Condition{notReady}, []string{"Warning ReadyBroken Ready=False: etcd down"}},
		{"became True", []metav1.Condition{notReady}, []metav1.Condition{ready}, []string{"Normal ReadyFine Ready=True: all good"}},
		{"warning reason", nil, []metav1.Condition{invalid}, []string{"Warning ReadyInvalidSpec Ready=False: bad"}},
	} {
		r := &recorder{}
		EmitTransitions(r, &corev1.Pod{}, tc.before, tc.after, "InvalidSpec")
		if fmt.Sprint(r.got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: events %q, want %q", tc.name, r.got, tc.want)
		}
	}
}

func TestSetKeepsTransitionTimeWhileStatusHolds(t *testing.T) {
	var conds []metav1.Condition
	Set(&conds, 1, New("Ready", false, "A", "x"))
	first := conds[0].LastTransitionTime
	Set(&conds, 2, New("Ready", false, "B", "y"))
	if conds[0].LastTransitionTime != first || conds[0].Reason != "B" || conds[0].ObservedGeneration != 2 {
		t.Errorf("after a reason change with the same status: %+v (first transition %v)", conds[0], first)
	}
}

func TestEventType(t *testing.T) {
	ptr := func(c metav1.Condition) *metav1.Condition { return &c }
	cond := func(s metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: "X", Status: s, Reason: reason}
	}
	for _, tc := range []struct {
		name string
		old  *metav1.Condition
		new  metav1.Condition
		want string
	}{
		{"first observation", nil, cond(metav1.ConditionFalse, "Issuing"), corev1.EventTypeNormal},
		{"became true", ptr(cond(metav1.ConditionFalse, "Issuing")), cond(metav1.ConditionTrue, "Issued"), corev1.EventTypeNormal},
		{"fell from true", ptr(cond(metav1.ConditionTrue, "Issued")), cond(metav1.ConditionFalse, "Issuing"), corev1.EventTypeWarning},
		{"invalid spec", nil, cond(metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec), corev1.EventTypeWarning},
		{"error", ptr(cond(metav1.ConditionFalse, "Issuing")), cond(metav1.ConditionFalse, v1alpha1.ReasonReconcileError), corev1.EventTypeWarning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := eventType(tc.old, tc.new, []string{v1alpha1.ReasonInvalidSpec, v1alpha1.ReasonReconcileError}); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijk", 4, "abcd..."},
		{"ééé", 3, "é..."}, // 6 bytes; the cut falls inside the second é
	} {
		if got := Clip(tc.s, tc.n); got != tc.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

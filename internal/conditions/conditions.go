// Package conditions holds what every kubefarm controller does with its
// status conditions besides deciding them: setting one for the object's
// generation, and turning each change into an event, so that `kubectl
// describe` tells a controller's story the same way for every kind.
package conditions

import (
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// New is a condition of typ, True when ok.
func New(typ string, ok bool, reason, msg string) metav1.Condition {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
}

// Set sets c in conds for generation: the condition describes the spec of
// that generation. The transition time moves only when the status does.
func Set(conds *[]metav1.Condition, generation int64, c metav1.Condition) {
	c.ObservedGeneration = generation
	meta.SetStatusCondition(conds, c)
}

// EmitTransitions records an event on obj for every condition whose status
// or reason changed since before. The event's reason is the condition type
// followed by its reason (EtcdReadyMembersReady), so one kind of transition
// aggregates with itself. It is a Warning when the condition fell from True
// or when its reason is one of warningReasons (an invalid spec, a failed
// pass); Normal otherwise.
func EmitTransitions(rec events.EventRecorder, obj runtime.Object, before, after []metav1.Condition, warningReasons ...string) {
	for _, c := range after {
		old := meta.FindStatusCondition(before, c.Type)
		if old != nil && old.Status == c.Status && old.Reason == c.Reason {
			continue
		}
		rec.Eventf(obj, nil, eventType(old, c, warningReasons), c.Type+c.Reason, "Reconcile", "%s=%s: %s", c.Type, c.Status, c.Message)
	}
}

func eventType(old *metav1.Condition, c metav1.Condition, warningReasons []string) string {
	for _, r := range warningReasons {
		if c.Reason == r {
			return corev1.EventTypeWarning
		}
	}
	if c.Status == metav1.ConditionFalse && old != nil && old.Status == metav1.ConditionTrue {
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}

// Clip cuts s to at most n bytes, on a rune boundary, marking the cut: for
// text a condition message quotes that someone else chose (an annotation's
// value, a version a Node reports, an alert's name), so that one long value
// cannot push the message past the API's bound and fail the status write.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

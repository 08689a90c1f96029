package cluster

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// BootEvent is one Event of a Machine: what kubefarm-pxe and
// kubefarm-manager record of its boot.
type BootEvent struct {
	At      time.Time
	Reason  string
	Message string
}

// BootStage is one stage of a boot, in seconds after power-on.
type BootStage struct {
	Stage   string  `json:"stage"`
	Seconds float64 `json:"seconds"`
	// Since is the seconds since the stage before (the stage's own cost).
	Since float64 `json:"since"`
}

// stageMarks are the stages of a boot in their order, each with the first
// Event that ends it.
var stageMarks = []struct {
	stage  string
	reason string
	// in: a part of the message that tells this stage's Event from
	// others of the same reason ("" for any).
	in string
}{
	{"DHCP (firmware or iPXE acked)", "Acked", ""},
	{"iPXE script served (iPXE start, its IPv6 configuration)", "ScriptServed", ""},
	{"kernel and initrd served", "ImageServed", "initrd"},
	{"root filesystem served (kernel boot, initrd, fetch)", "ImageServed", "root filesystem"},
	{"configuration fetched (switch_root, systemd to the agent)", "ConfigServed", ""},
	{"kubelet client certificate (kubelet start, TLS bootstrap)", "KubefarmJoinTokenVerified", ""},
}

// BootStages reads the stages of one boot from the Machine's Events and its
// Node: the marks above, then the Node registered, the boot reported (CNI
// chain verified), the network taint lifted and the Node Ready, in the
// order they happened. A stage with no Event is left out.
func BootStages(events []BootEvent, node *corev1.Node, powerOn time.Time) []BootStage {
	var out []BootStage
	add := func(stage string, at time.Time) {
		s := at.Sub(powerOn).Seconds()
		since := s
		if len(out) > 0 {
			since = s - out[len(out)-1].Seconds
		}
		out = append(out, BootStage{Stage: stage, Seconds: s, Since: since})
	}
	first := func(reason, in string) (time.Time, bool) {
		for _, e := range events {
			if e.Reason == reason && strings.Contains(e.Message, in) && !e.At.Before(powerOn) {
				return e.At, true
			}
		}
		return time.Time{}, false
	}
	for _, m := range stageMarks {
		if at, ok := first(m.reason, m.in); ok {
			add(m.stage, at)
		}
	}
	type late struct {
		stage string
		at    time.Time
	}
	var rest []late
	if node != nil {
		rest = append(rest, late{"Node registered", node.CreationTimestamp.Time})
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				rest = append(rest, late{"Node Ready", c.LastTransitionTime.Time})
			}
		}
	}
	if at, ok := first("BootReported", ""); ok {
		rest = append(rest, late{"boot reported, CNI chain verified", at})
	}
	if at, ok := first("NetworkTaintLifted", ""); ok {
		rest = append(rest, late{"network taint lifted", at})
	}
	// In the order they happened: the Node may be Ready before or after
	// its taint is lifted.
	for len(rest) > 0 {
		k := 0
		for i := range rest {
			if rest[i].at.Before(rest[k].at) {
				k = i
			}
		}
		add(rest[k].stage, rest[k].at)
		rest = append(rest[:k], rest[k+1:]...)
	}
	return out
}

// StageTable formats stages as the table make bench-node prints.
func StageTable(stages []BootStage) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %-60s %8s %8s\n", "stage", "at (s)", "took (s)")
	for _, s := range stages {
		fmt.Fprintf(&b, "  %-60s %8.1f %8.1f\n", s.Stage, s.Seconds, s.Since)
	}
	return b.String()
}

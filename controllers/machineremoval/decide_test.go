package machineremoval_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/machineremoval"
	"github.com/kubefarm/kubefarm/controllers/rollout/drain"
)

func TestDecide(t *testing.T) {
	const (
		cordoning = kubefarmv1.ReasonRemovalCordoning
		draining  = kubefarmv1.ReasonRemovalDraining
		held      = kubefarmv1.ReasonRemovalDrainHeld
		deleting  = kubefarmv1.ReasonRemovalDeleteNode
		poweroff  = kubefarmv1.ReasonRemovalPowerOff
		failed    = kubefarmv1.ReasonRemovalFailed
	)
	live := machineremoval.TenantLive
	for _, tc := range []struct {
		name string
		f    machineremoval.Facts
		want machineremoval.Step
	}{
		{"tenant gone: at once", machineremoval.Facts{Tenant: machineremoval.TenantGone, NodeExists: true, Recorded: draining}, machineremoval.StepRelease},
		{"tenant gone mid power off: at once", machineremoval.Facts{Tenant: machineremoval.TenantGone, Recorded: poweroff, PowerOff: true}, machineremoval.StepRelease},
		{"another live Machine has the hostname: its node is left alone", machineremoval.Facts{Tenant: live, OtherMachine: true, NodeExists: true}, machineremoval.StepRelease},
		{"tenant unreachable before the removal began: held", machineremoval.Facts{Tenant: machineremoval.TenantUnreachable}, machineremoval.StepHold},
		{"tenant unreachable mid drain: held", machineremoval.Facts{Tenant: machineremoval.TenantUnreachable, Recorded: held}, machineremoval.StepHold},
		{"tenant unreachable before the node's delete is known done: held", machineremoval.Facts{Tenant: machineremoval.TenantUnreachable, Recorded: deleting, PowerOff: true}, machineremoval.StepHold},
		{"tenant unreachable after the node's delete: power off goes on", machineremoval.Facts{Tenant: machineremoval.TenantUnreachable, Recorded: failed, PowerOff: true}, machineremoval.StepPowerOff},
		{"tenant unreachable after the node's delete, powered off: released", machineremoval.Facts{Tenant: machineremoval.TenantUnreachable, Recorded: poweroff, PowerOff: true, PoweredOff: true}, machineremoval.StepRelease},
		{"never joined: at once", machineremoval.Facts{Tenant: live}, machineremoval.StepRelease},
		{"never joined, with a power driver: at once, not powered off", machineremoval.Facts{Tenant: live, PowerOff: true}, machineremoval.StepRelease},
		{"joined: cordon first", machineremoval.Facts{Tenant: live, NodeExists: true}, machineremoval.StepCordon},
		{"already cordoned by someone: the cordon step still records", machineremoval.Facts{Tenant: live, NodeExists: true, Cordoned: true}, machineremoval.StepCordon},
		{"restarted while cordoning: cordon again", machineremoval.Facts{Tenant: live, NodeExists: true, Recorded: cordoning}, machineremoval.StepCordon},
		{"draining", machineremoval.Facts{Tenant: live, NodeExists: true, Cordoned: true, Recorded: draining}, machineremoval.StepDrain},
		{"drain held", machineremoval.Facts{Tenant: live, NodeExists: true, Cordoned: true, Recorded: held}, machineremoval.StepDrain},
		{"uncordoned mid drain: cordon again", machineremoval.Facts{Tenant: live, NodeExists: true, Recorded: draining}, machineremoval.StepCordon},
		{"restarted while deleting the node", machineremoval.Facts{Tenant: live, NodeExists: true, Cordoned: true, Recorded: deleting}, machineremoval.StepDeleteNode},
		{"the node came back after its delete: deleted again", machineremoval.Facts{Tenant: live, NodeExists: true, Recorded: poweroff, PowerOff: true}, machineremoval.StepDeleteNode},
		{"node deleted, a driver: power off", machineremoval.Facts{Tenant: live, Recorded: deleting, PowerOff: true}, machineremoval.StepPowerOff},
		{"node deleted, no driver: released", machineremoval.Facts{Tenant: live, Recorded: deleting}, machineremoval.StepRelease},
		{"node vanished mid drain, a driver: power off", machineremoval.Facts{Tenant: live, Recorded: draining, PowerOff: true}, machineremoval.StepPowerOff},
		{"restarted while powering off: power off again", machineremoval.Facts{Tenant: live, Recorded: poweroff, PowerOff: true}, machineremoval.StepPowerOff},
		{"power off failed: tried again", machineremoval.Facts{Tenant: live, Recorded: failed, PowerOff: true}, machineremoval.StepPowerOff},
		{"powered off in this pass: released", machineremoval.Facts{Tenant: live, Recorded: poweroff, PowerOff: true, PoweredOff: true}, machineremoval.StepRelease},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := machineremoval.Decide(tc.f); got != tc.want {
				t.Errorf("Decide(%+v) = %s, want %s", tc.f, got, tc.want)
			}
		})
	}
}

func TestDecideDrain(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	timeout := &metav1.Duration{Duration: 10 * time.Minute}
	poll := 5 * time.Second
	pdb := drain.Blocked{Pod: "a/web-1", Code: 429, DisruptionBudget: true,
		Reason: "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget web needs 1 healthy pods and has 1 currently"}
	blocked := drain.Result{Remaining: 1, Blocked: []drain.Blocked{pdb}}
	terminating := drain.Result{Remaining: 2, Terminating: []string{"a/x", "a/y"}}
	for _, tc := range []struct {
		name    string
		res     drain.Result
		now     time.Time
		timeout *metav1.Duration
		policy  kubefarmv1.DrainTimeoutPolicy
		want    machineremoval.DrainOutcome
		says    string
	}{
		{name: "drained", res: drain.Result{}, now: start, timeout: timeout, policy: kubefarmv1.DrainHalt,
			want: machineremoval.DrainOutcome{Proceed: true, Message: "drained"}},
		{name: "only DaemonSet and mirror pods left: drained", res: drain.Result{Remaining: 0, Evicted: nil}, now: start.Add(time.Hour), timeout: timeout, policy: kubefarmv1.DrainHalt,
			want: machineremoval.DrainOutcome{Proceed: true, Message: "drained"}},
		{name: "pods terminating", res: terminating, now: start.Add(time.Minute), timeout: timeout, policy: kubefarmv1.DrainHalt,
			want: machineremoval.DrainOutcome{Reason: kubefarmv1.ReasonRemovalDraining, Requeue: poll}, says: "2 pods still on the node"},
		{name: "a budget refuses: held, the budget's words", res: blocked, now: start.Add(time.Minute), timeout: timeout, policy: kubefarmv1.DrainSkip,
			want: machineremoval.DrainOutcome{Reason: kubefarmv1.ReasonRemovalDrainHeld, Blocked: true, Requeue: poll}, says: "a/web-1 (Cannot evict pod as it would violate the pod's disruption budget."},
		{name: "the next pass no later than the timeout", res: blocked, now: start.Add(timeout.Duration - time.Second), timeout: timeout, policy: kubefarmv1.DrainSkip,
			want: machineremoval.DrainOutcome{Reason: kubefarmv1.ReasonRemovalDrainHeld, Blocked: true, Requeue: time.Second}},
		{name: "timed out under Skip: the node goes anyway", res: blocked, now: start.Add(timeout.Duration), timeout: timeout, policy: kubefarmv1.DrainSkip,
			want: machineremoval.DrainOutcome{Proceed: true, TimedOut: true, Blocked: true}, says: "drainTimeoutPolicy Skip removes the node anyway"},
		{name: "timed out under Halt: held, still draining", res: blocked, now: start.Add(timeout.Duration + time.Hour), timeout: timeout, policy: kubefarmv1.DrainHalt,
			want: machineremoval.DrainOutcome{Reason: kubefarmv1.ReasonRemovalDrainHeld, TimedOut: true, Blocked: true, Requeue: poll}, says: "drainTimeoutPolicy Halt holds the Machine"},
		{name: "timed out under Halt while pods terminate", res: terminating, now: start.Add(timeout.Duration), timeout: timeout, policy: kubefarmv1.DrainHalt,
			want: machineremoval.DrainOutcome{Reason: kubefarmv1.ReasonRemovalDrainHeld, TimedOut: true, Requeue: poll}, says: "drain timed out after 10m0s"},
		{name: "no timeout never times out", res: blocked, now: start.Add(100 * time.Hour), timeout: nil, policy: kubefarmv1.DrainSkip,
			want: machineremoval.DrainOutcome{Reason: kubefarmv1.ReasonRemovalDrainHeld, Blocked: true, Requeue: poll}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := machineremoval.DecideDrain(tc.res, start, tc.now, tc.timeout, tc.policy, poll)
			msg := got.Message
			if tc.want.Message == "" {
				got.Message = ""
			}
			if got != tc.want {
				t.Errorf("DecideDrain = %+v, want %+v", got, tc.want)
			}
			if !strings.Contains(msg, tc.says) {
				t.Errorf("message %q does not say %q", msg, tc.says)
			}
		})
	}
}

func TestDrainMessageNamesThreeBlockedPodsAtMost(t *testing.T) {
	var res drain.Result
	for _, p := range []string{"a/1", "a/2", "a/3", "a/4", "a/5"} {
		res.Blocked = append(res.Blocked, drain.Blocked{Pod: p, Code: 429, Reason: "budget"})
	}
	res.Remaining = 5
	got := machineremoval.DecideDrain(res, time.Now(), time.Now(), nil, kubefarmv1.DrainHalt, time.Second).Message
	if !strings.Contains(got, "a/3 (budget) and 2 more") || strings.Contains(got, "a/4") {
		t.Errorf("message %q", got)
	}
}

func TestDrainPolicy(t *testing.T) {
	timeout, policy := machineremoval.DrainPolicy(nil)
	if timeout.Duration != machineremoval.DefaultDrainTimeout || policy != kubefarmv1.DrainHalt {
		t.Errorf("a pool that is gone: %s %s, want the API's defaults", timeout.Duration, policy)
	}
	pool := &kubefarmv1.NodePool{Spec: kubefarmv1.NodePoolSpec{Rollout: kubefarmv1.RolloutStrategy{
		DrainTimeout: &metav1.Duration{Duration: time.Minute}, DrainTimeoutPolicy: kubefarmv1.DrainSkip}}}
	timeout, policy = machineremoval.DrainPolicy(pool)
	if timeout.Duration != time.Minute || policy != kubefarmv1.DrainSkip {
		t.Errorf("the pool's: %s %s", timeout.Duration, policy)
	}
}

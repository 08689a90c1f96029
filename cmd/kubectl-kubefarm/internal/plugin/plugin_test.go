package plugin

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster"
)

var now = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

func cond(typ string, status metav1.ConditionStatus, reason, msg string, gen int64) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen, LastTransitionTime: ago(10 * time.Minute)}
}

// rolloutConds are the four rollout conditions as the controller writes
// them, with the ones given replacing the defaults of a complete rollout.
func rolloutConds(gen int64, override ...metav1.Condition) []metav1.Condition {
	conds := []metav1.Condition{
		cond(v1alpha1.ConditionProgressing, metav1.ConditionFalse, "RolloutComplete", "no machine waits for an update", gen),
		cond(v1alpha1.ConditionPaused, metav1.ConditionFalse, "NotPaused", "new machine updates may start", gen),
		cond(v1alpha1.ConditionHalted, metav1.ConditionFalse, "WithinFailureBudget", "0 failed updates, failure budget 1", gen),
		cond(v1alpha1.ConditionComplete, metav1.ConditionTrue, "AllMachinesUpdated", "all 3 machines run the pool's image", gen),
	}
	for _, o := range override {
		for i := range conds {
			if conds[i].Type == o.Type {
				conds[i] = o
			}
		}
	}
	return conds
}

func pool(ns, name string, gen int64, conds []metav1.Condition) v1alpha1.NodePool {
	return v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: gen},
		Spec:       v1alpha1.NodePoolSpec{Cluster: "c1", BootImage: "img-2"},
		Status: v1alpha1.NodePoolStatus{Conditions: conds, Machines: 3, ReadyMachines: 2, UpdatedMachines: 1,
			UpdatingMachines: 1, UnavailableMachines: 1},
	}
}

func TestRolloutState(t *testing.T) {
	True, False := metav1.ConditionTrue, metav1.ConditionFalse
	for _, tc := range []struct {
		name  string
		conds []metav1.Condition
		want  string
	}{
		{"no conditions", nil, StateUnknown},
		{"complete", rolloutConds(1), StateComplete},
		{"progressing", rolloutConds(1,
			cond(v1alpha1.ConditionProgressing, True, "MachinesUpdating", "", 1),
			cond(v1alpha1.ConditionComplete, False, "MachinesPending", "", 1)), StateProgressing},
		{"paused wins over updates in flight", rolloutConds(1,
			cond(v1alpha1.ConditionProgressing, True, "MachinesUpdating", "", 1),
			cond(v1alpha1.ConditionPaused, True, "RolloutPaused", "", 1),
			cond(v1alpha1.ConditionComplete, False, "MachinesPending", "", 1)), StatePaused},
		{"halted wins over paused", rolloutConds(1,
			cond(v1alpha1.ConditionPaused, True, "RolloutPaused", "", 1),
			cond(v1alpha1.ConditionHalted, True, "FailureBudgetExceeded", "", 1),
			cond(v1alpha1.ConditionComplete, False, "MachinesPending", "", 1)), StateHalted},
		{"waiting says for what", rolloutConds(1,
			cond(v1alpha1.ConditionProgressing, False, "WaitingForWindow", "", 1),
			cond(v1alpha1.ConditionComplete, False, "MachinesPending", "", 1)), "WaitingForWindow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pool("ns", "p", 1, tc.conds)
			if got := RolloutState(&p); got != tc.want {
				t.Errorf("RolloutState = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRolloutStale(t *testing.T) {
	for _, tc := range []struct {
		name     string
		gen      int64
		condsGen int64
		want     bool
	}{
		{"current", 3, 3, false},
		{"behind", 4, 3, true},
		{"no observed generation", 4, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pool("ns", "p", tc.gen, rolloutConds(tc.condsGen))
			if got := RolloutStale(&p); got != tc.want {
				t.Errorf("RolloutStale = %t, want %t", got, tc.want)
			}
		})
	}
}

func TestAdminKubeconfigKeyMatchesController(t *testing.T) {
	if AdminKubeconfigKey != tenantcluster.AdminKubeconfigKey {
		t.Errorf("AdminKubeconfigKey = %q, the controller writes %q", AdminKubeconfigKey, tenantcluster.AdminKubeconfigKey)
	}
}

func TestAdminKubeconfigSecret(t *testing.T) {
	tcWith := func(mut func(*v1alpha1.TenantCluster)) *v1alpha1.TenantCluster {
		tc := &v1alpha1.TenantCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
		mut(tc)
		return tc
	}
	for _, tc := range []struct {
		name    string
		tc      *v1alpha1.TenantCluster
		want    string
		wantErr string
	}{
		{"announced", tcWith(func(tc *v1alpha1.TenantCluster) { tc.Status.AdminKubeconfigSecret = "c1-admin-kubeconfig" }), "c1-admin-kubeconfig", ""},
		{"never reconciled", tcWith(func(*v1alpha1.TenantCluster) {}), "",
			"TenantCluster ns/c1 has no admin kubeconfig yet (status.adminKubeconfigSecret is empty): it has no conditions: kubefarm-manager has not reconciled it (is the manager running?)"},
		{"certificates pending", tcWith(func(tc *v1alpha1.TenantCluster) {
			tc.Status.Conditions = []metav1.Condition{
				cond(v1alpha1.ConditionReady, metav1.ConditionFalse, "CertificatesReadyFalse", "", 1),
				cond(v1alpha1.ConditionCertificatesReady, metav1.ConditionFalse, "Issuing", "waiting for c1-admin", 1),
			}
		}), "", "TenantCluster ns/c1 has no admin kubeconfig yet (status.adminKubeconfigSecret is empty): its CertificatesReady condition is False (Issuing): waiting for c1-admin"},
		{"endpoint pending", tcWith(func(tc *v1alpha1.TenantCluster) {
			tc.Status.Conditions = []metav1.Condition{
				cond(v1alpha1.ConditionReady, metav1.ConditionFalse, "NotAvailable", "the endpoint is pending", 1),
				cond(v1alpha1.ConditionCertificatesReady, metav1.ConditionTrue, "Issued", "", 1),
			}
		}), "", "TenantCluster ns/c1 has no admin kubeconfig yet (status.adminKubeconfigSecret is empty): its external endpoint (status.endpoint) is not known yet, which for a LoadBalancer waits for the Service's address; Ready condition is False (NotAvailable): the endpoint is pending"},
		{"endpoint known, not written", tcWith(func(tc *v1alpha1.TenantCluster) {
			tc.Spec.APIServer.Expose.Type = v1alpha1.ExposeNodePort
			tc.Status.Endpoint = "https://10.0.0.1:30443"
			tc.Status.Conditions = []metav1.Condition{cond(v1alpha1.ConditionCertificatesReady, metav1.ConditionTrue, "Issued", "", 1)}
		}), "", "TenantCluster ns/c1 has no admin kubeconfig yet (status.adminKubeconfigSecret is empty): the controller has not written it yet; Ready condition is not set yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AdminKubeconfigSecret(tc.tc)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v\nwant    %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("AdminKubeconfigSecret = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestPatches(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  []byte
		want string
	}{
		{"pause", PausePatch(true), `{"spec":{"rollout":{"paused":true}}}`},
		{"resume writes false explicitly", PausePatch(false), `{"spec":{"rollout":{"paused":false}}}`},
		{"retry", RetryPatch("2026-11-24T12:00:00Z"), `{"metadata":{"annotations":{"kubefarm.io/rollout-retry":"2026-11-24T12:00:00Z"}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if string(tc.got) != tc.want {
				t.Errorf("patch = %s, want %s", tc.got, tc.want)
			}
			if !json.Valid(tc.got) {
				t.Errorf("patch is not JSON: %s", tc.got)
			}
		})
	}
}

func TestRetryValue(t *testing.T) {
	at := time.Date(2026, 11, 24, 13, 0, 0, 5, time.FixedZone("CET", 3600))
	secs, nanos := "2026-11-24T12:00:00Z", "2026-11-24T12:00:00.000000005Z"
	for _, tc := range []struct {
		name               string
		annotation, status string
		want               string
	}{
		{"first retry", "", "", secs},
		{"earlier retry", "2026-11-01T00:00:00Z", "2026-11-01T00:00:00Z", secs},
		{"same second as the annotation", secs, "", nanos},
		{"same second as the observed retry", "", secs, nanos},
		{"same nanosecond too", secs, nanos, nanos + "-2"},
		{"same nanosecond, other order", nanos, secs, nanos + "-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pool("ns", "p", 1, nil)
			if tc.annotation != "" {
				p.Annotations = map[string]string{v1alpha1.AnnotationRolloutRetry: tc.annotation}
			}
			p.Status.ObservedRetry = tc.status
			if got := RetryValue(&p, at); got != tc.want {
				t.Errorf("RetryValue = %q, want %q", got, tc.want)
			}
		})
	}
}

// The nanosecond form keeps its zeros: with time.RFC3339Nano a clock at a
// whole second would give the seconds form again.
func TestRetryValueWholeSecond(t *testing.T) {
	p := pool("ns", "p", 1, nil)
	p.Status.ObservedRetry = "2026-11-24T12:00:00Z"
	if got, want := RetryValue(&p, now), "2026-11-24T12:00:00.000000000Z"; got != want {
		t.Errorf("RetryValue = %q, want %q", got, want)
	}
}

func TestTable(t *testing.T) {
	got := Table([]string{"NAME", "MESSAGE", "LAST"}, [][]string{
		{"a", "two\nlines\tand a tab", "x"},
		{"longer-name", "", "y"},
	})
	want := "" +
		"NAME          MESSAGE               LAST\n" +
		"a             two lines and a tab   x\n" +
		"longer-name   -                     y\n"
	if got != want {
		t.Errorf("Table =\n%s\nwant\n%s", got, want)
	}
}

func TestAge(t *testing.T) {
	for _, tc := range []struct {
		t    metav1.Time
		want string
	}{
		{metav1.Time{}, "-"},
		{ago(90 * time.Second), "90s"},
		{ago(3*time.Hour + 2*time.Minute), "3h2m"},
		{metav1.NewTime(now.Add(time.Minute)), "0s"},
	} {
		if got := Age(now, tc.t); got != tc.want {
			t.Errorf("Age(%v) = %q, want %q", tc.t, got, tc.want)
		}
	}
}

func machine(ns, pool, name string, ro *v1alpha1.MachineRollout, history ...v1alpha1.RolloutHistoryEntry) v1alpha1.Machine {
	return v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.MachineSpec{Pool: pool, Cluster: "c1"},
		Status:     v1alpha1.MachineStatus{Rollout: ro, History: history},
	}
}

var (
	img1 = v1alpha1.ImageRef{Name: "img-1", Digest: "sha256:" + strings.Repeat("1", 64)}
	img2 = v1alpha1.ImageRef{Name: "img-2", Digest: "sha256:" + strings.Repeat("2", 64)}
)

func TestStatus(t *testing.T) {
	clusters := []v1alpha1.TenantCluster{
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "c2"},
			Spec:       v1alpha1.TenantClusterSpec{Version: "v1.34.4"},
			Status: v1alpha1.TenantClusterStatus{ObservedVersion: "v1.33.4", Conditions: []metav1.Condition{
				cond(v1alpha1.ConditionReady, metav1.ConditionFalse, "APIServerReadyFalse", "rolling", 1),
				cond(v1alpha1.ConditionVersionRolledOut, metav1.ConditionFalse, v1alpha1.ReasonUpgradingStep, "v1.33.4 -> v1.34.4 (the last step)", 1),
				cond(v1alpha1.ConditionCARotated, metav1.ConditionFalse, "WaitingForRollout",
					"etcd-ca: waiting for the control plane to roll out (generations 1 and 2 are trusted, 1 signs)", 1)}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "c1"},
			Spec:       v1alpha1.TenantClusterSpec{Version: "v1.34.4"},
			Status: v1alpha1.TenantClusterStatus{ObservedVersion: "v1.34.4", Endpoint: "https://10.0.0.1:6443", Conditions: []metav1.Condition{
				cond(v1alpha1.ConditionReady, metav1.ConditionTrue, "ControlPlaneReady", "", 1),
				cond(v1alpha1.ConditionCARotated, metav1.ConditionTrue, v1alpha1.ReasonCAsInUse, "etcd-ca: generation 1 signs", 1)}},
		},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "new"}, Spec: v1alpha1.TenantClusterSpec{Version: "v1.34.4"}},
	}
	pools := []v1alpha1.NodePool{
		pool("a", "workers", 2, rolloutConds(2,
			cond(v1alpha1.ConditionProgressing, metav1.ConditionTrue, "MachinesUpdating", "1 updating", 2),
			cond(v1alpha1.ConditionComplete, metav1.ConditionFalse, "MachinesPending", "", 2))),
		pool("a", "gpu", 5, rolloutConds(4)),
	}
	machines := []v1alpha1.Machine{
		machine("a", "workers", "workers-m2", &v1alpha1.MachineRollout{Phase: v1alpha1.RolloutDraining, Reason: v1alpha1.RolloutForImage,
			TargetImage: img2, PhaseStartTime: ago(2 * time.Minute), Message: "evicting 1 pod: default/web-1 (PodDisruptionBudget web)"}),
		machine("a", "workers", "workers-m1", nil),
		machine("a", "workers", "workers-m0", &v1alpha1.MachineRollout{Phase: v1alpha1.RolloutFailed, TargetImage: img2,
			PhaseStartTime: ago(time.Hour), Message: "in phase Rebooting: no new boot within 15m"}),
	}

	gotNS := Status(clusters[1:], pools, machines, "a", false, now)
	wantNS := `TENANT CLUSTERS
NAME   VERSION   READY     REASON              ENDPOINT
c1     v1.34.4   True      ControlPlaneReady   https://10.0.0.1:6443
new    v1.34.4   Unknown   -                   -

NODE POOLS
NAME      CLUSTER   IMAGE   READY   UPDATED   MACHINES   ROLLOUT
gpu       c1        img-2   2       1         3          Complete*
workers   c1        img-2   2       1         3          Progressing
* the rollout controller has not acted on the pool's latest spec yet; its conditions describe an older generation

MACHINES IN A ROLLOUT
POOL      MACHINE      PHASE      SINCE   TARGET   MESSAGE
workers   workers-m0   Failed     60m     img-2    in phase Rebooting: no new boot within 15m
workers   workers-m2   Draining   2m      img-2    evicting 1 pod: default/web-1 (PodDisruptionBudget web)
`
	if gotNS != wantNS {
		t.Errorf("Status (namespace) =\n%s\nwant\n%s", gotNS, wantNS)
	}

	gotAll := Status(clusters, nil, nil, "", true, now)
	wantAll := `TENANT CLUSTERS
NAMESPACE   NAME   VERSION                     READY     REASON                ENDPOINT
a           c1     v1.34.4                     True      ControlPlaneReady     https://10.0.0.1:6443
a           new    v1.34.4                     Unknown   -                     -
b           c2     v1.34.4 (running v1.33.4)   False     APIServerReadyFalse   -

VERSION UPGRADES
NAMESPACE   NAME   REASON          MESSAGE
b           c2     UpgradingStep   v1.33.4 -> v1.34.4 (the last step)

CA ROTATIONS
NAMESPACE   NAME   REASON              MESSAGE
b           c2     WaitingForRollout   etcd-ca: waiting for the control plane to roll out (generations 1 and 2 are trusted, 1 signs)
`
	if gotAll != wantAll {
		t.Errorf("Status (all namespaces) =\n%s\nwant\n%s", gotAll, wantAll)
	}

	for _, tc := range []struct {
		all  bool
		want string
	}{
		{false, "No TenantClusters, NodePools or Machines found in namespace empty.\n"},
		{true, "No TenantClusters, NodePools or Machines found.\n"},
	} {
		if got := Status(nil, nil, nil, "empty", tc.all, now); got != tc.want {
			t.Errorf("Status of nothing (all namespaces %t) = %q, want %q", tc.all, got, tc.want)
		}
	}
}

func TestRecentHistory(t *testing.T) {
	h := func(result v1alpha1.RolloutPhase, age time.Duration) v1alpha1.RolloutHistoryEntry {
		return v1alpha1.RolloutHistoryEntry{Image: img2, Result: result, FinishTime: ago(age)}
	}
	machines := []v1alpha1.Machine{
		machine("a", "workers", "m2", nil, h(v1alpha1.RolloutDone, time.Minute), h(v1alpha1.RolloutDone, time.Hour)),
		machine("a", "workers", "m1", nil, h(v1alpha1.RolloutDone, time.Minute), h(v1alpha1.RolloutFailed, 2*time.Hour)),
		machine("a", "other", "o1", nil, h(v1alpha1.RolloutDone, time.Second)),
	}
	var got []string
	for _, e := range RecentHistory(machines, "workers", 3) {
		got = append(got, e.Machine+"/"+Age(now, e.FinishTime))
	}
	if want := "m1/60s m2/60s m2/60m"; strings.Join(got, " ") != want {
		t.Errorf("RecentHistory = %v, want %s", got, want)
	}
	if n := len(RecentHistory(machines, "workers", -1)); n != 4 {
		t.Errorf("RecentHistory(-1) has %d entries, want 4", n)
	}
}

func TestRolloutStatus(t *testing.T) {
	p := pool("a", "workers", 3, rolloutConds(2,
		cond(v1alpha1.ConditionProgressing, metav1.ConditionFalse, "RolloutHalted", "2 failed updates exceed the failure budget 1", 2),
		cond(v1alpha1.ConditionHalted, metav1.ConditionTrue, "FailureBudgetExceeded", "2 failed updates exceed the failure budget 1", 2),
		cond(v1alpha1.ConditionComplete, metav1.ConditionFalse, "MachinesPending", "1 of 3 machines run the pool's image", 2)))
	p.Spec.Rollout = v1alpha1.RolloutStrategy{Paused: true, FailureBudget: ptr.To[int32](1),
		BlockingPodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "batch"}},
		AlertGate:           &v1alpha1.AlertGate{Source: "prod", Exclude: "Watchdog"}}
	p.Status.FailedUpdates = 2
	p.Status.RolloutImage = &img2
	p.Annotations = map[string]string{v1alpha1.AnnotationRolloutRetry: "1"}
	p.Status.ObservedRetry = "1"
	machines := []v1alpha1.Machine{
		machine("a", "workers", "workers-m0", &v1alpha1.MachineRollout{Phase: v1alpha1.RolloutFailed, Reason: v1alpha1.RolloutForImage,
			TargetImage: img2, PhaseStartTime: ago(time.Hour), Message: "in phase Rebooting: no new boot within 15m"},
			v1alpha1.RolloutHistoryEntry{Image: img2, Result: v1alpha1.RolloutFailed, Reason: v1alpha1.RolloutForImage, FinishTime: ago(time.Hour),
				Message: "in phase Rebooting: no new boot within 15m"},
			v1alpha1.RolloutHistoryEntry{Image: img1, Result: v1alpha1.RolloutDone, Reason: v1alpha1.RolloutForImage, FinishTime: ago(48 * time.Hour)}),
		machine("a", "workers", "workers-m1", nil,
			v1alpha1.RolloutHistoryEntry{Image: img2, Result: v1alpha1.RolloutDone, Reason: v1alpha1.RolloutForReboot, FinishTime: ago(2 * time.Hour)}),
		machine("a", "other", "other-m0", &v1alpha1.MachineRollout{Phase: v1alpha1.RolloutDraining, TargetImage: img2}),
	}
	machines[1].Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionRolloutHeld, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonBlockingPods, LastTransitionTime: ago(5 * time.Minute),
		Message: "1 pod matching spec.rollout.blockingPodSelector runs on Node m1: jobs/nightly"}}
	got := RolloutStatus(&p, machines, 2, now)
	want := `NodePool a/workers (cluster c1): Halted
Image:          img-2
Rollout image:  img-2@sha256:2222222222222222222222222222222222222222222222222222222222222222
Paused:         true (spec.rollout.paused)
Machines:       3 total, 2 ready, 1 updated, 1 updating, 1 unavailable
Failed updates: 2 (failure budget 1)
Gates:          alerts firing in prod except "Watchdog", pods matching app=batch, kubefarm.io/reboot-hold on a Machine or its Node
Last retry:     1 (observed: 1)
Note: the conditions describe an older generation than the pool's (generation 3); the rollout controller has not acted on the latest spec yet.

Conditions:
  TYPE          STATUS   REASON                  SINCE   MESSAGE
  Progressing   False    RolloutHalted           10m     2 failed updates exceed the failure budget 1
  Paused        False    NotPaused               10m     new machine updates may start
  Halted        True     FailureBudgetExceeded   10m     2 failed updates exceed the failure budget 1
  Complete      False    MachinesPending         10m     1 of 3 machines run the pool's image

Machines in the rollout:
  MACHINE      PHASE    REASON         SINCE   TARGET   MESSAGE
  workers-m0   Failed   ImageChanged   60m     img-2    in phase Rebooting: no new boot within 15m

Machines held by a gate:
  MACHINE      REASON         SINCE   MESSAGE
  workers-m1   BlockingPods   5m      1 pod matching spec.rollout.blockingPodSelector runs on Node m1: jobs/nightly

Recent updates:
  MACHINE      RESULT   REASON           IMAGE   AGE    MESSAGE
  workers-m0   Failed   ImageChanged     img-2   60m    in phase Rebooting: no new boot within 15m
  workers-m1   Done     RebootRequired   img-2   120m   -
`
	if got != want {
		t.Errorf("RolloutStatus =\n%s\nwant\n%s", got, want)
	}
	if msg, ok := Halted(&p); !ok || msg != "2 failed updates exceed the failure budget 1" {
		t.Errorf("Halted = %q, %t", msg, ok)
	}

	// A pool the controller has not reported on, without history asked for.
	fresh := pool("a", "fresh", 1, nil)
	got = RolloutStatus(&fresh, nil, 0, now)
	want = `NodePool a/fresh (cluster c1): Unknown
Image:          img-2
Paused:         false (spec.rollout.paused)
Machines:       3 total, 2 ready, 1 updated, 1 updating, 1 unavailable
Failed updates: 0 (failure budget 1)
Gates:          kubefarm.io/reboot-hold on a Machine or its Node

Conditions:
  none: the rollout controller has not reported on this pool

Machines in the rollout:
  none
`
	if got != want {
		t.Errorf("RolloutStatus of a fresh pool =\n%s\nwant\n%s", got, want)
	}
	if _, ok := Halted(&fresh); ok {
		t.Error("a pool without conditions is Halted")
	}
}

func TestRolloutFinished(t *testing.T) {
	True, False := metav1.ConditionTrue, metav1.ConditionFalse
	halted := "2 failed updates exceed the failure budget 1"
	for _, tc := range []struct {
		name     string
		gen      int64
		conds    []metav1.Condition
		finished bool
		failure  string
	}{
		{"complete", 1, rolloutConds(1), true, ""},
		{"no conditions yet", 1, nil, false, ""},
		{"complete, but for the previous generation", 2, rolloutConds(1), false, ""},
		{"updating", 1, rolloutConds(1,
			cond(v1alpha1.ConditionProgressing, True, "MachinesUpdating", "1 updating", 1),
			cond(v1alpha1.ConditionComplete, False, "MachinesPending", "1 of 3", 1)), false, ""},
		{"waiting for budget", 1, rolloutConds(1,
			cond(v1alpha1.ConditionProgressing, False, "WaitingForBudget", "2 machines wait", 1),
			cond(v1alpha1.ConditionComplete, False, "MachinesPending", "1 of 3", 1)), false, ""},
		{"waiting for the first boot", 1, rolloutConds(1,
			cond(v1alpha1.ConditionProgressing, False, "WaitingForFirstBoot", "3 of 3 machines have not booted yet", 1),
			cond(v1alpha1.ConditionComplete, False, "MachinesPending", "0 of 3", 1)), false, ""},
		{"paused", 1, rolloutConds(1,
			cond(v1alpha1.ConditionProgressing, False, "RolloutPaused", "2 machines wait", 1),
			cond(v1alpha1.ConditionPaused, True, "RolloutPaused", "held", 1),
			cond(v1alpha1.ConditionComplete, False, "MachinesPending", "1 of 3", 1)), false, ""},
		{"halted", 1, rolloutConds(1,
			cond(v1alpha1.ConditionProgressing, False, "RolloutHalted", halted, 1),
			cond(v1alpha1.ConditionHalted, True, "FailureBudgetExceeded", halted, 1),
			cond(v1alpha1.ConditionComplete, False, "MachinesPending", "1 of 3", 1)), true, "halted: " + halted},
		{"invalid strategy", 1, rolloutConds(1,
			cond(v1alpha1.ConditionProgressing, False, "InvalidStrategy", "spec.rollout.maintenanceWindows[0].timeZone: unknown", 1),
			cond(v1alpha1.ConditionComplete, False, "MachinesPending", "1 of 3", 1)),
			true, "its strategy is invalid: spec.rollout.maintenanceWindows[0].timeZone: unknown"},
		// Complete and an update in flight (a reboot asked for after the
		// image was rolled out) is not finished.
		{"complete with an update in flight", 1, rolloutConds(1,
			cond(v1alpha1.ConditionProgressing, True, "MachinesUpdating", "1 updating", 1)), false, ""},
	} {
		p := pool("ns", "workers", tc.gen, tc.conds)
		finished, failure := RolloutFinished(&p)
		if finished != tc.finished || failure != tc.failure {
			t.Errorf("%s: RolloutFinished = %t, %q; want %t, %q", tc.name, finished, failure, tc.finished, tc.failure)
		}
	}
}

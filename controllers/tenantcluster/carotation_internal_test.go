package tenantcluster

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// TestCARotatedCondition: True only when no CA is in a rotation, the
// reason of the first CA that is, every CA named in the message, and the
// cluster CA's own steps named.
func TestCARotatedCondition(t *testing.T) {
	steady := desired.FirstCATrust()
	both := desired.CATrust{Trusted: []int{1, 2}, Signer: 1, Handled: "r"}
	tests := []struct {
		name        string
		annotations map[string]string
		records     map[desired.PKIRole]desired.CATrust
		status      metav1.ConditionStatus
		reason      string
		msgHas      []string
	}{
		{"nothing asked", nil, nil, metav1.ConditionTrue, v1alpha1.ReasonCAsInUse,
			[]string{"front-proxy-ca: generation 1 signs", "etcd-ca: generation 1 signs"}},
		{"a request not handled yet", map[string]string{"kubefarm.io/rotate-etcd-ca": "r"}, nil,
			metav1.ConditionFalse, string(desired.CAStepIssue), []string{"etcd-ca"}},
		{"a handled request", map[string]string{"kubefarm.io/rotate-etcd-ca": "r"},
			map[desired.PKIRole]desired.CATrust{desired.RoleEtcdCA: {Trusted: []int{2}, Signer: 2, Handled: "r"}},
			metav1.ConditionTrue, v1alpha1.ReasonCAsInUse, []string{"etcd-ca: generation 2 signs"}},
		{"both trusted", nil, map[desired.PKIRole]desired.CATrust{desired.RoleFrontProxyCA: both},
			metav1.ConditionFalse, string(desired.CAStepTrust), []string{"generations 1 and 2 are trusted, 1 signs"}},
		{"the cluster CA asked for", map[string]string{"kubefarm.io/rotate-ca": "2026-11-28"}, nil,
			metav1.ConditionFalse, string(desired.CAStepIssue), []string{"ca: generation 1 signs"}},
		{"the cluster CA signs its clients with the new generation", nil,
			map[desired.PKIRole]desired.CATrust{desired.RoleCA: {Trusted: []int{1, 2}, Signer: 2, Serving: 1, Handled: "r"}},
			metav1.ConditionFalse, string(desired.CAStepSignClients), []string{"ca: generations 1 and 2 are trusted, 2 signs the clients and kubelets, 1 serves"}},
		{"the cluster CA waits for the nodes", nil,
			map[desired.PKIRole]desired.CATrust{desired.RoleCA: {Trusted: []int{1, 2}, Signer: 2, Serving: 1, Handled: "r",
				NodesSince: time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)}},
			metav1.ConditionFalse, string(desired.CAStepRebootNodes), []string{"the nodes booted before 2026-11-28T08:00:00Z reboot"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := &v1alpha1.TenantCluster{}
			tc.Annotations = tt.annotations
			var outcomes []caOutcome
			for _, ca := range desired.RotatableCAs {
				rec, ok := tt.records[ca]
				if !ok {
					rec = steady
				}
				outcomes = append(outcomes, caOutcome{step: recordStep(rec, tc.Annotations[desired.RotateCAAnnotation(ca)]), msg: caSteadyMessage(ca, rec)})
			}
			c := caRotatedCondition(outcomes)
			if c.Type != v1alpha1.ConditionCARotated || c.Status != tt.status || c.Reason != tt.reason {
				t.Errorf("%s %s %s: %s, want %s %s", c.Type, c.Status, c.Reason, c.Message, tt.status, tt.reason)
			}
			for _, want := range tt.msgHas {
				if !strings.Contains(c.Message, want) {
					t.Errorf("message %q lacks %q", c.Message, want)
				}
			}
		})
	}
}

// TestBootedBefore: a boot counts as before the rotation's time by its
// boot secret, with a margin for the two components' clocks; only a Ready
// node holds the rotation.
func TestBootedBefore(t *testing.T) {
	since := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	machine := func(issued time.Time, ready metav1.ConditionStatus) *v1alpha1.Machine {
		m := &v1alpha1.Machine{}
		if !issued.IsZero() {
			m.Status.BootCredential = &v1alpha1.BootCredential{Issued: metav1.NewTime(issued)}
		}
		m.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionNodeReady, Status: ready}}
		return m
	}
	tests := []struct {
		name           string
		m              *v1alpha1.Machine
		running, stale bool
	}{
		{"booted an hour before, Ready", machine(since.Add(-time.Hour), metav1.ConditionTrue), true, true},
		{"booted an hour before, off", machine(since.Add(-time.Hour), metav1.ConditionFalse), false, true},
		{"booted within the clocks' margin", machine(since.Add(10*time.Second), metav1.ConditionTrue), true, true},
		{"booted after", machine(since.Add(time.Minute), metav1.ConditionTrue), false, false},
		{"never booted", machine(time.Time{}, metav1.ConditionUnknown), false, false},
	}
	for _, tt := range tests {
		running, stale := bootedBefore(tt.m, since)
		if running != tt.running || stale != tt.stale {
			t.Errorf("%s: running %v stale %v, want %v %v", tt.name, running, stale, tt.running, tt.stale)
		}
	}
}

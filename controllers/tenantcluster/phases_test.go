package tenantcluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// TestSummarise covers every way a pass ends: the summary conditions are
// decided only there, from what the phases recorded.
func TestSummarise(t *testing.T) {
	r := &Reconciler{}
	ok := func(typ string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: "Fine", Message: "fine"}
	}
	certs, etcd, api := ok(v1alpha1.ConditionCertificatesReady), ok(v1alpha1.ConditionEtcdReady), ok(v1alpha1.ConditionAPIServerReady)
	etcdDown := notReady(v1alpha1.ConditionEtcdReady, v1alpha1.ReasonMembersNotReady, "0/3 etcd members ready")
	issuing := notReady(v1alpha1.ConditionCertificatesReady, v1alpha1.ReasonIssuing, "1 of 2 certificates not ready: x")
	waitingAPI := notReady(v1alpha1.ConditionAPIServerReady, v1alpha1.ReasonWaitingForEtcd, "created once etcd is ready")
	addonsApplied := ok(v1alpha1.ConditionAddonsReady)

	for _, tc := range []struct {
		name       string
		before     []metav1.Condition // status before the pass
		observed   []metav1.Condition
		notReady   []string
		invalid    error
		waitingFor waitReason
		err        error
		wantReady  string // reason
		wantMsg    string // substring of Ready's message
		notInMsg   string
		wantAddons string // reason; "" means absent
	}{
		{name: "failed pass", before: []metav1.Condition{addonsApplied}, observed: []metav1.Condition{certs},
			err: errors.New("boom"), wantReady: v1alpha1.ReasonReconcileError, wantMsg: "boom", wantAddons: "Fine"},
		{name: "failed pass, no AddonsReady yet", err: errors.New("boom"), wantReady: v1alpha1.ReasonReconcileError, wantMsg: "boom"},
		{name: "invalid spec", invalid: errors.New("metadata.name: too long"), wantReady: v1alpha1.ReasonInvalidSpec, wantMsg: "metadata.name"},
		{name: "issuing, first pass", observed: []metav1.Condition{issuing, etcdDown, api}, waitingFor: waitingForCertificates,
			wantReady: "CertificatesReadyFalse", wantMsg: "EtcdReady: 0/3", notInMsg: "AddonsReady", wantAddons: v1alpha1.ReasonWaitingForCertificates},
		{name: "reissuing keeps AddonsReady", before: []metav1.Condition{addonsApplied}, observed: []metav1.Condition{issuing, etcd, api},
			waitingFor: waitingForCertificates, wantReady: "CertificatesReadyFalse", notInMsg: "AddonsReady", wantAddons: "Fine"},
		{name: "waiting for etcd", before: []metav1.Condition{addonsApplied}, observed: []metav1.Condition{certs, etcdDown, waitingAPI},
			waitingFor: waitingForEtcd, wantReady: "EtcdReadyFalse", wantMsg: "APIServerReady: created once etcd is ready",
			notInMsg: "AddonsReady", wantAddons: v1alpha1.ReasonWaitingForAPIServer},
		{name: "full pass, ready", observed: []metav1.Condition{certs, etcd, api, addonsApplied},
			wantReady: v1alpha1.ReasonControlPlaneReady, wantAddons: "Fine"},
		{name: "full pass, followers and endpoint pending", observed: []metav1.Condition{certs, etcd, api, addonsApplied},
			notReady:  []string{"kube-scheduler: 1/2 replicas available", "the external endpoint is not known yet"},
			wantReady: v1alpha1.ReasonNotAvailable, wantMsg: "kube-scheduler: 1/2 replicas available; the external endpoint", wantAddons: "Fine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &v1alpha1.TenantCluster{}
			obj.Generation = 4
			obj.Status.Conditions = append([]metav1.Condition(nil), tc.before...)
			s := &scope{tc: obj, notReady: tc.notReady, invalidSpec: tc.invalid, waitingFor: tc.waitingFor}
			for _, c := range tc.observed {
				s.observe(r, c)
			}
			r.summarise(s, tc.err)
			ready := meta.FindStatusCondition(obj.Status.Conditions, v1alpha1.ConditionReady)
			if ready == nil || ready.Reason != tc.wantReady || !strings.Contains(ready.Message, tc.wantMsg) ||
				(tc.notInMsg != "" && strings.Contains(ready.Message, tc.notInMsg)) || ready.ObservedGeneration != 4 {
				t.Errorf("Ready = %+v, want reason %s, message with %q and without %q", ready, tc.wantReady, tc.wantMsg, tc.notInMsg)
			}
			addons := meta.FindStatusCondition(obj.Status.Conditions, v1alpha1.ConditionAddonsReady)
			switch {
			case tc.wantAddons == "" && addons != nil:
				t.Errorf("AddonsReady = %+v, want none", addons)
			case tc.wantAddons != "" && (addons == nil || addons.Reason != tc.wantAddons):
				t.Errorf("AddonsReady = %+v, want reason %s", addons, tc.wantAddons)
			}
		})
	}
}

func TestSoonest(t *testing.T) {
	after := func(d time.Duration) ctrl.Result { return ctrl.Result{RequeueAfter: d} }
	for _, tc := range []struct{ a, b, want ctrl.Result }{
		{after(0), after(0), after(0)},
		{after(0), after(time.Minute), after(time.Minute)},
		{after(time.Minute), after(0), after(time.Minute)},
		{after(time.Minute), after(10 * time.Second), after(10 * time.Second)},
	} {
		if got := soonest(tc.a, tc.b); got != tc.want {
			t.Errorf("soonest(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

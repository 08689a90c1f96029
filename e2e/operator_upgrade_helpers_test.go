//go:build e2e

package e2e

import (
	"reflect"
	"testing"
)

func TestReconcilePasses(t *testing.T) {
	page := `# HELP controller_runtime_reconcile_total Total number of reconciliations per controller
# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="nodepool",result="success"} 9
controller_runtime_reconcile_total{controller="tenantcluster",result="error"} 2
controller_runtime_reconcile_total{controller="tenantcluster",result="requeue"} 1
controller_runtime_reconcile_total{controller="tenantcluster",result="requeue_after"} 30
controller_runtime_reconcile_total{controller="tenantcluster",result="success"} 4
controller_runtime_reconcile_time_seconds_count{controller="tenantcluster",result="success"} 99
`
	for _, tc := range []struct {
		controller string
		want       int
	}{{"tenantcluster", 35}, {"nodepool", 9}, {"rollout", 0}} {
		if got := reconcilePasses(page, tc.controller); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.controller, got, tc.want)
		}
	}
	if got := reconcilePasses("", "tenantcluster"); got != 0 {
		t.Errorf("empty page: %d", got)
	}
}

func TestStateDiff(t *testing.T) {
	before := map[string]string{"pod a": "uid 1 restarts 0", "pod b": "uid 2 restarts 0", "statefulset etcd": "generation 1"}
	after := map[string]string{"pod a": "uid 1 restarts 0", "pod b": "uid 3 restarts 0", "statefulset etcd": "generation 1", "pod c": "uid 4 restarts 0"}
	want := []string{"pod b: uid 2 restarts 0 became uid 3 restarts 0", "pod c: new (uid 4 restarts 0)"}
	if got := stateDiff(before, after); !reflect.DeepEqual(got, want) {
		t.Errorf("diff %q, want %q", got, want)
	}
	delete(after, "pod a")
	if got := stateDiff(before, after); len(got) != 3 || got[0] != "pod a: gone (was uid 1 restarts 0)" {
		t.Errorf("a pod gone: %q", got)
	}
	if got := stateDiff(before, before); len(got) != 0 {
		t.Errorf("no change: %q", got)
	}
}

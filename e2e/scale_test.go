//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// TestTenantEtcdScaling grows a tenant's etcd from one member to three and
// shrinks it back to one by editing spec.etcd.replicas, on real pods, while
// a loop of tenant API calls (a read and a write every 100 ms, through the
// tenant's endpoint) runs throughout and must see no failure but etcd's
// own refusal of a write during a leader move (at most two). After each
// change: EtcdScaling False MembersMatch, the StatefulSet at the count with
// every member ready, the API servers rolled out listing every member, and
// the Events of each membership step (learners added and promoted, members
// removed). Reads done before, between and after the changes agree.
func TestTenantEtcdScaling(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	_, cs, c := adminClients(t)
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "scale-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNamespace(t, cs, ns.Name) })

	tc := exampleTenantCluster(t)
	tc.Namespace = ns.Name
	tc.Spec.APIServer.Expose = kubefarmv1.APIServerExpose{Type: kubefarmv1.ExposeNodePort}
	tc.Spec.Etcd.Replicas = 1
	small := resource.MustParse("1Gi")
	tc.Spec.Etcd.StorageSize = &small
	tc.Spec.VolumeReclaimPolicy = kubefarmv1.VolumeReclaimDelete
	if err := c.Create(ctx, tc); err != nil {
		t.Fatalf("creating the TenantCluster: %v", err)
	}
	key := client.ObjectKeyFromObject(tc)
	waitFor := tenantWaiter(ctx, func() string { return describeTenant(c, cs, key) })
	got := &kubefarmv1.TenantCluster{}
	waitFor(t, "the TenantCluster never became Ready", 8*time.Minute, tenantReady(c, key, got, ""))
	tenantCfg := tenantConfig(t, ctx, cs, got)
	tenant, err := kubernetes.NewForConfig(tenantCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-scaling"},
		Data: map[string]string{"members": "1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// settled: the change is complete and everything runs the count.
	settled := func(members int32) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, key, got); err != nil || got.Status.ObservedGeneration != got.Generation {
				return false, nil
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionEtcdScaling)
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != kubefarmv1.ReasonMembersMatch ||
				!meta.IsStatusConditionTrue(got.Status.Conditions, kubefarmv1.ConditionReady) {
				return false, nil
			}
			sts, err := cs.AppsV1().StatefulSets(ns.Name).Get(ctx, tc.Name+"-etcd", metav1.GetOptions{})
			if err != nil || sts.Spec.Replicas == nil || *sts.Spec.Replicas != members || sts.Status.ReadyReplicas != members ||
				sts.Status.ObservedGeneration != sts.Generation {
				return false, nil
			}
			api, err := cs.AppsV1().Deployments(ns.Name).Get(ctx, tc.Name+"-apiserver", metav1.GetOptions{})
			if err != nil || api.Status.ObservedGeneration != api.Generation || api.Spec.Replicas == nil ||
				api.Status.UpdatedReplicas != *api.Spec.Replicas || api.Status.AvailableReplicas != *api.Spec.Replicas ||
				api.Status.Replicas != *api.Spec.Replicas {
				return false, nil
			}
			servers := ""
			for _, a := range api.Spec.Template.Spec.Containers[0].Args {
				if v, ok := strings.CutPrefix(a, "--etcd-servers="); ok {
					servers = v
				}
			}
			return len(strings.Split(servers, ",")) == int(members), nil
		}
	}

	load := startLoad(t, tenantCfg)
	for _, step := range []struct {
		members int32
		events  []string
	}{
		{3, []string{"MemberAdded", "MemberPromoted"}},
		{1, []string{"MemberRemoved"}},
	} {
		start := time.Now()
		patch := client.MergeFrom(got.DeepCopy())
		got.Spec.Etcd.Replicas = step.members
		if err := c.Patch(ctx, got, patch); err != nil {
			t.Fatalf("setting spec.etcd.replicas to %d: %v", step.members, err)
		}
		waitFor(t, fmt.Sprintf("etcd never settled at %d members", step.members), 6*time.Minute, settled(step.members))
		t.Logf("etcd at %d members, the API servers listing them all, %.1fs after the change", step.members, time.Since(start).Seconds())
		events, err := cs.EventsV1().Events(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range step.events {
			n := 0
			for _, e := range events.Items {
				if e.Regarding.Kind != "TenantCluster" || e.Regarding.Name != tc.Name || e.Reason != want {
					continue
				}
				// The recorder folds repeats of a reason into one Event's
				// series; its count is how many there were.
				last := e.EventTime.Time
				if e.Series != nil {
					last = e.Series.LastObservedTime.Time
				}
				if last.Before(start.Add(-time.Second)) {
					continue
				}
				n++
				if e.Series != nil {
					n += int(e.Series.Count) - 1
				}
			}
			if n < 2 {
				t.Errorf("%d %s Events after scaling to %d members, want one per member changed (2)", n, want, step.members)
			}
		}
	}
	ok, failed, errs := load.stop()
	t.Logf("%d tenant API calls succeeded, %d failed during 1 -> 3 -> 1", ok, failed)
	// etcd drops the writes its old leader receives while a leader move
	// hands over (docs/etcd.md); the API server passes that on. One such
	// refusal per move (two moves at most in 3 -> 1) is the documented
	// cost; any other failure is not.
	dropped := 0
	for _, e := range errs {
		if strings.Contains(e, "raft proposal dropped") || strings.Contains(e, "leader changed") {
			dropped++
		}
	}
	if dropped > 0 {
		t.Logf("%d writes refused by etcd during a leader move: %s", dropped, strings.Join(errs, "\n"))
	}
	if failed > dropped || dropped > 2 || ok == 0 {
		t.Errorf("%d calls failed (%d of them etcd's leader-move refusals), %d succeeded: %s", failed, dropped, ok, strings.Join(errs, "\n"))
	}
	cm, err := tenant.CoreV1().ConfigMaps("default").Get(ctx, "before-scaling", metav1.GetOptions{})
	if err != nil || cm.Data["members"] != "1" {
		t.Errorf("the ConfigMap written before the changes: %v %v", cm, err)
	}
}

package desired

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// A membership change moves EtcdMembers and EtcdServers one step at a
// time (docs/etcd.md, Scaling). What each must change, and what it must
// not.
func TestEtcdMembershipCounts(t *testing.T) {
	peer := func(i int) string {
		return fmt.Sprintf("alpha-etcd-%d=https://alpha-etcd-%d.alpha-etcd.tenants.svc.cluster.local:2380", i, i)
	}
	client := func(i int) string {
		return fmt.Sprintf("https://alpha-etcd-%d.alpha-etcd.tenants.svc.cluster.local:2379", i)
	}
	list := func(n int32, f func(int) string) string {
		var out []string
		for i := range int(n) {
			out = append(out, f(i))
		}
		return strings.Join(out, ",")
	}
	for _, spec := range []int32{1, 3} {
		base := mustResolve(t, newTC(
			func(tc *v1alpha1.TenantCluster) { tc.Spec.Etcd.Replicas = spec },
			withBackup(v1alpha1.EtcdBackup{}),
		), toolsOptions())
		if base.EtcdMembers != spec || base.EtcdServers != spec {
			t.Errorf("spec %d: Resolve gives EtcdMembers %d, EtcdServers %d; both must default to the spec", spec, base.EtcdMembers, base.EtcdServers)
		}
		baseSTS, err := EtcdStatefulSet(base, sampleSecrets())
		if err != nil {
			t.Fatal(err)
		}
		for _, members := range []int32{1, 2, 3} {
			for _, servers := range []int32{1, members} {
				t.Run(fmt.Sprintf("spec=%d members=%d servers=%d", spec, members, servers), func(t *testing.T) {
					c := *base
					c.EtcdMembers, c.EtcdServers = members, servers

					cm, err := EtcdStateConfigMap(&c, EtcdClusterExisting)
					if err != nil {
						t.Fatal(err)
					}
					if got, want := cm.Data[EtcdInitialClusterKey], list(members, peer); got != want {
						t.Errorf("initial cluster %q, want %q", got, want)
					}

					sts, err := EtcdStatefulSet(&c, sampleSecrets())
					if err != nil {
						t.Fatal(err)
					}
					if *sts.Spec.Replicas != members {
						t.Errorf("StatefulSet replicas %d, want %d", *sts.Spec.Replicas, members)
					}
					// The running members must not restart: only the
					// replicas may differ from the spec's StatefulSet.
					if !reflect.DeepEqual(sts.Spec.Template, baseSTS.Spec.Template) {
						t.Errorf("the pod template changes with EtcdMembers:\n%s\nvs\n%s", toYAML(t, sts), toYAML(t, baseSTS))
					}
					if !reflect.DeepEqual(sts.Spec.VolumeClaimTemplates, baseSTS.Spec.VolumeClaimTemplates) {
						t.Error("the claim templates change with EtcdMembers")
					}

					api, err := APIServerFlags(&c)
					if err != nil {
						t.Fatal(err)
					}
					if got, want := flagMap(t, api)["etcd-servers"], list(servers, client); got != want {
						t.Errorf("--etcd-servers %q, want %q", got, want)
					}
					cj, err := EtcdBackupCronJob(&c)
					if err != nil {
						t.Fatal(err)
					}
					args := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Args
					if got, _ := argValue(args, "--endpoints"); got != list(servers, client) {
						t.Errorf("backup --endpoints %q, want %q", got, list(servers, client))
					}

					names := map[string]bool{}
					for _, p := range PodDisruptionBudgets(&c) {
						names[p.Name] = true
					}
					if names["alpha-etcd"] != (members > 1) {
						t.Errorf("etcd budget %v with %d members", names["alpha-etcd"], members)
					}
				})
			}
		}
	}
}

// The mark of a change under way is on the StatefulSet's own metadata,
// never in its pod template (which would restart every member), and
// absent outside a change.
func TestEtcdScalingMark(t *testing.T) {
	c := mustResolve(t, newTC(func(tc *v1alpha1.TenantCluster) { tc.Spec.Etcd.Replicas = 3 }), toolsOptions())
	quiet, err := EtcdStatefulSet(c, sampleSecrets())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := quiet.Annotations[v1alpha1.AnnotationEtcdScaling]; ok {
		t.Errorf("a StatefulSet outside a change is marked: %v", quiet.Annotations)
	}
	changing := *c
	changing.EtcdMembers, changing.EtcdServers, changing.EtcdScaling = 3, 1, true
	sts, err := EtcdStatefulSet(&changing, sampleSecrets())
	if err != nil {
		t.Fatal(err)
	}
	if got := sts.Annotations[v1alpha1.AnnotationEtcdScaling]; got != "3" {
		t.Errorf("%s = %q during a change towards 3 members, want \"3\"", v1alpha1.AnnotationEtcdScaling, got)
	}
	if !reflect.DeepEqual(sts.Spec, quiet.Spec) {
		t.Errorf("the mark changed the StatefulSet's spec:\n%s\nvs\n%s", toYAML(t, sts), toYAML(t, quiet))
	}
}

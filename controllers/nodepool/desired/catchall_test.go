package desired

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func joinPool(policy kubefarmv1.UnknownMachinePolicy) *kubefarmv1.NodePool {
	p := testPool()
	p.Spec.Tags["all"] = kubefarmv1.TagSpec{KernelArgs: []string{"console=ttyS0"}}
	p.Spec.Network.DynamicRange = &kubefarmv1.DynamicRange{Start: "10.28.72.10", End: "10.28.72.13", UnknownMachines: policy}
	return p
}

func TestCatchAllNames(t *testing.T) {
	if got := CatchAllHostname("52:54:00:AB:cd:01"); got != "52-54-00-ab-cd-01" {
		t.Errorf("hostname %q", got)
	}
	if got := CatchAllName("workers", "52:54:00:ab:cd:01"); got != "workers-52-54-00-ab-cd-01" {
		t.Errorf("name %q", got)
	}
	// The longest pool name Machines accepts (a label value, 63) still
	// gives a valid object name.
	long := strings.Repeat("p", 63)
	if n := CatchAllName(long, "52:54:00:ab:cd:01"); len(long) != 63 || len(n) != 81 {
		t.Errorf("len(pool) %d, len(name) %d", len(long), len(n))
	}
}

func TestLeaseJoins(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	bound := metav1.NewTime(now.Add(-time.Minute))
	// lease is an acknowledged lease, an hour left, bound a minute ago.
	lease := func(mod func(*kubefarmv1.DHCPLease)) *kubefarmv1.DHCPLease {
		l := &kubefarmv1.DHCPLease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "workers-10-28-72-11"},
			Spec: kubefarmv1.DHCPLeaseSpec{Pool: "workers", MAC: "52:54:00:00:00:01", IP: "10.28.72.11",
				ExpireTime: metav1.NewTime(now.Add(time.Hour)), BoundTime: bound.DeepCopy()},
		}
		if mod != nil {
			mod(l)
		}
		return l
	}
	deleting := metav1.NewTime(now)
	for _, tc := range []struct {
		name  string
		pool  *kubefarmv1.NodePool
		lease *kubefarmv1.DHCPLease
		want  bool
	}{
		{"acknowledged, a lease time left", joinPool(kubefarmv1.UnknownJoin), lease(nil), true},
		{"renewed at half time", joinPool(kubefarmv1.UnknownJoin), lease(func(l *kubefarmv1.DHCPLease) {
			l.Spec.ExpireTime = metav1.NewTime(now.Add(29 * time.Minute))
		}), true},
		{"hold pool", joinPool(kubefarmv1.UnknownHold), lease(nil), false},
		{"policy unset is Hold", joinPool(""), lease(nil), false},
		{"no range", testPool(), lease(nil), false},
		{"an offer: no boundTime", joinPool(kubefarmv1.UnknownJoin), lease(func(l *kubefarmv1.DHCPLease) {
			l.Spec.ExpireTime = metav1.NewTime(now.Add(time.Minute))
			l.Spec.BoundTime = nil
		}), false},
		{"an offer with an hour left (a skewed clock)", joinPool(kubefarmv1.UnknownJoin), lease(func(l *kubefarmv1.DHCPLease) {
			l.Spec.BoundTime = nil
		}), false},
		{"acknowledged with a 2 minute lease time", joinPool(kubefarmv1.UnknownJoin), lease(func(l *kubefarmv1.DHCPLease) {
			l.Spec.ExpireTime = metav1.NewTime(now.Add(2 * time.Minute))
		}), true},
		{"acknowledged, a second left", joinPool(kubefarmv1.UnknownJoin), lease(func(l *kubefarmv1.DHCPLease) {
			l.Spec.ExpireTime = metav1.NewTime(now.Add(time.Second))
		}), true},
		{"expired", joinPool(kubefarmv1.UnknownJoin), lease(func(l *kubefarmv1.DHCPLease) {
			l.Spec.ExpireTime = metav1.NewTime(now.Add(-time.Second))
		}), false},
		{"expires right now", joinPool(kubefarmv1.UnknownJoin), lease(func(l *kubefarmv1.DHCPLease) {
			l.Spec.ExpireTime = metav1.NewTime(now)
		}), false},
		{"declined", joinPool(kubefarmv1.UnknownJoin), lease(func(l *kubefarmv1.DHCPLease) { l.Spec.Declined = true }), false},
		{"being deleted", joinPool(kubefarmv1.UnknownJoin), lease(func(l *kubefarmv1.DHCPLease) { l.DeletionTimestamp = &deleting }), false},
		{"another pool", joinPool(kubefarmv1.UnknownJoin), lease(func(l *kubefarmv1.DHCPLease) { l.Spec.Pool = "other" }), false},
		{"another namespace", joinPool(kubefarmv1.UnknownJoin), lease(func(l *kubefarmv1.DHCPLease) { l.Namespace = "x" }), false},
		{"outside the range now", joinPool(kubefarmv1.UnknownJoin), lease(func(l *kubefarmv1.DHCPLease) { l.Spec.IP = "10.28.72.14" }), false},
		{"range end", joinPool(kubefarmv1.UnknownJoin), lease(func(l *kubefarmv1.DHCPLease) { l.Spec.IP = "10.28.72.13" }), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LeaseJoins(tc.pool, tc.lease, now); got != tc.want {
				t.Errorf("LeaseJoins = %t, want %t", got, tc.want)
			}
		})
	}
}

func TestCatchAll(t *testing.T) {
	const (
		macA = "52:54:00:00:00:0a"
		macB = "52:54:00:00:00:0b"
		macC = "52:54:00:00:00:0c"
		macD = "52:54:00:00:00:0d"
		macE = "52:54:00:00:00:0e"
	)
	type got struct{ name, ip string }
	for _, tc := range []struct {
		name    string
		pool    *kubefarmv1.NodePool
		members []CatchAllMember
		want    []got
		retired []string
	}{
		{
			name:    "a lease of a join pool",
			pool:    joinPool(kubefarmv1.UnknownJoin),
			members: []CatchAllMember{{MAC: macA, IP: "10.28.72.10"}},
			want:    []got{{"workers-52-54-00-00-00-0a", "10.28.72.10"}},
		},
		{
			name:    "upper-case MAC is lowered",
			pool:    joinPool(kubefarmv1.UnknownJoin),
			members: []CatchAllMember{{MAC: "52:54:00:00:00:0A", IP: "10.28.72.10"}},
			want:    []got{{"workers-52-54-00-00-00-0a", "10.28.72.10"}},
		},
		{
			name:    "a hold pool makes none but keeps existing ones",
			pool:    joinPool(kubefarmv1.UnknownHold),
			members: []CatchAllMember{{MAC: macA, IP: "10.28.72.10"}, {MAC: macB, IP: "10.28.72.11", Existing: true}},
			want:    []got{{"workers-52-54-00-00-00-0b", "10.28.72.11"}},
		},
		{
			name: "an existing machine keeps its address when its MAC leases another",
			pool: joinPool(kubefarmv1.UnknownJoin),
			members: []CatchAllMember{{MAC: macA, IP: "10.28.72.12"},
				{MAC: macA, IP: "10.28.72.10", Existing: true}},
			want: []got{{"workers-52-54-00-00-00-0a", "10.28.72.10"}},
		},
		{
			name:    "an existing machine outside the range (the range moved) is kept",
			pool:    joinPool(kubefarmv1.UnknownJoin),
			members: []CatchAllMember{{MAC: macA, IP: "10.28.9.9", Existing: true}},
			want:    []got{{"workers-52-54-00-00-00-0a", "10.28.9.9"}},
		},
		{
			name:    "a new lease outside the range is not",
			pool:    joinPool(kubefarmv1.UnknownJoin),
			members: []CatchAllMember{{MAC: macA, IP: "10.28.9.9"}},
		},
		{
			name: "bounded by the range's size (4), existing machines first",
			pool: joinPool(kubefarmv1.UnknownJoin),
			members: []CatchAllMember{{MAC: macA, IP: "10.28.72.10"}, {MAC: macB, IP: "10.28.72.11"},
				{MAC: macC, IP: "10.28.72.12"}, {MAC: macD, IP: "10.28.72.13"},
				{MAC: macE, IP: "10.28.9.9", Existing: true}},
			want: []got{{"workers-52-54-00-00-00-0a", "10.28.72.10"}, {"workers-52-54-00-00-00-0b", "10.28.72.11"},
				{"workers-52-54-00-00-00-0c", "10.28.72.12"}, {"workers-52-54-00-00-00-0e", "10.28.9.9"}},
		},
		{
			name:    "one address for two MACs: the existing machine's",
			pool:    joinPool(kubefarmv1.UnknownJoin),
			members: []CatchAllMember{{MAC: macA, IP: "10.28.72.10"}, {MAC: macB, IP: "10.28.72.10", Existing: true}},
			want:    []got{{"workers-52-54-00-00-00-0b", "10.28.72.10"}},
		},
		{
			name: "an entry's MAC: a lease is dropped, an existing machine retired",
			pool: joinPool(kubefarmv1.UnknownJoin),
			members: []CatchAllMember{{MAC: "02:00:0a:1c:00:0b", IP: "10.28.72.10"},
				{MAC: "02:00:0a:1c:01:0c", IP: "10.28.72.11", Existing: true}},
			retired: []string{"workers-02-00-0a-1c-01-0c"},
		},
		{
			name:    "an entry's IP: the existing machine is retired",
			pool:    joinPool(kubefarmv1.UnknownJoin),
			members: []CatchAllMember{{MAC: macA, IP: "10.28.0.13", Existing: true}},
			retired: []string{"workers-52-54-00-00-00-0a"},
		},
		{
			name: "an entry named after the MAC takes the object over: nothing retired",
			pool: func() *kubefarmv1.NodePool {
				p := joinPool(kubefarmv1.UnknownJoin)
				p.Spec.Machines = append(p.Spec.Machines, kubefarmv1.MachineEntry{Name: "52-54-00-00-00-0a", MACs: []string{macA}, IP: "10.28.72.10"})
				return p
			}(),
			members: []CatchAllMember{{MAC: macA, IP: "10.28.72.10", Existing: true}},
		},
		{
			name:    "a malformed MAC is dropped",
			pool:    joinPool(kubefarmv1.UnknownJoin),
			members: []CatchAllMember{{MAC: "52:54:00:00:00", IP: "10.28.72.10"}, {MAC: macB, IP: "10.28.72.300", Existing: true}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entries, err := Machines(tc.pool)
			if err != nil {
				t.Fatal(err)
			}
			out, retired := CatchAll(tc.pool, entries, tc.members)
			var names []got
			for _, m := range out {
				names = append(names, got{m.Name, m.Spec.IP})
			}
			if !reflect.DeepEqual(names, tc.want) {
				t.Errorf("machines %v, want %v", names, tc.want)
			}
			if !slices.Equal(retired, tc.retired) {
				t.Errorf("retired %v, want %v", retired, tc.retired)
			}
		})
	}
}

// A catch-all Machine is a pool Machine like the others: the pool's image,
// owner, labels and `all` tag, no power, plus the catch-all label; and
// the same inputs give the same bytes.
func TestCatchAllMachine(t *testing.T) {
	pool := joinPool(kubefarmv1.UnknownJoin)
	entries, err := Machines(pool)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := CatchAll(pool, entries, []CatchAllMember{{MAC: "52:54:00:00:00:0a", IP: "10.28.72.10"}})
	if len(out) != 1 {
		t.Fatalf("%d machines", len(out))
	}
	m := out[0]
	want := kubefarmv1.MachineSpec{Pool: "workers", Cluster: "c1", Hostname: "52-54-00-00-00-0a",
		MACs: []string{"52:54:00:00:00:0a"}, IP: "10.28.72.10", Tags: []string{"all"}, DesiredImage: "node-2026-01"}
	if !reflect.DeepEqual(m.Spec, want) {
		t.Errorf("spec %+v\nwant %+v", m.Spec, want)
	}
	if m.Labels[kubefarmv1.LabelCatchAll] != "true" || m.Labels[kubefarmv1.LabelPool] != "workers" ||
		m.Labels[kubefarmv1.LabelTenantCluster] != "c1" || m.Labels[LabelManagedBy] != ManagedBy {
		t.Errorf("labels %v", m.Labels)
	}
	if !reflect.DeepEqual(m.OwnerReferences, entries[0].OwnerReferences) {
		t.Errorf("owner %v, want the entries' %v", m.OwnerReferences, entries[0].OwnerReferences)
	}
	again, _ := CatchAll(pool, entries, []CatchAllMember{{MAC: "52:54:00:00:00:0a", IP: "10.28.72.10"}})
	if !reflect.DeepEqual(again, out) {
		t.Error("two builds differ")
	}
	// The image moves with the pool; name and address stay.
	pool.Spec.BootImage = "node-2026-02"
	moved, _ := CatchAll(pool, entries, []CatchAllMember{{MAC: "52:54:00:00:00:0a", IP: "10.28.72.10", Existing: true}})
	if moved[0].Name != m.Name || moved[0].Spec.IP != m.Spec.IP || moved[0].Spec.DesiredImage != "node-2026-02" {
		t.Errorf("after the image change %s %s %s", moved[0].Name, moved[0].Spec.IP, moved[0].Spec.DesiredImage)
	}
	if RangeSize(pool) != 4 || RangeSize(testPool()) != 0 {
		t.Errorf("range sizes %d %d", RangeSize(pool), RangeSize(testPool()))
	}
}

package inventory

import (
	"fmt"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/leases"
)

func testPool(rv string) *kubefarmv1.NodePool {
	return &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rack1", ResourceVersion: rv},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: "c1", BootImage: "img",
			Network: kubefarmv1.BootNetwork{
				Subnet: "10.28.0.0/16", Gateway: "10.28.0.1", DNS: []string{"10.28.0.1", "1.1.1.1"},
				Domain: "farm.example", LeaseTime: &metav1.Duration{Duration: 30 * time.Minute},
			},
			Tags: map[string]kubefarmv1.TagSpec{
				"ntp":   {DHCPOptions: []kubefarmv1.DHCPOption{{Code: 42, Value: "0x0a1c0001"}, {Code: 17, Value: "/root"}}},
				"plain": {KernelArgs: []string{"quiet"}},
				"bad":   {DHCPOptions: []kubefarmv1.DHCPOption{{Code: 43, Value: "0xzz"}}},
			},
		},
	}
}

func testMachine(name, ip string, macs ...string) *kubefarmv1.Machine {
	return &kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rack1-" + name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec:       kubefarmv1.MachineSpec{Pool: "rack1", Cluster: "c1", Hostname: name, IP: ip, MACs: macs, DesiredImage: "img"},
	}
}

func hw(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestLeaseIsThePureBuilders: the lease a lookup builds is, field for
// field, the one leases.FromObjects derives from the same Machine and
// NodePool, for every MAC, with and without tag options.
func TestLeaseIsThePureBuilders(t *testing.T) {
	pool := testPool("1")
	for _, tags := range [][]string{nil, {"plain"}, {"ntp"}, {"plain", "ntp"}} {
		t.Run(fmt.Sprint(tags), func(t *testing.T) {
			inv := newInventory(testr.New(t))
			inv.setPool(pool)
			m := testMachine("m1", "10.28.0.11", "52:54:00:00:00:01", "52:54:00:00:00:02")
			m.Spec.Tags = tags
			mustDo(t, inv.Add(m.DeepCopy()))
			want, err := leases.FromObjects(m, pool)
			mustDo(t, err)
			for _, w := range want {
				got, ok := inv.Lookup(w.MAC)
				if !ok {
					t.Fatalf("no lease for %s", w.MAC)
				}
				if !reflect.DeepEqual(*got, w) {
					t.Errorf("lease of %s:\n got %+v\nwant %+v", w.MAC, *got, w)
				}
				if ip, ok := inv.LookupIP(net.IPv4(10, 28, 0, 11)); !ok || !ip.IP.Equal(w.IP) {
					t.Errorf("LookupIP: %v %+v", ok, ip)
				}
			}
			if inv.Errors() != 0 {
				t.Errorf("%d errors", inv.Errors())
			}
		})
	}
}

// TestInventoryFollowsMachinesAndPools: the store's events and the pool's
// keep lookups right, in the order a reflector and an informer may deliver
// them.
func TestInventoryFollowsMachinesAndPools(t *testing.T) {
	inv := newInventory(testr.New(t))
	m1 := testMachine("m1", "10.28.0.11", "52:54:00:00:01:01", "52:54:00:00:01:02")
	m2 := testMachine("m2", "10.28.0.12", "52:54:00:00:02:01")
	// Machines before their pool: no lease yet, but the boot handlers find
	// them.
	mustDo(t, inv.Replace([]any{m1.DeepCopy(), m2.DeepCopy()}, "10"))
	if _, ok := inv.Lookup(hw("52:54:00:00:01:01")); ok {
		t.Fatal("a lease without a pool")
	}
	if m, ok := inv.ByMAC("52:54:00:00:02:01"); !ok || m.Name != "rack1-m2" {
		t.Fatalf("ByMAC before the pool: %v %v", ok, m)
	}
	inv.setPool(testPool("1"))
	if l, ok := inv.Lookup(hw("52:54:00:00:01:02")); !ok || l.Hostname != "m1" || l.Machine != "farm/rack1-m1" || l.LeaseTime != 30*time.Minute {
		t.Fatalf("lease after the pool came: %v %+v", ok, l)
	}
	if n := inv.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3", n)
	}

	// A MAC change moves the key.
	m1.Spec.MACs = []string{"52:54:00:00:01:01", "52:54:00:00:01:03"}
	mustDo(t, inv.Update(m1.DeepCopy()))
	if _, ok := inv.Lookup(hw("52:54:00:00:01:02")); ok {
		t.Error("the old MAC still has a lease")
	}
	if _, ok := inv.Lookup(hw("52:54:00:00:01:03")); !ok {
		t.Error("the new MAC has none")
	}

	// A pool change derives every machine of the pool again.
	p2 := testPool("2")
	p2.Spec.Network.DNS = []string{"10.28.0.53"}
	inv.setPool(p2)
	for _, m := range []string{"52:54:00:00:01:01", "52:54:00:00:01:03", "52:54:00:00:02:01"} {
		if l, ok := inv.Lookup(hw(m)); !ok || len(l.DNS) != 1 || !l.DNS[0].Equal(net.IPv4(10, 28, 0, 53)) {
			t.Errorf("%s after the pool change: %v %+v", m, ok, l)
		}
	}

	// A spec that derives no lease keeps the last good one, counted.
	bad := m2.DeepCopy()
	bad.Spec.IP = "10.99.0.12" // outside the pool's subnet
	bad.ResourceVersion = "2"
	mustDo(t, inv.Update(bad))
	if l, ok := inv.Lookup(hw("52:54:00:00:02:01")); !ok || !l.IP.Equal(net.IPv4(10, 28, 0, 12)) {
		t.Errorf("m2's last good lease went: %v %+v", ok, l)
	}
	if m, ok := inv.ByMAC("52:54:00:00:02:01"); !ok || m.Spec.IP != "10.99.0.12" || m.ResourceVersion != "2" {
		t.Errorf("the boot handlers must see the Machine as it is: %+v", m)
	}
	// Its requests come from the leased address, which stays taken.
	if m, ok := inv.ByIP("10.28.0.12"); !ok || m.Name != "rack1-m2" {
		t.Errorf("ByIP of the kept lease's address: %v %+v", ok, m)
	}
	if _, ok := inv.LookupIP(net.IPv4(10, 28, 0, 12)); !ok {
		t.Error("the kept lease's address is free for the allocator")
	}
	if inv.Errors() != 1 {
		t.Errorf("Errors = %d, want 1", inv.Errors())
	}
	// A pool version whose network does not parse keeps the last good one.
	p3 := testPool("3")
	p3.Spec.Network.Subnet = "not a subnet"
	inv.setPool(p3)
	if l, ok := inv.Lookup(hw("52:54:00:00:01:01")); !ok || len(l.DNS) != 1 {
		t.Errorf("a bad pool version dropped the leases: %v %+v", ok, l)
	}

	// Two Machines claiming one MAC: neither is served, by DHCP or HTTP,
	// until the conflict ends.
	m3 := testMachine("m3", "10.28.0.13", "52:54:00:00:01:01")
	mustDo(t, inv.Add(m3.DeepCopy()))
	if _, ok := inv.Lookup(hw("52:54:00:00:01:01")); ok {
		t.Error("a MAC two machines claim has a lease")
	}
	if _, ok := inv.ByMAC("52:54:00:00:01:01"); ok {
		t.Error("a MAC two machines claim names a Machine")
	}
	mustDo(t, inv.Delete(toolscache.DeletedFinalStateUnknown{Key: "farm/rack1-m3", Obj: m3}))
	if l, ok := inv.Lookup(hw("52:54:00:00:01:01")); !ok || l.Hostname != "m1" {
		t.Errorf("after the conflict: %v %+v", ok, l)
	}

	// A relist without m2 drops it.
	mustDo(t, inv.Replace([]any{m1.DeepCopy()}, "20"))
	if _, ok := inv.ByIP("10.28.0.12"); ok {
		t.Error("m2 survived a list without it")
	}
	if _, ok := inv.ByIP("10.99.0.12"); ok {
		t.Error("m2's new address survived a list without it")
	}
	if m, ok := inv.ByIP("10.28.0.11"); !ok || m.Name != "rack1-m1" {
		t.Errorf("ByIP: %v %+v", ok, m)
	}
	if uid, ok := inv.UID("farm", "rack1-m1"); !ok || uid != "uid-m1" {
		t.Errorf("UID = %q %v", uid, ok)
	}

	// Deleting the pool withdraws its machines' leases, not the Machines.
	inv.removePool(toolscache.DeletedFinalStateUnknown{Key: "farm/rack1", Obj: testPool("3")})
	if _, ok := inv.Lookup(hw("52:54:00:00:01:01")); ok {
		t.Error("a lease outlived its pool")
	}
	if _, ok := inv.Machine(types.NamespacedName{Namespace: "farm", Name: "rack1-m1"}); !ok {
		t.Error("the Machine went with its pool")
	}
	if n := inv.Machines(); n != 1 {
		t.Errorf("Machines = %d, want 1", n)
	}
}

// TestLookupAllocatesOneLease: the DHCP path pays one lease and its
// machine key per lookup, nothing per stored machine.
func TestLookupAllocatesOneLease(t *testing.T) {
	inv := newInventory(testr.New(t))
	inv.setPool(testPool("1"))
	mustDo(t, inv.Add(testMachine("m1", "10.28.0.11", "52:54:00:00:00:01")))
	mac := hw("52:54:00:00:00:01")
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := inv.Lookup(mac); !ok {
			t.Fatal("no lease")
		}
	})
	if allocs > 2 {
		t.Errorf("%.0f allocations per lookup, want at most 2 (the lease, its machine key)", allocs)
	}
	unknown := hw("52:54:00:00:00:09")
	if allocs := testing.AllocsPerRun(100, func() { inv.Lookup(unknown) }); allocs != 0 {
		t.Errorf("an unknown MAC costs %.0f allocations", allocs)
	}
}

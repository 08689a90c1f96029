package nodepool_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// netSeq hands each pool of these tests a network of its own (10.<n>.0.0/16,
// MACs 02:<n>:...), so that a test run again (-count) meets no address an
// earlier run left claimed.
var netSeq = 100

func nextNet(t *testing.T) int {
	t.Helper()
	if netSeq > 250 {
		t.Fatal("out of test networks; run fewer times")
	}
	netSeq++
	return netSeq - 1
}

// smallPool is a pool of the named entries in a namespace of its own, on
// 10.<net>.0.0/16, with the addresses the caller gives.
func smallPool(t *testing.T, net int, entries ...v1alpha1.MachineEntry) *v1alpha1.NodePool {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "claims-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "workers"},
		Spec: v1alpha1.NodePoolSpec{Cluster: "cluster1", BootImage: "np-claims",
			Network: v1alpha1.BootNetwork{Subnet: fmt.Sprintf("10.%d.0.0/16", net)}, Machines: entries},
	}
}

func entry(name, ip string, macs ...string) v1alpha1.MachineEntry {
	return v1alpha1.MachineEntry{Name: name, IP: ip, MACs: macs}
}

// machinesWith lists the Machines, in every namespace, that use the address.
func machinesWith(ctx context.Context, kind v1alpha1.AddressKind, addr string) ([]string, error) {
	list := &v1alpha1.MachineList{}
	if err := env.Client.List(ctx, list); err != nil {
		return nil, err
	}
	var out []string
	for _, m := range list.Items {
		if kind == v1alpha1.AddressMAC && slices.Contains(m.Spec.MACs, addr) || kind == v1alpha1.AddressIPv4 && m.Spec.IP == addr {
			out = append(out, m.Namespace+"/"+m.Name)
		}
	}
	return out, nil
}

func claimOf(ctx context.Context, kind v1alpha1.AddressKind, addr string) (*v1alpha1.AddressClaim, error) {
	c := &v1alpha1.AddressClaim{}
	err := env.Client.Get(ctx, client.ObjectKey{Name: v1alpha1.AddressClaimName(kind, addr)}, c)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return c, err
}

// TestConcurrentPoolsShareAnAddress creates two pools at one instant (a
// start barrier) with one address in common, in rounds. The NodePool
// webhook answers from a cache, so both can be admitted; whichever way it
// goes, exactly one Machine ends up with the address, the one its claim
// names, and the other pool either was refused or reports the conflict
// naming the address and the winner, with its other entries applied.
func TestConcurrentPoolsShareAnAddress(t *testing.T) {
	const rounds = 3
	for _, kind := range []v1alpha1.AddressKind{v1alpha1.AddressMAC, v1alpha1.AddressIPv4} {
		t.Run(string(kind), func(t *testing.T) {
			raced := 0
			for range rounds {
				net := nextNet(t)
				mac := func(pool, i int) string { return fmt.Sprintf("02:%02x:%02x:00:00:%02x", net, pool, i) }
				ip := func(pool, i int) string { return fmt.Sprintf("10.%d.%d.%d", net, pool, i) }
				a := smallPool(t, net, entry("m1", ip(1, 1), mac(1, 1)), entry("m2", ip(1, 2), mac(1, 2)))
				b := smallPool(t, net, entry("m1", ip(2, 1), mac(2, 1)), entry("m2", ip(2, 2), mac(2, 2)))
				shared := mac(1, 1)
				if kind == v1alpha1.AddressMAC {
					b.Spec.Machines[0].MACs = []string{shared}
				} else {
					shared = ip(1, 1)
					b.Spec.Machines[0].IP = shared
				}
				if raceOnce(t, kind, shared, a, b) {
					raced++
				}
			}
			// Both paths are correct; the log says which one the rounds took.
			t.Logf("%d of %d rounds had both pools admitted and the claim decide", raced, rounds)
		})
	}
}

// raceOnce creates a and b at once and checks the outcome; it tells whether
// both were admitted.
func raceOnce(t *testing.T, kind v1alpha1.AddressKind, shared string, a, b *v1alpha1.NodePool) bool {
	t.Helper()
	ctx := context.Background()
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, p := range []*v1alpha1.NodePool{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = env.Client.Create(ctx, p)
		}()
	}
	close(start)
	wg.Wait()
	var admitted []*v1alpha1.NodePool
	for i, p := range []*v1alpha1.NodePool{a, b} {
		switch {
		case errs[i] == nil:
			admitted = append(admitted, p)
		case strings.Contains(errs[i].Error(), "already used by"):
			// The NodePool webhook's cache had seen the other pool.
		default:
			t.Fatalf("creating pool %s/%s: %v", p.Namespace, p.Name, errs[i])
		}
	}
	if len(admitted) == 0 {
		t.Fatal("both pools were refused; one must get in")
	}

	// Every admitted pool settles: its AddressesClaimed condition is
	// written for its generation.
	conds := map[*v1alpha1.NodePool]*metav1.Condition{}
	for _, p := range admitted {
		eventually(t, "pool "+p.Namespace+" reports AddressesClaimed", func(ctx context.Context) (bool, error) {
			_, c, err := poolCondition(ctx, p, v1alpha1.ConditionAddressesClaimed)
			conds[p] = c
			return c != nil, err
		})
	}
	claim, err := claimOf(ctx, kind, shared)
	if err != nil || claim == nil {
		t.Fatalf("the claim of %s %s: %v, %v", kind, shared, claim, err)
	}
	winner := claim.Spec.Holder
	var winnerPool *v1alpha1.NodePool
	for _, p := range admitted {
		if p.Namespace == winner.Namespace {
			winnerPool = p
		}
	}
	if winnerPool == nil {
		t.Fatalf("the claim of %s %s names %s, not an admitted pool", kind, shared, winner)
	}
	eventually(t, "exactly the winner's Machine has "+shared, func(ctx context.Context) (bool, error) {
		got, err := machinesWith(ctx, kind, shared)
		return slices.Equal(got, []string{winner.Namespace + "/" + winner.Machine}), err
	})
	for _, p := range admitted {
		c := conds[p]
		if p == winnerPool {
			if c.Status != metav1.ConditionTrue {
				t.Errorf("the winner %s reports %s=%s %s: %s", p.Namespace, c.Type, c.Status, c.Reason, c.Message)
			}
			continue
		}
		want := fmt.Sprintf("%s %s of workers-m1 is held by %s", kind, shared, winner)
		if c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonAddressConflict || !strings.Contains(c.Message, want) {
			t.Errorf("the loser %s reports %s=%s %s: %q; want AddressConflict naming %q", p.Namespace, c.Type, c.Status, c.Reason, c.Message, want)
		}
		// Its entry without a conflict is applied all the same.
		eventually(t, "the loser's other entry is a Machine", func(ctx context.Context) (bool, error) {
			got, err := machines(ctx, p)
			_, m1 := got["workers-m1"]
			_, m2 := got["workers-m2"]
			return err == nil && m2 && !m1, err
		})
	}
	return len(admitted) == 2
}

// TestAddressHeldElsewhere: a pool whose entry needs an address claimed for
// another Machine (here by hand, which the NodePool webhook cannot see, so
// the conflict reaches the controller every time) leaves that entry's
// Machine uncreated, says so in a condition and a Warning event naming the
// address and the holder, and creates it once the claim is released.
func TestAddressHeldElsewhere(t *testing.T) {
	ctx := context.Background()
	n := nextNet(t)
	mac := fmt.Sprintf("02:%02x:00:00:00:01", n)
	pool := smallPool(t, n, entry("m1", fmt.Sprintf("10.%d.0.1", n), mac), entry("m2", fmt.Sprintf("10.%d.0.2", n), fmt.Sprintf("02:%02x:00:00:00:02", n)))
	// With its BootImage present, the conflict is what holds Ready back.
	pool.Spec.BootImage = bootImage(t, fmt.Sprintf("np-claims-held-%d", n), "e").Name
	hand := &v1alpha1.AddressClaim{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AddressClaimName(v1alpha1.AddressMAC, mac)},
		Spec: v1alpha1.AddressClaimSpec{Kind: v1alpha1.AddressMAC, Address: mac,
			Holder: v1alpha1.AddressHolder{Namespace: "lab", Pool: "bench", Machine: "bench-x"}},
	}
	if err := env.Client.Create(ctx, hand); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	want := "MAC " + mac + " of workers-m1 is held by Machine lab/bench-x of NodePool bench"
	eventually(t, "AddressesClaimed=False and Ready=False, naming the MAC and its holder", func(ctx context.Context) (bool, error) {
		_, c, err := poolCondition(ctx, pool, v1alpha1.ConditionAddressesClaimed)
		if err != nil || c == nil || c.Reason != v1alpha1.ReasonAddressConflict || !strings.Contains(c.Message, want) {
			return false, err
		}
		_, r, err := poolCondition(ctx, pool, v1alpha1.ConditionReady)
		return r != nil && r.Status == metav1.ConditionFalse && r.Reason == v1alpha1.ReasonAddressConflict, err
	})
	eventually(t, "a Warning event naming the MAC and its holder", func(ctx context.Context) (bool, error) {
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(pool.Namespace)); err != nil {
			return false, err
		}
		return slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && e.Reason == v1alpha1.ConditionAddressesClaimed+v1alpha1.ReasonAddressConflict &&
				strings.Contains(e.Message, want)
		}), nil
	})
	got, err := machines(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["workers-m1"]; ok {
		t.Error("the Machine of the entry whose MAC is held elsewhere was created")
	}
	if _, ok := got["workers-m2"]; !ok {
		t.Error("the entry without a conflict was not applied")
	}
	// The claim made by hand is not the controller's to free.
	if c, err := claimOf(ctx, v1alpha1.AddressMAC, mac); err != nil || c == nil || c.UID != hand.UID {
		t.Fatalf("the claim made by hand was touched: %v, %v", c, err)
	}
	// Its holder lets go: the claim's deletion wakes the pool.
	if err := env.Client.Delete(ctx, hand); err != nil {
		t.Fatal(err)
	}
	eventually(t, "workers-m1 created and every address claimed", func(ctx context.Context) (bool, error) {
		got, err := machines(ctx, pool)
		if _, ok := got["workers-m1"]; err != nil || !ok {
			return false, err
		}
		_, c, err := poolCondition(ctx, pool, v1alpha1.ConditionAddressesClaimed)
		return c != nil && c.Status == metav1.ConditionTrue, err
	})
}

// TestClaimsFollowThePool: an entry's claims name its Machine, move with a
// new address (the old one freed once the Machine no longer uses it), and
// are all freed after the pool is deleted, once its Machines are gone; a
// pool elsewhere can then take the addresses.
func TestClaimsFollowThePool(t *testing.T) {
	ctx := context.Background()
	n := nextNet(t)
	ip := func(last int) string { return fmt.Sprintf("10.%d.0.%d", n, last) }
	mac := func(last int) string { return fmt.Sprintf("02:%02x:00:00:00:%02x", n, last) }
	pool := smallPool(t, n, entry("m1", ip(1), mac(1)), entry("m2", ip(2), mac(2)))
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	holder := v1alpha1.AddressHolder{Namespace: pool.Namespace, Pool: "workers", Machine: "workers-m1"}
	eventually(t, "workers-m1 exists and its claims name it", func(ctx context.Context) (bool, error) {
		got, err := machines(ctx, pool)
		if _, ok := got["workers-m1"]; err != nil || !ok {
			return false, err
		}
		mc, err := claimOf(ctx, v1alpha1.AddressMAC, mac(1))
		if err != nil || mc == nil {
			return false, err
		}
		ic, err := claimOf(ctx, v1alpha1.AddressIPv4, ip(1))
		return ic != nil && mc.Spec.Holder == holder && ic.Spec.Holder == holder, err
	})

	patchPool(t, pool, func(p *v1alpha1.NodePool) { p.Spec.Machines[0].IP = ip(9) })
	eventually(t, "workers-m1 moved to its new IP, which is claimed, and the old one freed", func(ctx context.Context) (bool, error) {
		got, err := machines(ctx, pool)
		if err != nil || got["workers-m1"].Spec.IP != ip(9) {
			return false, err
		}
		old, err := claimOf(ctx, v1alpha1.AddressIPv4, ip(1))
		if err != nil || old != nil {
			return false, err
		}
		c, err := claimOf(ctx, v1alpha1.AddressIPv4, ip(9))
		return c != nil && c.Spec.Holder == holder, err
	})

	// The test API server runs no garbage collector: the test deletes the
	// pool's Machines after the pool, as the collector would, one at a
	// time. The pass that frees the first Machine's claims also sees the
	// second's, and must keep them while that Machine exists.
	if err := env.Client.Delete(ctx, pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool is gone", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(pool), &v1alpha1.NodePool{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	type address struct {
		kind v1alpha1.AddressKind
		addr string
	}
	gone := func(ctx context.Context, addrs ...address) (bool, error) {
		for _, a := range addrs {
			if c, err := claimOf(ctx, a.kind, a.addr); err != nil || c != nil {
				return false, err
			}
		}
		return true, nil
	}
	deleteMachine := func(name string) {
		m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: pool.Namespace, Name: name}}
		if err := env.Client.Delete(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	first := []address{{v1alpha1.AddressMAC, mac(1)}, {v1alpha1.AddressIPv4, ip(9)}}
	second := []address{{v1alpha1.AddressMAC, mac(2)}, {v1alpha1.AddressIPv4, ip(2)}}
	deleteMachine("workers-m1")
	eventually(t, "workers-m1's claims freed once it is gone", func(ctx context.Context) (bool, error) { return gone(ctx, first...) })
	for _, a := range second {
		if c, err := claimOf(ctx, a.kind, a.addr); err != nil || c == nil {
			t.Fatalf("the claim of %s %s was freed while workers-m2 still uses it (%v)", a.kind, a.addr, err)
		}
	}
	deleteMachine("workers-m2")
	eventually(t, "workers-m2's claims freed once it is gone", func(ctx context.Context) (bool, error) { return gone(ctx, second...) })

	again := smallPool(t, n, entry("n1", ip(9), mac(1)))
	if err := env.Client.Create(ctx, again); err != nil {
		t.Fatalf("a pool taking the freed addresses was refused: %v", err)
	}
	eventually(t, "the new pool's Machine has the freed addresses", func(ctx context.Context) (bool, error) {
		got, err := machinesWith(ctx, v1alpha1.AddressMAC, mac(1))
		return slices.Equal(got, []string{again.Namespace + "/workers-n1"}), err
	})
}

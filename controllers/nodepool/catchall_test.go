package nodepool_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// catchAllPool is the example pool on 10.<subnet>.0.0/16 with a catch-all
// range 10.<subnet>.72.10-20 whose unknown machines do as policy says.
func catchAllPool(t *testing.T, subnet int, policy v1alpha1.UnknownMachinePolicy) *v1alpha1.NodePool {
	t.Helper()
	pool := example(t, subnet)
	pool.Spec.Network.DynamicRange = &v1alpha1.DynamicRange{
		Start: fmt.Sprintf("10.%d.72.10", subnet), End: fmt.Sprintf("10.%d.72.20", subnet), UnknownMachines: policy,
	}
	pool.Spec.Network.LeaseTime = &metav1.Duration{Duration: time.Hour}
	return pool
}

// lease writes the DHCPLease kubefarm-pxe writes for mac on ip: after the
// REQUEST (acked) boundTime is set, after a bare OFFER it is absent. Both
// expire an hour away: an offer's hold is a minute, but only boundTime may
// tell the two apart (an offer written by a clock an hour ahead must make
// no Machine either).
func lease(t *testing.T, pool *v1alpha1.NodePool, mac, ip string, acked bool) *v1alpha1.DHCPLease {
	t.Helper()
	l := &v1alpha1.DHCPLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: pool.Namespace, Name: pool.Name + "-" + ip},
		Spec:       v1alpha1.DHCPLeaseSpec{Pool: pool.Name, MAC: mac, IP: ip, ExpireTime: metav1.NewTime(time.Now().Add(time.Hour))},
	}
	if acked {
		now := metav1.Now()
		l.Spec.BoundTime = &now
	}
	if err := env.Client.Create(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	return l
}

// reconciled waits until the controller has seen the pool's latest spec:
// a pass happened after everything done before it.
func reconciled(t *testing.T, pool *v1alpha1.NodePool) {
	t.Helper()
	eventually(t, "the pool's status observes its generation", func(ctx context.Context) (bool, error) {
		got := &v1alpha1.NodePool{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pool), got); err != nil {
			return false, err
		}
		return got.Status.ObservedGeneration == got.Generation, nil
	})
}

// bump changes the pool's spec (a kernel argument) so that a pass runs
// after whatever the test did last.
func bump(t *testing.T, pool *v1alpha1.NodePool, arg string) {
	t.Helper()
	patchPool(t, pool, func(p *v1alpha1.NodePool) { p.Spec.KernelArgs = append(p.Spec.KernelArgs, arg) })
	reconciled(t, pool)
}

func catchAllMachines(ctx context.Context, pool *v1alpha1.NodePool) (map[string]v1alpha1.Machine, error) {
	all, err := machines(ctx, pool)
	if err != nil {
		return nil, err
	}
	for name, m := range all {
		if m.Labels[v1alpha1.LabelCatchAll] == "" {
			delete(all, name)
		}
	}
	return all, nil
}

func TestCatchAllPoolJoinsUnknownMachines(t *testing.T) {
	ctx := context.Background()
	img := bootImage(t, "np-catchall-a", "c")
	pool := catchAllPool(t, 57, v1alpha1.UnknownJoin)
	pool.Spec.BootImage = img.Name
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	servedMachines(t, pool, 3)

	const mac = "52:54:00:39:00:01"
	acked := lease(t, pool, mac, "10.57.72.14", true)
	const name = "workers-52-54-00-39-00-01"
	var m v1alpha1.Machine
	eventually(t, "the catch-all Machine of the acknowledged lease", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: name}, &m)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if m.Spec.Hostname != "52-54-00-39-00-01" || m.Spec.IP != "10.57.72.14" || !slices.Equal(m.Spec.MACs, []string{mac}) ||
		m.Spec.DesiredImage != img.Name || m.Spec.Power != nil || !slices.Equal(m.Spec.Tags, []string{"all"}) {
		t.Errorf("catch-all Machine spec %+v", m.Spec)
	}
	if m.Labels[v1alpha1.LabelCatchAll] != "true" || m.Labels[v1alpha1.LabelPool] != pool.Name {
		t.Errorf("labels %v", m.Labels)
	}
	if ref := metav1.GetControllerOf(&m); ref == nil || string(ref.UID) != poolUID(t, pool) {
		t.Errorf("controller %+v, want the pool", ref)
	}
	claim := &v1alpha1.AddressClaim{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: v1alpha1.AddressClaimName(v1alpha1.AddressIPv4, "10.57.72.14")}, claim); err != nil ||
		claim.Spec.Holder.Machine != name {
		t.Errorf("IP claim %+v, %v: want it held by %s", claim.Spec, err, name)
	}

	// A bare offer (another MAC) makes none.
	lease(t, pool, "52:54:00:39:00:02", "10.57.72.15", false)
	// A pass of the pool keeps the Machine (it is in no entry).
	bump(t, pool, "catchall.pass=1")
	got, err := catchAllMachines(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[name].DeletionTimestamp != nil {
		t.Fatalf("catch-all Machines after a pass: %v", keysOf(got))
	}
	if st := poolStatus(t, pool); st.Machines != 4 {
		t.Errorf("status.machines %d, want the 3 entries and the catch-all one", st.Machines)
	}

	// A new image: desiredImage moves, name and address stay.
	img2 := bootImage(t, "np-catchall-b", "d")
	patchPool(t, pool, func(p *v1alpha1.NodePool) { p.Spec.BootImage = img2.Name })
	reconciled(t, pool)
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: name}, &m); err != nil {
		t.Fatal(err)
	}
	if m.Spec.DesiredImage != img2.Name || m.Spec.IP != "10.57.72.14" || m.Spec.Hostname != "52-54-00-39-00-01" {
		t.Errorf("after the image change: %+v", m.Spec)
	}

	// The lease goes (it lapsed and was taken, or released): the Machine
	// stays, with its address.
	if err := env.Client.Delete(ctx, acked); err != nil {
		t.Fatal(err)
	}
	bump(t, pool, "catchall.pass=2")
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: name}, &m); err != nil || m.DeletionTimestamp != nil {
		t.Fatalf("the catch-all Machine after its lease went: %v, deleting %v", err, m.DeletionTimestamp)
	}

	// Enrolled under another name: the entry takes the MAC, the catch-all
	// Machine is retired and the entry's made once the claims are free.
	patchPool(t, pool, func(p *v1alpha1.NodePool) {
		p.Spec.Machines = append(p.Spec.Machines, v1alpha1.MachineEntry{Name: "m9", MACs: []string{mac}, IP: "10.57.0.99"})
	})
	eventually(t, "the entry's Machine replaces the catch-all one", func(ctx context.Context) (bool, error) {
		all, err := machines(ctx, pool)
		if err != nil {
			return false, err
		}
		_, still := all[name]
		entry, ok := all["workers-m9"]
		return !still && ok && slices.Equal(entry.Spec.MACs, []string{mac}), nil
	})
}

func TestHoldPoolMakesNoMachines(t *testing.T) {
	ctx := context.Background()
	pool := catchAllPool(t, 58, v1alpha1.UnknownHold)
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	reconciled(t, pool)
	lease(t, pool, "52:54:00:3a:00:01", "10.58.72.14", true)
	bump(t, pool, "hold.pass=1")
	got, err := catchAllMachines(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("a Hold pool made Machines %v", keysOf(got))
	}
	// Join now: the same lease joins.
	patchPool(t, pool, func(p *v1alpha1.NodePool) { p.Spec.Network.DynamicRange.UnknownMachines = v1alpha1.UnknownJoin })
	eventually(t, "the lease joins once the pool says Join", func(ctx context.Context) (bool, error) {
		got, err := catchAllMachines(ctx, pool)
		return len(got) == 1, err
	})
}

func TestDiscoveredMachineGoesOnceEnrolled(t *testing.T) {
	ctx := context.Background()
	dm := func(mac string) *v1alpha1.DiscoveredMachine {
		d := &v1alpha1.DiscoveredMachine{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DiscoveredMachineName(mac)},
			Spec:       v1alpha1.DiscoveredMachineSpec{MAC: mac, IP: "10.59.72.14", LastSeen: metav1.Now()},
		}
		if err := env.Client.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), d) })
		return d
	}
	enrolled := dm("52:54:00:3b:00:01")
	other := dm("52:54:00:3b:00:02")

	pool := example(t, 59)
	pool.Spec.Machines = append(pool.Spec.Machines, v1alpha1.MachineEntry{Name: "found", MACs: []string{enrolled.Spec.MAC}, IP: "10.59.0.50"})
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the enrolled MAC's DiscoveredMachine is deleted", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(enrolled), &v1alpha1.DiscoveredMachine{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	// The pool's Machines all exist by now (the enrolled one did): the
	// other discovered machine, whose MAC none has, stays.
	reconciled(t, pool)
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(other), &v1alpha1.DiscoveredMachine{}); err != nil {
		t.Errorf("the DiscoveredMachine of a MAC no Machine has: %v", err)
	}
}

func poolStatus(t *testing.T, pool *v1alpha1.NodePool) v1alpha1.NodePoolStatus {
	t.Helper()
	got := &v1alpha1.NodePool{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pool), got); err != nil {
		t.Fatal(err)
	}
	return got.Status
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

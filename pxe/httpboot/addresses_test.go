package httpboot

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func addrMachine(ns, name, ip string, macs ...string) *kubefarmv1.Machine {
	return &kubefarmv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kubefarmv1.MachineSpec{MACs: macs, IP: ip}}
}

// TestAddressIndex follows the informer's calls (add, update as remove of
// the old object then add of the new, delete) and checks who owns each
// address after each step: one owner serves, several (a conflict passing
// through) serve none, and nothing stays behind once a machine is gone.
func TestAddressIndex(t *testing.T) {
	a := types.NamespacedName{Namespace: "t1", Name: "a"}
	b := types.NamespacedName{Namespace: "t2", Name: "b"}
	x := newAddressIndex()
	ma := addrMachine("t1", "a", "10.0.0.1", "02:00:00:00:00:01", "02:00:00:00:00:02")
	mb := addrMachine("t2", "b", "10.0.0.1", "02:00:00:00:00:03")
	x.add(ma)
	x.add(mb)
	x.add(ma) // a resync delivers an object again: no second entry

	check := func(step string, mac string, ip string, wantMAC, wantIP []types.NamespacedName) {
		t.Helper()
		if got := x.ownersOfMAC(mac); !slices.Equal(got, wantMAC) {
			t.Errorf("%s: owners of MAC %s = %v, want %v", step, mac, got, wantMAC)
		}
		if ip != "" {
			if got := x.ownersOfIP(ip); !slices.Equal(got, wantIP) {
				t.Errorf("%s: owners of IP %s = %v, want %v", step, ip, got, wantIP)
			}
		}
	}
	check("added", "02:00:00:00:00:02", "10.0.0.1", []types.NamespacedName{a}, []types.NamespacedName{a, b})
	check("added", "02:00:00:00:00:03", "", []types.NamespacedName{b}, nil)

	// b moves to another address and takes one of a's MACs.
	mb2 := addrMachine("t2", "b", "10.0.0.2", "02:00:00:00:00:02")
	x.remove(mb)
	x.add(mb2)
	check("updated", "02:00:00:00:00:02", "10.0.0.1", []types.NamespacedName{a, b}, []types.NamespacedName{a})
	check("updated", "02:00:00:00:00:03", "10.0.0.2", nil, []types.NamespacedName{b})

	// A third claimant, then the first one leaves: the other two remain in
	// conflict; once one of them leaves too, the last one owns it alone.
	mc := addrMachine("t3", "c", "10.0.0.3", "02:00:00:00:00:02")
	c := types.NamespacedName{Namespace: "t3", Name: "c"}
	x.add(mc)
	check("three claimants", "02:00:00:00:00:02", "", []types.NamespacedName{a, b, c}, nil)
	x.remove(ma)
	check("two left", "02:00:00:00:00:02", "10.0.0.1", []types.NamespacedName{b, c}, nil)
	x.remove(mc)
	check("one left", "02:00:00:00:00:02", "10.0.0.3", []types.NamespacedName{b}, nil)
	x.remove(mb2)
	x.remove(nil) // a tombstone without an object: nothing to do
	if x.byMAC.len() != 0 || x.byIP.len() != 0 {
		t.Errorf("after deleting every machine the index still holds %d MACs and %d IPs", x.byMAC.len(), x.byIP.len())
	}

	// owners returns a copy: the caller cannot corrupt the index.
	x.add(ma)
	got := x.ownersOfMAC("02:00:00:00:00:01")
	got[0].Name = "changed"
	check("after a caller changed its copy", "02:00:00:00:00:01", "", []types.NamespacedName{a}, nil)
}

// TestSameAddresses: an update that keeps the Machine's MACs and IP
// (a status write) skips the index; any change of address does not.
func TestSameAddresses(t *testing.T) {
	m := addrMachine("t1", "a", "10.0.0.1", "02:00:00:00:00:01")
	for _, tc := range []struct {
		name string
		b    *kubefarmv1.Machine
		want bool
	}{
		{"status only", func() *kubefarmv1.Machine {
			c := m.DeepCopy()
			c.Status.Conditions = nil
			c.ResourceVersion = "9"
			return c
		}(), true},
		{"IP changed", addrMachine("t1", "a", "10.0.0.2", "02:00:00:00:00:01"), false},
		{"MAC added", addrMachine("t1", "a", "10.0.0.1", "02:00:00:00:00:01", "02:00:00:00:00:02"), false},
		{"MAC changed", addrMachine("t1", "a", "10.0.0.1", "02:00:00:00:00:09"), false},
		{"another machine", addrMachine("t1", "b", "10.0.0.1", "02:00:00:00:00:01"), false},
		{"tombstone without an object", nil, false},
	} {
		if got := sameAddresses(m, tc.b); got != tc.want {
			t.Errorf("%s: sameAddresses = %v, want %v", tc.name, got, tc.want)
		}
	}
}

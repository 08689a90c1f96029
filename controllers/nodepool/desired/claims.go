package desired

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Claims are the AddressClaims a Machine needs before it may exist: one per
// MAC, in the Machine's order, then one for its IP, each naming the Machine
// as holder. The NodePool controller creates them before it creates or
// readdresses the Machine; the Machine admission webhook refuses the
// Machine until they exist.
//
// They carry no owner reference: a claim is cluster-scoped and its holder
// namespaced, which garbage collection does not follow. Releasing them is
// the NodePool controller's (Unwanted, then a check that the Machine no
// longer uses the address).
func Claims(m *kubefarmv1.Machine) []*kubefarmv1.AddressClaim {
	holder := kubefarmv1.HolderOf(m)
	out := make([]*kubefarmv1.AddressClaim, 0, len(m.Spec.MACs)+1)
	add := func(kind kubefarmv1.AddressKind, addr string) {
		out = append(out, &kubefarmv1.AddressClaim{
			TypeMeta: metav1.TypeMeta{APIVersion: kubefarmv1.GroupVersion.String(), Kind: "AddressClaim"},
			ObjectMeta: metav1.ObjectMeta{
				Name:   kubefarmv1.AddressClaimName(kind, addr),
				Labels: map[string]string{LabelManagedBy: ManagedBy},
			},
			Spec: kubefarmv1.AddressClaimSpec{Kind: kind, Address: addr, Holder: holder},
		})
	}
	for _, mac := range m.Spec.MACs {
		add(kubefarmv1.AddressMAC, mac)
	}
	add(kubefarmv1.AddressIPv4, m.Spec.IP)
	return out
}

// Unwanted are the claims, among held (a pool's claims), that the NodePool
// controller made (LabelManagedBy) and no desired Machine of the pool
// needs: same address, same holder. A claim on this list may still be in
// use, by a Machine whose deletion or readdressing has not happened yet
// (see Uses); it is freed only once it is not.
//
// A claim made by hand, for a Machine made by hand, is never on the list:
// it is made before its Machine, so "its Machine does not exist" cannot
// tell it from a claim left over; whoever made it deletes it.
func Unwanted(held []kubefarmv1.AddressClaim, desired []*kubefarmv1.Machine) []*kubefarmv1.AddressClaim {
	wanted := map[string]kubefarmv1.AddressHolder{}
	for _, m := range desired {
		for _, c := range Claims(m) {
			wanted[c.Name] = c.Spec.Holder
		}
	}
	var out []*kubefarmv1.AddressClaim
	for i := range held {
		c := &held[i]
		if c.Labels[LabelManagedBy] != ManagedBy {
			continue
		}
		if h, ok := wanted[c.Name]; ok && h == c.Spec.Holder {
			continue
		}
		out = append(out, c)
	}
	return out
}

// Uses tells whether the Machine m (nil when it does not exist) is the
// claim's holder and lists its address: while it does, releasing the claim
// would let another Machine take an address that is still served.
func Uses(m *kubefarmv1.Machine, c *kubefarmv1.AddressClaim) bool {
	if m == nil || kubefarmv1.HolderOf(m) != c.Spec.Holder {
		return false
	}
	switch c.Spec.Kind {
	case kubefarmv1.AddressMAC:
		return slices.Contains(m.Spec.MACs, c.Spec.Address)
	case kubefarmv1.AddressIPv4:
		return m.Spec.IP == c.Spec.Address
	}
	// A kind this code does not know: keep the claim rather than free an
	// address it cannot judge.
	return true
}

package nodepool

import (
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation/field"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// MaxDynamicRange is the largest catch-all range a pool may have: a /16.
const MaxDynamicRange = 65536

// maxPoolNameWithRange keeps a DHCPLease's name, <pool>-a-b-c-d, within the
// 253 characters of an object name (the address part takes up to 16).
const maxPoolNameWithRange = 253 - len("-255-255-255-255")

// validateDynamicRange checks what the CRD's CEL rules cannot: start <= end
// and the size. The CRD has already checked that both are IPv4 addresses
// inside the subnet; unparsable values are left to it.
func validateDynamicRange(pool *kubefarmv1.NodePool) field.ErrorList {
	r := pool.Spec.Network.DynamicRange
	if r == nil {
		return nil
	}
	path := field.NewPath("spec", "network", "dynamicRange")
	var errs field.ErrorList
	if len(pool.Name) > maxPoolNameWithRange {
		errs = append(errs, field.Invalid(path, pool.Name,
			fmt.Sprintf("a pool with a dynamic range must have a name of at most %d characters (its leases are named <pool>-a-b-c-d)", maxPoolNameWithRange)))
	}
	start, err1 := netip.ParseAddr(r.Start)
	end, err2 := netip.ParseAddr(r.End)
	if err1 != nil || err2 != nil || !start.Is4() || !end.Is4() {
		return errs
	}
	s, e := u32(start), u32(end)
	switch {
	case e < s:
		errs = append(errs, field.Invalid(path.Child("end"), r.End, "must not be below spec.network.dynamicRange.start "+r.Start))
	case uint64(e)-uint64(s)+1 > MaxDynamicRange:
		errs = append(errs, field.Invalid(path.Child("end"), r.End,
			fmt.Sprintf("the range from %s holds %d addresses; at most %d are allowed", r.Start, uint64(e)-uint64(s)+1, MaxDynamicRange)))
	}
	return errs
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

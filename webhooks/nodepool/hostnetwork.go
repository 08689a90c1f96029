package nodepool

import (
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubefarm/kubefarm/agent/render"
	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/machineconfig"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// admissionMAC stands for a machine's boot MAC when a hostNetwork is checked
// without a machine: the links it names are checked, not the MAC.
const admissionMAC = "02:00:00:00:00:00"

// validateHostNetwork refuses at admission what kubefarm-agent would refuse
// at boot: the same networkd rendering runs on the pool's and each tag's
// hostNetwork (a link in two bonds, a VLAN on a bond member, a route or a
// node link on a link the network does not set up), and each listed
// machine's network is resolved from its IP (two tags with a hostNetwork,
// an address for a link the network lacks, a boot address an
// addressFromBoot rule cannot turn into an address).
func validateHostNetwork(pool *kubefarmv1.NodePool) field.ErrorList {
	var errs field.ErrorList
	check := func(path *field.Path, h *kubefarmv1.HostNetwork) {
		if h == nil {
			return
		}
		if _, err := render.Networkd(&nodeconfig.Network{HostNetwork: *h}, nodeconfig.BootLink, admissionMAC); err != nil {
			errs = append(errs, field.Invalid(path, field.OmitValueType{}, err.Error()))
		}
	}
	check(field.NewPath("spec", "hostNetwork"), pool.Spec.HostNetwork)
	names := make([]string, 0, len(pool.Spec.Tags))
	for name := range pool.Spec.Tags {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		check(field.NewPath("spec", "tags").Key(name).Child("hostNetwork"), pool.Spec.Tags[name].HostNetwork)
	}
	if len(errs) > 0 {
		// A broken network would fail every machine again below.
		return errs
	}
	for i := range pool.Spec.Machines {
		m := &pool.Spec.Machines[i]
		tags := nodeconfig.PoolTags(pool, machineconfig.Tags(pool, m.Tags))
		ip, err := netip.ParseAddr(m.IP)
		if err != nil {
			continue // the CRD refuses it
		}
		if _, err := nodeconfig.ResolveNetwork(pool.Spec.HostNetwork, tags, m, ip); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "machines").Index(i), m.Name, err.Error()))
		}
	}
	return errs
}

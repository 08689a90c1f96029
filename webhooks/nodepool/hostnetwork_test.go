package nodepool

import (
	"strings"
	"testing"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func TestValidateHostNetwork(t *testing.T) {
	bonded := &kubefarmv1.HostNetwork{
		Bonds: []kubefarmv1.Bond{{Name: "bond0", Members: []string{"boot", "eth1"}}},
		VLANs: []kubefarmv1.VLAN{{Name: "data", Link: "bond0", ID: 29, AddressFromBoot: "10.29.0.0/16"}},
	}
	jumbo := &kubefarmv1.HostNetwork{Links: []kubefarmv1.LinkSettings{{Match: "boot", MTU: 9000}}}
	for _, tc := range []struct {
		name   string
		edit   func(p *kubefarmv1.NodePool)
		path   string
		detail string
	}{
		{name: "a sound network", edit: func(*kubefarmv1.NodePool) {}},
		{name: "a link in two bonds", path: "spec.hostNetwork", detail: "eth1 is a member of bonds bond0 and bond1",
			edit: func(p *kubefarmv1.NodePool) {
				p.Spec.HostNetwork.Bonds = append(p.Spec.HostNetwork.Bonds, kubefarmv1.Bond{Name: "bond1", Members: []string{"eth1"}})
			}},
		{name: "a tag's network routes over a link it does not set up", path: "spec.tags[jumbo].hostNetwork", detail: "route to 10.1.0.0/16: link eth7 is not",
			edit: func(p *kubefarmv1.NodePool) {
				p.Spec.Tags["jumbo"].HostNetwork.Routes = []kubefarmv1.Route{{To: "10.1.0.0/16", Via: "10.28.0.1", Link: "eth7"}}
			}},
		{name: "a machine with two tags that have networks", path: "spec.machines[0]", detail: "tags jumbo and other both have a hostNetwork",
			edit: func(p *kubefarmv1.NodePool) {
				p.Spec.Tags["other"] = kubefarmv1.TagSpec{HostNetwork: jumbo.DeepCopy()}
				p.Spec.Machines[0].Tags = []string{"jumbo", "other"}
			}},
		{name: "a machine's address for a link its network lacks", path: "spec.machines[0]", detail: `has no bond or VLAN "storage"`,
			edit: func(p *kubefarmv1.NodePool) {
				p.Spec.Machines[0].Addresses = []kubefarmv1.MachineAddress{{Link: "storage", Address: "10.30.0.1/16"}}
			}},
		{name: "a machine whose IP an addressFromBoot rule cannot use", path: "spec.machines[0]", detail: "host part all zeros or all ones",
			edit: func(p *kubefarmv1.NodePool) {
				p.Spec.HostNetwork.VLANs[0].AddressFromBoot = "10.29.0.0/24"
				p.Spec.Machines[0].IP = "10.28.1.255"
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := &kubefarmv1.NodePool{}
			pool.Name = "workers"
			pool.Spec.HostNetwork = bonded.DeepCopy()
			pool.Spec.Tags = map[string]kubefarmv1.TagSpec{"jumbo": {HostNetwork: jumbo.DeepCopy()}}
			pool.Spec.Machines = []kubefarmv1.MachineEntry{{Name: "m1", MACs: []string{"52:54:00:00:00:01"}, IP: "10.28.3.4"}}
			tc.edit(pool)
			errs := validateHostNetwork(pool)
			if tc.detail == "" {
				if len(errs) != 0 {
					t.Fatalf("rejected: %v", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != tc.path || !strings.Contains(errs[0].Detail, tc.detail) {
				t.Fatalf("errors %v, want one on %s saying %q", errs, tc.path, tc.detail)
			}
		})
	}
}

package nodeconfig

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func TestAddressFromBoot(t *testing.T) {
	for _, tc := range []struct {
		subnet, boot, want, err string
	}{
		{"10.29.0.0/16", "10.28.3.4", "10.29.3.4/16", ""},
		{"10.29.0.0/24", "10.28.3.4", "10.29.0.4/24", ""},
		{"192.168.0.0/20", "10.28.19.4", "192.168.3.4/20", ""},
		{"10.29.0.0/16", "10.28.0.0", "", "all zeros or all ones"},
		{"10.29.0.0/16", "10.28.255.255", "", "all zeros or all ones"},
		{"10.29.0.0/31", "10.28.3.4", "", "no host part"},
		{"10.29.1.0/16", "10.28.3.4", "", "host bits zero"},
		{"fd00::/64", "10.28.3.4", "", "IPv4 subnet"},
		{"10.29.0.0/16", "fd00::1", "", "not IPv4"},
	} {
		got, err := AddressFromBoot(tc.subnet, netip.MustParseAddr(tc.boot))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("AddressFromBoot(%s, %s) = %v, %v; want an error with %q", tc.subnet, tc.boot, got, err, tc.err)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("AddressFromBoot(%s, %s) = %v, %v; want %s", tc.subnet, tc.boot, got, err, tc.want)
		}
	}
}

func TestResolveNetwork(t *testing.T) {
	pool := &kubefarmv1.HostNetwork{
		Bonds: []kubefarmv1.Bond{{Name: "bond0", Members: []string{"boot", "eth1"}}},
		VLANs: []kubefarmv1.VLAN{{Name: "data", Link: "bond0", ID: 29, AddressFromBoot: "10.29.0.0/16"}},
	}
	jumbo := kubefarmv1.TagSpec{HostNetwork: &kubefarmv1.HostNetwork{Links: []kubefarmv1.LinkSettings{{Match: "boot", MTU: 9000}}}}
	boot := netip.MustParseAddr("10.28.3.4")
	for _, tc := range []struct {
		name  string
		pool  *kubefarmv1.HostNetwork
		tags  []NamedTag
		entry *kubefarmv1.MachineEntry
		want  *Network
		err   string
	}{
		{name: "no hostNetwork anywhere", want: nil},
		{name: "the pool's rule", pool: pool,
			want: &Network{HostNetwork: *pool, Addresses: map[string][]string{"data": {"10.29.3.4/16"}}}},
		{name: "the machine's own address wins", pool: pool,
			entry: &kubefarmv1.MachineEntry{Name: "m1", Addresses: []kubefarmv1.MachineAddress{{Link: "data", Address: "10.29.99.1/16"}}},
			want:  &Network{HostNetwork: *pool, Addresses: map[string][]string{"data": {"10.29.99.1/16"}}}},
		{name: "a tag's replaces the pool's", pool: pool, tags: []NamedTag{{Name: "plain"}, {Name: "jumbo", Spec: jumbo}},
			want: &Network{HostNetwork: *jumbo.HostNetwork}},
		{name: "two tags with one each", pool: pool, tags: []NamedTag{{Name: "a", Spec: jumbo}, {Name: "b", Spec: jumbo}},
			err: "tags a and b both have a hostNetwork"},
		{name: "an address for a link the network lacks", pool: pool,
			entry: &kubefarmv1.MachineEntry{Name: "m1", Addresses: []kubefarmv1.MachineAddress{{Link: "storage", Address: "10.30.0.1/16"}}},
			err:   `machine m1: addresses[storage]: spec.hostNetwork has no bond or VLAN "storage"`},
		{name: "addresses without a hostNetwork",
			entry: &kubefarmv1.MachineEntry{Name: "m1", Addresses: []kubefarmv1.MachineAddress{{Link: "data", Address: "10.29.0.1/16"}}},
			err:   "addresses need a hostNetwork"},
		{name: "a rule the boot address cannot fill", pool: &kubefarmv1.HostNetwork{VLANs: []kubefarmv1.VLAN{{Name: "data", Link: "boot", ID: 2, AddressFromBoot: "10.29.0.0/31"}}},
			err: "spec.hostNetwork: vlans[data].addressFromBoot: subnet 10.29.0.0/31 has no host part"},
	} {
		got, err := ResolveNetwork(tc.pool, tc.tags, tc.entry, boot)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: ResolveNetwork = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

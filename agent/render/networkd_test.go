package render

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// kubefarm's advanced_network example as a hostNetwork: two ports bonded
// with LACP under the boot MAC and address, MTU 9000, and a VLAN with an
// address from the boot address.
var advanced = &nodeconfig.Network{
	HostNetwork: kubefarmv1.HostNetwork{
		Bonds: []kubefarmv1.Bond{{Name: "bond0", Members: []string{"boot", "52:54:00:00:00:02"}, Mode: kubefarmv1.Bond8023ad,
			LACPRate: "fast", TransmitHashPolicy: "layer3+4", MTU: 9000}},
		VLANs:    []kubefarmv1.VLAN{{Name: "data", Link: "bond0", ID: 29}},
		Routes:   []kubefarmv1.Route{{To: "10.30.0.0/16", Via: "10.29.0.1", Link: "data"}},
		NodeLink: "data",
	},
	Addresses: map[string][]string{"data": {"10.29.3.4/16"}},
}

func TestNetworkdAdvancedNetwork(t *testing.T) {
	files, err := Networkd(advanced, "eth0", "52:54:00:00:00:01")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"/run/systemd/network/01-kubefarm-bond0.netdev": "[NetDev]\nName=bond0\nKind=bond\nMTUBytes=9000\nMACAddress=52:54:00:00:00:01\n\n" +
			"[Bond]\nMode=802.3ad\nLACPTransmitRate=fast\nTransmitHashPolicy=layer3+4\nMIIMonitorSec=100ms\n",
		"/run/systemd/network/01-kubefarm-data.netdev":   "[NetDev]\nName=data\nKind=vlan\n\n[VLAN]\nId=29\n",
		"/run/systemd/network/02-kubefarm-link0.network": "[Match]\nName=eth0\n\n[Link]\nMTUBytes=9000\n\n[Network]\nBond=bond0\n",
		"/run/systemd/network/02-kubefarm-link1.network": "[Match]\nPermanentMACAddress=52:54:00:00:00:02\n\n[Link]\nMTUBytes=9000\n\n[Network]\nBond=bond0\n",
		"/run/systemd/network/03-kubefarm-bond0.network": "[Match]\nName=bond0\n\n[Link]\nMTUBytes=9000\n\n[Network]\nDHCP=ipv4\nKeepConfiguration=yes\nVLAN=data\n",
		"/run/systemd/network/03-kubefarm-data.network": "[Match]\nName=data\n\n[Network]\nLinkLocalAddressing=no\nAddress=10.29.3.4/16\n\n" +
			"[Route]\nDestination=10.30.0.0/16\nGateway=10.29.0.1\n",
	}
	var order []string
	for _, f := range files {
		order = append(order, f.Path)
		if f.Mode != modePublic {
			t.Errorf("%s: mode %v, want %v", f.Path, f.Mode, modePublic)
		}
		if w, ok := want[f.Path]; !ok {
			t.Errorf("unexpected file %s:\n%s", f.Path, f.Data)
		} else if string(f.Data) != w {
			t.Errorf("%s:\n%s\nwant:\n%s", f.Path, f.Data, w)
		}
	}
	if len(files) != len(want) {
		t.Errorf("files %v, want %d", order, len(want))
	}
	// networkd takes the first matching .network by name: every file sorts
	// before the image's 10-kubefarm.network.
	for _, p := range order {
		if name := p[strings.LastIndex(p, "/")+1:]; name >= "10-kubefarm.network" {
			t.Errorf("%s sorts after the image's 10-kubefarm.network", name)
		}
	}
}

func TestNetworkdLinksAndRefusals(t *testing.T) {
	plain := &nodeconfig.Network{HostNetwork: kubefarmv1.HostNetwork{
		Links:  []kubefarmv1.LinkSettings{{Match: "boot", MTU: 9000}},
		VLANs:  []kubefarmv1.VLAN{{Name: "eth0.7", Link: "boot", ID: 7, MTU: 1500}},
		Bonds:  []kubefarmv1.Bond{{Name: "bond1", Members: []string{"eth2", "eth3"}, MIIMonitorMilliseconds: ptr.To[int32](0), UpDelayMilliseconds: 200}},
		Routes: []kubefarmv1.Route{{To: "10.40.0.0/16", Via: "10.28.0.254", Link: "eth0"}},
	}}
	files, err := Networkd(plain, "eth0", "52:54:00:00:00:01")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range files {
		got[f.Path[len(NetworkdDir)+1:]] = string(f.Data)
	}
	// The boot link, not bonded, keeps its DHCP, carries the VLAN and the
	// MTU, and the route that names it.
	boot := "[Match]\nName=eth0\n\n[Link]\nMTUBytes=9000\n\n[Network]\nDHCP=ipv4\nKeepConfiguration=yes\nVLAN=eth0.7\n\n[Route]\nDestination=10.40.0.0/16\nGateway=10.28.0.254\n"
	if got["02-kubefarm-link2.network"] != boot {
		t.Errorf("the boot link's file:\n%s\nwant:\n%s\nall: %v", got["02-kubefarm-link2.network"], boot, got)
	}
	if b := got["01-kubefarm-bond1.netdev"]; strings.Contains(b, "MACAddress=") || !strings.Contains(b, "Mode=active-backup\nMIIMonitorSec=0ms\nUpDelaySec=200ms\n") {
		t.Errorf("a bond without the boot link:\n%s", b)
	}
	if b := got["03-kubefarm-bond1.network"]; strings.Contains(b, "DHCP") {
		t.Errorf("a bond without the boot link asks for a lease:\n%s", b)
	}

	for _, tc := range []struct {
		name string
		n    kubefarmv1.HostNetwork
		err  string
	}{
		{"a link in two bonds", kubefarmv1.HostNetwork{Bonds: []kubefarmv1.Bond{{Name: "a", Members: []string{"eth1"}}, {Name: "b", Members: []string{"eth1"}}}},
			"eth1 is a member of bonds a and b"},
		{"a VLAN on a bond member", kubefarmv1.HostNetwork{Bonds: []kubefarmv1.Bond{{Name: "a", Members: []string{"boot"}}}, VLANs: []kubefarmv1.VLAN{{Name: "v", Link: "boot", ID: 3}}},
			"VLAN v is on boot, a member of bond a: put it on the bond"},
		{"a VLAN with a bond's name", kubefarmv1.HostNetwork{Bonds: []kubefarmv1.Bond{{Name: "a", Members: []string{"boot"}}}, VLANs: []kubefarmv1.VLAN{{Name: "a", Link: "eth1", ID: 3}}},
			"VLAN a has a bond's name"},
		{"a route on a link the network does not set up", kubefarmv1.HostNetwork{Routes: []kubefarmv1.Route{{To: "10.1.0.0/16", Via: "10.0.0.1", Link: "eth9"}}},
			"route to 10.1.0.0/16: link eth9 is not"},
		{"a route on a bond member", kubefarmv1.HostNetwork{Bonds: []kubefarmv1.Bond{{Name: "a", Members: []string{"eth1"}}}, Routes: []kubefarmv1.Route{{To: "10.1.0.0/16", Via: "10.0.0.1", Link: "eth1"}}},
			"route to 10.1.0.0/16: link eth1 is not"},
		{"a node link that is not a bond or VLAN", kubefarmv1.HostNetwork{NodeLink: "eth1"}, "nodeLink eth1 is not a bond or a VLAN"},
		// What the API refuses, refused again: the configuration came over the network.
		{"a bond name that climbs out of the directory", kubefarmv1.HostNetwork{Bonds: []kubefarmv1.Bond{{Name: "../x", Members: []string{"eth1"}}}}, `link name "../x"`},
		{"a member that adds a line", kubefarmv1.HostNetwork{Bonds: []kubefarmv1.Bond{{Name: "b", Members: []string{"eth1\nBond=x"}}}}, "link name"},
		{"a bond called boot", kubefarmv1.HostNetwork{Bonds: []kubefarmv1.Bond{{Name: "boot", Members: []string{"eth1"}}}}, `a bond may not be called "boot"`},
		{"a mode the API does not have", kubefarmv1.HostNetwork{Bonds: []kubefarmv1.Bond{{Name: "b", Members: []string{"eth1"}, Mode: "x\ny"}}}, "is not one the API allows"},
		{"a route that is no address", kubefarmv1.HostNetwork{Links: []kubefarmv1.LinkSettings{{Match: "eth1", MTU: 9000}}, Routes: []kubefarmv1.Route{{To: "10.0.0.0/8\n", Via: "10.0.0.1", Link: "eth1"}}}, "is not IPv4"},
		{"a VLAN on a link with an upper-case name", kubefarmv1.HostNetwork{VLANs: []kubefarmv1.VLAN{{Name: "v", Link: "ETH1", ID: 2}}}, `link name "ETH1"`},
	} {
		if _, err := Networkd(&nodeconfig.Network{HostNetwork: tc.n}, "eth0", "52:54:00:00:00:01"); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
		}
	}
	bad := &nodeconfig.Network{HostNetwork: kubefarmv1.HostNetwork{VLANs: []kubefarmv1.VLAN{{Name: "v", Link: "boot", ID: 2}}},
		Addresses: map[string][]string{"v": {"10.0.0.1/8\nDNS=1.1.1.1"}}}
	if _, err := Networkd(bad, "eth0", "52:54:00:00:00:01"); err == nil || !strings.Contains(err.Error(), "is not an IPv4 address with its prefix length") {
		t.Errorf("an address that adds a line: %v", err)
	}
	if _, err := Networkd(plain, "", ""); err == nil {
		t.Error("no boot interface: no error")
	}
	if files, err := Networkd(nil, "eth0", "52:54:00:00:00:01"); files != nil || err != nil {
		t.Errorf("no network: %v, %v; want nothing", files, err)
	}
}

func TestNodeIfaceAndIP(t *testing.T) {
	bonded := &nodeconfig.Network{HostNetwork: kubefarmv1.HostNetwork{Bonds: []kubefarmv1.Bond{{Name: "bond0", Members: []string{"52:54:00:00:00:01", "eth1"}}}}}
	for _, tc := range []struct {
		name      string
		n         *nodeconfig.Network
		iface, ip string
	}{
		{"no network", nil, "eth0", ""},
		{"the bond that took the boot interface, by its MAC", bonded, "bond0", ""},
		{"the node link's static address", advanced, "data", "10.29.3.4"},
		{"a node link without an address of its own", &nodeconfig.Network{HostNetwork: kubefarmv1.HostNetwork{NodeLink: "bond0"}}, "bond0", ""},
	} {
		if got := NodeIface(tc.n, "eth0", "52:54:00:00:00:01"); got != tc.iface {
			t.Errorf("%s: NodeIface = %q, want %q", tc.name, got, tc.iface)
		}
		if got := NodeIP(tc.n); got != tc.ip {
			t.Errorf("%s: NodeIP = %q, want %q", tc.name, got, tc.ip)
		}
	}
}

// TestRenderMovesTheNodeOntoItsNodeLink: with a hostNetwork, Render writes
// its networkd files, flannel routes over the node link and the kubelet
// takes that link's address.
func TestRenderMovesTheNodeOntoItsNodeLink(t *testing.T) {
	nc := config()
	nc.Network = advanced
	r, err := Render(Input{Config: nc, BootIface: "eth0", BootMAC: "52:54:00:00:00:01"})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(file(t, r, FlannelEnv).Data); got != "NODE_NAME=node-1\nFLANNELD_IFACE=data\n" {
		t.Errorf("flanneld env %q", got)
	}
	if env := string(file(t, r, KubeletEnv).Data); !strings.Contains(env, `"--hostname-override=node-1 --node-ip=10.29.3.4 `) {
		t.Errorf("kubelet env %q lacks --node-ip of the node link", env)
	}
	file(t, r, NetworkdDir+"/01-kubefarm-bond0.netdev")
	file(t, r, NetworkdDir+"/03-kubefarm-data.network")
	for i := 1; i < len(r.Files); i++ {
		if r.Files[i-1].Path >= r.Files[i].Path {
			t.Errorf("files not sorted: %s before %s", r.Files[i-1].Path, r.Files[i].Path)
		}
	}

	nc.Network = &nodeconfig.Network{HostNetwork: kubefarmv1.HostNetwork{NodeLink: "eth9"}}
	if _, err := Render(Input{Config: nc, BootIface: "eth0", BootMAC: "52:54:00:00:00:01"}); err == nil || !strings.Contains(err.Error(), "network: nodeLink eth9") {
		t.Errorf("a bad network: %v, want an error naming it", err)
	}
}

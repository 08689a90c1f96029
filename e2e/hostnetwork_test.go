//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/e2e/cluster"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// The join pool's server network (issue #32, docs/nodes.md "Server
// networks"), kubefarm's advanced_network example on the e2e farm: the boot
// NIC and a second port bonded (active-backup: the boot bridge is a plain
// Linux bridge, which speaks no LACP), MTU 9000 (the bridge and its taps are
// jumbo, cluster.BootMTU), and a VLAN on the bond whose address is the boot
// address moved into dataSubnet. The VLAN is the nodes' link (nodeLink): the
// kubelets' InternalIPs and flannel's host-gw routes are on it, so pods of
// two nodes talk over the data network. The Redfish machine has the second
// port; the catch-all machine (UEFI, one NIC) bonds its boot NIC alone.
const (
	dataVLAN   = "data"
	dataVLANID = 29
	dataSubnet = "10.124.0.0/24"
	dataBond   = "bond0"
	// secondPort is the second NIC's kernel name: the libvirt domain lists
	// it after the boot NIC, both e1000s, so it probes second.
	secondPort = "eth1"
)

// joinHostNetwork is the join pool's hostNetwork in the values, as an
// operator writes it (charts/kubefarm/README.md, "Server networks").
func joinHostNetwork() map[string]any {
	return map[string]any{
		"bonds": []any{map[string]any{"name": dataBond, "members": []any{nodeconfig.BootLink, secondPort},
			"mode": "active-backup", "mtu": cluster.BootMTU}},
		"vlans":    []any{map[string]any{"name": dataVLAN, "link": dataBond, "id": dataVLANID, "addressFromBoot": dataSubnet}},
		"nodeLink": dataVLAN,
	}
}

// dataAddress is the address a machine booted as boot has on the VLAN.
func dataAddress(t *testing.T, boot string) string {
	t.Helper()
	a, err := netip.ParseAddr(boot)
	if err != nil {
		t.Fatalf("boot address %q: %v", boot, err)
	}
	p, err := nodeconfig.AddressFromBoot(dataSubnet, a)
	if err != nil {
		t.Fatal(err)
	}
	return p.Addr().String()
}

// serverNetworkTarget is what checkServerNetwork looks at: the tenant, the
// bonded machine (behind its Redfish BMC, which pulls its cables) and
// every node with the boot address it runs on.
type serverNetworkTarget struct {
	cfg     *rest.Config
	tenant  kubernetes.Interface
	bonded  *joinVM
	bootIPs map[string]string
	// admin reads the pool's Machines in namespace.
	admin     client.Client
	namespace string
}

// checkServerNetwork shows the join pool's hostNetwork on the running
// machines: each Node's InternalIP and flannel's public IP are its data
// address; on the bonded machine the bond has both ports, MTU 9000, and
// the VLAN its address; then the active port's cable is pulled: the bond
// moves to the other port, the kubelet renews
// its Lease through it (the node stays Ready), and pods of both nodes still
// reach each other over the data network. The cable is plugged back.
func checkServerNetwork(ctx context.Context, t *testing.T, s serverNetworkTarget) {
	nodes := slices.Sorted(maps.Keys(s.bootIPs))
	for _, node := range nodes {
		boot := s.bootIPs[node]
		want := dataAddress(t, boot)
		n, err := s.tenant.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var internal []string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = append(internal, a.Address)
			}
		}
		public := n.Annotations["flannel.alpha.coreos.com/public-ip"]
		if len(internal) != 1 || internal[0] != want || public != want {
			t.Fatalf("Node %s (booted as %s): InternalIP %v, flannel public-ip %q; want %s on VLAN %s", node, boot, internal, public, want, dataVLAN)
		}
		t.Logf("Node %s: booted as %s, InternalIP and flannel's address %s (VLAN %d)", node, boot, want, dataVLANID)
	}

	// The second port never asked for a lease of its own: the node image
	// leaves every NIC but the boot one to the pool's hostNetwork (the
	// initrd's 09-kubefarm-other-nics.network), so the catch-all range made
	// no Machine for it.
	machines := &kubefarmv1.MachineList{}
	if err := s.admin.List(ctx, machines, client.InNamespace(s.namespace)); err != nil {
		t.Fatal(err)
	}
	for _, m := range machines.Items {
		if slices.Contains(m.Spec.MACs, s.bonded.SecondMAC) {
			t.Fatalf("Machine %s has %s's second port's MAC %s (MACs %v): it asked for a lease before it was bonded", m.Name, s.bonded.Name, s.bonded.SecondMAC, m.Spec.MACs)
		}
	}

	node := s.bonded.Name
	state := func() (string, bool) {
		out := nodeShell(ctx, s.cfg, s.tenant, node, fmt.Sprintf(
			"cat /proc/net/bonding/%[1]s; echo '--- links'; ip -d -o link show %[1]s; ip -d -o link show %[2]s; ip -o -4 addr show dev %[2]s",
			dataBond, dataVLAN))
		return out, strings.Contains(out, "Bonding Mode:")
	}
	out, ok := state()
	if !ok {
		t.Fatalf("%s has no bond %s:%s", node, dataBond, out)
	}
	want := dataAddress(t, s.bootIPs[node])
	for _, must := range []string{"Bonding Mode: fault-tolerance (active-backup)", "Slave Interface: eth0", "Slave Interface: " + secondPort,
		fmt.Sprintf("mtu %d", cluster.BootMTU), fmt.Sprintf("vlan protocol 802.1Q id %d", dataVLANID), " " + want + "/24 "} {
		if !strings.Contains(out, must) {
			t.Fatalf("%s's bond and VLAN: no %q in:%s", node, must, out)
		}
	}
	t.Logf("%s's bond and VLAN:%s", node, out)

	// The active port's cable, pulled at the "switch": its tap goes dark,
	// and the bond must move to the other port.
	active := regexp.MustCompile(`Currently Active Slave: (\S+)`)
	m := active.FindStringSubmatch(out)
	if m == nil || (m[1] != "eth0" && m[1] != secondPort) {
		t.Fatalf("%s's bond has no active port:%s", node, out)
	}
	from, to, tap := m[1], secondPort, s.bonded.Tap()
	if from == secondPort {
		to, tap = "eth0", s.bonded.SecondTap()
	}
	pulled := time.Now()
	s.bonded.redfish.emu.SetLink(t, tap, false)
	plugged := false
	plug := func() {
		if !plugged {
			s.bonded.redfish.emu.SetLink(t, tap, true)
			plugged = true
		}
	}
	defer plug()
	if err := pollErr(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		out, _ = state()
		m := active.FindStringSubmatch(out)
		return m != nil && m[1] == to, nil
	}); err != nil {
		t.Fatalf("%s's cable pulled, %s's bond never made %s active: %v; last:%s", from, node, to, err, out)
	}
	t.Logf("cable of %s (tap %s) pulled: %s active after %.0f s", from, tap, to, time.Since(pulled).Seconds())
	// Two Lease renewals after the pull: the second went out through the
	// second port for certain (the kubelet renews every 10 s).
	var renewed int
	var last time.Time
	if err := pollErr(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := s.tenant.CoordinationV1().Leases("kube-node-lease").Get(ctx, node, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(pulled) {
			return false, nil
		}
		if !l.Spec.RenewTime.Time.Equal(last) {
			last = l.Spec.RenewTime.Time
			renewed++
		}
		return renewed >= 2, nil
	}); err != nil {
		t.Fatalf("%s's kubelet did not renew its Lease twice after the cable was pulled: %v (%d renewals seen)", node, err, renewed)
	}
	n, err := s.tenant.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			t.Fatalf("Node %s: Ready %s (%s) with one cable pulled", node, c.Status, c.Message)
		}
	}
	if err := cluster.CheckSpread(ctx, s.cfg, s.tenant, "spread-failover", nodes, t.Logf); err != nil {
		t.Fatalf("with %s's boot NIC unplugged: %v", node, err)
	}
	plug()
}

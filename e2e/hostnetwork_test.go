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
	"sync"
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
	// bootPort and secondPort are the NICs' kernel names: the libvirt
	// domain lists the boot NIC first, both e1000s, so it probes first.
	bootPort   = "eth0"
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
// address; no Machine was made for the bonded machine's second port; on the
// bonded machine the bond has both ports, MTU 9000, and the VLAN its
// address; then the active port's cable is pulled: the bond moves to the
// other port, the kubelet renews its Lease through it (the node stays
// Ready), and pods of both nodes still reach each other over the data
// network. The cable is plugged back.
func checkServerNetwork(ctx context.Context, t *testing.T, s serverNetworkTarget) {
	nodes := slices.Sorted(maps.Keys(s.bootIPs))
	for _, node := range nodes {
		checkNodeOnVLAN(ctx, t, s, node)
	}
	checkNoSecondPortMachine(ctx, t, s)

	node := s.bonded.Name
	out, ok := bondState(ctx, s)
	if !ok {
		t.Fatalf("%s has no bond %s:%s", node, dataBond, out)
	}
	want := dataAddress(t, s.bootIPs[node])
	for _, must := range []string{"Bonding Mode: fault-tolerance (active-backup)", "Slave Interface: " + bootPort, "Slave Interface: " + secondPort,
		fmt.Sprintf("mtu %d", cluster.BootMTU), fmt.Sprintf("vlan protocol 802.1Q id %d", dataVLANID), " " + want + "/24 "} {
		if !strings.Contains(out, must) {
			t.Fatalf("%s's bond and VLAN: no %q in:%s", node, must, out)
		}
	}
	t.Logf("%s's bond and VLAN:%s", node, out)

	pulled, plug := pullActivePort(ctx, t, s, out)
	defer plug()
	waitLeaseRenewals(ctx, t, s.tenant, node, pulled, 2)
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
		t.Fatalf("with one of %s's ports unplugged: %v", node, err)
	}
	plug()
}

// checkNodeOnVLAN checks that node's InternalIP and flannel's public IP
// are its data address, the boot address moved into dataSubnet.
func checkNodeOnVLAN(ctx context.Context, t *testing.T, s serverNetworkTarget, node string) {
	t.Helper()
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

// checkNoSecondPortMachine checks that the second port never asked for a
// lease of its own: the node image leaves every NIC but the boot one to the
// pool's hostNetwork (the initrd's 09-kubefarm-other-nics.network), so the
// catch-all range made no Machine for it.
func checkNoSecondPortMachine(ctx context.Context, t *testing.T, s serverNetworkTarget) {
	t.Helper()
	machines := &kubefarmv1.MachineList{}
	if err := s.admin.List(ctx, machines, client.InNamespace(s.namespace)); err != nil {
		t.Fatal(err)
	}
	for _, m := range machines.Items {
		if slices.Contains(m.Spec.MACs, s.bonded.SecondMAC) {
			t.Fatalf("Machine %s has %s's second port's MAC %s (MACs %v): it asked for a lease before it was bonded",
				m.Name, s.bonded.Name, s.bonded.SecondMAC, m.Spec.MACs)
		}
	}
}

// bondState is the bonded machine's bond as the kernel reports it, with
// its and the VLAN's links and the VLAN's address; ok when there is a bond.
func bondState(ctx context.Context, s serverNetworkTarget) (out string, ok bool) {
	out = nodeShell(ctx, s.cfg, s.tenant, s.bonded.Name, fmt.Sprintf(
		"cat /proc/net/bonding/%[1]s; echo '--- links'; ip -d -o link show %[1]s; ip -d -o link show %[2]s; ip -o -4 addr show dev %[2]s",
		dataBond, dataVLAN))
	return out, strings.Contains(out, "Bonding Mode:")
}

var activePort = regexp.MustCompile(`Currently Active Slave: (\S+)`)

// pullActivePort pulls the cable of the port the bond state out names
// active, at the "switch" (its tap goes dark), and waits until the bond
// made the other port active. It returns when it pulled, and plug, which
// plugs the cable back once however often it is called.
func pullActivePort(ctx context.Context, t *testing.T, s serverNetworkTarget, out string) (time.Time, func()) {
	t.Helper()
	m := activePort.FindStringSubmatch(out)
	if m == nil || (m[1] != bootPort && m[1] != secondPort) {
		t.Fatalf("%s's bond has no active port:%s", s.bonded.Name, out)
	}
	from, to, tap := m[1], secondPort, s.bonded.Tap()
	if from == secondPort {
		to, tap = bootPort, s.bonded.SecondTap()
	}
	pulled := time.Now()
	s.bonded.redfish.emu.SetLink(t, tap, false)
	var once sync.Once
	plug := func() { once.Do(func() { s.bonded.redfish.emu.SetLink(t, tap, true) }) }
	if err := pollErr(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		out, _ = bondState(ctx, s)
		m := activePort.FindStringSubmatch(out)
		return m != nil && m[1] == to, nil
	}); err != nil {
		plug()
		t.Fatalf("%s's cable pulled, %s's bond never made %s active: %v; last:%s", from, s.bonded.Name, to, err, out)
	}
	t.Logf("cable of %s (tap %s) pulled: %s active after %.0f s", from, tap, to, time.Since(pulled).Seconds())
	return pulled, plug
}

// waitLeaseRenewals waits until node's kubelet renewed its Lease n times
// after since: with n = 2 the second went out after any change at since
// for certain (the kubelet renews every 10 s).
func waitLeaseRenewals(ctx context.Context, t *testing.T, tenant kubernetes.Interface, node string, since time.Time, n int) {
	t.Helper()
	var renewed int
	var last time.Time
	if err := pollErr(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := tenant.CoordinationV1().Leases("kube-node-lease").Get(ctx, node, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(since) {
			return false, nil
		}
		if !l.Spec.RenewTime.Time.Equal(last) {
			last = l.Spec.RenewTime.Time
			renewed++
		}
		return renewed >= n, nil
	}); err != nil {
		t.Fatalf("%s's kubelet did not renew its Lease %d times after %s: %v (%d renewals seen)", node, n, since.Format(time.RFC3339), err, renewed)
	}
}

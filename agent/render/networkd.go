package render

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// NetworkdDir is where the machine's links are described for
// systemd-networkd: its runtime directory, so that a boot starts from the
// image's files and this boot's configuration alone. The files' names sort
// before the initrd's 09-kubefarm-other-nics.network (meant for every
// Ethernet link but the boot NIC, unmanaged; its negated Name= matches the
// boot NIC's alternative names too, docs/nodes.md) and the image's 10-kubefarm.network (DHCP,
// now the boot NIC's alone), and networkd applies the first .network file
// that matches a link.
const NetworkdDir = "/run/systemd/network"

// physical is the [Match] line of an interface named by its kernel name
// or its MAC. A MAC is matched against the permanent address, since a bond
// gives its members its own.
func physical(ref string) string {
	if isMAC(ref) {
		return "PermanentMACAddress=" + strings.ToLower(ref) + "\n"
	}
	return "Name=" + ref + "\n"
}

func isMAC(s string) bool {
	hw, err := net.ParseMAC(s)
	return err == nil && len(hw) == 6
}

// Networkd renders a machine's Network as systemd-networkd files, in a
// fixed order: bonds' and VLANs' .netdev files, the members' and the
// other physical links' .network files, then the bonds' and VLANs'.
// bootIface and bootMAC are the interface the machine booted from: a bond
// with "boot" among its members takes its MAC (so kubefarm-pxe's lease,
// which is by MAC, stays the machine's) and asks for the lease by DHCP,
// keeping the address the initrd configured meanwhile.
func Networkd(n *nodeconfig.Network, bootIface, bootMAC string) ([]File, error) {
	if n == nil {
		return nil, nil
	}
	if bootIface == "" || !isMAC(bootMAC) {
		return nil, fmt.Errorf("the boot interface (%q, MAC %q) is unknown", bootIface, bootMAC)
	}
	p, err := newLinkPlan(n, bootIface, bootMAC)
	if err != nil {
		return nil, err
	}
	if err := p.checkReferences(); err != nil {
		return nil, err
	}
	var files []File
	add := func(name string, body string) {
		files = append(files, File{Path: NetworkdDir + "/" + name, Mode: modePublic, Data: []byte(body)})
	}
	for _, b := range n.Bonds {
		add("01-kubefarm-"+b.Name+".netdev", bondNetdev(b, p.carriesBoot(b), bootMAC))
	}
	for _, v := range n.VLANs {
		add("01-kubefarm-"+v.Name+".netdev", vlanNetdev(v))
	}
	for i, ref := range p.physicalLinks() {
		add(fmt.Sprintf("02-kubefarm-link%d.network", i), p.physicalNetwork(ref))
	}
	for _, b := range n.Bonds {
		add("03-kubefarm-"+b.Name+".network", linkNetwork(b.Name, b.MTU, p.carriesBoot(b), n.Addresses[b.Name], p.vlansOn[b.Name], p.routesOn(b.Name)))
	}
	for _, v := range n.VLANs {
		add("03-kubefarm-"+v.Name+".network", linkNetwork(v.Name, v.MTU, false, n.Addresses[v.Name], nil, p.routesOn(v.Name)))
	}
	return files, nil
}

// linkPlan is a Network with its links' relations worked out: which bond
// each physical link is a member of, which VLANs run on each link.
type linkPlan struct {
	n                  *nodeconfig.Network
	bootIface, bootMAC string
	bonds              map[string]kubefarmv1.Bond
	member             map[string]string   // physical link -> its bond
	vlansOn            map[string][]string // bond or physical link -> VLANs
	mtu                map[string]int32    // physical link -> links[]'s MTU
}

// linkName is what the API allows a link to be called; checked again here
// since the configuration came over the network, and a name becomes a file
// name and a line of a networkd file.
var linkName = regexp.MustCompile(`^(boot|[a-z][a-z0-9_.-]{0,14}|([0-9a-f]{2}:){5}[0-9a-f]{2})$`)

// The values of the API's enums, for the same reason.
var (
	bondModes    = []string{"", "balance-rr", "active-backup", "balance-xor", "broadcast", "802.3ad", "balance-tlb", "balance-alb"}
	lacpRates    = []string{"", "slow", "fast"}
	hashPolicies = []string{"", "layer2", "layer3+4", "layer2+3", "encap2+3", "encap3+4"}
)

// checkValues refuses a Network whose names, enums or addresses the API
// would not have let through.
func checkValues(n *nodeconfig.Network) error {
	names := []string{n.NodeLink}
	for _, b := range n.Bonds {
		if b.Name == nodeconfig.BootLink {
			return fmt.Errorf("a bond may not be called %q", b.Name)
		}
		names = append(append(names, b.Name), b.Members...)
		if !slices.Contains(bondModes, string(b.Mode)) || !slices.Contains(lacpRates, b.LACPRate) || !slices.Contains(hashPolicies, b.TransmitHashPolicy) {
			return fmt.Errorf("bond %q: mode %q, lacpRate %q or transmitHashPolicy %q is not one the API allows", b.Name, b.Mode, b.LACPRate, b.TransmitHashPolicy)
		}
	}
	for _, v := range n.VLANs {
		if v.Name == nodeconfig.BootLink {
			return fmt.Errorf("a VLAN may not be called %q", v.Name)
		}
		names = append(names, v.Name, v.Link)
	}
	for _, l := range n.Links {
		names = append(names, l.Match)
	}
	for _, r := range n.Routes {
		names = append(names, r.Link)
		to, err1 := netip.ParsePrefix(r.To)
		via, err2 := netip.ParseAddr(r.Via)
		if err1 != nil || err2 != nil || !to.Addr().Is4() || !via.Is4() {
			return fmt.Errorf("route to %q via %q is not IPv4", r.To, r.Via)
		}
	}
	for i, name := range names {
		// names[0] is nodeLink: empty is the default, boot is not a bond or VLAN.
		if (i > 0 || name != "") && (!linkName.MatchString(name) || i == 0 && name == nodeconfig.BootLink) {
			return fmt.Errorf("link name %q is not a name the API allows", name)
		}
	}
	for link, addrs := range n.Addresses {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a); err != nil || !p.Addr().Is4() {
				return fmt.Errorf("address %q of %s is not an IPv4 address with its prefix length", a, link)
			}
		}
	}
	return nil
}

func newLinkPlan(n *nodeconfig.Network, bootIface, bootMAC string) (*linkPlan, error) {
	if err := checkValues(n); err != nil {
		return nil, err
	}
	p := &linkPlan{n: n, bootIface: bootIface, bootMAC: bootMAC, bonds: map[string]kubefarmv1.Bond{},
		member: map[string]string{}, vlansOn: map[string][]string{}, mtu: map[string]int32{}}
	for _, b := range n.Bonds {
		p.bonds[b.Name] = b
		for _, m := range b.Members {
			if other, ok := p.member[p.canon(m)]; ok {
				return nil, fmt.Errorf("%s is a member of bonds %s and %s", m, other, b.Name)
			}
			p.member[p.canon(m)] = b.Name
		}
	}
	for _, v := range n.VLANs {
		if _, ok := p.bonds[v.Name]; ok {
			return nil, fmt.Errorf("VLAN %s has a bond's name", v.Name)
		}
		if bond, ok := p.member[p.canon(v.Link)]; ok {
			return nil, fmt.Errorf("VLAN %s is on %s, a member of bond %s: put it on the bond", v.Name, v.Link, bond)
		}
		p.vlansOn[p.canon(v.Link)] = append(p.vlansOn[p.canon(v.Link)], v.Name)
	}
	for _, l := range n.Links {
		p.mtu[p.canon(l.Match)] = l.MTU
	}
	return p, nil
}

// canon gives one name per physical link: "boot" and the boot MAC are the
// boot interface's name, so that every mention of it lands in one file.
func (p *linkPlan) canon(ref string) string {
	if ref == nodeconfig.BootLink || strings.EqualFold(ref, p.bootMAC) {
		return p.bootIface
	}
	return ref
}

func (p *linkPlan) isBondOrVLAN(name string) bool {
	_, bond := p.bonds[name]
	return bond || slices.ContainsFunc(p.n.VLANs, func(v kubefarmv1.VLAN) bool { return v.Name == name })
}

// checkReferences refuses routes and a node link on links the network does
// not set up: they would be dropped without a word otherwise.
func (p *linkPlan) checkReferences() error {
	for _, r := range p.n.Routes {
		link := p.canon(r.Link)
		_, bonded := p.member[link]
		_, hasMTU := p.mtu[link]
		if bonded || !(p.isBondOrVLAN(r.Link) || p.vlansOn[link] != nil || hasMTU) {
			return fmt.Errorf("route to %s: link %s is not a bond, a VLAN, or a link of links[] or of a VLAN outside a bond", r.To, r.Link)
		}
	}
	if p.n.NodeLink != "" && !p.isBondOrVLAN(p.n.NodeLink) {
		return fmt.Errorf("nodeLink %s is not a bond or a VLAN of the hostNetwork", p.n.NodeLink)
	}
	return nil
}

func (p *linkPlan) carriesBoot(b kubefarmv1.Bond) bool {
	return slices.ContainsFunc(b.Members, func(m string) bool { return p.canon(m) == p.bootIface })
}

// physicalLinks are the interfaces the network names: bond members, then
// the links of VLANs outside bonds, then links[], each once, in the order
// they are first named.
func (p *linkPlan) physicalLinks() []string {
	var refs []string
	for _, b := range p.n.Bonds {
		for _, m := range b.Members {
			refs = append(refs, p.canon(m))
		}
	}
	for _, v := range p.n.VLANs {
		if _, ok := p.bonds[v.Link]; !ok {
			refs = append(refs, p.canon(v.Link))
		}
	}
	for _, l := range p.n.Links {
		refs = append(refs, p.canon(l.Match))
	}
	var out []string
	for _, r := range refs {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// physicalNetwork is an interface's .network: enslaved to its bond, or
// keeping the image's DHCP with its VLANs and routes.
func (p *linkPlan) physicalNetwork(ref string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[Match]\n%s\n", physical(ref))
	bond, bonded := p.member[ref]
	m := p.mtu[ref]
	if bonded && p.bonds[bond].MTU > 0 {
		m = p.bonds[bond].MTU
	}
	if m > 0 {
		fmt.Fprintf(&b, "[Link]\nMTUBytes=%d\n\n", m)
	}
	b.WriteString("[Network]\n")
	if bonded {
		fmt.Fprintf(&b, "Bond=%s\n", bond)
		return b.String()
	}
	// Not bonded: the link keeps the DHCP the image's default file would
	// have given it.
	b.WriteString("DHCP=ipv4\nKeepConfiguration=yes\n")
	for _, v := range p.vlansOn[ref] {
		fmt.Fprintf(&b, "VLAN=%s\n", v)
	}
	for _, r := range p.routesOn(ref) {
		fmt.Fprintf(&b, "\n[Route]\nDestination=%s\nGateway=%s\n", r.To, r.Via)
	}
	return b.String()
}

func (p *linkPlan) routesOn(link string) []kubefarmv1.Route {
	var out []kubefarmv1.Route
	for _, r := range p.n.Routes {
		if p.canon(r.Link) == link {
			out = append(out, r)
		}
	}
	return out
}

func bondNetdev(b kubefarmv1.Bond, carriesBoot bool, bootMAC string) string {
	var s bytes.Buffer
	fmt.Fprintf(&s, "[NetDev]\nName=%s\nKind=bond\n", b.Name)
	if b.MTU > 0 {
		fmt.Fprintf(&s, "MTUBytes=%d\n", b.MTU)
	}
	if carriesBoot {
		fmt.Fprintf(&s, "MACAddress=%s\n", strings.ToLower(bootMAC))
	}
	mode := b.Mode
	if mode == "" {
		mode = kubefarmv1.BondActiveBackup
	}
	fmt.Fprintf(&s, "\n[Bond]\nMode=%s\n", mode)
	if b.LACPRate != "" {
		fmt.Fprintf(&s, "LACPTransmitRate=%s\n", b.LACPRate)
	}
	if b.TransmitHashPolicy != "" {
		fmt.Fprintf(&s, "TransmitHashPolicy=%s\n", b.TransmitHashPolicy)
	}
	mii := int32(100)
	if b.MIIMonitorMilliseconds != nil {
		mii = *b.MIIMonitorMilliseconds
	}
	fmt.Fprintf(&s, "MIIMonitorSec=%dms\n", mii)
	if b.UpDelayMilliseconds > 0 {
		fmt.Fprintf(&s, "UpDelaySec=%dms\n", b.UpDelayMilliseconds)
	}
	if b.DownDelayMilliseconds > 0 {
		fmt.Fprintf(&s, "DownDelaySec=%dms\n", b.DownDelayMilliseconds)
	}
	return s.String()
}

func vlanNetdev(v kubefarmv1.VLAN) string {
	s := fmt.Sprintf("[NetDev]\nName=%s\nKind=vlan\n", v.Name)
	if v.MTU > 0 {
		s += fmt.Sprintf("MTUBytes=%d\n", v.MTU)
	}
	return s + fmt.Sprintf("\n[VLAN]\nId=%d\n", v.ID)
}

// linkNetwork is a bond's or VLAN's .network: the boot lease by DHCP on the
// bond that carries it, static addresses, its VLANs and routes.
func linkNetwork(name string, mtu int32, dhcp bool, addrs, vlans []string, routes []kubefarmv1.Route) string {
	var s strings.Builder
	fmt.Fprintf(&s, "[Match]\nName=%s\n\n", name)
	if mtu > 0 {
		fmt.Fprintf(&s, "[Link]\nMTUBytes=%d\n\n", mtu)
	}
	s.WriteString("[Network]\n")
	if dhcp {
		s.WriteString("DHCP=ipv4\nKeepConfiguration=yes\n")
	} else {
		// No DHCP and no link-local address on a link that has its
		// addresses from the pool.
		s.WriteString("LinkLocalAddressing=no\n")
	}
	for _, a := range addrs {
		fmt.Fprintf(&s, "Address=%s\n", a)
	}
	for _, v := range vlans {
		fmt.Fprintf(&s, "VLAN=%s\n", v)
	}
	for _, r := range routes {
		fmt.Fprintf(&s, "\n[Route]\nDestination=%s\nGateway=%s\n", r.To, r.Via)
	}
	return s.String()
}

// NodeIface is the link whose address is the node's, for flannel: the
// network's nodeLink, else the bond that carries the boot address, else
// the boot interface.
func NodeIface(n *nodeconfig.Network, bootIface, bootMAC string) string {
	if n == nil {
		return bootIface
	}
	if n.NodeLink != "" {
		return n.NodeLink
	}
	p := linkPlan{bootIface: bootIface, bootMAC: bootMAC}
	for _, b := range n.Bonds {
		if p.carriesBoot(b) {
			return b.Name
		}
	}
	return bootIface
}

// NodeIP is the kubelet's --node-ip when the node is on a link with a
// static address (nodeLink); empty leaves the kubelet to take the address
// of its default route's link, the boot address.
func NodeIP(n *nodeconfig.Network) string {
	if a := n.NodeAddress(); a.IsValid() {
		return a.String()
	}
	return ""
}

// NetworkLinks are the bonds and VLANs a Network sets up, in its order:
// what the agent waits for before the node counts as networked.
func NetworkLinks(n *nodeconfig.Network) []string {
	if n == nil {
		return nil
	}
	var out []string
	for _, b := range n.Bonds {
		out = append(out, b.Name)
	}
	for _, v := range n.VLANs {
		out = append(out, v.Name)
	}
	return out
}

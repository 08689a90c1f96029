// Package podguard keeps a node's pods away from kubefarm-pxe
// (docs/security.md, "a pod in a tenant").
//
// A pod's packets leave the node with the node's address (the pod network
// masquerades them), so kubefarm-pxe cannot tell a pod from its node by
// address. The boot secret is what authenticates the node; this is the
// second wall: the node drops every packet it forwards, that is every
// packet from a pod (or from a Service address translated to it), to
// kubefarm-pxe's HTTP, DHCP, TFTP and proxyDHCP ports. kubefarm-agent runs
// in the host's network namespace, so its own requests are not forwarded
// and pass.
//
// The rules are an nftables table of their own, in a forward chain at a
// priority before the filter tables of kube-proxy, flannel and
// iptables-nft: in nftables a drop in any base chain is final, so nothing
// those programs add later can let the packets through.
package podguard

import (
	"fmt"
	"net/netip"
	"strings"
)

// Table is the nftables table (family inet) the rules live in.
const Table = "kubefarm-podguard"

// Priority of the forward chain: before the filter priority (0) that
// iptables-nft, kube-proxy and flannel use.
const Priority = -10

// UDP ports of kubefarm-pxe: DHCP, TFTP and proxyDHCP.
var udpPorts = []int{67, 69, 4011}

// Rules is the nftables script (for `nft -f -`) that drops forwarded
// packets to each of servers' httpPort (TCP) and DHCP, TFTP and proxyDHCP
// ports (UDP): kubefarm-pxe's addresses, one or more when its host name
// resolves to several. It replaces the table whole, so running it again
// (an agent restart) leaves one copy.
func Rules(servers []netip.Addr, httpPort int) (string, error) {
	if len(servers) == 0 {
		return "", fmt.Errorf("no address of kubefarm-pxe")
	}
	for _, s := range servers {
		if !s.IsValid() || s.IsUnspecified() {
			return "", fmt.Errorf("kubefarm-pxe's address %v is not a host address", s)
		}
	}
	if httpPort < 1 || httpPort > 65535 {
		return "", fmt.Errorf("kubefarm-pxe's HTTP port %d is out of range", httpPort)
	}
	ports := make([]string, len(udpPorts))
	for i, p := range udpPorts {
		ports[i] = fmt.Sprint(p)
	}
	var b strings.Builder
	// Declaring the table first makes the delete succeed when it is not
	// there yet; the whole script is one transaction.
	fmt.Fprintf(&b, "table inet %s\n", Table)
	fmt.Fprintf(&b, "delete table inet %s\n", Table)
	fmt.Fprintf(&b, "table inet %s {\n", Table)
	b.WriteString("\tchain forward {\n")
	fmt.Fprintf(&b, "\t\ttype filter hook forward priority %d; policy accept;\n", Priority)
	for _, server := range servers {
		family := "ip"
		if server.Is6() && !server.Is4In6() {
			family = "ip6"
		}
		server = server.Unmap()
		fmt.Fprintf(&b, "\t\t%s daddr %s tcp dport %d counter drop\n", family, server, httpPort)
		fmt.Fprintf(&b, "\t\t%s daddr %s udp dport { %s } counter drop\n", family, server, strings.Join(ports, ", "))
	}
	b.WriteString("\t}\n}\n")
	return b.String(), nil
}

// Package cluster runs a real single-node Kubernetes admin cluster on this
// machine for end-to-end tests, from upstream parts only: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
// kube-proxy from the pinned binaries of hack/tools, containerd, runc and the
// CNI plugins from Debian packages, and a local OCI registry that containerd
// pulls every image from.
//
// Everything the cluster creates lives under one state directory, and every
// process is recorded by PID there, so that Down (or Up after a crash) finds
// and removes all of it: processes, containers, mounts, network namespaces,
// the bridge and the iptables rules.
package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// Cluster is the admin cluster's configuration; its zero value is not
// usable, call New.
type Cluster struct {
	// StateDir holds everything: PKI, configs, logs, PID files, containerd's
	// root and state, kubelet's root.
	StateDir string
	// BinDir holds the pinned binaries (the repository's bin/).
	BinDir string
	// WithoutPreviousMinor leaves the previous minor's control plane images
	// out of the registry (and their binaries unneeded): only the upgrade
	// scenario starts a tenant on it, and make demo runs none.
	WithoutPreviousMinor bool
	// NodeName and NodeIP register the one node. NodeIP must be the address of
	// a real interface, or kube-proxy programs nothing.
	NodeName string
	NodeIP   net.IP
	// ServiceCIDR and PodCIDR of the cluster.
	ServiceCIDR string
	PodCIDR     string
	// RegistryAddr is the loopback address of the local registry.
	RegistryAddr string
	// Bridge is the name of the CNI bridge; owned by this cluster.
	Bridge string
	// BootBridge is the boot network kubefarm-pxe serves (DHCP, TFTP, HTTP):
	// a bridge on the host with BootAddr, owned by this cluster. Test
	// clients join it from their own network namespaces.
	BootBridge string
	BootAddr   *net.IPNet
}

// Boot network defaults (see New): 10.123.0.0/24 is used by nothing else
// here (pods 10.88.0.0/24, Services 10.96.0.0/16).
const (
	BootBridge = "kfboot0"
	// RegistryAddr is the local registry's loopback address.
	RegistryAddr = "127.0.0.1:5001"
	// BootIP is the host's address on the boot network (kubefarm-pxe's).
	BootIP   = "10.123.0.1"
	BootCIDR = BootIP + "/24"
	// BootRegistryAddr is the same registry as the boot network reaches
	// it: netbooted nodes pull through it (a NodePool's registryMirrors).
	BootRegistryAddr = BootIP + ":5002"
	// BootNetnsPrefix names the network namespaces of test clients on the
	// boot network; Down removes any left over, and their host-side veths
	// (BootVethPrefix) with them.
	BootNetnsPrefix = "kfpxe-e2e"
	BootVethPrefix  = "kfpxe"
)

// New returns a cluster rooted at stateDir with the defaults the e2e tests use.
func New(stateDir, binDir string) (*Cluster, error) {
	ip, err := hostIP()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, err
	}
	bootIP, bootNet, err := net.ParseCIDR(BootCIDR)
	if err != nil {
		return nil, err
	}
	bootNet.IP = bootIP.To4()
	return &Cluster{
		StateDir:     abs,
		BinDir:       binDir,
		NodeName:     "kubefarm-e2e",
		NodeIP:       ip,
		ServiceCIDR:  "10.96.0.0/16",
		PodCIDR:      "10.88.0.0/24",
		RegistryAddr: RegistryAddr,
		Bridge:       "kfe2e0",
		BootBridge:   BootBridge,
		BootAddr:     bootNet,
	}, nil
}

func (c *Cluster) path(parts ...string) string {
	return filepath.Join(append([]string{c.StateDir}, parts...)...)
}

// AdminKubeconfig is the path of a system:masters kubeconfig for tests.
func (c *Cluster) AdminKubeconfig() string { return c.path("kubeconfig", "admin.kubeconfig") }

// hostIP is the first global IPv4 address of an interface that is up.
func hostIP() (net.IP, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 ||
			strings.HasPrefix(iface.Name, "kfe2e") || strings.HasPrefix(iface.Name, "veth") ||
			strings.HasPrefix(iface.Name, "kfboot") || strings.HasPrefix(iface.Name, BootVethPrefix) {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
				return n.IP.To4(), nil
			}
		}
	}
	return nil, errors.New("no interface with a global IPv4 address: the node needs a real address for kube-proxy")
}

func writeFile(path, content string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), mode)
}

func kubeconfig(server, caPath, certPath, keyPath, user string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: %s}
current-context: e2e
`, server, caPath, user, certPath, keyPath, user)
}

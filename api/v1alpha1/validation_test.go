package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

func newNamespace(t *testing.T) string { return env.NewNamespace(t, "validation-") }

func validPool(ns string) *kubefarmv1.NodePool {
	return &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster:   "cluster1",
			BootImage: "img",
			Network:   kubefarmv1.BootNetwork{Subnet: "10.28.0.0/24", Gateway: "10.28.0.1"},
			Tags:      map[string]kubefarmv1.TagSpec{"debug": {KernelArgs: []string{"debug"}}},
			Machines: []kubefarmv1.MachineEntry{
				{Name: "m1", MACs: []string{"02:00:00:00:00:01"}, IP: "10.28.0.11"},
				{Name: "m2", MACs: []string{"02:00:00:00:00:02", "02:00:00:00:01:02"}, IP: "10.28.0.12", Tags: []string{"debug"}},
			},
		},
	}
}

// TestExamplesAccepted creates every object in examples/ for real.
func TestExamplesAccepted(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	ctx := context.Background()
	created := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(data)), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); err != nil {
				break
			}
			if obj.GetNamespace() != "" {
				ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: obj.GetNamespace()}}
				if err := env.Client.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
					t.Fatal(err)
				}
			}
			if err := env.Client.Create(ctx, obj); err != nil {
				t.Errorf("%s: %s %s rejected: %v", filepath.Base(file), obj.GetKind(), obj.GetName(), err)
				continue
			}
			created++
		}
	}
	if created < 3 {
		t.Fatalf("created only %d example objects", created)
	}
}

// TestDefaults shows that a minimal TenantCluster and NodePool get the
// documented defaults from the API server.
func TestDefaults(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tc := &kubefarmv1.TenantCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "minimal", Namespace: ns},
		Spec:       kubefarmv1.TenantClusterSpec{Version: "v1.34.4"},
	}
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	s := tc.Spec
	checks := map[string][2]any{
		"apiServer.replicas":     {int32(2), *s.APIServer.Replicas},
		"apiServer.expose.type":  {kubefarmv1.ExposeLoadBalancer, s.APIServer.Expose.Type},
		"apiServer.expose.port":  {int32(6443), s.APIServer.Expose.Port},
		"etcd.replicas":          {int32(3), s.Etcd.Replicas},
		"etcd.storageSize":       {"2Gi", s.Etcd.StorageSize.String()},
		"network.serviceCIDR":    {"10.96.0.0/12", s.Network.ServiceCIDR},
		"network.podCIDR":        {"10.244.0.0/16", s.Network.PodCIDR},
		"network.clusterDomain":  {"cluster.local", s.Network.ClusterDomain},
		"konnectivity.enabled":   {true, *s.Konnectivity.Enabled},
		"kubeProxy.mode":         {kubefarmv1.KubeProxyMode("iptables"), s.KubeProxy.Mode},
		"addons.coreDNS":         {true, *s.Addons.CoreDNS},
		"addons.probeHostPolicy": {true, *s.Addons.ProbeHostPolicy},
		"podSecurity.enforce":    {kubefarmv1.PodSecurityLevel("baseline"), s.PodSecurity.Enforce},
		"volumeReclaimPolicy":    {kubefarmv1.VolumeReclaimRetain, s.VolumeReclaimPolicy},
	}
	for field, c := range checks {
		if c[0] != c[1] {
			t.Errorf("spec.%s defaulted to %v, want %v", field, c[1], c[0])
		}
	}

	pool := validPool(ns)
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	r := pool.Spec.Rollout
	if r.MaxUnavailable == nil || r.MaxUnavailable.IntValue() != 1 || r.FailureBudget == nil || *r.FailureBudget != 1 ||
		r.MinReadySeconds == nil || *r.MinReadySeconds != 30 || r.DrainTimeoutPolicy != kubefarmv1.DrainHalt ||
		r.DrainTimeout == nil || r.DrainTimeout.Duration.String() != "15m0s" ||
		r.PowerCycleAfter == nil || r.PowerCycleAfter.Duration.String() != "3m0s" ||
		r.BootTimeout == nil || r.BootTimeout.Duration.String() != "15m0s" ||
		pool.Spec.Network.LeaseTime == nil || pool.Spec.Network.LeaseTime.Duration.String() != "1h0m0s" {
		t.Errorf("NodePool rollout/network defaults not applied: %+v, lease %v", r, pool.Spec.Network.LeaseTime)
	}
}

// rejection is one bad object and the words the API server must answer with.
type rejection struct {
	name   string
	mutate func(*kubefarmv1.NodePool)
	want   []string // every string must appear in the error
}

func TestNodePoolRejected(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cases := []rejection{
		{"duplicate MAC within a machine", func(p *kubefarmv1.NodePool) {
			p.Spec.Machines[1].MACs = []string{"02:00:00:00:00:02", "02:00:00:00:00:02"}
		}, []string{"spec.machines[1].macs[1]", "Duplicate value"}},
		{"IP outside the subnet", func(p *kubefarmv1.NodePool) {
			p.Spec.Machines[1].IP = "10.29.0.12"
		}, []string{"spec.machines", "inside spec.network.subnet 10.28.0.0/24"}},
		{"IP not an address", func(p *kubefarmv1.NodePool) {
			p.Spec.Machines[0].IP = "10.28.0.300"
		}, []string{"spec.machines[0].ip", "must be an IPv4 address"}},
		{"bad subnet CIDR", func(p *kubefarmv1.NodePool) {
			p.Spec.Network.Subnet = "10.28.0.0/33"
		}, []string{"spec.network.subnet", "must be an IPv4 CIDR"}},
		{"gateway outside the subnet", func(p *kubefarmv1.NodePool) {
			p.Spec.Network.Gateway = "10.99.0.1"
		}, []string{"spec.network.gateway", "gateway must be inside spec.network.subnet"}},
		{"uppercase MAC", func(p *kubefarmv1.NodePool) {
			p.Spec.Machines[0].MACs = []string{"02:00:00:00:00:AA"}
		}, []string{"spec.machines[0].macs[0]", "should match"}},
		{"machine without MAC", func(p *kubefarmv1.NodePool) {
			p.Spec.Machines[0].MACs = nil
		}, []string{"spec.machines[0].macs", "Required value"}},
		{"undefined tag", func(p *kubefarmv1.NodePool) {
			p.Spec.Machines[0].Tags = []string{"nosuchtag"}
		}, []string{"spec.machines", "only use tags defined in spec.tags"}},
		{"reserved DHCP option", func(p *kubefarmv1.NodePool) {
			p.Spec.Tags["debug"] = kubefarmv1.TagSpec{DHCPOptions: []kubefarmv1.DHCPOption{{Code: 67, Value: "x"}}}
		}, []string{"spec.tags[debug].dhcpOptions[0].code", "set by kubefarm-pxe"}},
		{"maxUnavailable zero", func(p *kubefarmv1.NodePool) {
			v := intstr.FromInt32(0)
			p.Spec.Rollout.MaxUnavailable = &v
		}, []string{"spec.rollout.maxUnavailable", "count of at least 1 or a percentage"}},
		{"maxUnavailable over 100%", func(p *kubefarmv1.NodePool) {
			v := intstr.FromString("150%")
			p.Spec.Rollout.MaxUnavailable = &v
		}, []string{"spec.rollout.maxUnavailable", "count of at least 1 or a percentage"}},
		{"maxUnavailable not a percentage", func(p *kubefarmv1.NodePool) {
			v := intstr.FromString("half")
			p.Spec.Rollout.MaxUnavailable = &v
		}, []string{"spec.rollout.maxUnavailable", "count of at least 1 or a percentage"}},
		{"bad maintenance window start", func(p *kubefarmv1.NodePool) {
			p.Spec.Rollout.MaintenanceWindows = []kubefarmv1.MaintenanceWindow{{Start: "25:00"}}
		}, []string{"spec.rollout.maintenanceWindows[0].start"}},
		{"registry mirror with a path", func(p *kubefarmv1.NodePool) {
			p.Spec.RegistryMirrors = []kubefarmv1.RegistryMirror{{Registry: "registry.k8s.io", Endpoints: []string{"http://10.28.0.1:5000/v2"}}}
		}, []string{"spec.registryMirrors[0].endpoints[0]", "should match"}},
		{"registry mirror with credentials", func(p *kubefarmv1.NodePool) {
			p.Spec.RegistryMirrors = []kubefarmv1.RegistryMirror{{Registry: "docker.io", Endpoints: []string{"https://user:pw@mirror"}}}
		}, []string{"spec.registryMirrors[0].endpoints[0]", "should match"}},
		{"registry name with a slash", func(p *kubefarmv1.NodePool) {
			p.Spec.RegistryMirrors = []kubefarmv1.RegistryMirror{{Registry: "../etc", Endpoints: []string{"http://m:5000"}}}
		}, []string{"spec.registryMirrors[0].registry", "should match"}},
		{"registry mirror twice", func(p *kubefarmv1.NodePool) {
			p.Spec.RegistryMirrors = []kubefarmv1.RegistryMirror{{Registry: "docker.io", Endpoints: []string{"http://a"}}, {Registry: "docker.io", Endpoints: []string{"http://b"}}}
		}, []string{"spec.registryMirrors[1]", "Duplicate value"}},
		{"lacpRate outside 802.3ad", func(p *kubefarmv1.NodePool) {
			p.Spec.HostNetwork = &kubefarmv1.HostNetwork{Bonds: []kubefarmv1.Bond{{Name: "bond0", Members: []string{"boot"}, LACPRate: "fast"}}}
		}, []string{"spec.hostNetwork.bonds[0].lacpRate", "applies to mode 802.3ad only"}},
		{"transmitHashPolicy in active-backup", func(p *kubefarmv1.NodePool) {
			p.Spec.HostNetwork = &kubefarmv1.HostNetwork{Bonds: []kubefarmv1.Bond{{Name: "bond0", Members: []string{"boot"}, Mode: "active-backup", TransmitHashPolicy: "layer3+4"}}}
		}, []string{"spec.hostNetwork.bonds[0].transmitHashPolicy", "applies to modes"}},
		{"a bond member that is no link", func(p *kubefarmv1.NodePool) {
			p.Spec.HostNetwork = &kubefarmv1.HostNetwork{Bonds: []kubefarmv1.Bond{{Name: "bond0", Members: []string{"Eth 1"}}}}
		}, []string{"spec.hostNetwork.bonds[0].members[0]", "should match"}},
		{"addressFromBoot with host bits", func(p *kubefarmv1.NodePool) {
			p.Spec.HostNetwork = &kubefarmv1.HostNetwork{VLANs: []kubefarmv1.VLAN{{Name: "data", Link: "boot", ID: 29, AddressFromBoot: "10.29.1.0/16"}}}
		}, []string{"spec.hostNetwork.vlans[0].addressFromBoot", "host bits zero"}},
		{"a bond called boot", func(p *kubefarmv1.NodePool) {
			p.Spec.HostNetwork = &kubefarmv1.HostNetwork{Bonds: []kubefarmv1.Bond{{Name: "boot", Members: []string{"eth1"}}}}
		}, []string{"spec.hostNetwork.bonds[0].name", "boot names the boot interface"}},
		{"VLAN tag 4095", func(p *kubefarmv1.NodePool) {
			p.Spec.HostNetwork = &kubefarmv1.HostNetwork{VLANs: []kubefarmv1.VLAN{{Name: "data", Link: "boot", ID: 4095}}}
		}, []string{"spec.hostNetwork.vlans[0].id", "less than or equal to 4094"}},
		{"a VLAN named like a bond", func(p *kubefarmv1.NodePool) {
			p.Spec.HostNetwork = &kubefarmv1.HostNetwork{Bonds: []kubefarmv1.Bond{{Name: "bond0", Members: []string{"boot"}}},
				VLANs: []kubefarmv1.VLAN{{Name: "bond0", Link: "boot", ID: 3}}}
		}, []string{"spec.hostNetwork.vlans", "a VLAN cannot have a bond's name"}},
		{"a machine address without its prefix length", func(p *kubefarmv1.NodePool) {
			p.Spec.Machines[0].Addresses = []kubefarmv1.MachineAddress{{Link: "data", Address: "10.29.0.1"}}
		}, []string{"spec.machines[0].addresses[0].address", "with its prefix length"}},
		{"too many machines", func(p *kubefarmv1.NodePool) {
			p.Spec.Machines = machines(kubefarmv1.MaxMachinesPerPool + 1)
			p.Spec.Network.Subnet = "10.28.0.0/16"
		}, []string{"spec.machines", "must have at most 250 items"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pool := validPool(ns)
			pool.Name = fmt.Sprintf("bad-%d", i)
			c.mutate(pool)
			expectRejected(t, env.Client.Create(ctx, pool), c.want...)
		})
	}
}

// TestLargestPoolAccepted shows that the pool's CEL rules stay within the
// API server's CEL cost budget at the largest pool the schema allows, with
// every machine carrying the most MACs allowed. (Uniqueness inside a pool
// is the webhook's: webhooks/nodepool.)
func TestLargestPoolAccepted(t *testing.T) {
	pool := validPool(newNamespace(t))
	pool.Spec.Network.Subnet = "10.28.0.0/16"
	pool.Spec.Machines = machines(kubefarmv1.MaxMachinesPerPool)
	// And the most of a hostNetwork: every list at its bound, on the pool,
	// and on every machine its addresses.
	hn := &kubefarmv1.HostNetwork{NodeLink: "vlan0"}
	for i := range 4 {
		hn.Bonds = append(hn.Bonds, kubefarmv1.Bond{Name: fmt.Sprintf("bond%d", i), Mode: kubefarmv1.Bond8023ad, LACPRate: "fast", TransmitHashPolicy: "layer3+4",
			Members: []string{fmt.Sprintf("eth%d", 2*i), fmt.Sprintf("eth%d", 2*i+1), "02:00:00:00:00:01", "02:00:00:00:00:02", "e1", "e2", "e3", "e4"}})
	}
	for i := range 16 {
		hn.VLANs = append(hn.VLANs, kubefarmv1.VLAN{Name: fmt.Sprintf("vlan%d", i), Link: "bond0", ID: int32(i + 1), AddressFromBoot: "10.29.0.0/16"})
	}
	for i := range 8 {
		hn.Links = append(hn.Links, kubefarmv1.LinkSettings{Match: fmt.Sprintf("eth%d", 10+i), MTU: 9000})
	}
	for i := range 16 {
		hn.Routes = append(hn.Routes, kubefarmv1.Route{To: fmt.Sprintf("10.%d.0.0/16", 100+i), Via: "10.29.0.1", Link: "vlan0"})
	}
	pool.Spec.HostNetwork = hn
	for i := range pool.Spec.Machines {
		for j := range 8 {
			pool.Spec.Machines[i].Addresses = append(pool.Spec.Machines[i].Addresses,
				kubefarmv1.MachineAddress{Link: fmt.Sprintf("vlan%d", j), Address: fmt.Sprintf("10.%d.%d.%d/16", 30+j, 1+i/250, 1+i%250)})
		}
	}
	if err := env.Client.Create(context.Background(), pool); err != nil {
		t.Fatalf("a pool of %d machines was rejected: %v", kubefarmv1.MaxMachinesPerPool, err)
	}
}

func machines(n int) []kubefarmv1.MachineEntry {
	out := make([]kubefarmv1.MachineEntry, n)
	for i := range out {
		out[i] = kubefarmv1.MachineEntry{
			Name: fmt.Sprintf("m%d", i),
			MACs: []string{
				fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256), fmt.Sprintf("02:00:00:01:%02x:%02x", i/256, i%256),
				fmt.Sprintf("02:00:00:02:%02x:%02x", i/256, i%256), fmt.Sprintf("02:00:00:03:%02x:%02x", i/256, i%256),
			},
			IP: fmt.Sprintf("10.28.%d.%d", 1+i/250, 1+i%250),
		}
	}
	return out
}

func TestTenantClusterRejected(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cases := []struct {
		name   string
		mutate func(*kubefarmv1.TenantCluster)
		want   []string
	}{
		{"bad version", func(c *kubefarmv1.TenantCluster) { c.Spec.Version = "1.34" }, []string{"spec.version", "should match"}},
		{"bad service CIDR", func(c *kubefarmv1.TenantCluster) { c.Spec.Network.ServiceCIDR = "10.96.0.0" },
			[]string{"spec.network.serviceCIDR", "must be a CIDR"}},
		{"external IP missing", func(c *kubefarmv1.TenantCluster) { c.Spec.APIServer.Expose.Type = kubefarmv1.ExposeExternalIP },
			[]string{"spec.apiServer.expose.externalIP", "externalIP is required"}},
		{"even etcd members", func(c *kubefarmv1.TenantCluster) { c.Spec.Etcd.Replicas = 2 },
			[]string{"spec.etcd.replicas", "Unsupported value"}},
		{"unknown kube-proxy mode", func(c *kubefarmv1.TenantCluster) { c.Spec.KubeProxy.Mode = "userspace" },
			[]string{"spec.kubeProxy.mode", "Unsupported value"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tc := &kubefarmv1.TenantCluster{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bad-%d", i), Namespace: ns},
				Spec:       kubefarmv1.TenantClusterSpec{Version: "v1.34.4"},
			}
			c.mutate(tc)
			expectRejected(t, env.Client.Create(ctx, tc), c.want...)
		})
	}
}

// TestImmutableFields changes each immutable field of a stored object.
func TestImmutableFields(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)

	tc := &kubefarmv1.TenantCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns},
		Spec:       kubefarmv1.TenantClusterSpec{Version: "v1.34.4"},
	}
	pool := validPool(ns)
	machine := &kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: "workers-m1", Namespace: ns},
		Spec: kubefarmv1.MachineSpec{Pool: "workers", Cluster: "cluster1", Hostname: "m1",
			MACs: []string{"02:00:00:00:00:01"}, IP: "10.28.0.11", DesiredImage: "img"},
	}
	image := &kubefarmv1.BootImage{
		ObjectMeta: metav1.ObjectMeta{Name: "immutable-" + ns},
		Spec: kubefarmv1.BootImageSpec{
			Repository:     "registry.example.com/node",
			Kernel:         kubefarmv1.Artifact{Digest: "sha256:" + strings.Repeat("1", 64)},
			Initrd:         kubefarmv1.Artifact{Digest: "sha256:" + strings.Repeat("2", 64)},
			Rootfs:         kubefarmv1.Artifact{Digest: "sha256:" + strings.Repeat("3", 64)},
			KubeletVersion: "v1.34.4",
		},
	}
	for _, obj := range []client.Object{tc, pool, machine, image} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T: %v", obj, err)
		}
	}

	cases := []struct {
		name   string
		obj    client.Object
		mutate func()
		want   []string
	}{
		{"TenantCluster serviceCIDR", tc, func() { tc.Spec.Network.ServiceCIDR = "10.100.0.0/16" },
			[]string{"spec.network.serviceCIDR", "is immutable"}},
		{"TenantCluster clusterDomain", tc, func() { tc.Spec.Network.ClusterDomain = "tenant.local" },
			[]string{"spec.network.clusterDomain", "is immutable"}},
		{"NodePool cluster", pool, func() { pool.Spec.Cluster = "cluster2" },
			[]string{"spec.cluster", "is immutable"}},
		{"Machine pool", machine, func() { machine.Spec.Pool = "other" },
			[]string{"spec.pool", "is immutable"}},
		{"BootImage rootfs", image, func() { image.Spec.Rootfs.Digest = "sha256:" + strings.Repeat("9", 64) },
			[]string{"spec", "BootImage is immutable"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := client.ObjectKeyFromObject(c.obj)
			if err := env.Client.Get(ctx, key, c.obj); err != nil {
				t.Fatal(err)
			}
			c.mutate()
			expectRejected(t, env.Client.Update(ctx, c.obj), c.want...)
		})
	}

	// A mutable field still changes: the rules above are not blanket refusals.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
		t.Fatal(err)
	}
	pool.Spec.BootImage = "img2"
	if err := env.Client.Update(ctx, pool); err != nil {
		t.Errorf("changing spec.bootImage was rejected: %v", err)
	}
	// The etcd member count changes in place (docs/etcd.md, Scaling),
	// within its enum.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tc), tc); err != nil {
		t.Fatal(err)
	}
	tc.Spec.Etcd.Replicas = 1
	if err := env.Client.Update(ctx, tc); err != nil {
		t.Errorf("changing spec.etcd.replicas was rejected: %v", err)
	}
}

func TestBootImageRejected(t *testing.T) {
	digest := "sha256:" + strings.Repeat("a", 64)
	cases := []struct {
		name string
		spec kubefarmv1.BootImageSpec
		want []string
	}{
		{"no source", kubefarmv1.BootImageSpec{
			Kernel: kubefarmv1.Artifact{Digest: digest}, Initrd: kubefarmv1.Artifact{Digest: digest},
			Rootfs: kubefarmv1.Artifact{Digest: digest}, KubeletVersion: "v1.34.4",
		}, []string{"either spec.repository or a url"}},
		{"bad digest", kubefarmv1.BootImageSpec{
			Repository: "r.example.com/x", Kernel: kubefarmv1.Artifact{Digest: "md5:abc"},
			Initrd: kubefarmv1.Artifact{Digest: digest}, Rootfs: kubefarmv1.Artifact{Digest: digest}, KubeletVersion: "v1.34.4",
		}, []string{"spec.kernel.digest", "should match"}},
		{"credentials in URL", kubefarmv1.BootImageSpec{
			Kernel: kubefarmv1.Artifact{Digest: digest, URL: "https://user:pw@files.example.com/vmlinuz"},
			Initrd: kubefarmv1.Artifact{Digest: digest, URL: "https://files.example.com/initrd"},
			Rootfs: kubefarmv1.Artifact{Digest: digest, URL: "https://files.example.com/rootfs"}, KubeletVersion: "v1.34.4",
		}, []string{"spec.kernel.url", "must not carry credentials"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img := &kubefarmv1.BootImage{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bad-image-%d", i)}, Spec: c.spec}
			expectRejected(t, env.Client.Create(context.Background(), img), c.want...)
		})
	}
}

func expectRejected(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want a rejection mentioning %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("rejection does not mention %q:\n%v", w, err)
		}
	}
}

// TestPowerSpec creates Machines with each kind of spec.power: the address
// shape of each driver and the credential rules are the API server's CEL,
// and each refusal names the rule it broke.
func TestPowerSpec(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cases := []struct {
		name  string
		power kubefarmv1.PowerSpec
		want  []string // nil: accepted
	}{
		{"qmp over tcp", kubefarmv1.PowerSpec{Driver: kubefarmv1.PowerQMP, Address: "tcp://10.28.0.1:4444"}, nil},
		{"qmp with credentialsSecret", kubefarmv1.PowerSpec{Driver: kubefarmv1.PowerQMP, Address: "tcp://10.28.0.1:4444",
			CredentialsSecret: "bmc"},
			[]string{"spec.power", "credentialsSecret is required for ipmi and redfish, and not used by qmp"}},
		{"ipmi host:623", kubefarmv1.PowerSpec{Driver: kubefarmv1.PowerIPMI, Address: "bmc1.rack1:623",
			CredentialsSecret: "bmc-rack1"}, nil},
		{"ipmi without credentialsSecret", kubefarmv1.PowerSpec{Driver: kubefarmv1.PowerIPMI, Address: "10.0.0.5"},
			[]string{"spec.power", "credentialsSecret is required for ipmi and redfish, and not used by qmp"}},
		{"ipmi with caSecret", kubefarmv1.PowerSpec{Driver: kubefarmv1.PowerIPMI, Address: "10.0.0.5",
			CredentialsSecret: "bmc-rack1", CASecret: "bmc-ca"},
			[]string{"spec.power", "caSecret and insecureSkipVerify are for redfish"}},
		{"ipmi with a URL", kubefarmv1.PowerSpec{Driver: kubefarmv1.PowerIPMI, Address: "https://10.0.0.5",
			CredentialsSecret: "bmc-rack1"},
			[]string{"spec.power", "an ipmi address is host or host:port"}},
		{"redfish over https", kubefarmv1.PowerSpec{Driver: kubefarmv1.PowerRedfish, Address: "https://bmc1.rack1",
			CredentialsSecret: "bmc-rack1"}, nil},
		{"redfish over http without insecureSkipVerify", kubefarmv1.PowerSpec{Driver: kubefarmv1.PowerRedfish,
			Address: "http://bmc1.rack1:8000", CredentialsSecret: "bmc-rack1"},
			[]string{"spec.power", "a plain http:// redfish address sends the BMC password in clear: it needs insecureSkipVerify: true"}},
		{"redfish over http with insecureSkipVerify", kubefarmv1.PowerSpec{Driver: kubefarmv1.PowerRedfish,
			Address: "http://bmc1.rack1:8000", CredentialsSecret: "bmc-rack1", InsecureSkipVerify: true}, nil},
		{"redfish with caSecret and insecureSkipVerify", kubefarmv1.PowerSpec{Driver: kubefarmv1.PowerRedfish,
			Address: "https://bmc1.rack1", CredentialsSecret: "bmc-rack1", CASecret: "bmc-ca", InsecureSkipVerify: true},
			[]string{"spec.power", "caSecret and insecureSkipVerify: true contradict each other"}},
		{"redfish with a system path", kubefarmv1.PowerSpec{Driver: kubefarmv1.PowerRedfish,
			Address: "https://bmc1.rack1:8443/redfish/v1/Systems/1", CredentialsSecret: "bmc-rack1", CASecret: "bmc-ca"}, nil},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			power := c.power
			m := &kubefarmv1.Machine{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("power-%d", i), Namespace: ns},
				Spec: kubefarmv1.MachineSpec{
					Pool: "workers", Cluster: "cluster1", Hostname: fmt.Sprintf("power-%d", i),
					MACs: []string{fmt.Sprintf("02:00:00:00:10:%02x", i)}, IP: fmt.Sprintf("10.28.0.%d", 100+i),
					DesiredImage: "img", Power: &power,
				},
			}
			err := env.Client.Create(ctx, m)
			if c.want == nil {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			expectRejected(t, err, c.want...)
		})
	}
}

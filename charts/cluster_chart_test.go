package charts_test

// Tests of charts/kubefarm, the per-cluster chart that reads kubefarm values
// files: lint, goldens of kubefarm's published examples, the refusals of
// options that no longer mean anything, schema errors, deterministic output,
// and every rendered object accepted by a real API server with kubefarm's
// CRDs and admission webhooks (server-side dry run).

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/manager"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

const (
	clusterChartDir = "kubefarm"
	clusterRelease  = "farm1"
	clusterNS       = "farm1"
	examplesDir     = "../examples/kubefarm"
)

var update = flag.Bool("update", false, "rewrite the cluster chart's golden files")

// renderCluster renders charts/kubefarm as `helm template farm1 -n farm1 -f
// <values>` does, schema validation included.
func renderCluster(t *testing.T, vals map[string]any) (map[string]string, error) {
	t.Helper()
	return renderChart(t, clusterChartDir, clusterRelease, clusterNS, vals)
}

func mustRenderCluster(t *testing.T, vals map[string]any) map[string]string {
	t.Helper()
	files, err := renderCluster(t, vals)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	return files
}

func valuesFile(t *testing.T, path string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return v.AsMap()
}

// example is one of kubefarm's published example values files, and how the
// chart takes it: as it is, or refused with errors naming what to edit, the
// edit being edited.yaml beside it.
type example struct {
	name string
	// refused are substrings of the error the file as published gets; nil
	// means it renders unchanged.
	refused []string
}

var examples = []example{
	{name: "generic"},
	{name: "catchall"},
	{name: "advanced_network", refused: []string{"ltsp.config.extraFiles", "hostNetwork", "Server networks"}},
	{name: "dualstack_network", refused: []string{"kubernetes.apiServer.extraArgs.feature-gates", "IPv6DualStack", "remove it"}},
}

// renderable is the values file of an example the chart renders.
func (e example) renderable() string {
	if e.refused == nil {
		return filepath.Join(examplesDir, e.name, "values.yaml")
	}
	return filepath.Join(examplesDir, e.name, "edited.yaml")
}

func TestClusterChartLint(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range examples {
		t.Run(e.name, func(t *testing.T) {
			linter := lint.AllWithKubeVersion(clusterChartDir, valuesFile(t, e.renderable()), clusterNS, kv)
			for _, m := range linter.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %s", m.Error())
				}
			}
		})
	}
}

// TestClusterChartExamples renders each published example: as it is when it
// needs no edit (else the error names the value), and edited.yaml, which
// must be the published file with values deleted and nothing else changed.
// The output is compared with testdata/cluster/<name>.yaml (-update
// rewrites them).
func TestClusterChartExamples(t *testing.T) {
	for _, e := range examples {
		t.Run(e.name, func(t *testing.T) {
			published := valuesFile(t, filepath.Join(examplesDir, e.name, "values.yaml"))
			_, err := renderCluster(t, published)
			switch {
			case e.refused == nil && err != nil:
				t.Fatalf("the published values are refused: %v", err)
			case e.refused != nil && err == nil:
				t.Fatalf("the published values render, want them refused for %q", e.refused)
			case e.refused != nil:
				for _, s := range e.refused {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("the refusal does not say %q:\n%v", s, err)
					}
				}
				edited := valuesFile(t, e.renderable())
				if extra := notIn(edited, published, ""); extra != "" {
					t.Errorf("edited.yaml is not the published file with values deleted: %s", extra)
				}
			}
			files := mustRenderCluster(t, valuesFile(t, e.renderable()))
			got := clusterManifest(files)
			golden := filepath.Join("testdata", "cluster", e.name+".yaml")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./charts -run TestClusterChartExamples -update writes it)", err)
			}
			if got != string(want) {
				t.Errorf("render differs from %s (review, then -update):\n%s", golden, lineDiff(string(want), got))
			}
		})
	}
}

// clusterManifest is the rendered objects and NOTES.txt, as `helm install`
// would show them.
func clusterManifest(files map[string]string) string {
	var b strings.Builder
	for _, name := range sortedKeys(files) {
		if strings.TrimSpace(files[name]) == "" {
			continue
		}
		b.WriteString("# Source: " + name + "\n" + strings.TrimSpace(files[name]) + "\n")
	}
	return b.String()
}

// notIn names the first value of a that b does not have, equal, at the
// same path ("" when a only deletes from b).
func notIn(a, b any, path string) string {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return path + " is a map only in edited.yaml"
		}
		for k, v := range av {
			bw, ok := bv[k]
			if !ok {
				return path + "." + k + " is not in the published file"
			}
			if s := notIn(v, bw, path+"."+k); s != "" {
				return s
			}
		}
		return ""
	case []any:
		bv, ok := b.([]any)
		if !ok || len(bv) != len(av) {
			return path + " is not the published list"
		}
		for i := range av {
			if s := notIn(av[i], bv[i], path+"["+strconv.Itoa(i)+"]"); s != "" {
				return s
			}
		}
		return ""
	default:
		if !reflect.DeepEqual(a, b) {
			return path + " differs from the published file"
		}
		return ""
	}
}

func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + strconv.Itoa(i+1) + ":\n  want " + wl + "\n  got  " + gl
		}
	}
	return ""
}

// clusterObjects decodes the rendered TenantCluster and NodePools.
func clusterObjects(t *testing.T, files map[string]string) (*kubefarmv1.TenantCluster, []kubefarmv1.NodePool) {
	t.Helper()
	var tc *kubefarmv1.TenantCluster
	var pools []kubefarmv1.NodePool
	for _, o := range objects(t, files) {
		switch o.GetKind() {
		case "TenantCluster":
			tc = &kubefarmv1.TenantCluster{}
			typed(t, o, tc)
		case "NodePool":
			var p kubefarmv1.NodePool
			typed(t, o, &p)
			pools = append(pools, p)
		default:
			t.Errorf("the chart renders a %s (%s); it renders TenantClusters and NodePools only", o.GetKind(), o.GetName())
		}
	}
	if tc == nil {
		t.Fatal("no TenantCluster rendered")
	}
	return tc, pools
}

// TestClusterChartMapsGeneric checks what each value of kubefarm's generic
// example becomes.
func TestClusterChartMapsGeneric(t *testing.T) {
	files := mustRenderCluster(t, valuesFile(t, filepath.Join(examplesDir, "generic", "values.yaml")))
	tc, pools := clusterObjects(t, files)
	if tc.Name != clusterRelease || tc.Namespace != clusterNS {
		t.Errorf("TenantCluster %s/%s, want %s/%s", tc.Namespace, tc.Name, clusterNS, clusterRelease)
	}
	api := tc.Spec.APIServer
	if api.Expose.ExternalIP != "10.28.36.72" || api.Expose.Type != kubefarmv1.ExposeLoadBalancer {
		t.Errorf("expose %+v, want LoadBalancer with externalIP 10.28.36.72 (advertise-address)", api.Expose)
	}
	if _, ok := api.ExtraArgs["advertise-address"]; ok {
		t.Error("advertise-address kept as a flag; it is the expose address")
	}
	if !reflect.DeepEqual(api.CertSANs, []string{"10.28.36.72"}) {
		t.Errorf("certSANs %v", api.CertSANs)
	}
	if len(pools) != 2 {
		t.Fatalf("%d pools, want 2", len(pools))
	}
	p0, p1 := pools[0], pools[1]
	if p0.Name != "farm1-pool0" || p1.Name != "farm1-pool1" {
		t.Errorf("pool names %s, %s", p0.Name, p1.Name)
	}
	wantNet := kubefarmv1.BootNetwork{Subnet: "10.28.0.0/16", Gateway: "10.28.0.1", DNS: []string{"10.28.0.1"}}
	for _, p := range pools {
		if !reflect.DeepEqual(p.Spec.Network, wantNet) {
			t.Errorf("%s network %+v, want %+v (the second pool shares the first's range)", p.Name, p.Spec.Network, wantNet)
		}
		if p.Spec.Cluster != clusterRelease || p.Spec.BootImage != "kubefarm-node" {
			t.Errorf("%s cluster %q bootImage %q", p.Name, p.Spec.Cluster, p.Spec.BootImage)
		}
		wantArgs := []string{"modules-load=br_netfilter,ip_vs,ip_vs_rr,ip_vs_wrr,ip_vs_sh", "forcepae", "console=tty1", "console=ttyS0,9600n8"}
		if !reflect.DeepEqual(p.Spec.KernelArgs, wantArgs) {
			t.Errorf("%s kernelArgs %q, want %q", p.Name, p.Spec.KernelArgs, wantArgs)
		}
		if p.Spec.Host.Timezone != "Europe/Prague" || p.Spec.Host.RootPasswordHash != "$1$jaKnTiEb$IhpsNUfssXQ8eQg8orald0" ||
			len(p.Spec.Host.SSHAuthorizedKeys) != 1 || !strings.HasSuffix(p.Spec.Host.SSHAuthorizedKeys[0], " id_rsa") {
			t.Errorf("%s host %+v", p.Name, p.Spec.Host)
		}
	}
	if n := len(p0.Spec.Machines); n != 5 {
		t.Fatalf("pool0 has %d machines, want 5", n)
	}
	if m := p0.Spec.Machines[0]; m.Name != "m1c29" || !reflect.DeepEqual(m.MACs, []string{"94:57:a5:d3:ec:f2", "94:57:a5:d3:ec:f3"}) || m.IP != "10.28.36.173" || m.Tags != nil {
		t.Errorf("pool0 first machine %+v", m)
	}
	if m := p1.Spec.Machines[0]; m.Name != "m1c43" || !reflect.DeepEqual(m.Tags, []string{"debug", "foo"}) {
		t.Errorf("pool1 machine %+v, want the pool's tags debug and foo", m)
	}
	foo := p1.Spec.Tags["foo"]
	if !reflect.DeepEqual(foo.Labels, map[string]string{"label1": "value1", "label2": "value2"}) ||
		len(foo.Taints) != 1 || foo.Taints[0] != (corev1.Taint{Key: "foo", Value: "bar", Effect: corev1.TaintEffectNoSchedule}) {
		t.Errorf("tag foo %+v", foo)
	}
	if _, ok := p1.Spec.Tags["debug"]; !ok {
		t.Error("tag debug, which the machines name, is not defined in the pool")
	}
	notes := files[clusterChartDir+"/templates/NOTES.txt"]
	for _, s := range []string{"kubectl kubefarm kubeconfig farm1", "farm1-admin-kubeconfig", "ltsp.config.options.DEBUG_SHELL", "ltsp.config.options.MENU_TIMEOUT", "tags.ltspOptions.debug.DEBUG_SHELL"} {
		if !strings.Contains(notes, s) {
			t.Errorf("NOTES.txt does not say %q:\n%s", s, notes)
		}
	}
}

// TestClusterChartMapsS3Backup: an S3 backup target passes through whole.
func TestClusterChartMapsS3Backup(t *testing.T) {
	files := mustRenderCluster(t, values(t, `
clusterName: lab
kubernetes:
  etcd:
    backup:
      retain: 3
      s3: {endpoint: "https://s3.example.com:9000", bucket: etcd-backups, prefix: lab/, region: eu-central-1, credentialsSecret: s3-creds, caConfigMap: s3-ca}
`))
	tc, _ := clusterObjects(t, files)
	want := &kubefarmv1.EtcdBackupS3{Endpoint: "https://s3.example.com:9000", Bucket: "etcd-backups", Prefix: "lab/", Region: "eu-central-1",
		CredentialsSecret: "s3-creds", CAConfigMap: "s3-ca"}
	if b := tc.Spec.Etcd.Backup; b == nil || *b.Retain != 3 || !reflect.DeepEqual(b.S3, want) {
		t.Errorf("etcd backup %+v, want s3 %+v", b, want)
	}
	if _, err := renderCluster(t, values(t, `
clusterName: lab
kubernetes:
  etcd:
    backup: {s3: {endpoint: "https://s3.example.com", bucket: b01}}
`)); err == nil || !strings.Contains(err.Error(), "credentialsSecret") {
		t.Errorf("an S3 target without credentials rendered: %v", err)
	}
}

// TestClusterChartMapsCatchAll: kubefarm's catchall example (a range with
// dhcp-generate-names and dhcp-ignore-names for the pool's own tag) is a
// pool whose range joins unknown machines under MAC-derived names; a range
// without the option holds them for enrollment; a pool's network can say
// so itself.
func TestClusterChartMapsCatchAll(t *testing.T) {
	_, pools := clusterObjects(t, mustRenderCluster(t, valuesFile(t, filepath.Join(examplesDir, "catchall", "values.yaml"))))
	if len(pools) != 1 {
		t.Fatalf("%d pools, want 1", len(pools))
	}
	want := &kubefarmv1.DynamicRange{Start: "10.28.72.10", End: "10.28.72.250", UnknownMachines: kubefarmv1.UnknownJoin}
	if n := pools[0].Spec.Network; !reflect.DeepEqual(n.DynamicRange, want) || n.Subnet != "10.28.0.0/16" || n.LeaseTime.Duration.String() != "12h0m0s" {
		t.Errorf("network %+v, range %+v, want %+v", n, n.DynamicRange, want)
	}
	if len(pools[0].Spec.Machines) != 0 {
		t.Errorf("machines %v", pools[0].Spec.Machines)
	}
	for _, tc := range []struct {
		name, values string
		want         kubefarmv1.UnknownMachinePolicy
	}{
		{"a range alone holds", "nodePools: [{range: '10.28.72.10,10.28.72.250,255.255.0.0'}]", kubefarmv1.UnknownHold},
		{"dhcp-ignore-names alone holds", "nodePools: [{range: '10.28.72.10,10.28.72.250,255.255.0.0', extraOpts: [{dhcp-ignore-names: 'tag:?'}]}]", kubefarmv1.UnknownHold},
		{"dhcp-generate-names alone joins", "nodePools: [{range: '10.28.72.10,10.28.72.250,255.255.0.0', extraOpts: [{dhcp-generate-names: 'tag:?'}]}]", kubefarmv1.UnknownJoin},
		{"network says it", "nodePools: [{range: '10.28.72.10,10.28.72.250,255.255.0.0', network: {dynamicRange: {unknownMachines: Join}}}]", kubefarmv1.UnknownJoin},
		{"network wins", "nodePools: [{range: '10.28.72.10,10.28.72.250,255.255.0.0', extraOpts: [{dhcp-generate-names: 'tag:?'}], network: {dynamicRange: {unknownMachines: Hold}}}]", kubefarmv1.UnknownHold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, pools := clusterObjects(t, mustRenderCluster(t, values(t, tc.values)))
			r := pools[0].Spec.Network.DynamicRange
			if r == nil || r.UnknownMachines != tc.want || r.Start != "10.28.72.10" {
				t.Errorf("dynamicRange %+v, want unknownMachines %s", r, tc.want)
			}
		})
	}
}

// TestClusterChartMapsCatchAllBesideListedMachines: a pool may list
// machines (here one behind a Redfish BMC) and join unknown ones in its
// range, as the e2e's join pool does.
func TestClusterChartMapsCatchAllBesideListedMachines(t *testing.T) {
	_, pools := clusterObjects(t, mustRenderCluster(t, values(t, `
nodePools:
- name: workers
  range: 10.123.0.200,10.123.0.209,255.255.255.0,12h
  extraOpts: [{dhcp-generate-names: "tag:?"}, {dhcp-ignore-names: "tag:?"}]
  nodes:
  - name: m1
    mac: "52:54:00:7b:00:3d"
    ip: 10.123.0.61
    power: {driver: redfish, address: "https://10.123.0.1:8443/redfish/v1/Systems/abc", credentialsSecret: m1-bmc, caSecret: m1-bmc-ca}
`)))
	if len(pools) != 1 {
		t.Fatalf("%d pools, want 1", len(pools))
	}
	n := pools[0].Spec.Network
	want := &kubefarmv1.DynamicRange{Start: "10.123.0.200", End: "10.123.0.209", UnknownMachines: kubefarmv1.UnknownJoin}
	if !reflect.DeepEqual(n.DynamicRange, want) || n.Subnet != "10.123.0.0/24" {
		t.Errorf("network %+v, range %+v, want %+v in 10.123.0.0/24", n, n.DynamicRange, want)
	}
	ms := pools[0].Spec.Machines
	wantPower := &kubefarmv1.PowerSpec{Driver: kubefarmv1.PowerRedfish, Address: "https://10.123.0.1:8443/redfish/v1/Systems/abc",
		CredentialsSecret: "m1-bmc", CASecret: "m1-bmc-ca"}
	if len(ms) != 1 || ms[0].IP != "10.123.0.61" || !reflect.DeepEqual(ms[0].Power, wantPower) {
		t.Errorf("machines %+v, want m1 at 10.123.0.61 with power %+v", ms, wantPower)
	}
}

// TestClusterChartMaps covers the mappings the examples do not use.
func TestClusterChartMaps(t *testing.T) {
	files := mustRenderCluster(t, values(t, `
clusterName: lab
kubernetes:
  apiServer:
    replicaCount: 3
    service: {type: NodePort, nodePort: 31443, annotations: {example.com/owner: lab}}
    certSANs: {dnsNames: [lab.example.org]}
    resources: {requests: {cpu: 500m, memory: 1Gi}}
    audit:
      mode: Stdout
      policy: {apiVersion: audit.k8s.io/v1, kind: Policy, rules: [{level: Metadata}]}
  etcd:
    replicaCount: 1
    resources: {requests: {memory: 300Mi}, limits: {memory: 1Gi}}
    backup: {schedule: "0 3 * * *", retain: 14, volume: {size: 20Gi}}
    restoreFrom: {claimName: lab-etcd-backup, snapshot: lab-20261124T030000Z.db}
  scheduler: {resources: {requests: {cpu: 20m}}}
  placement: {nodeSelector: {example.com/control-planes: "true"}, spread: Required}
  persistence: {size: 5Gi, storageClassName: local-path}
  kubeProxy: {enabled: false}
bootImage: node-r1
rollout: {maxUnavailable: 2, drainTimeout: 10m}
kubelet: {maxPods: 60}
nodePools:
- name: gpu
  range: 10.30.1.20,10.30.1.200,255.255.255.0,10.30.1.255,1d
  bootImage: node-gpu-r1
  rollout: {maxUnavailable: 1}
  kubelet: {extraArgs: {v: "2"}}
  nodes:
  - {name: g1, mac: "94-57-A5-D3-EC-F2", ip: 10.30.1.5, tags: [big]}
tags:
  dhcpOptions:
    all: {router: 10.30.1.1, dns-server: "10.30.1.1, 10.30.1.2", domain-name: lab.example.org}
    big: {ntp-server: "10.30.1.1,10.30.1.2", "150": "0x0a1e0101"}
  ltspOptions:
    big: {KERNEL_PARAMETERS: "hugepages=64"}
`))
	tc, pools := clusterObjects(t, files)
	if tc.Name != "lab" || *tc.Spec.APIServer.Replicas != 3 || tc.Spec.APIServer.Expose.Type != kubefarmv1.ExposeNodePort ||
		tc.Spec.Etcd.Replicas != 1 || tc.Spec.Etcd.StorageSize.String() != "5Gi" || *tc.Spec.Etcd.StorageClassName != "local-path" ||
		tc.Spec.KubeProxy.Mode != "none" || !reflect.DeepEqual(tc.Spec.APIServer.CertSANs, []string{"lab.example.org"}) {
		t.Errorf("TenantCluster spec %+v", tc.Spec)
	}
	if a := tc.Spec.APIServer.Audit; a.Mode != kubefarmv1.AuditStdout || a.Policy == nil ||
		!strings.Contains(string(a.Policy.Raw), `"level":"Metadata"`) {
		t.Errorf("audit %+v", a)
	}
	if e := tc.Spec.APIServer.Expose; e.NodePort != 31443 || e.Annotations["example.com/owner"] != "lab" {
		t.Errorf("expose %+v", e)
	}
	if r := tc.Spec.APIServer.Resources; r == nil || r.Requests.Memory().String() != "1Gi" {
		t.Errorf("apiServer resources %v", r)
	}
	if r := tc.Spec.Etcd.Resources; r == nil || r.Limits.Memory().String() != "1Gi" {
		t.Errorf("etcd resources %v", r)
	}
	if b := tc.Spec.Etcd.Backup; b == nil || b.Schedule != "0 3 * * *" || *b.Retain != 14 || b.Volume.Size.String() != "20Gi" {
		t.Errorf("etcd backup %+v", b)
	}
	if r := tc.Spec.Etcd.RestoreFrom; r == nil || r.ClaimName != "lab-etcd-backup" || r.Snapshot != "lab-20261124T030000Z.db" {
		t.Errorf("etcd restoreFrom %+v", r)
	}
	if r := tc.Spec.Scheduler.Resources; r == nil || r.Requests.Cpu().String() != "20m" {
		t.Errorf("scheduler resources %v", r)
	}
	if p := tc.Spec.Placement; p.Spread != kubefarmv1.SpreadRequired || p.NodeSelector["example.com/control-planes"] != "true" {
		t.Errorf("placement %+v", p)
	}
	p := pools[0]
	if p.Name != "lab-gpu" || p.Spec.BootImage != "node-gpu-r1" {
		t.Errorf("pool %s bootImage %s", p.Name, p.Spec.BootImage)
	}
	n := p.Spec.Network
	if n.Subnet != "10.30.1.0/24" || n.Gateway != "10.30.1.1" || !reflect.DeepEqual(n.DNS, []string{"10.30.1.1", "10.30.1.2"}) ||
		n.Domain != "lab.example.org" || n.LeaseTime.Duration.String() != "24h0m0s" ||
		n.DynamicRange == nil || n.DynamicRange.Start != "10.30.1.20" || n.DynamicRange.End != "10.30.1.200" {
		t.Errorf("network %+v", n)
	}
	if got := p.Spec.Machines[0].MACs; !reflect.DeepEqual(got, []string{"94:57:a5:d3:ec:f2"}) {
		t.Errorf("MACs %v, want lowercase and colon-separated", got)
	}
	big := p.Spec.Tags["big"]
	wantOpts := []kubefarmv1.DHCPOption{{Code: 42, Value: "0x0a1e01010a1e0102"}, {Code: 150, Value: "0x0a1e0101"}}
	if !reflect.DeepEqual(big.DHCPOptions, wantOpts) || !reflect.DeepEqual(big.KernelArgs, []string{"hugepages=64"}) {
		t.Errorf("tag big %+v, want options %+v and kernelArgs hugepages=64", big, wantOpts)
	}
	if p.Spec.Rollout.MaxUnavailable.IntValue() != 1 || p.Spec.Rollout.DrainTimeout.Duration.String() != "10m0s" {
		t.Errorf("rollout %+v: the pool's maxUnavailable over the top level's, drainTimeout from the top level", p.Spec.Rollout)
	}
	if p.Spec.Kubelet.MaxPods != 60 || p.Spec.Kubelet.ExtraArgs["v"] != "2" {
		t.Errorf("kubelet %+v", p.Spec.Kubelet)
	}
}

// TestClusterChartRefusals: options without a meaning in kubefarm stop the
// render with the value named and what to use instead.
// TestClusterChartMapsHostNetwork: advanced_network's bond and VLAN, said as
// hostNetwork in the values, become the pool's spec.hostNetwork as written,
// and a node's addresses its machine's.
func TestClusterChartMapsHostNetwork(t *testing.T) {
	vals := valuesFile(t, filepath.Join(examplesDir, "advanced_network", "hostnetwork.yaml"))
	var pool *unstructured.Unstructured
	for _, o := range objects(t, mustRenderCluster(t, vals)) {
		if o.GetKind() == "NodePool" {
			pool = o
		}
	}
	if pool == nil {
		t.Fatal("no NodePool rendered")
	}
	got, _, _ := unstructured.NestedMap(pool.Object, "spec", "hostNetwork")
	// As JSON: YAML's numbers decode as int64 or float64 by where they came from.
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(vals["hostNetwork"])
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("spec.hostNetwork %v, want the values' %v", got, vals["hostNetwork"])
	}
	machines, _, _ := unstructured.NestedSlice(pool.Object, "spec", "machines")
	if len(machines) != 2 {
		t.Fatalf("machines %v", machines)
	}
	if _, ok := machines[0].(map[string]any)["addresses"]; ok {
		t.Errorf("node1 got addresses it has none of: %v", machines[0])
	}
	want := []any{map[string]any{"link": "bond0.29", "address": "10.29.100.12/16"}}
	if a := machines[1].(map[string]any)["addresses"]; !reflect.DeepEqual(a, want) {
		t.Errorf("node2's addresses %v, want %v", a, want)
	}
	// The network script's option points to hostNetwork too.
	_, err := renderCluster(t, values(t, "ltsp: {config: {options: {POST_INIT_NETWORKING: '. /etc/ltsp/network.sh'}}}"))
	if err == nil || !strings.Contains(err.Error(), "ltsp.config.options.POST_INIT_NETWORKING") || !strings.Contains(err.Error(), "hostNetwork") {
		t.Errorf("POST_INIT_NETWORKING: %v, want a refusal pointing to hostNetwork", err)
	}
}

func TestClusterChartRefusals(t *testing.T) {
	pool := "nodePools: [{range: '10.28.0.0,static,255.255.0.0', nodes: [{name: n1, mac: '02:00:00:00:00:01', ip: 10.28.0.5}]}]\n"
	for _, tc := range []struct {
		name, values string
		want         []string
	}{
		{"sysctls", "ltsp: {config: {sysctls: {net.ipv4.ip_forward: 1}}}", []string{"ltsp.config.sysctls", "node image"}},
		{"ltsp server settings", "ltsp: {image: {tag: v1}}", []string{"ltsp.image", "kubefarm-pxe"}},
		{"ltsp option", "ltsp: {config: {options: {POST_INIT_X: 'echo'}}}", []string{"ltsp.config.options.POST_INIT_X", "node image"}},
		{"fstab option", "tags: {ltspOptions: {all: {FSTAB_KUBELET: x}}}", []string{"tags.ltspOptions.all.FSTAB_KUBELET"}},
		{"kubelet args option", "tags: {ltspOptions: {all: {KUBELET_EXTRA_ARGS_CGROUP: x}}}", []string{"KUBELET_EXTRA_ARGS_CGROUP", "kubelet.extraArgs"}},
		{"token generator", "tokenGenerator: {enabled: true}", []string{"tokenGenerator", "per machine"}},
		{"cluster ip", "kubernetes: {apiServer: {service: {type: ClusterIP}}}", []string{"kubernetes.apiServer.service.type", "LoadBalancer"}},
		{"no persistence", "kubernetes: {persistence: {enabled: false}}", []string{"kubernetes.persistence.enabled"}},
		{"range tags", "nodePools: [{range: 'set:rack1,10.28.0.0,static,255.255.0.0'}]", []string{"nodePools[0].range", "set:rack1"}},
		{"range without mask", "nodePools: [{range: '10.28.0.0,static,infinite'}]", []string{"nodePools[0].range", "no netmask"}},
		{"proxy range", "nodePools: [{range: '10.28.0.0,proxy'}]", []string{"nodePools[0].range", "proxy"}},
		{"bad mask", "nodePools: [{range: '10.28.0.0,static,255.0.255.0'}]", []string{"nodePools[0].range", "255.0.255.0"}},
		{"bad lease", "nodePools: [{range: '10.28.0.0,static,255.255.0.0,forever'}]", []string{"nodePools[0].range", "forever"}},
		{"no network at all", "nodePools: [{nodes: [{name: n1, mac: '02:00:00:00:00:01', ip: 10.28.0.5}]}]", []string{"nodePools[0].range"}},
		{"bad mac", "nodePools: [{range: '10.28.0.0,static,255.255.0.0', nodes: [{name: n1, mac: '02:00:00:00:00:01,zz:00:00:00:00:01', ip: 10.28.0.5}]}]", []string{"nodePools[0].nodes[0].mac", "zz:00"}},
		{"duplicate pool names", "nodePools: [{name: a, range: '10.28.0.0,static,255.255.0.0'}, {name: a}]", []string{"nodePools[1].name", "unique"}},
		{"router per tag", pool + "tags: {dhcpOptions: {foo: {router: 10.28.0.1}}}", []string{"tags.dhcpOptions.foo.router", "tags.dhcpOptions.all"}},
		{"unknown dhcp option", pool + "tags: {dhcpOptions: {all: {vendor-magic: x}}}", []string{"tags.dhcpOptions.all.vendor-magic", "number"}},
		{"boot file option", pool + "tags: {dhcpOptions: {all: {bootfile-name: x}}}", []string{"tags.dhcpOptions.all.bootfile-name", "boot server"}},
		{"service cidr flag", "kubernetes: {apiServer: {extraArgs: {service-cluster-ip-range: 10.96.0.0/12}}}", []string{"service-cluster-ip-range", "kubernetes.network.serviceCIDR"}},
		{"two fixed addresses", "kubernetes: {apiServer: {service: {loadBalancerIP: 10.0.0.1}, extraArgs: {advertise-address: 10.0.0.2}}}", []string{"loadBalancerIP", "advertise-address", "differ"}},
		{"other dnsmasq option", "nodePools: [{range: '10.28.72.10,10.28.72.250,255.255.0.0', extraOpts: [{dhcp-circuitid: 'set:port_0,ge-0/0/0.0'}]}]", []string{"nodePools[0].extraOpts[0]", "dhcp-circuitid", "remove it"}},
		{"second option refused", "nodePools: [{range: '10.28.72.10,10.28.72.250,255.255.0.0', extraOpts: [{dhcp-generate-names: 'tag:?'}, {tag-if: 'set:bar,tag:?'}]}]", []string{"nodePools[0].extraOpts[1]", "tag-if"}},
		{"generate names for another tag", "nodePools: [{range: '10.28.72.10,10.28.72.250,255.255.0.0', extraOpts: [{dhcp-generate-names: 'tag:rack1'}]}]", []string{"nodePools[0].extraOpts[0].dhcp-generate-names", "tag:rack1", `"tag:?"`}},
		{"extraOpts item not a map", "nodePools: [{range: '10.28.72.10,10.28.72.250,255.255.0.0', extraOpts: ['dhcp-generate-names=tag:?']}]", []string{"nodePools[0].extraOpts[0]", "map"}},
		{"generate names without a range", "nodePools: [{range: '10.28.0.0,static,255.255.0.0', extraOpts: [{dhcp-generate-names: 'tag:?'}]}]", []string{"nodePools[0].extraOpts", "catch-all range", "nodePools[0].range"}},
		{"kubelet feature gates", "kubernetes: {kubelet: {config: {featureGates: {IPv6DualStack: true}}}}", []string{"kubernetes.kubelet", "per pool"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderCluster(t, values(t, tc.values))
			if err == nil {
				t.Fatalf("values %q rendered", tc.values)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not say %q:\n%v", s, err)
				}
			}
		})
	}
}

func TestClusterChartSchemaErrors(t *testing.T) {
	for _, tc := range []struct{ name, values, field string }{
		{"unknown top-level key", "kubernets: {}", "kubernets"},
		{"unknown pool key", "nodePools: [{rnage: x}]", "rnage"},
		{"node without ip", "nodePools: [{nodes: [{name: a, mac: '02:00:00:00:00:01'}]}]", "ip"},
		{"node name", "nodePools: [{nodes: [{name: A_1, mac: '02:00:00:00:00:01', ip: 10.0.0.1}]}]", "name"},
		{"etcd members", "kubernetes: {etcd: {replicas: 2}}", "replicas"},
		{"version", "kubernetes: {version: '1.34'}", "version"},
		{"kube-proxy mode", "kubernetes: {kubeProxy: {mode: userspace}}", "mode"},
		{"audit mode", "kubernetes: {apiServer: {audit: {mode: Syslog}}}", "mode"},
		{"audit key", "kubernetes: {apiServer: {audit: {maxSize: 10}}}", "maxSize"},
		{"password not a hash", "ltsp: {config: {rootPasswd: hackme}}", "rootPasswd"},
		{"taint effect", "tags: {kubernetesTaints: {foo: [{key: a, effect: Never}]}}", "effect"},
		{"labels not strings", "tags: {kubernetesLabels: {foo: {a: 1}}}", "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderCluster(t, values(t, tc.values))
			if err == nil {
				t.Fatalf("values %q were accepted", tc.values)
			}
			if msg := err.Error(); !strings.Contains(msg, "values don't meet the specifications of the schema") || !strings.Contains(msg, tc.field) {
				t.Errorf("values %q: error does not name %q as a schema violation:\n%v", tc.values, tc.field, err)
			}
		})
	}
}

// TestClusterChartDeterministic: ArgoCD compares renders; two renders of
// the same values, maps with many keys among them, are byte-identical.
func TestClusterChartDeterministic(t *testing.T) {
	vals := valuesFile(t, filepath.Join(examplesDir, "generic", "values.yaml"))
	extra := values(t, `
kubernetes: {apiServer: {extraArgs: {z: "1", a: "2", m: "3"}}}
tags:
  kubernetesLabels: {z: {z: "1", a: "2"}, a: {m: "3", b: "4"}}
  dhcpOptions: {z: {"200": x, "150": yes-text, ntp-server: 10.0.0.1}}
`)
	vals = chartutil.CoalesceTables(extra, vals)
	first := clusterManifest(mustRenderCluster(t, vals))
	for range 5 {
		if again := clusterManifest(mustRenderCluster(t, vals)); again != first {
			t.Fatalf("renders differ:\n%s", lineDiff(first, again))
		}
	}
}

// TestClusterChartAcceptedByAPIServer applies every rendered object of
// every example (and of a values file using kubefarm's own fields) to a real
// API server with kubefarm's CRDs and admission webhooks, as a server-side
// dry run: the CRDs' schemas and CEL rules and the TenantCluster and
// NodePool webhooks all see them.
func TestClusterChartAcceptedByAPIServer(t *testing.T) {
	env := testenv.StartT(t, testenv.Options{CertManager: true})
	ctx := context.Background()
	_, stop, err := env.StartManager(ctx, manager.Options{}, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterNS}}); err != nil {
		t.Fatal(err)
	}
	cases := map[string]map[string]any{}
	for _, e := range examples {
		cases[e.name] = valuesFile(t, e.renderable())
	}
	// advanced_network with its network script said as hostNetwork.
	cases["advanced_network hostNetwork"] = valuesFile(t, filepath.Join(examplesDir, "advanced_network", "hostnetwork.yaml"))
	// make demo's tenant, with the bootImage make demo sets.
	cases["demo"] = valuesFile(t, filepath.Join(examplesDir, "demo", "values.yaml"))
	cases["demo"]["bootImage"] = "node-0123456789ab"
	cases["kubefarm fields"] = values(t, `
kubernetes: {network: {serviceCIDR: 10.32.0.0/16, podCIDR: 10.33.0.0/16}}
rollout: {maxUnavailable: 10%, maintenanceWindows: [{days: [Sat], start: "02:00", duration: 4h}]}
registryMirrors: [{registry: registry.k8s.io, endpoints: ["http://10.40.0.1:5000"]}]
nodePools:
- name: rack1
  range: 10.40.0.0,static,255.255.255.0,12h
  network: {domain: rack1.example.org}
  nodes: [{name: r1n1, mac: '02:00:00:00:01:01', ip: 10.40.0.11, power: {driver: qmp, address: "unix:///run/qmp/r1n1.sock"}}]
  taints: [{key: rack, value: "1", effect: NoSchedule}]
`)
	for name, vals := range cases {
		t.Run(name, func(t *testing.T) {
			objs := objects(t, mustRenderCluster(t, vals))
			if len(objs) == 0 {
				t.Fatal("nothing rendered")
			}
			for _, o := range objs {
				if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("helm"), client.DryRunAll); err != nil {
					y, _ := yaml.Marshal(o.Object)
					t.Errorf("%s %s refused: %v\n%s", o.GetKind(), o.GetName(), err, y)
				}
			}
		})
	}
	// A refusal by the API server names the object and field: the test can
	// fail.
	bad := objects(t, mustRenderCluster(t, values(t, "nodePools: [{range: '10.28.0.0,static,255.255.255.0', nodes: [{name: n1, mac: '02:00:00:00:00:01', ip: 10.99.0.5}]}]")))
	var refused error
	for _, o := range bad {
		if o.GetKind() == "NodePool" {
			refused = env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("helm"), client.DryRunAll)
		}
	}
	if refused == nil || !strings.Contains(refused.Error(), "spec.machines") {
		t.Errorf("a machine outside the pool's subnet was not refused by the API server naming spec.machines: %v", refused)
	}
}

// changedObjects renders both charts' values a and b and names the objects
// whose rendered content differs (or exists in one render only): what a
// `helm upgrade` from a to b changes, and so what rolls.
func changedObjects(t *testing.T, render func(map[string]any) map[string]string, a, b map[string]any) []string {
	t.Helper()
	index := func(files map[string]string) map[string]string {
		out := map[string]string{}
		for _, o := range objects(t, files) {
			y, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			out[o.GetKind()+"/"+o.GetName()] = string(y)
		}
		return out
	}
	before, after := index(render(a)), index(render(b))
	var changed []string
	for id, y := range after {
		if before[id] != y {
			changed = append(changed, id)
		}
	}
	for id := range before {
		if _, ok := after[id]; !ok {
			changed = append(changed, id)
		}
	}
	slices.Sort(changed)
	return changed
}

// TestUpgradeChangesOnlyWhatChanged: a changed value changes the objects
// it is about and nothing else, in both charts (so a `helm upgrade` or an
// ArgoCD sync rolls only those). The e2e join checks the same on a live
// cluster for the cluster chart's bootImage.
func TestUpgradeChangesOnlyWhatChanged(t *testing.T) {
	operator := func(v map[string]any) map[string]string { return render(t, v) }
	cluster := func(v map[string]any) map[string]string { return mustRenderCluster(t, v) }
	generic := func() map[string]any { return valuesFile(t, filepath.Join(examplesDir, "generic", "values.yaml")) }
	with := func(base map[string]any, doc string) map[string]any {
		return chartutil.CoalesceTables(values(t, doc), base)
	}
	for _, tc := range []struct {
		name   string
		render func(map[string]any) map[string]string
		a, b   map[string]any
		want   []string
	}{
		{"operator log level", operator, values(t, pxeValues), with(values(t, pxeValues), "logLevel: debug"), []string{"Deployment/kubefarm-manager"}},
		{"kubefarm-pxe DHCP workers", operator, values(t, pxeValues), with(values(t, pxeValues), "pxe: {dhcp: {workers: 16}}"), []string{"DaemonSet/kubefarm-pxe"}},
		{"cluster bootImage", cluster, generic(), with(generic(), "bootImage: node-r2"), []string{"NodePool/farm1-pool0", "NodePool/farm1-pool1"}},
		{"cluster API server replicas", cluster, generic(), with(generic(), "kubernetes: {apiServer: {replicas: 3}}"), []string{"TenantCluster/farm1"}},
		{"one pool's node", cluster, generic(), func() map[string]any {
			v := generic()
			pools := v["nodePools"].([]any)
			nodes := pools[1].(map[string]any)["nodes"].([]any)
			nodes[0].(map[string]any)["ip"] = "10.28.36.199"
			return v
		}(), []string{"NodePool/farm1-pool1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := changedObjects(t, tc.render, tc.a, tc.b); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("changed %v, want %v", got, tc.want)
			}
		})
	}
}

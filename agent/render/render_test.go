package render

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

const token = "abcdef.0123456789abcdef"
const ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

func config() nodeconfig.NodeConfig {
	return nodeconfig.NodeConfig{
		Machine: "t1/m1", Cluster: "c1", Hostname: "node-1",
		Labels: map[string]string{
			"zone":                             "b",
			"example.com/rack":                 "r1",
			"node-role.kubernetes.io/worker":   "",
			"kubernetes.io/role":               "worker",
			"node.kubernetes.io/instance-type": "big",
			"topology.kubernetes.io/zone":      "z1",
		},
		Taints: []corev1.Taint{
			{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
			nodeconfig.NetworkUnavailableTaint,
		},
		Kubelet:   kubefarmv1.KubeletSpec{MaxPods: 50, ExtraArgs: map[string]string{"v": "2", "--event-qps": "10"}},
		JoinToken: token,
		TenantFacts: nodeconfig.TenantFacts{APIServer: "https://10.0.0.5:6443", CACert: []byte(ca),
			ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "tenant.local", PodCIDR: "10.244.0.0/16"},
	}
}

func file(t *testing.T, r Result, path string) File {
	t.Helper()
	for _, f := range r.Files {
		if f.Path == path {
			return f
		}
	}
	t.Fatalf("no %s among %d files", path, len(r.Files))
	return File{}
}

func TestRender(t *testing.T) {
	in := Input{Config: config(), BootIface: "enp1s0"}
	r, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	// Deterministic: same input, same files; sorted by path.
	again, _ := Render(in)
	if !reflect.DeepEqual(r, again) {
		t.Error("two renders differ")
	}
	for i := 1; i < len(r.Files); i++ {
		if r.Files[i-1].Path >= r.Files[i].Path {
			t.Errorf("files not sorted: %s before %s", r.Files[i-1].Path, r.Files[i].Path)
		}
	}
	// Only the bootstrap kubeconfig holds the token, and it is 0600.
	for _, f := range r.Files {
		if bytes.Contains(f.Data, []byte("0123456789abcdef")) && (f.Path != BootstrapKubeconfig || f.Mode != 0o600) {
			t.Errorf("%s (mode %o) holds the join token", f.Path, f.Mode)
		}
	}

	kc := file(t, r, BootstrapKubeconfig)
	cfg, err := clientcmd.Load(kc.Data)
	if err != nil {
		t.Fatal(err)
	}
	cl := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
	if cl.Server != "https://10.0.0.5:6443" || string(cl.CertificateAuthorityData) != ca ||
		cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token != token {
		t.Errorf("bootstrap kubeconfig %+v", cfg)
	}

	var k kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(file(t, r, KubeletConfig).Data, &k); err != nil {
		t.Fatal(err)
	}
	if k.Kind != "KubeletConfiguration" || k.APIVersion != "kubelet.config.k8s.io/v1beta1" || k.CgroupDriver != "systemd" ||
		!reflect.DeepEqual(k.ClusterDNS, []string{"10.96.0.10"}) || k.ClusterDomain != "tenant.local" ||
		!k.ServerTLSBootstrap || !k.RotateCertificates || k.MaxPods != 50 || k.Authentication.X509.ClientCAFile != CACert ||
		k.SerializeImagePulls == nil || *k.SerializeImagePulls || k.MaxParallelImagePulls != nil {
		t.Errorf("kubelet configuration %+v", k)
	}
	if want := config().Taints; !reflect.DeepEqual(k.RegisterWithTaints, want) {
		t.Errorf("registerWithTaints %v, want %v", k.RegisterWithTaints, want)
	}

	env := string(file(t, r, KubeletEnv).Data)
	wantEnv := `KUBELET_EXTRA_ARGS="--hostname-override=node-1 --node-labels=example.com/rack=r1,node.kubernetes.io/instance-type=big,topology.kubernetes.io/zone=z1,zone=b --event-qps=10 --v=2"` + "\n"
	if env != wantEnv {
		t.Errorf("kubelet env\n got %s\nwant %s", env, wantEnv)
	}
	if want := []string{"kubernetes.io/role", "node-role.kubernetes.io/worker"}; !reflect.DeepEqual(r.DroppedLabels, want) {
		t.Errorf("dropped %v, want %v", r.DroppedLabels, want)
	}
	if got := string(file(t, r, FlannelEnv).Data); got != "NODE_NAME=node-1\nFLANNELD_IFACE=enp1s0\n" {
		t.Errorf("flanneld env %q", got)
	}
	if got := string(file(t, r, FlannelNetConf).Data); !strings.Contains(got, `"Network": "10.244.0.0/16"`) || !strings.Contains(got, "host-gw") {
		t.Errorf("net-conf %q", got)
	}
	if got := string(file(t, r, Hostname).Data); got != "node-1\n" {
		t.Errorf("hostname %q", got)
	}
	for _, f := range r.Files {
		if f.Path == Shadow || f.Path == AuthorizedKeys || f.Path == Localtime {
			t.Errorf("%s written without its setting", f.Path)
		}
	}
}

func TestRenderOptional(t *testing.T) {
	nc := config()
	nc.Timezone = "Europe/Berlin"
	nc.SSHAuthorizedKeys = []string{"ssh-ed25519 AAAA admin@farm", " ssh-rsa BBBB ops "}
	nc.RootPasswordHash = "$6$salt$digest"
	shadow := "root:*:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"
	r, err := Render(Input{Config: nc, BootIface: "eth0", Shadow: []byte(shadow)})
	if err != nil {
		t.Fatal(err)
	}
	if f := file(t, r, Localtime); f.Symlink != "/usr/share/zoneinfo/Europe/Berlin" {
		t.Errorf("localtime %+v", f)
	}
	if f := file(t, r, AuthorizedKeys); f.Mode != 0o600 || string(f.Data) != "ssh-ed25519 AAAA admin@farm\nssh-rsa BBBB ops\n" {
		t.Errorf("authorized_keys %o %q", f.Mode, f.Data)
	}
	if f := file(t, r, Shadow); f.Mode != 0o600 || string(f.Data) != "root:$6$salt$digest:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n" {
		t.Errorf("shadow %o %q", f.Mode, f.Data)
	}
}

// TestRenderRegistryMirrors: one hosts.toml per registry, mirrors in
// order, then the registry itself (docker.io's at registry-1.docker.io).
func TestRenderRegistryMirrors(t *testing.T) {
	nc := config()
	nc.RegistryMirrors = []kubefarmv1.RegistryMirror{
		{Registry: "registry.k8s.io", Endpoints: []string{"http://10.123.0.1:5002/", "https://mirror.example.com"}},
		{Registry: "docker.io", Endpoints: []string{"https://dh.example.com:8443"}},
	}
	r, err := Render(Input{Config: nc, BootIface: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	want := "server = \"https://registry.k8s.io\"\n\n[host.\"http://10.123.0.1:5002\"]\n  capabilities = [\"pull\", \"resolve\"]\n" +
		"\n[host.\"https://mirror.example.com\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
	if f := file(t, r, "/etc/containerd/certs.d/registry.k8s.io/hosts.toml"); string(f.Data) != want || f.Mode != 0o644 {
		t.Errorf("registry.k8s.io hosts.toml %o:\n%s\nwant:\n%s", f.Mode, f.Data, want)
	}
	if f := file(t, r, "/etc/containerd/certs.d/docker.io/hosts.toml"); !strings.HasPrefix(string(f.Data), "server = \"https://registry-1.docker.io\"\n") {
		t.Errorf("docker.io hosts.toml:\n%s", f.Data)
	}
}

func TestRenderErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mut   func(*Input)
		field string
	}{
		{"no hostname", func(in *Input) { in.Config.Hostname = "" }, "hostname"},
		{"no token", func(in *Input) { in.Config.JoinToken = "" }, "joinToken"},
		{"no API server", func(in *Input) { in.Config.APIServer = "" }, "apiServer"},
		{"http API server", func(in *Input) { in.Config.APIServer = "http://x" }, "apiServer"},
		{"no CA", func(in *Input) { in.Config.CACert = nil }, "caCert"},
		{"bad DNS", func(in *Input) { in.Config.ClusterDNS = []string{"dns"} }, "clusterDNS[0]"},
		{"no pod CIDR", func(in *Input) { in.Config.PodCIDR = "" }, "podCIDR"},
		{"no boot interface", func(in *Input) { in.BootIface = "" }, "boot interface"},
		{"extra arg with a space", func(in *Input) { in.Config.Kubelet.ExtraArgs = map[string]string{"x": "a b"} }, `extraArgs["x"]`},
		{"bad label value", func(in *Input) { in.Config.Labels = map[string]string{"a": "b c"} }, `label "a"`},
		{"timezone escaping", func(in *Input) { in.Config.Timezone = "../../etc/passwd" }, "timezone"},
		{"multi-line key", func(in *Input) { in.Config.SSHAuthorizedKeys = []string{"a\nb"} }, "sshAuthorizedKeys[0]"},
		{"hash with a colon", func(in *Input) { in.Config.RootPasswordHash = "$6$a:b"; in.Shadow = []byte("root:*:1::::::\n") }, "rootPasswordHash"},
		{"mirror folder escape", func(in *Input) {
			in.Config.RegistryMirrors = []kubefarmv1.RegistryMirror{{Registry: "../etc", Endpoints: []string{"http://m:5000"}}}
		}, "registryMirrors[0]"},
		{"mirror endpoint with a quote", func(in *Input) {
			in.Config.RegistryMirrors = []kubefarmv1.RegistryMirror{{Registry: "docker.io", Endpoints: []string{`http://m"]`}}}
		}, "registryMirrors[0]"},
		{"mirror without endpoints", func(in *Input) {
			in.Config.RegistryMirrors = []kubefarmv1.RegistryMirror{{Registry: "docker.io"}}
		}, "registryMirrors[0]"},
		{"no root in shadow", func(in *Input) { in.Config.RootPasswordHash = "$6$a$b"; in.Shadow = []byte("daemon:*:1::::::\n") }, "rootPasswordHash"},
	} {
		in := Input{Config: config(), BootIface: "eth0"}
		tc.mut(&in)
		_, err := Render(in)
		if err == nil || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), "t1/m1") {
			t.Errorf("%s: err %v, want one naming machine t1/m1 and %s", tc.name, err, tc.field)
		}
		if err != nil && strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("%s: error quotes the token", tc.name)
		}
	}
}

// TestNode: the Node the agent creates for the kubelet is the one the
// kubelet would register: the labels it may set (those of --node-labels)
// and the taints of registerWithTaints, the network taint always among them.
func TestNode(t *testing.T) {
	nc := config()
	n, err := Node(nc)
	if err != nil {
		t.Fatal(err)
	}
	if n.Name != "node-1" || n.APIVersion != "v1" || n.Kind != "Node" {
		t.Errorf("node %s %s/%s", n.Name, n.APIVersion, n.Kind)
	}
	wantLabels := map[string]string{"zone": "b", "example.com/rack": "r1", "node.kubernetes.io/instance-type": "big", "topology.kubernetes.io/zone": "z1"}
	if !reflect.DeepEqual(n.Labels, wantLabels) {
		t.Errorf("labels %v, want %v (the manager sets node-role and kubernetes.io/role)", n.Labels, wantLabels)
	}
	r, err := Render(Input{Config: nc, BootIface: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	env := string(file(t, r, KubeletEnv).Data)
	for k, v := range n.Labels {
		if !strings.Contains(env, k+"="+v) {
			t.Errorf("label %s=%s is not in the kubelet's --node-labels: %s", k, v, env)
		}
	}
	cfg := string(file(t, r, KubeletConfig).Data)
	for _, taint := range n.Spec.Taints {
		if !strings.Contains(cfg, "key: "+taint.Key) {
			t.Errorf("taint %s is not among the kubelet's registerWithTaints:\n%s", taint.Key, cfg)
		}
	}
	if len(n.Spec.Taints) != 2 {
		t.Errorf("taints %v, want the pool's and the network taint", n.Spec.Taints)
	}
	// Without the network taint in the configuration, it is still there.
	nc.Taints = nil
	if n, _ := Node(nc); len(n.Spec.Taints) != 1 || n.Spec.Taints[0] != nodeconfig.NetworkUnavailableTaint {
		t.Errorf("taints %v, want the network taint", n.Spec.Taints)
	}
	nc.Labels = map[string]string{"bad key!": "x"}
	if _, err := Node(nc); err == nil || !strings.Contains(err.Error(), `label "bad key!"`) {
		t.Errorf("bad label: %v", err)
	}
}

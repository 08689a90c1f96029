package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Packages the cluster needs from Debian.
var debPackages = []string{"containerd", "runc", "containernetworking-plugins", "conntrack", "iptables", "busybox-static"}

// EnsurePackages installs the Debian packages that are missing (as root).
func EnsurePackages() error {
	var missing []string
	for _, p := range debPackages {
		if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", p).Output(); err != nil || string(out) != "install ok installed" {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	fmt.Printf("installing %v\n", missing)
	if out, err := exec.Command("apt-get", "update", "-qq").CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update: %v\n%s", err, out)
	}
	args := append([]string{"install", "-y", "-qq", "--no-install-recommends"}, missing...)
	cmd := exec.Command("apt-get", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %v: %v\n%s", missing, err, out)
	}
	return nil
}

// Up brings the cluster up, or completes a cluster that is partly up (after a
// crash). It returns once the node is Ready.
func (c *Cluster) Up(ctx context.Context) error {
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"packages", func(context.Context) error { return EnsurePackages() }},
		{"pki", func(context.Context) error { return c.ensurePKI() }},
		{"configs", func(context.Context) error { return c.writeConfigs() }},
		{"boot-network", func(context.Context) error { return c.ensureBootNetwork() }},
		{"registry", c.startRegistry},
		{"containerd", c.startContainerd},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"controllers", c.startControllers},
		{"kubelet", c.startKubelet},
		{"kube-proxy", c.startKubeProxy},
		{"dns", c.startDNS},
		{"storage", c.ensureStorage},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Printf("%-15s ok (%.1fs)\n", s.name, time.Since(start).Seconds())
	}
	return nil
}

// ensureBootNetwork creates the boot network bridge with BootAddr, or leaves
// it as it is when it already exists with that address.
func (c *Cluster) ensureBootNetwork() error {
	run := func(args ...string) error {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %v: %v: %s", args, err, out)
		}
		return nil
	}
	if exec.Command("ip", "link", "show", c.BootBridge).Run() != nil {
		// No STP and no forward delay: a client's port forwards at once.
		if err := run("link", "add", c.BootBridge, "type", "bridge", "forward_delay", "0", "stp_state", "0"); err != nil {
			return err
		}
	}
	out, err := exec.Command("ip", "-o", "-4", "addr", "show", "dev", c.BootBridge).Output()
	if err != nil {
		return fmt.Errorf("ip addr show %s: %w", c.BootBridge, err)
	}
	if !strings.Contains(string(out), " "+c.BootAddr.String()+" ") {
		if err := run("addr", "add", c.BootAddr.String(), "dev", c.BootBridge); err != nil {
			return err
		}
	}
	// Jumbo frames, as a server network's switch has them: a machine's
	// hostNetwork may set an MTU of 9000 on its bond and VLANs, and frames
	// that size must cross the bridge (every tap is 9000 too, AddTap). Set
	// explicitly, the bridge keeps it when a smaller port joins.
	if err := run("link", "set", c.BootBridge, "mtu", fmt.Sprint(BootMTU)); err != nil {
		return err
	}
	return run("link", "set", c.BootBridge, "up")
}

func (c *Cluster) bin(name string) string { return c.BinDir + "/" + name }

func (c *Cluster) writeConfigs() error {
	pki := c.path("pki")
	server := fmt.Sprintf("https://%s:6443", c.NodeIP)
	for _, k := range []struct{ name, cert, user string }{
		{"admin", "admin", "admin"},
		{"controller-manager", "controller-manager", "system:kube-controller-manager"},
		{"scheduler", "scheduler", "system:kube-scheduler"},
		{"kube-proxy", "kube-proxy", "system:kube-proxy"},
		{"kubelet", "kubelet", "system:node:" + c.NodeName},
	} {
		content := kubeconfig(server, pki+"/ca.crt", pki+"/"+k.cert+".crt", pki+"/"+k.cert+".key", k.user)
		if err := writeFile(c.path("kubeconfig", k.name+".kubeconfig"), content, 0o600); err != nil {
			return err
		}
	}
	if err := writeFile(c.path("cni", "net.d", "10-kubefarm-e2e.conflist"), c.cniConfig(), 0o644); err != nil {
		return err
	}
	if err := writeFile(c.path("containerd", "config.toml"), c.containerdConfig(), 0o644); err != nil {
		return err
	}
	for _, host := range []string{"registry.k8s.io", "quay.io", "docker.io", "ghcr.io"} {
		hosts := fmt.Sprintf("server = \"https://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n", host, c.RegistryAddr)
		if err := writeFile(c.path("containerd", "certs.d", host, "hosts.toml"), hosts, 0o644); err != nil {
			return err
		}
	}
	if err := writeFile(c.path("kubelet", "config.yaml"), c.kubeletConfig(), 0o644); err != nil {
		return err
	}
	return writeFile(c.path("kube-proxy", "config.yaml"), c.kubeProxyConfig(), 0o644)
}

func (c *Cluster) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "kubefarm-e2e",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": %q}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
`, c.Bridge, c.PodCIDR, c.path("cni", "ipam"))
}

func (c *Cluster) containerdConfig() string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[debug]
  level = "info"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  # The sandbox may not lower oom_score_adj (no CAP_SYS_RESOURCE); without
  # this every pod sandbox fails to start.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, c.path("containerd", "root"), c.path("containerd", "state"), c.containerdSocket(),
		c.path("runc"), c.path("cni", "net.d"), c.path("containerd", "certs.d"))
}

func (c *Cluster) containerdSocket() string { return c.path("run", "containerd.sock") }

func (c *Cluster) kubeletConfig() string {
	pki := c.path("pki")
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
clusterDomain: cluster.local
clusterDNS: [%q]
tlsCertFile: %q
tlsPrivateKeyFile: %q
# The host's disks are shared with builds; do not evict test pods over them.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
podCIDR: %q
podLogsDir: %q
serializeImagePulls: false
`, pki+"/ca.crt", c.containerdSocket(), c.NodeIP.String(), pki+"/kubelet-serving.crt", pki+"/kubelet-serving.key", c.PodCIDR, c.path("pod-logs"))
}

func (c *Cluster) kubeProxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: %q
hostnameOverride: %q
clientConnection: {kubeconfig: %q}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack: {maxPerCore: 0}
`, c.PodCIDR, c.NodeName, c.path("kubeconfig", "kube-proxy.kubeconfig"))
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	if err := sharedNetnsDir(); err != nil {
		return err
	}
	if err := c.start("containerd", []string{"containerd", "--config", c.path("containerd", "config.toml")}); err != nil {
		return err
	}
	return c.waitFor(ctx, "containerd", time.Minute, func(context.Context) (bool, error) {
		_, err := os.Stat(c.containerdSocket())
		return err == nil, nil
	})
}

// NetnsDir is where containerd and `ip netns` both keep network namespaces.
const NetnsDir = "/var/run/netns"

// sharedNetnsDir makes NetnsDir a shared mount point before containerd
// puts pod network namespaces there, as `ip netns add` does on first use.
// Otherwise the scenarios' first `ip netns add` does it later: it bind
// mounts the folder onto itself, and every pod namespace mounted before
// stays mounted underneath, so containerd's unlink of it fails with EBUSY
// and those pods never finish terminating (seen in the e2e join: a deleted
// tenant's pods Terminating for good, their cni-* namespaces left behind).
func sharedNetnsDir() error {
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return err
	}
	// EINVAL: not a mount point yet.
	if err := unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, ""); err == nil {
		return nil
	}
	if err := unix.Mount(NetnsDir, NetnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind mounting %s onto itself: %w", NetnsDir, err)
	}
	if err := unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making %s a shared mount: %w", NetnsDir, err)
	}
	return nil
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	pki := c.path("pki")
	argv := []string{c.bin("etcd"), "--name", "e2e", "--data-dir", c.path("etcd"),
		"--listen-client-urls", "https://127.0.0.1:2379", "--advertise-client-urls", "https://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "e2e=http://127.0.0.1:2380",
		"--listen-metrics-urls", "http://127.0.0.1:2381",
		"--cert-file", pki + "/etcd.crt", "--key-file", pki + "/etcd.key",
		"--trusted-ca-file", pki + "/ca.crt", "--client-cert-auth",
	}
	if err := c.start("etcd", argv); err != nil {
		return err
	}
	return c.waitHTTP(ctx, "etcd", "http://127.0.0.1:2381/health", nil)
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	pki := c.path("pki")
	argv := []string{c.bin("kube-apiserver"),
		"--advertise-address", c.NodeIP.String(), "--secure-port", "6443",
		"--etcd-servers", "https://127.0.0.1:2379", "--etcd-cafile", pki + "/ca.crt",
		"--etcd-certfile", pki + "/apiserver-etcd-client.crt", "--etcd-keyfile", pki + "/apiserver-etcd-client.key",
		"--client-ca-file", pki + "/ca.crt",
		"--tls-cert-file", pki + "/apiserver.crt", "--tls-private-key-file", pki + "/apiserver.key",
		"--kubelet-client-certificate", pki + "/apiserver-kubelet-client.crt", "--kubelet-client-key", pki + "/apiserver-kubelet-client.key",
		"--kubelet-certificate-authority", pki + "/ca.crt",
		// The node's name does not resolve on this machine; its address does.
		"--kubelet-preferred-address-types", "InternalIP",
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", pki + "/sa.pub", "--service-account-signing-key-file", pki + "/sa.key",
		"--service-cluster-ip-range", c.ServiceCIDR, "--allow-privileged",
		"--profiling=false",
	}
	if err := c.start("kube-apiserver", argv); err != nil {
		return err
	}
	if err := c.waitHTTP(ctx, "kube-apiserver", fmt.Sprintf("https://%s:6443/readyz", c.NodeIP), c.adminTLS()); err != nil {
		return err
	}
	// The apiserver calls kubelets as this group; give it the kubelet API.
	return c.kubectlApply(ctx, `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kubefarm-e2e-apiserver-kubelet}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:kubelet-api-admin}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "kubefarm:apiserver-kubelet-clients"}]
`)
}

func (c *Cluster) startControllers(ctx context.Context) error {
	pki := c.path("pki")
	if err := c.start("kube-controller-manager", []string{c.bin("kube-controller-manager"),
		"--kubeconfig", c.path("kubeconfig", "controller-manager.kubeconfig"),
		"--authentication-kubeconfig", c.path("kubeconfig", "controller-manager.kubeconfig"),
		"--authorization-kubeconfig", c.path("kubeconfig", "controller-manager.kubeconfig"),
		"--service-account-private-key-file", pki + "/sa.key", "--root-ca-file", pki + "/ca.crt",
		"--cluster-signing-cert-file", pki + "/ca.crt", "--cluster-signing-key-file", pki + "/ca.key",
		"--use-service-account-credentials", "--controllers", "*,bootstrapsigner,tokencleaner",
		"--service-cluster-ip-range", c.ServiceCIDR, "--leader-elect=false", "--bind-address", "127.0.0.1",
	}); err != nil {
		return err
	}
	return c.start("kube-scheduler", []string{c.bin("kube-scheduler"),
		"--kubeconfig", c.path("kubeconfig", "scheduler.kubeconfig"),
		"--authentication-kubeconfig", c.path("kubeconfig", "scheduler.kubeconfig"),
		"--authorization-kubeconfig", c.path("kubeconfig", "scheduler.kubeconfig"),
		"--leader-elect=false", "--bind-address", "127.0.0.1",
	})
}

func (c *Cluster) startKubelet(ctx context.Context) error {
	if err := c.start("kubelet", []string{c.bin("kubelet"),
		"--config", c.path("kubelet", "config.yaml"),
		"--kubeconfig", c.path("kubeconfig", "kubelet.kubeconfig"),
		"--root-dir", c.path("kubelet", "root"),
		"--hostname-override", c.NodeName, "--node-ip", c.NodeIP.String(),
	}); err != nil {
		return err
	}
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	return c.waitFor(ctx, "kubelet", 3*time.Minute, func(ctx context.Context) (bool, error) {
		node, err := cs.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

func (c *Cluster) startKubeProxy(ctx context.Context) error {
	if err := c.start("kube-proxy", []string{c.bin("kube-proxy"), "--config", c.path("kube-proxy", "config.yaml")}); err != nil {
		return err
	}
	return c.waitHTTP(ctx, "kube-proxy", "http://127.0.0.1:10256/healthz", nil)
}

// Clientset is an admin client of the cluster.
func (c *Cluster) Clientset() (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig())
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func (c *Cluster) adminTLS() *tls.Config {
	pool := x509.NewCertPool()
	if ca, err := os.ReadFile(c.path("pki", "ca.crt")); err == nil {
		pool.AppendCertsFromPEM(ca)
	}
	cert, _ := tls.LoadX509KeyPair(c.path("pki", "admin.crt"), c.path("pki", "admin.key"))
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}
}

// waitHTTP waits for url to answer 200, failing early with the component's
// log if its process died.
func (c *Cluster) waitHTTP(ctx context.Context, name, url string, tlsCfg *tls.Config) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	return c.waitFor(ctx, name, 2*time.Minute, func(context.Context) (bool, error) {
		resp, err := client.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func (c *Cluster) waitFor(ctx context.Context, name string, timeout time.Duration, cond wait.ConditionWithContextFunc) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if _, ok := c.running(name); !ok {
			return false, fmt.Errorf("%s is not running", name)
		}
		return cond(ctx)
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w; last log lines:\n%s", name, err, c.logTail(name, 30))
	}
	return nil
}

// Package render turns a machine's node configuration (pxe/httpboot's
// NodeConfig, with its join token) into the files the node needs before
// kubelet and flanneld start. It is pure: the same input gives the same
// files, byte for byte and in the same order; cmd/kubefarm-agent writes
// them under a root.
//
// The paths are those the node image's units read
// (images/node/rootfs/etc/systemd/system: kubelet.service's --config,
// --bootstrap-kubeconfig and /etc/default/kubelet; flanneld.service's
// /etc/kube-flannel/net-conf.json and /etc/default/flanneld).
package render

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// The files, as absolute paths inside the node's root.
const (
	BootstrapKubeconfig = "/etc/kubernetes/bootstrap-kubelet.conf"
	CACert              = "/etc/kubernetes/pki/ca.crt"
	KubeletConfig       = "/var/lib/kubelet/config.yaml"
	KubeletEnv          = "/etc/default/kubelet"
	FlannelNetConf      = "/etc/kube-flannel/net-conf.json"
	FlannelEnv          = "/etc/default/flanneld"
	Hostname            = "/etc/hostname"
	Localtime           = "/etc/localtime"
	Timezone            = "/etc/timezone"
	AuthorizedKeys      = "/root/.ssh/authorized_keys"
	Shadow              = "/etc/shadow"
	// ContainerdHostsDir is containerd's config_path (the image's
	// /etc/containerd/config.toml): one <registry>/hosts.toml per mirror.
	ContainerdHostsDir = "/etc/containerd/certs.d"
)

// Modes: anything holding a secret (the join token, a password hash, and
// root's keys, which sshd insists on) is 0600.
const (
	modeSecret fs.FileMode = 0o600
	modePublic fs.FileMode = 0o644
)

// File is one file to write. Symlink, when set, makes it a symbolic link
// to that target instead (Data and Mode unused).
type File struct {
	Path    string
	Mode    fs.FileMode
	Data    []byte
	Symlink string
}

// Input is what the files are made of.
type Input struct {
	Config nodeconfig.NodeConfig
	// BootIface is the interface the machine booted on: flanneld's
	// interface, whose address is the node's, unless the configuration's
	// network moves the node onto another link.
	BootIface string
	// BootMAC is the boot interface's MAC, which a bond carrying the boot
	// address takes.
	BootMAC string
	// Shadow is the root's current /etc/shadow; it is needed only when the
	// configuration sets a root password hash.
	Shadow []byte
}

// Result is the files, and what of the configuration was left out.
type Result struct {
	Files []File
	// DroppedLabels are the labels kubelet may not set on its own Node
	// (NodeRestriction, and kubelet's own check of --node-labels): those
	// in the kubernetes.io and k8s.io namespaces other than the few kubelet
	// owns, node-role.kubernetes.io/* among them. The manager sets them on
	// the Node with its own credential.
	DroppedLabels []string
}

// DefaultClusterDomain is used when the tenant facts carry none.
const DefaultClusterDomain = "cluster.local"

// Render makes the files of in, sorted by path.
func Render(in Input) (Result, error) {
	nc := in.Config
	if errs := validation.IsDNS1123Label(nc.Hostname); nc.Hostname == "" || len(errs) > 0 {
		return Result{}, fmt.Errorf("node configuration of machine %s: hostname %q is not a DNS label", nc.Machine, nc.Hostname)
	}
	if nc.JoinToken == "" {
		return Result{}, fmt.Errorf("node configuration of machine %s: joinToken is empty", nc.Machine)
	}
	var res Result
	add := func(f File) { res.Files = append(res.Files, f) }

	kc, err := bootstrapKubeconfig(nc)
	if err != nil {
		return Result{}, err
	}
	add(File{Path: BootstrapKubeconfig, Mode: modeSecret, Data: kc})
	add(File{Path: CACert, Mode: modePublic, Data: nc.CACert})

	cfg, err := kubeletConfiguration(nc)
	if err != nil {
		return Result{}, err
	}
	add(File{Path: KubeletConfig, Mode: modePublic, Data: cfg})

	env, dropped, err := kubeletEnv(nc)
	if err != nil {
		return Result{}, err
	}
	res.DroppedLabels = dropped
	add(File{Path: KubeletEnv, Mode: modePublic, Data: env})

	netFiles, err := Networkd(nc.Network, in.BootIface, in.BootMAC)
	if err != nil {
		return Result{}, fmt.Errorf("node configuration of machine %s: network: %w", nc.Machine, err)
	}
	res.Files = append(res.Files, netFiles...)
	netconf, flannelEnv, err := flannel(nc, NodeIface(nc.Network, in.BootIface, in.BootMAC))
	if err != nil {
		return Result{}, err
	}
	add(File{Path: FlannelNetConf, Mode: modePublic, Data: netconf})
	add(File{Path: FlannelEnv, Mode: modePublic, Data: flannelEnv})

	add(File{Path: Hostname, Mode: modePublic, Data: []byte(nc.Hostname + "\n")})

	for i, m := range nc.RegistryMirrors {
		hosts, err := containerdHosts(m)
		if err != nil {
			return Result{}, fmt.Errorf("node configuration of machine %s: registryMirrors[%d]: %w", nc.Machine, i, err)
		}
		add(File{Path: ContainerdHostsDir + "/" + m.Registry + "/hosts.toml", Mode: modePublic, Data: hosts})
	}

	if nc.Timezone != "" {
		if !validTimezone(nc.Timezone) {
			return Result{}, fmt.Errorf("node configuration of machine %s: timezone %q is not a zoneinfo name", nc.Machine, nc.Timezone)
		}
		add(File{Path: Localtime, Symlink: "/usr/share/zoneinfo/" + nc.Timezone})
		add(File{Path: Timezone, Mode: modePublic, Data: []byte(nc.Timezone + "\n")})
	}
	if len(nc.SSHAuthorizedKeys) > 0 {
		var b bytes.Buffer
		for i, k := range nc.SSHAuthorizedKeys {
			k = strings.TrimSpace(k)
			if k == "" || strings.ContainsAny(k, "\n\r\x00") {
				return Result{}, fmt.Errorf("node configuration of machine %s: sshAuthorizedKeys[%d] is empty or spans lines", nc.Machine, i)
			}
			b.WriteString(k + "\n")
		}
		add(File{Path: AuthorizedKeys, Mode: modeSecret, Data: b.Bytes()})
	}
	if nc.RootPasswordHash != "" {
		shadow, err := SetRootPassword(in.Shadow, nc.RootPasswordHash)
		if err != nil {
			return Result{}, fmt.Errorf("node configuration of machine %s: rootPasswordHash: %w", nc.Machine, err)
		}
		add(File{Path: Shadow, Mode: modeSecret, Data: shadow})
	}
	sort.Slice(res.Files, func(i, j int) bool { return res.Files[i].Path < res.Files[j].Path })
	return res, nil
}

// The shapes the API allows (api/v1alpha1.RegistryMirror), checked again
// here: the configuration came over the network, and a registry name
// becomes a folder name.
var (
	registryRE = regexp.MustCompile(kubefarmv1.RegistryPattern)
	endpointRE = regexp.MustCompile(kubefarmv1.MirrorEndpointPattern)
)

// containerdHosts is one registry's hosts.toml: the mirrors in order, for
// pulling and resolving, then the registry itself (server).
func containerdHosts(m kubefarmv1.RegistryMirror) ([]byte, error) {
	if len(m.Registry) > 253 || !registryRE.MatchString(m.Registry) || strings.Contains(m.Registry, "..") {
		return nil, fmt.Errorf("registry %q is not a host name with an optional port", m.Registry)
	}
	if len(m.Endpoints) == 0 || len(m.Endpoints) > kubefarmv1.MaxMirrorEndpoints {
		return nil, fmt.Errorf("registry %s: 1 to %d endpoints, not %d", m.Registry, kubefarmv1.MaxMirrorEndpoints, len(m.Endpoints))
	}
	var b bytes.Buffer
	// docker.io's images live at registry-1.docker.io.
	server := "https://" + m.Registry
	if m.Registry == "docker.io" {
		server = "https://registry-1.docker.io"
	}
	fmt.Fprintf(&b, "server = %q\n", server)
	for _, e := range m.Endpoints {
		if len(e) > 255 || !endpointRE.MatchString(e) {
			return nil, fmt.Errorf("registry %s: endpoint %q is not an http or https URL without a path", m.Registry, e)
		}
		fmt.Fprintf(&b, "\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", strings.TrimSuffix(e, "/"))
	}
	return b.Bytes(), nil
}

// bootstrapKubeconfig is kubelet's --bootstrap-kubeconfig: the tenant API
// server and CA, and the join token as a bearer token. kubelet uses it once,
// to request its client certificate, then writes /etc/kubernetes/kubelet.conf.
func bootstrapKubeconfig(nc nodeconfig.NodeConfig) ([]byte, error) {
	u, err := url.Parse(nc.APIServer)
	if nc.APIServer == "" || err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("node configuration of machine %s: apiServer %q is not an https URL (has kubefarm-pxe a source of tenant facts?)", nc.Machine, nc.APIServer)
	}
	if !bytes.Contains(nc.CACert, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("node configuration of machine %s: caCert is not a PEM certificate", nc.Machine)
	}
	const name = "tenant"
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{name: {Server: nc.APIServer, CertificateAuthorityData: nc.CACert}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"kubelet-bootstrap": {Token: nc.JoinToken}},
		Contexts:       map[string]*clientcmdapi.Context{name: {Cluster: name, AuthInfo: "kubelet-bootstrap"}},
		CurrentContext: name,
	}
	b, err := clientcmd.Write(cfg)
	if err != nil {
		// clientcmd's errors do not quote values, but the token is in
		// there: say only which file failed.
		return nil, errors.New("encoding the bootstrap kubeconfig failed")
	}
	return b, nil
}

// registerTaints are the taints the Node starts with: the pool's and the
// network taint. kubefarm-pxe already puts the network taint in; it is
// added here too in case it did not, since the scheduling guarantee rests
// on it.
func registerTaints(nc nodeconfig.NodeConfig) []corev1.Taint {
	taints := make([]corev1.Taint, 0, len(nc.Taints)+1)
	taints = append(taints, nc.Taints...)
	if !slices.ContainsFunc(taints, func(t corev1.Taint) bool {
		return t.Key == nodeconfig.NetworkUnavailableTaint.Key && t.Effect == nodeconfig.NetworkUnavailableTaint.Effect
	}) {
		taints = append(taints, nodeconfig.NetworkUnavailableTaint)
	}
	return taints
}

// kubeletConfiguration is /var/lib/kubelet/config.yaml.
func kubeletConfiguration(nc nodeconfig.NodeConfig) ([]byte, error) {
	yes := true
	no := false
	domain := nc.ClusterDomain
	if domain == "" {
		domain = DefaultClusterDomain
	}
	for i, ip := range nc.ClusterDNS {
		if net.ParseIP(ip) == nil {
			return nil, fmt.Errorf("node configuration of machine %s: clusterDNS[%d] %q is not an IP address", nc.Machine, i, ip)
		}
	}
	taints := registerTaints(nc)
	kc := kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: kubeletv1beta1.SchemeGroupVersion.String(), Kind: "KubeletConfiguration"},
		Authentication: kubeletv1beta1.KubeletAuthentication{
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: &no},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: &yes},
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: CACert},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		// The node image's containerd runs runc with SystemdCgroup = true;
		// kubelet must agree, and systemd is PID 1.
		CgroupDriver:             "systemd",
		ClusterDNS:               nc.ClusterDNS,
		ClusterDomain:            domain,
		ContainerRuntimeEndpoint: "unix:///run/containerd/containerd.sock",
		// The client certificate rotates; the serving certificate is
		// requested as a CSR that kubefarm-manager approves only for the
		// machine's names and IP (controllers/csrapproval).
		RotateCertificates: true,
		ServerTLSBootstrap: true,
		RegisterWithTaints: taints,
		// The root is a tmpfs overlay: no swap to speak of, and kubelet
		// must not refuse to run on the overlay's accounting.
		FailSwapOn: &no,
		// Every boot starts with an empty image store (containerd's state
		// is a tmpfs), so each boot pulls every DaemonSet's image again.
		// Pulled one at a time, the first workload pod waits behind all of
		// them; containerd pulls in parallel safely. No cap
		// (maxParallelImagePulls unset), so a pool's extraArgs
		// serialize-image-pulls=true still makes a valid configuration.
		SerializeImagePulls: &no,
	}
	if nc.Kubelet.MaxPods > 0 {
		kc.MaxPods = nc.Kubelet.MaxPods
	}
	// The upstream type marshals its unset durations as "0s" (and a few
	// blocks as {}): kubelet's defaulting treats a zero value as unset, so
	// they get kubelet's defaults, as if absent.
	b, err := yaml.Marshal(kc)
	if err != nil {
		return nil, fmt.Errorf("kubelet configuration of machine %s: %w", nc.Machine, err)
	}
	return b, nil
}

// kubeletEnv is /etc/default/kubelet: KUBELET_EXTRA_ARGS, which the unit
// splits on whitespace. The hostname is the node name (the CSR approver and
// the manager find the Node by it); labels kubelet may set go in
// --node-labels; the pool's extra arguments follow, sorted.
func kubeletEnv(nc nodeconfig.NodeConfig) ([]byte, []string, error) {
	args := []string{"--hostname-override=" + nc.Hostname}
	if ip := NodeIP(nc.Network); ip != "" {
		args = append(args, "--node-ip="+ip)
	}
	labels, dropped, err := kubeletLabels(nc)
	if err != nil {
		return nil, nil, err
	}
	keep := make([]string, 0, len(labels))
	for k, v := range labels {
		keep = append(keep, k+"="+v)
	}
	sort.Strings(keep)
	if len(keep) > 0 {
		args = append(args, "--node-labels="+strings.Join(keep, ","))
	}
	names := make([]string, 0, len(nc.Kubelet.ExtraArgs))
	for k := range nc.Kubelet.ExtraArgs {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		a := "--" + strings.TrimLeft(k, "-") + "=" + nc.Kubelet.ExtraArgs[k]
		if !safeArg(a) {
			return nil, nil, fmt.Errorf("node configuration of machine %s: kubelet.extraArgs[%q]: whitespace, quotes, '$' or '\\' would not survive the unit's word splitting", nc.Machine, k)
		}
		args = append(args, a)
	}
	return []byte("KUBELET_EXTRA_ARGS=\"" + strings.Join(args, " ") + "\"\n"), dropped, nil
}

// kubeletLabels splits the machine's labels into those the kubelet may set
// on its own Node (validated) and the others, sorted, which the manager sets.
func kubeletLabels(nc nodeconfig.NodeConfig) (map[string]string, []string, error) {
	keep := map[string]string{}
	var dropped []string
	for k, v := range nc.Labels {
		if !nodeconfig.KubeletMaySet(k) {
			dropped = append(dropped, k)
			continue
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, nil, fmt.Errorf("node configuration of machine %s: label %q: %s", nc.Machine, k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, nil, fmt.Errorf("node configuration of machine %s: label %q value %q: %s", nc.Machine, k, v, strings.Join(errs, "; "))
		}
		keep[k] = v
	}
	sort.Strings(dropped)
	return keep, dropped, nil
}

// Node is the Node the kubelet registers for nc: its name, the labels of
// --node-labels and the taints of registerWithTaints, nothing else.
// kubefarm-agent creates it with the kubelet's own credential as soon as
// the kubelet has one. The kubelet sets up its CSINode right then and
// retries that only 0.03, 0.27 and 2.2 s later, then not before 17.6 s;
// its own registration comes after more start-up than that on a slow
// machine, and until the CSINode is set up the Node stays NotReady. A
// kubelet that finds its Node already there adds its default labels
// (hostname, OS, architecture) and keeps these; it does not apply
// registerWithTaints to an existing Node, hence the taints here.
func Node(nc nodeconfig.NodeConfig) (*corev1.Node, error) {
	labels, _, err := kubeletLabels(nc)
	if err != nil {
		return nil, err
	}
	return &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: nc.Hostname, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: registerTaints(nc)},
	}, nil
}

func safeArg(a string) bool {
	for i := 0; i < len(a); i++ {
		c := a[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\'' || c == '$' || c == '\\' {
			return false
		}
	}
	return true
}

// flannel is flanneld's network configuration (the tenant's pod network,
// host-gw: the machines of one pool share a boot network) and its
// environment (the node name it looks up its pod CIDR by, the interface it
// routes over).
func flannel(nc nodeconfig.NodeConfig, iface string) (netconf, env []byte, err error) {
	if _, _, err := net.ParseCIDR(nc.PodCIDR); err != nil {
		return nil, nil, fmt.Errorf("node configuration of machine %s: podCIDR %q is not a CIDR", nc.Machine, nc.PodCIDR)
	}
	if iface == "" || strings.ContainsAny(iface, " \t\n\"'$\\/") {
		return nil, nil, fmt.Errorf("machine %s: boot interface %q is not usable as FLANNELD_IFACE", nc.Machine, iface)
	}
	netconf = []byte(`{"Network": "` + nc.PodCIDR + `", "Backend": {"Type": "host-gw"}}` + "\n")
	env = []byte("NODE_NAME=" + nc.Hostname + "\nFLANNELD_IFACE=" + iface + "\n")
	return netconf, env, nil
}

// validTimezone accepts zoneinfo names: letters, digits, '_', '-', '+' and
// '/' between non-empty parts, nothing that climbs out of zoneinfo.
func validTimezone(tz string) bool {
	if len(tz) > 64 {
		return false
	}
	for _, part := range strings.Split(tz, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
		for _, c := range part {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '+') {
				return false
			}
		}
	}
	return true
}

// SetRootPassword returns shadow with root's password field set to hash
// (crypt(3) form: $id$salt$digest). Other lines are kept as they are.
func SetRootPassword(shadow []byte, hash string) ([]byte, error) {
	if !strings.HasPrefix(hash, "$") || strings.ContainsAny(hash, ":\n\r\x00 ") {
		return nil, errors.New("not a crypt(3) hash ($id$salt$digest, no ':' or whitespace)")
	}
	lines := strings.SplitAfter(string(shadow), "\n")
	found := false
	for i, l := range lines {
		body := strings.TrimSuffix(l, "\n")
		fields := strings.Split(body, ":")
		if len(fields) < 2 || fields[0] != "root" {
			continue
		}
		fields[1] = hash
		lines[i] = strings.Join(fields, ":") + l[len(body):]
		found = true
	}
	if !found {
		return nil, errors.New("/etc/shadow has no root entry")
	}
	return []byte(strings.Join(lines, "")), nil
}

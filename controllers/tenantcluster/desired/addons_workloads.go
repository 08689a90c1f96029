package desired

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

var (
	daemonSetMeta    = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"}
	addonDeployMeta  = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	addonServiceMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
)

const (
	konnectivityAgentName = "konnectivity-agent"
	kubeProxyName         = "kube-proxy"
	coreDNSName           = "coredns"

	// konnectivityAudience must equal konnectivity-server's
	// --authentication-audience (KonnectivityServerFlags), and the
	// ServiceAccount kube-system/konnectivity-agent its --agent-namespace
	// and --agent-service-account.
	konnectivityAudience = "system:konnectivity-server"

	// Critical priority classes exist in every cluster and may only be used
	// in kube-system. Node-level daemons get the highest, so a full node
	// evicts ordinary pods rather than its networking.
	priorityNodeCritical    = "system-node-critical"
	priorityClusterCritical = "system-cluster-critical"

	// The service-account volume every pod with automountServiceAccountToken
	// gets; kube-proxy uses its token and ca.crt from there.
	saDir = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// tolerateAll lets a node daemon run on every node whatever its taints: a
// node without kube-proxy or a Konnectivity agent has broken Services or no
// logs/exec, which makes its problems harder to diagnose, not easier.
func tolerateAll() []corev1.Toleration {
	return []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
}

// daemonSetUpdate rolls node daemons a tenth of the nodes at a time: a farm
// has hundreds or thousands of nodes, and restarting kube-proxy or an agent
// does not disturb established traffic (rules and connections persist while
// the pod restarts), so the default of one node at a time would only make
// an upgrade take hours.
func daemonSetUpdate() appsv1.DaemonSetUpdateStrategy {
	tenth := intstr.FromString("10%")
	return appsv1.DaemonSetUpdateStrategy{
		Type:          appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &tenth},
	}
}

func envFromField(name, fieldPath string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		APIVersion: "v1", FieldPath: fieldPath,
	}}}
}

// konnectivityAgentDaemonSet runs one agent per node. Each agent dials
// konnectivity-server (through the API server Service, at host:port) and
// kube-apiserver's traffic to nodes and pods flows back over those tunnels.
//
// The agent authenticates with a projected service-account token whose
// audience is konnectivity-server's (so the token is useless against the
// API server), valid for an hour and rotated by the kubelet. It verifies the
// server with the cluster CA from the kube-root-ca.crt ConfigMap, which
// kube-controller-manager publishes in every namespace: the
// konnectivity-server certificate is issued by that CA. No other token is
// mounted: the agent never calls the API server.
//
// The agent identifies itself by node name and host IP, so that
// konnectivity-server's destHost strategy sends traffic for a node (logs,
// exec, port-forward go to the kubelet at the node's address) through that
// node's own agent. The address family of the identifier follows the
// tenant's Service CIDR; a mismatch only makes the server fall back to any
// agent (the "default" strategy).
func konnectivityAgentDaemonSet(c *Cluster, host string, port int32) *appsv1.DaemonSet {
	const (
		tokenDir  = "/var/run/secrets/tokens"
		tokenFile = "konnectivity-agent-token"
		caFile    = "ca.crt"
		volume    = "konnectivity-agent-token"
	)
	ipKey := "ipv4"
	if isIPv6Cluster(c) {
		ipKey = "ipv6"
	}
	args := sortedUnique([]string{
		"--admin-server-port=" + strconv.Itoa(int(KonnectivityAdminPort)),
		// Identifiers are a URL query; $(VAR) is expanded by the kubelet.
		"--agent-identifiers=host=$(NODE_NAME)&" + ipKey + "=$(HOST_IP)",
		"--ca-cert=" + path.Join(tokenDir, caFile),
		"--health-server-port=" + strconv.Itoa(int(KonnectivityHealthPort)),
		"--proxy-server-host=" + host,
		"--proxy-server-port=" + strconv.Itoa(int(port)),
		"--service-account-token-path=" + path.Join(tokenDir, tokenFile),
		// Keep looking for servers after reaching the expected count, so
		// that scaling kube-apiserver up gives the new replicas agents.
		"--sync-forever=true",
	})
	sel := map[string]string{labelK8sApp: konnectivityAgentName}
	ctr := container(konnectivityAgentName, c.Images.Registry+"/kas-network-proxy/proxy-agent:"+c.Images.KonnectivityTag,
		[]string{"/proxy-agent"}, args)
	ctr.Env = []corev1.EnvVar{envFromField("HOST_IP", "status.hostIP"), envFromField("NODE_NAME", "spec.nodeName")}
	ctr.Ports = []corev1.ContainerPort{{Name: "health", ContainerPort: KonnectivityHealthPort, Protocol: corev1.ProtocolTCP}}
	ctr.VolumeMounts = []corev1.VolumeMount{{Name: volume, MountPath: tokenDir, ReadOnly: true}}
	ctr.LivenessProbe = httpProbe("/healthz", KonnectivityHealthPort, corev1.URISchemeHTTP, 10, 3)
	ctr.LivenessProbe.InitialDelaySeconds = 15
	ctr.Resources = requests("10m", "32Mi")

	expiry := int64(3600)
	return &appsv1.DaemonSet{
		TypeMeta:   daemonSetMeta,
		ObjectMeta: addonMeta(nsKubeSystem, konnectivityAgentName, sel),
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: sel},
			UpdateStrategy: daemonSetUpdate(),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{
					ServiceAccountName:           konnectivityAgentName,
					AutomountServiceAccountToken: ptrTo(false),
					PriorityClassName:            priorityNodeCritical,
					Tolerations:                  tolerateAll(),
					NodeSelector:                 map[string]string{corev1.LabelOSStable: "linux"},
					SecurityContext:              podSecurityContext(),
					Containers:                   []corev1.Container{ctr},
					Volumes: []corev1.Volume{{
						Name: volume,
						VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
							Sources: []corev1.VolumeProjection{
								{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
									Audience: konnectivityAudience, ExpirationSeconds: &expiry, Path: tokenFile,
								}},
								{ConfigMap: &corev1.ConfigMapProjection{
									LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
									Items:                []corev1.KeyToPath{{Key: caFile, Path: caFile}},
								}},
							},
						}},
					}},
				},
			},
		},
	}
}

// KubeProxyConfiguration is kubeproxy.config.k8s.io/v1alpha1
// KubeProxyConfiguration, limited to the fields kubefarm sets.
type KubeProxyConfiguration struct {
	APIVersion       string              `json:"apiVersion"`
	Kind             string              `json:"kind"`
	ClientConnection KubeProxyClientConn `json:"clientConnection"`
	ClusterCIDR      string              `json:"clusterCIDR,omitempty"`
	Mode             string              `json:"mode"`
	IPVS             *KubeProxyIPVS      `json:"ipvs,omitempty"`
}

// KubeProxyClientConn is how kube-proxy reaches the API server.
type KubeProxyClientConn struct {
	Kubeconfig string `json:"kubeconfig"`
}

// KubeProxyIPVS configures the ipvs mode.
type KubeProxyIPVS struct {
	Scheduler string `json:"scheduler"`
	StrictARP bool   `json:"strictARP"`
}

const (
	kubeProxyDir        = "/var/lib/kube-proxy"
	kubeProxyConfigKey  = "config.conf"
	kubeProxyKubeconfig = "kubeconfig.conf"
)

// kubeProxyConfigMap holds kube-proxy's configuration and kubeconfig.
//
// clusterCIDR (the pod CIDR, when the tenant has one) lets kube-proxy tell
// pod traffic from external traffic, to masquerade only the latter. In
// ipvs mode, strictARP stops nodes from answering ARP for Service addresses
// that ipvs puts on its dummy interface; bare-metal load balancers that
// announce addresses by ARP (MetalLB in L2 mode) require it, and without
// one it changes nothing visible. nftables needs nothing beyond defaults.
//
// The kubeconfig points at the external endpoint, not the kubernetes
// Service: kube-proxy is what makes Service addresses work, so it cannot
// depend on one. It authenticates with the pod's service-account token and
// trusts the CA of the same volume (kube-root-ca.crt, the cluster CA), both
// re-read from files, so token rotation needs nothing from us.
func kubeProxyConfigMap(c *Cluster, endpoint string, mode v1alpha1.KubeProxyMode) (*corev1.ConfigMap, error) {
	cfg := KubeProxyConfiguration{
		APIVersion:       "kubeproxy.config.k8s.io/v1alpha1",
		Kind:             "KubeProxyConfiguration",
		ClientConnection: KubeProxyClientConn{Kubeconfig: path.Join(kubeProxyDir, kubeProxyKubeconfig)},
		ClusterCIDR:      validPodCIDR(c.PodCIDR),
		Mode:             string(mode),
	}
	if mode == "ipvs" {
		cfg.IPVS = &KubeProxyIPVS{Scheduler: "rr", StrictARP: true}
	}
	conf, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy configuration: %w", err)
	}
	kc, err := clientcmd.Write(clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"default": {
			Server: endpoint, CertificateAuthority: path.Join(saDir, "ca.crt"),
		}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{"default": {TokenFile: path.Join(saDir, "token")}},
		Contexts: map[string]*clientcmdapi.Context{"default": {
			Cluster: "default", AuthInfo: "default", Namespace: nsKubeSystem,
		}},
		CurrentContext: "default",
	})
	if err != nil {
		return nil, fmt.Errorf("kube-proxy kubeconfig: %w", err)
	}
	return &corev1.ConfigMap{
		TypeMeta:   configMapMeta,
		ObjectMeta: addonMeta(nsKubeSystem, kubeProxyName, map[string]string{labelK8sApp: kubeProxyName}),
		Data:       map[string]string{kubeProxyConfigKey: string(conf), kubeProxyKubeconfig: string(kc)},
	}, nil
}

func kubeProxyClusterRoleBinding() *rbacv1.ClusterRoleBinding {
	return clusterRoleBinding("kubefarm:node-proxier", "system:node-proxier", rbacv1.Subject{
		Kind: rbacv1.ServiceAccountKind, Namespace: nsKubeSystem, Name: kubeProxyName,
	})
}

// configHash hashes a ConfigMap's data in key order with length prefixes.
func configHash(cm *corev1.ConfigMap) string {
	h := sha256.New()
	for _, k := range sortedKeys(cm.Data) {
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(cm.Data[k]), cm.Data[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// kubeProxyDaemonSet runs kube-proxy on every node, in the host's network
// namespace and privileged, because it programs the host's iptables, ipvs
// or nftables and loads kernel modules. The pod template carries a hash of
// its ConfigMap: kube-proxy reads its configuration once, so a changed mode
// or endpoint must roll the pods.
func kubeProxyDaemonSet(c *Cluster, cm *corev1.ConfigMap) *appsv1.DaemonSet {
	sel := map[string]string{labelK8sApp: kubeProxyName}
	hostPath := func(name, p string, t corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: p, Type: &t}}}
	}
	ctr := corev1.Container{
		Name:            kubeProxyName,
		Image:           c.kubeImage(kubeProxyName),
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command: []string{
			"/usr/local/bin/kube-proxy",
			"--config=" + path.Join(kubeProxyDir, kubeProxyConfigKey),
			// The node's name as registered by its kubelet, not the
			// hostname kube-proxy would read, so the two always agree.
			"--hostname-override=$(NODE_NAME)",
		},
		Env:             []corev1.EnvVar{envFromField("NODE_NAME", "spec.nodeName")},
		SecurityContext: &corev1.SecurityContext{Privileged: ptrTo(true)},
		VolumeMounts: []corev1.VolumeMount{
			{Name: kubeProxyName, MountPath: kubeProxyDir, ReadOnly: true},
			{Name: "lib-modules", MountPath: "/lib/modules", ReadOnly: true},
			// Shared with every other iptables user on the host, so their
			// updates do not interleave with kube-proxy's.
			{Name: "xtables-lock", MountPath: "/run/xtables.lock"},
		},
		Resources:                requests("50m", "64Mi"),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	return &appsv1.DaemonSet{
		TypeMeta:   daemonSetMeta,
		ObjectMeta: addonMeta(nsKubeSystem, kubeProxyName, sel),
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: sel},
			UpdateStrategy: daemonSetUpdate(),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel, Annotations: map[string]string{v1alpha1.AnnotationChecksum: configHash(cm)}},
				Spec: corev1.PodSpec{
					ServiceAccountName: kubeProxyName,
					// Needed: the kubeconfig uses this token.
					AutomountServiceAccountToken: ptrTo(true),
					HostNetwork:                  true,
					PriorityClassName:            priorityNodeCritical,
					Tolerations:                  tolerateAll(),
					NodeSelector:                 map[string]string{corev1.LabelOSStable: "linux"},
					Containers:                   []corev1.Container{ctr},
					Volumes: []corev1.Volume{
						{Name: kubeProxyName, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: kubeProxyName},
						}}},
						hostPath("lib-modules", "/lib/modules", corev1.HostPathDirectory),
						hostPath("xtables-lock", "/run/xtables.lock", corev1.HostPathFileOrCreate),
					},
				},
			},
		},
	}
}

// coreDNSRBAC lets CoreDNS's kubernetes plugin watch what it serves.
func coreDNSRBAC() (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	const name = "kubefarm:coredns"
	return &rbacv1.ClusterRole{
			TypeMeta:   clusterRoleMeta,
			ObjectMeta: addonMeta("", name, nil),
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"endpoints", "namespaces", "pods", "services"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
			},
		}, clusterRoleBinding(name, name, rbacv1.Subject{
			Kind: rbacv1.ServiceAccountKind, Namespace: nsKubeSystem, Name: coreDNSName,
		})
}

// Corefile is the CoreDNS configuration, as kubeadm's in substance:
// cluster names answered from the API (pod A records "insecure", i.e.
// without checking the pod exists, which is what kube-dns did and what
// some workloads rely on), reverse zones fall through to upstream when not
// ours, everything else forwarded to the node's resolvers; health with a
// lameduck period so a terminating replica drains, ready for the readiness
// probe, metrics on :9153, and reload so a changed ConfigMap needs no
// restart.
func Corefile(c *Cluster) string {
	return fmt.Sprintf(`.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes %s in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
        max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
`, c.ClusterDomain)
}

func coreDNSConfigMap(c *Cluster) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   configMapMeta,
		ObjectMeta: addonMeta(nsKubeSystem, coreDNSName, map[string]string{labelK8sApp: "kube-dns"}),
		Data:       map[string]string{"Corefile": Corefile(c)},
	}
}

// coreDNSService is kube-dns, the name every Kubernetes distribution uses,
// at the address the kubelets hand to pods (clusterDNS).
func coreDNSService(c *Cluster) *corev1.Service {
	sel := map[string]string{labelK8sApp: "kube-dns"}
	return &corev1.Service{
		TypeMeta:   addonServiceMeta,
		ObjectMeta: addonMeta(nsKubeSystem, "kube-dns", sel),
		Spec: corev1.ServiceSpec{
			ClusterIP: c.DNSServiceIP.String(),
			Selector:  sel,
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("dns")},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("dns-tcp")},
				{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("metrics")},
			},
		},
	}
}

// coreDNSDeployment runs two CoreDNS replicas, preferably on different
// nodes, so a node reboot during a rolling update does not stop DNS. It uses
// the node's resolvers (dnsPolicy Default) for upstream queries, never
// itself. Like upstream, it runs with only NET_BIND_SERVICE (port 53), a
// read-only root and no privilege escalation.
func coreDNSDeployment(c *Cluster) *appsv1.Deployment {
	sel := map[string]string{labelK8sApp: "kube-dns"}
	ctr := corev1.Container{
		Name:            coreDNSName,
		Image:           c.Images.Registry + "/coredns/coredns:" + c.Images.CoreDNSTag,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Args:            []string{"-conf", "/etc/coredns/Corefile"},
		Ports: []corev1.ContainerPort{
			{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
			{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
			{Name: "metrics", ContainerPort: 9153, Protocol: corev1.ProtocolTCP},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("70Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("170Mi")},
		},
		LivenessProbe:  httpProbe("/health", 8080, corev1.URISchemeHTTP, 10, 5),
		ReadinessProbe: httpProbe("/ready", 8181, corev1.URISchemeHTTP, 10, 3),
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptrTo(false),
			ReadOnlyRootFilesystem:   ptrTo(true),
			Capabilities: &corev1.Capabilities{
				Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"},
			},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	ctr.LivenessProbe.InitialDelaySeconds = 60
	one := intstr.FromInt32(1)
	return &appsv1.Deployment{
		TypeMeta:   addonDeployMeta,
		ObjectMeta: addonMeta(nsKubeSystem, coreDNSName, sel),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptrTo(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &one},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{
					ServiceAccountName: coreDNSName,
					PriorityClassName:  priorityClusterCritical,
					DNSPolicy:          corev1.DNSDefault,
					NodeSelector:       map[string]string{corev1.LabelOSStable: "linux"},
					Tolerations:        []corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists}},
					SecurityContext: &corev1.PodSecurityContext{
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
							Weight: 100,
							PodAffinityTerm: corev1.PodAffinityTerm{
								LabelSelector: &metav1.LabelSelector{MatchLabels: sel},
								TopologyKey:   corev1.LabelHostname,
							},
						}},
					}},
					Containers: []corev1.Container{ctr},
					Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: coreDNSName},
							Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
						},
					}}},
				},
			},
		},
	}
}

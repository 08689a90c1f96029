package desired

import (
	"encoding/pem"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// The tenant add-ons are the objects kubefarm applies inside each tenant
// cluster, with server-side apply and the super-admin identity, once its API
// server answers. They are what kubeadm would install on a cluster it
// creates (bootstrap-token RBAC, cluster-info, kubelet configuration,
// kube-proxy, CoreDNS), plus the Konnectivity agent, a policy that closes
// a server-side request forgery hole of multi-tenant clusters, and one that
// keeps kubefarm-pxe's token issuer to creating bootstrap tokens. They are our
// own objects, not kubeadm's: names use the "kubefarm:" prefix where kubeadm
// uses "kubeadm:", and "system:" (reserved for Kubernetes) is never used for
// an object we create.

// AddonInputs are the facts the add-ons need that the Cluster does not hold.
type AddonInputs struct {
	// Endpoint is the external https URL of the tenant API server (what
	// nodes use), e.g. https://10.0.0.5:31443. Empty: not known yet.
	Endpoint string
	// CACert is the PEM of the tenant's cluster CA (ca.crt).
	CACert []byte
	// KonnectivityEndpoint is "host:port" where Konnectivity agents on the
	// tenant's nodes reach konnectivity-server. The agents dial the same
	// Service as the API server, on its Konnectivity port; only the
	// reconciler knows the port a node can reach: with a NodePort Service
	// it is the node port assigned to that Service port, not
	// KonnectivityAgentPort. Empty: the host of Endpoint and
	// KonnectivityAgentPort, which is right for LoadBalancer and
	// ExternalIP. The host must be a name or address in the
	// konnectivity-server certificate (the external address or a certSAN),
	// since the agent verifies it.
	KonnectivityEndpoint string
	// KubeProxyMode is spec.kubeProxy.mode; empty means iptables, the CRD
	// default. "none" installs no kube-proxy.
	// TODO: move to Cluster once Resolve fills it.
	KubeProxyMode v1alpha1.KubeProxyMode
	// CoreDNS is spec.addons.coreDNS with its default (true) applied: the
	// caller turns a nil pointer into true.
	// TODO: move to Cluster once Resolve fills it.
	CoreDNS bool
	// ProbeHostPolicy is spec.addons.probeHostPolicy with its default
	// (true) applied.
	// TODO: move to Cluster once Resolve fills it.
	ProbeHostPolicy bool
}

// GroupBootstrappers is the group of the bootstrap tokens kubefarm issues to
// machines (the token Secret's auth-extra-groups). The RBAC that lets a node
// join is bound to this group rather than to the generic
// system:bootstrappers, which every bootstrap token is in: a token someone
// creates by other means (kubeadm token create, a stray Secret in
// kube-system) then cannot join a node.
const GroupBootstrappers = "system:bootstrappers:kubefarm:default-node-token"

// Names of the kubelet configuration ConfigMap and its key, which nodes (or
// kubefarm-pxe on their behalf) read. kubeadm uses the same names, so tools
// that look for them find them.
const (
	KubeletConfigMapName = "kubelet-config"
	KubeletConfigKey     = "kubelet"
)

// ProbeHostPolicyName names the ValidatingAdmissionPolicy (and its binding)
// that rejects probe and lifecycle hosts.
const ProbeHostPolicyName = "kubefarm-deny-probe-host"

const (
	nsKubeSystem = metav1.NamespaceSystem
	nsKubePublic = metav1.NamespacePublic

	groupNodes    = "system:nodes"
	userAnonymous = "system:anonymous"

	clusterInfoName = "cluster-info"
	clusterInfoKey  = "kubeconfig"

	// Conventional label of kube-system add-ons; dashboards, kubectl
	// examples and CNI documentation select on it (k8s-app=kube-dns).
	labelK8sApp = "k8s-app"
)

// Addons returns every object to apply in the tenant cluster, in apply
// order: the kube-system Namespace labels, then cluster-scoped RBAC, then
// namespaced RBAC, ServiceAccounts and ConfigMaps, then the Services and
// workloads that use them, then the admission policy and its binding. Every
// object has TypeMeta, the managed-by label and no status. The same inputs
// give byte-identical objects.
//
// Errors name what is unusable: an Endpoint not known yet (the API server
// Service has no external address), a missing or unparsable CA, an invalid
// KonnectivityEndpoint or kube-proxy mode.
func Addons(c *Cluster, in AddonInputs) ([]client.Object, error) {
	if err := validateAddonEndpoint(c, in); err != nil {
		return nil, err
	}
	return buildAddons(c, in)
}

// AddonNames lists "Kind namespace/name" (or "Kind name" when
// cluster-scoped) of what Addons returns for c and in, in the same order.
// Unlike Addons it needs neither Endpoint nor CACert: which objects exist
// depends only on the switches. The controller does not use it (its
// AddonsReady message counts objects, and pruning needs the objects' kinds
// to read them back, so it calls Addons with every switch on); it is the
// cheap way to ask which objects a set of switches yields.
func AddonNames(c *Cluster, in AddonInputs) ([]string, error) {
	objs, err := buildAddons(c, in)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, ObjectName(o))
	}
	return out, nil
}

// ObjectName renders an object as "Kind namespace/name", or "Kind name" when
// it has no namespace. It reads TypeMeta, so it works on what Addons returns.
func ObjectName(o client.Object) string {
	kind := o.GetObjectKind().GroupVersionKind().Kind
	if o.GetNamespace() == "" {
		return kind + " " + o.GetName()
	}
	return kind + " " + o.GetNamespace() + "/" + o.GetName()
}

// buildAddons builds the objects without requiring the endpoint and CA, so
// that AddonNames works before they are known. Only Addons may hand the
// result to the API server.
func buildAddons(c *Cluster, in AddonInputs) ([]client.Object, error) {
	mode, err := kubeProxyMode(in.KubeProxyMode)
	if err != nil {
		return nil, err
	}
	if in.CoreDNS && c.Images.CoreDNSTag == "" {
		// Not a user error: the manager is misconfigured.
		return nil, field.Required(field.NewPath("options", "images", "coreDNSTag"), "required when spec.addons.coreDNS is true")
	}

	var a addonObjects
	if err := a.addBase(c, in); err != nil {
		return nil, err
	}
	if err := a.addOptional(c, in, mode); err != nil {
		return nil, err
	}
	tp, tb := TokenIssuerPolicy()
	a.policies = append(a.policies, tp, tb)
	if in.ProbeHostPolicy {
		p, b := probeHostPolicy()
		a.policies = append(a.policies, p, b)
	}
	if c.ExposeType == v1alpha1.ExposeNodePort && in.Endpoint != "" {
		eps, err := KubernetesServiceEndpoints(in.Endpoint)
		if err != nil {
			return nil, err
		}
		a.services = append(a.services, eps...)
	}
	return a.ordered(), nil
}

// addonObjects collects the add-ons by kind, so that they come out in the
// order ordered gives whatever order they were built in.
type addonObjects struct {
	clusterRoles, clusterRoleBindings, roles, roleBindings []client.Object
	serviceAccounts, configMaps, services, workloads       []client.Object
	policies                                               []client.Object
}

// ordered lists the kube-system Namespace, then the objects kind by kind.
func (a *addonObjects) ordered() []client.Object {
	out := []client.Object{kubeSystemNamespace()}
	for _, group := range [][]client.Object{a.clusterRoles, a.clusterRoleBindings, a.roles, a.roleBindings,
		a.serviceAccounts, a.configMaps, a.services, a.workloads, a.policies} {
		out = append(out, group...)
	}
	return out
}

// addBase adds what every tenant gets: the bootstrap and node RBAC and the
// cluster-info and kubelet configuration ConfigMaps.
func (a *addonObjects) addBase(c *Cluster, in AddonInputs) error {
	a.clusterRoleBindings = append(a.clusterRoleBindings, bootstrapClusterRoleBindings()...)
	nr, nrb := nodeNetworkRBAC()
	a.clusterRoles, a.clusterRoleBindings = append(a.clusterRoles, nr), append(a.clusterRoleBindings, nrb)
	r, rb := clusterInfoRBAC()
	a.roles, a.roleBindings = append(a.roles, r), append(a.roleBindings, rb)
	r, rb = kubeletConfigRBAC()
	a.roles, a.roleBindings = append(a.roles, r), append(a.roleBindings, rb)
	r, rb = TokenIssuerRBAC()
	a.roles, a.roleBindings = append(a.roles, r), append(a.roleBindings, rb)

	ci, err := clusterInfo(c, in)
	if err != nil {
		return err
	}
	kc, err := kubeletConfigMap(c)
	if err != nil {
		return err
	}
	a.configMaps = append(a.configMaps, ci, kc)
	return nil
}

// addOptional adds the Konnectivity agent, kube-proxy (unless mode is
// "none") and CoreDNS, as the cluster and in ask.
func (a *addonObjects) addOptional(c *Cluster, in AddonInputs, mode v1alpha1.KubeProxyMode) error {
	if c.Konnectivity {
		host, port, err := konnectivityAgentTarget(in)
		if err != nil {
			return err
		}
		a.serviceAccounts = append(a.serviceAccounts, serviceAccount(konnectivityAgentName))
		a.workloads = append(a.workloads, konnectivityAgentDaemonSet(c, host, port))
	}
	if mode != v1alpha1.KubeProxyMode("none") {
		cm, err := kubeProxyConfigMap(c, in.Endpoint, mode)
		if err != nil {
			return err
		}
		a.clusterRoleBindings = append(a.clusterRoleBindings, kubeProxyClusterRoleBinding())
		a.serviceAccounts = append(a.serviceAccounts, serviceAccount(kubeProxyName))
		a.configMaps = append(a.configMaps, cm)
		a.workloads = append(a.workloads, kubeProxyDaemonSet(c, cm))
	}
	if in.CoreDNS {
		cr, crb := coreDNSRBAC()
		a.clusterRoles = append(a.clusterRoles, cr)
		a.clusterRoleBindings = append(a.clusterRoleBindings, crb)
		a.serviceAccounts = append(a.serviceAccounts, serviceAccount(coreDNSName))
		a.configMaps = append(a.configMaps, coreDNSConfigMap(c))
		a.services = append(a.services, coreDNSService(c))
		a.workloads = append(a.workloads, coreDNSDeployment(c))
	}
	return nil
}

// validateAddonEndpoint checks the inputs only Addons needs.
func validateAddonEndpoint(c *Cluster, in AddonInputs) error {
	if in.Endpoint == "" {
		return fmt.Errorf("spec.apiServer.expose: the external endpoint of tenant %s/%s is not known yet", c.Namespace, c.Name)
	}
	if _, err := endpointHost(in.Endpoint); err != nil {
		return err
	}
	block, _ := pem.Decode(in.CACert)
	if block == nil || block.Type != "CERTIFICATE" {
		return fmt.Errorf("tenant %s/%s: the cluster CA (%s, key %s) is missing or not a PEM certificate",
			c.Namespace, c.Name, c.volumeSecretName(RoleCA), TrustBundleKey)
	}
	return nil
}

// endpointHost returns the host (without brackets) of an https endpoint.
func endpointHost(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("endpoint %q: must be an https URL with a host and no path", endpoint)
	}
	return u.Hostname(), nil
}

// konnectivityAgentTarget is where the agents dial: KonnectivityEndpoint,
// else the Endpoint's host on KonnectivityAgentPort. Without either (only
// in AddonNames, before the endpoint is known) it returns an empty host.
func konnectivityAgentTarget(in AddonInputs) (string, int32, error) {
	if in.KonnectivityEndpoint != "" {
		host, p, err := net.SplitHostPort(in.KonnectivityEndpoint)
		port, perr := strconv.ParseUint(p, 10, 16)
		if err != nil || host == "" || perr != nil || port == 0 {
			return "", 0, fmt.Errorf("konnectivity endpoint %q: must be host:port", in.KonnectivityEndpoint)
		}
		return host, int32(port), nil
	}
	if in.Endpoint == "" {
		return "", KonnectivityAgentPort, nil
	}
	host, err := endpointHost(in.Endpoint)
	return host, KonnectivityAgentPort, err
}

// kubeProxyMode applies the CRD default and rejects unknown modes (the CRD
// enum does too; this covers objects that bypassed it).
func kubeProxyMode(m v1alpha1.KubeProxyMode) (v1alpha1.KubeProxyMode, error) {
	switch m {
	case "":
		return "iptables", nil
	case "iptables", "ipvs", "nftables", "none":
		return m, nil
	}
	return "", field.NotSupported(field.NewPath("spec", "kubeProxy", "mode"), m, []string{"iptables", "ipvs", "nftables", "none"})
}

// kubeSystemNamespace labels kube-system for Pod Security admission. The
// tenant-wide default level (spec.podSecurity, at least baseline unless the
// user lowers it) would reject kube-proxy (privileged, host network, host
// paths) and the CNI DaemonSet users install there. kube-system holds node
// infrastructure and is writable only by cluster administrators, so it gets
// privileged, visibly on the namespace rather than as a hidden exemption in
// the admission configuration. warn is set too, so applying kube-proxy does
// not return the same warning on every reconcile; audit keeps the cluster
// default, so privileged pods there are still recorded. Server-side apply
// owns only these labels: the namespace itself is the API server's.
func kubeSystemNamespace() *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: nsKubeSystem, Labels: map[string]string{
			LabelManagedBy:                       managedBy,
			"pod-security.kubernetes.io/enforce": "privileged",
			"pod-security.kubernetes.io/warn":    "privileged",
		}},
	}
}

// addonMeta is the ObjectMeta of an add-on object.
func addonMeta(namespace, name string, extra map[string]string) metav1.ObjectMeta {
	l := map[string]string{LabelManagedBy: managedBy}
	maps.Copy(l, extra)
	return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: l}
}

func serviceAccount(name string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: addonMeta(nsKubeSystem, name, map[string]string{labelK8sApp: name}),
	}
}

// isIPv6Cluster says whether the tenant's Services (and so, in a
// single-stack cluster, its nodes) are IPv6.
func isIPv6Cluster(c *Cluster) bool {
	return c.ServiceCIDR.IsValid() && c.ServiceCIDR.Addr().Is6()
}

// validPodCIDR is c.PodCIDR as a string, or "" when not configured.
func validPodCIDR(p netip.Prefix) string {
	if !p.IsValid() {
		return ""
	}
	return p.String()
}

package desired

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

var (
	clusterRoleBindingMeta = metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"}
	clusterRoleMeta        = metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"}
	roleMeta               = metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"}
	roleBindingMeta        = metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"}
	configMapMeta          = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
)

func groupSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: name}
}

func clusterRoleBinding(name, role string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   clusterRoleBindingMeta,
		ObjectMeta: addonMeta("", name, nil),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   subjects,
	}
}

// bootstrapClusterRoleBindings are what a machine needs to join with a
// kubefarm bootstrap token and keep its client certificate afterwards:
//   - create a CSR for its first client certificate (system:node-bootstrapper);
//   - as a node (group system:nodes), have the renewal of its own client
//     certificate approved by kube-controller-manager's csrapproving
//     controller (selfnodeclient: the name asked for must be the
//     requester's).
//
// The first client certificate is not auto-approved here: csrapproving's
// nodeclient rule would approve a bootstrapper's request for any node name,
// so whoever holds a token could become any node. kubefarm-manager
// approves it only for the hostname of the Machine the token was issued
// for, and deletes the token (controllers/csrapproval). Serving-certificate
// CSRs (serverTLSBootstrap) are likewise approved by the manager only, for
// the names and addresses of the machine that asks.
func bootstrapClusterRoleBindings() []client.Object {
	return []client.Object{
		clusterRoleBinding("kubefarm:kubelet-bootstrap", "system:node-bootstrapper", groupSubject(GroupBootstrappers)),
		clusterRoleBinding("kubefarm:node-autoapprove-certificate-rotation",
			"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", groupSubject(groupNodes)),
	}
}

// RetiredNodeClientApproval is the ClusterRoleBinding with which earlier
// kubefarm versions let kube-controller-manager approve every bootstrapper's
// kubelet client CSR (nodeclient), whatever node name it asked for.
const RetiredNodeClientApproval = "kubefarm:node-autoapprove-bootstrap"

// RetiredAddons are objects earlier kubefarm versions applied in every
// tenant and this one must delete from tenants that still have them: the
// controller prunes them like add-ons switched off (only while they carry
// kubefarm's managed-by label, so a binding of the same name the tenant
// admin made is left alone).
func RetiredAddons() []client.Object {
	return []client.Object{
		clusterRoleBinding(RetiredNodeClientApproval,
			"system:certificates.k8s.io:certificatesigningrequests:nodeclient", groupSubject(GroupBootstrappers)),
	}
}

// NodeNetworkRole is the ClusterRole that lets nodes read every Node.
const NodeNetworkRole = "kubefarm:node-network"

// nodeNetworkRBAC lets the pod network daemon of the node image (flanneld,
// run on the host with the kubelet's own credential) list and watch Nodes:
// it learns every other node's pod subnet and address from their Node
// objects to program host-gw routes. Since Kubernetes 1.32 the Node
// authorizer (AuthorizeNodeWithSelectors) lets a node read only its own
// Node, so without this flanneld never starts and the agent never verifies
// the network. Reading is all it grants: writes to Nodes stay with the Node
// authorizer and NodeRestriction (a node patches only its own Node and
// cannot lift another node's taints or set its labels).
func nodeNetworkRBAC() (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	return &rbacv1.ClusterRole{
		TypeMeta:   clusterRoleMeta,
		ObjectMeta: addonMeta("", NodeNetworkRole, nil),
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		},
	}, clusterRoleBinding(NodeNetworkRole, NodeNetworkRole, groupSubject(groupNodes))
}

// getConfigMapRBAC is a Role allowing "get" of one ConfigMap by name (no
// list or watch, so nothing else in the namespace is visible) and its
// RoleBinding.
func getConfigMapRBAC(namespace, name, configMap string, subjects ...rbacv1.Subject) (*rbacv1.Role, *rbacv1.RoleBinding) {
	return &rbacv1.Role{
			TypeMeta:   roleMeta,
			ObjectMeta: addonMeta(namespace, name, nil),
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"configmaps"},
				ResourceNames: []string{configMap}, Verbs: []string{"get"},
			}},
		}, &rbacv1.RoleBinding{
			TypeMeta:   roleBindingMeta,
			ObjectMeta: addonMeta(namespace, name, nil),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   subjects,
		}
}

// clusterInfoRBAC lets anyone read kube-public/cluster-info: a joining
// machine has no trusted CA yet and reads it anonymously, then trusts it only
// if a JWS signature made with its bootstrap token matches. The content is
// public by design (the CA certificate and the endpoint).
func clusterInfoRBAC() (*rbacv1.Role, *rbacv1.RoleBinding) {
	return getConfigMapRBAC(nsKubePublic, "kubefarm:bootstrap-signer-clusterinfo", clusterInfoName,
		rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: userAnonymous},
		groupSubject(GroupBootstrappers))
}

// kubeletConfigRBAC lets nodes, and machines still joining, read the
// kubelet configuration.
func kubeletConfigRBAC() (*rbacv1.Role, *rbacv1.RoleBinding) {
	return getConfigMapRBAC(nsKubeSystem, "kubefarm:kubelet-config", KubeletConfigMapName,
		groupSubject(groupNodes), groupSubject(GroupBootstrappers))
}

// TokenIssuerRBAC is the Role (and its RoleBinding to UserTokenIssuer)
// with which kubefarm-pxe issues the machines' bootstrap tokens: create
// Secrets in kube-system, nothing else. It cannot read a Secret, so it
// cannot read a token it did not issue (or one it did, once issued), nor
// list, update or delete any; a used token is deleted by kubefarm-manager,
// an unused one by kube-controller-manager's tokencleaner when it expires.
//
// RBAC cannot restrict "create" by name or content (the name is not known
// when the request is authorized, and a Secret of another type, such as a
// service-account token Secret for a controller's ServiceAccount, would be
// cluster-admin two steps away), so TokenIssuerPolicy narrows the create
// down to kubefarm bootstrap tokens.
func TokenIssuerRBAC() (*rbacv1.Role, *rbacv1.RoleBinding) {
	name := bootstraptoken.IssuerRole
	return &rbacv1.Role{
			TypeMeta:   roleMeta,
			ObjectMeta: addonMeta(bootstraptoken.Namespace, name, nil),
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"secrets"},
				Verbs: []string{"create"},
			}},
		}, &rbacv1.RoleBinding{
			TypeMeta:   roleBindingMeta,
			ObjectMeta: addonMeta(bootstraptoken.Namespace, name, nil),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: UserTokenIssuer}},
		}
}

// clusterInfo is kube-public/cluster-info: a kubeconfig with the endpoint
// and CA and no user, which joining machines read before they trust the API
// server. The bootstrapsigner controller of kube-controller-manager adds a
// "jws-kubeconfig-<token-id>" key per bootstrap token, signing the
// "kubeconfig" value. The object carries only "kubeconfig", so server-side
// apply makes kubefarm the owner of data.kubeconfig alone (ConfigMap data
// is a map whose keys are owned separately) and never removes the
// signatures; the reconciler must apply it, never update or replace it.
// The kubeconfig bytes are deterministic, so re-applying does not change
// the signed content and the signatures stay valid.
func clusterInfo(c *Cluster, in AddonInputs) (*corev1.ConfigMap, error) {
	cfg := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{c.Name: {
			Server:                   in.Endpoint,
			CertificateAuthorityData: in.CACert,
		}},
	}
	b, err := clientcmd.Write(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster-info kubeconfig: %w", err)
	}
	return &corev1.ConfigMap{
		TypeMeta:   configMapMeta,
		ObjectMeta: addonMeta(nsKubePublic, clusterInfoName, nil),
		Data:       map[string]string{clusterInfoKey: string(b)},
	}, nil
}

// KubeletConfiguration is kubelet.config.k8s.io/v1beta1 KubeletConfiguration,
// limited to the fields kubefarm sets. The upstream type (k8s.io/kubelet) is
// not a dependency of kubefarm, and a local struct keeps the file to what we
// mean to set; everything else is the kubelet's default.
type KubeletConfiguration struct {
	APIVersion               string       `json:"apiVersion"`
	Kind                     string       `json:"kind"`
	Authentication           KubeletAuthn `json:"authentication"`
	Authorization            KubeletAuthz `json:"authorization"`
	CgroupDriver             string       `json:"cgroupDriver"`
	ClusterDNS               []string     `json:"clusterDNS"`
	ClusterDomain            string       `json:"clusterDomain"`
	ContainerRuntimeEndpoint string       `json:"containerRuntimeEndpoint"`
	RotateCertificates       bool         `json:"rotateCertificates"`
	ServerTLSBootstrap       bool         `json:"serverTLSBootstrap"`
}

// KubeletAuthn is how the kubelet authenticates requests to its API.
type KubeletAuthn struct {
	Anonymous KubeletEnabled      `json:"anonymous"`
	Webhook   KubeletAuthnWebhook `json:"webhook"`
	X509      KubeletX509         `json:"x509"`
}

// KubeletEnabled is an {enabled: bool} block.
type KubeletEnabled struct {
	Enabled bool `json:"enabled"`
}

// KubeletAuthnWebhook delegates bearer-token authentication to the API
// server (TokenReview).
type KubeletAuthnWebhook struct {
	Enabled  bool   `json:"enabled"`
	CacheTTL string `json:"cacheTTL"`
}

// KubeletX509 authenticates client certificates signed by a CA.
type KubeletX509 struct {
	ClientCAFile string `json:"clientCAFile"`
}

// KubeletAuthz is how the kubelet authorizes requests to its API.
type KubeletAuthz struct {
	Mode    string              `json:"mode"`
	Webhook KubeletAuthzWebhook `json:"webhook"`
}

// KubeletAuthzWebhook caches SubjectAccessReview answers.
type KubeletAuthzWebhook struct {
	CacheAuthorizedTTL   string `json:"cacheAuthorizedTTL"`
	CacheUnauthorizedTTL string `json:"cacheUnauthorizedTTL"`
}

// KubeletConfig renders the kubelet configuration of the tenant's nodes as
// YAML (sigs.k8s.io/yaml sorts keys, so the bytes are deterministic):
//   - clusterDNS and clusterDomain point pods at the tenant's DNS Service;
//   - the kubelet API accepts client certificates from the cluster CA
//     (kube-apiserver's kubelet client) and bearer tokens checked by
//     TokenReview, never anonymous requests, and authorizes every request
//     with SubjectAccessReview (Webhook), i.e. the tenant's RBAC;
//   - rotateCertificates renews the client certificate before it expires;
//     serverTLSBootstrap gets the serving certificate from the cluster CA
//     by CSR instead of a self-signed one, so kube-apiserver can verify
//     the kubelet (the manager approves those CSRs);
//   - cgroupDriver systemd because the node images boot systemd, which must
//     be the only manager of the cgroup tree; containerd in the image is
//     configured the same way;
//   - containerRuntimeEndpoint is containerd's default socket, written out
//     so the kubelet does not depend on a changing default.
//
// resolvConf is left at the kubelet's default (/etc/resolv.conf): the image
// decides whether that is a systemd-resolved stub.
func KubeletConfig(c *Cluster) ([]byte, error) {
	cfg := KubeletConfiguration{
		APIVersion: "kubelet.config.k8s.io/v1beta1",
		Kind:       "KubeletConfiguration",
		Authentication: KubeletAuthn{
			Anonymous: KubeletEnabled{Enabled: false},
			Webhook:   KubeletAuthnWebhook{Enabled: true, CacheTTL: "2m0s"},
			X509:      KubeletX509{ClientCAFile: kubeletCAFile},
		},
		Authorization: KubeletAuthz{
			Mode:    "Webhook",
			Webhook: KubeletAuthzWebhook{CacheAuthorizedTTL: "5m0s", CacheUnauthorizedTTL: "30s"},
		},
		CgroupDriver:             "systemd",
		ClusterDNS:               []string{c.DNSServiceIP.String()},
		ClusterDomain:            c.ClusterDomain,
		ContainerRuntimeEndpoint: "unix:///run/containerd/containerd.sock",
		RotateCertificates:       true,
		ServerTLSBootstrap:       true,
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubelet configuration: %w", err)
	}
	return b, nil
}

// kubeletCAFile is where the node's cluster CA lives; the node's bootstrap
// writes it next to the kubelet's other files.
const kubeletCAFile = "/etc/kubernetes/pki/ca.crt"

func kubeletConfigMap(c *Cluster) (*corev1.ConfigMap, error) {
	b, err := KubeletConfig(c)
	if err != nil {
		return nil, err
	}
	return &corev1.ConfigMap{
		TypeMeta:   configMapMeta,
		ObjectMeta: addonMeta(nsKubeSystem, KubeletConfigMapName, nil),
		Data:       map[string]string{KubeletConfigKey: string(b)},
	}, nil
}

package bootstraptoken

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
)

// The token issuer's credential. kubefarm-manager writes, for every
// TenantCluster, a kubeconfig of the tenant user IssuerUser into a Secret in
// kubefarm-pxe's namespace; kubefarm-pxe reads it to issue join tokens. The
// names live here, beside the tokens, because both sides must agree on them
// and neither should import the other.
const (
	// IssuerUser is the tenant identity (client certificate CN, no
	// organization) that issues join tokens, and does nothing else: the
	// tenant's Role IssuerRole in kube-system, bound to this user alone,
	// allows only creating Secrets, and an admission policy only kubefarm
	// bootstrap tokens among them (controllers/tenantcluster/desired).
	IssuerUser = "kubefarm:token-issuer"
	// IssuerRole names the tenant Role and RoleBinding of IssuerUser.
	IssuerRole = "kubefarm:token-issuer"

	// CredentialTokenIssuer is the value of v1alpha1.LabelCredential on
	// the Secrets kubefarm-pxe may read: its cache selects on it, so
	// nothing else in its namespace is ever loaded into its memory. The
	// Secret lives in another namespace than its tenant, so it names the
	// TenantCluster with v1alpha1.LabelTenantCluster and
	// LabelTenantNamespace.
	CredentialTokenIssuer = "token-issuer"
	// KeyKubeconfig is the data key of the kubeconfig in the Secret.
	KeyKubeconfig = "kubeconfig"
	// KeyNodeFacts is the data key of the tenant's NodeFacts (JSON) in the
	// same Secret: written once the tenant's endpoint is known.
	KeyNodeFacts = "node-facts.json"
)

// NodeFacts are what a joining node must know of its tenant cluster before
// it can reach it: where the API server is and which CA signs it, the DNS
// settings its kubelet hands to pods, and the pod network flannel allocates
// node subnets from. kubefarm-manager knows them all and writes them beside
// the token issuer's credential; kubefarm-pxe hands them to the machine's
// agent with its join token (/config). Nothing here is secret: the same
// facts are in the tenant's public kube-public/cluster-info.
type NodeFacts struct {
	// APIServer is the tenant API server's https URL as nodes reach it.
	APIServer string `json:"apiServer,omitempty"`
	// CACert is the PEM of the tenant cluster CA.
	CACert []byte `json:"caCert,omitempty"`
	// ClusterDNS are the addresses of the tenant's DNS Service.
	ClusterDNS []string `json:"clusterDNS,omitempty"`
	// ClusterDomain is the tenant's DNS domain, e.g. cluster.local.
	ClusterDomain string `json:"clusterDomain,omitempty"`
	// PodCIDR is the tenant's pod network, e.g. 10.244.0.0/16.
	PodCIDR string `json:"podCIDR,omitempty"`
}

// maxSecretName is the longest valid Secret name (a DNS subdomain).
const maxSecretName = 253

// CredentialSecretName names the token issuer credential of TenantCluster
// namespace/cluster: token-issuer-<namespace>-<cluster>-<hash>. All tenants'
// credentials share one namespace, and "-" may appear inside both names, so
// "a-b"/"c" and "a"/"b-c" would collide without the hash of the pair; a
// collision would hand one tenant's machines tokens of another tenant. The
// readable part is cut if needed to stay a valid name.
func CredentialSecretName(namespace, cluster string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + cluster))
	suffix := "-" + hex.EncodeToString(sum[:4])
	base := "token-issuer-" + namespace + "-" + cluster
	if len(base)+len(suffix) > maxSecretName {
		base = base[:maxSecretName-len(suffix)]
	}
	return base + suffix
}

// CredentialLabels are the labels of the credential of namespace/cluster.
func CredentialLabels(namespace, cluster string) map[string]string {
	return map[string]string{
		v1alpha1.LabelCredential:      CredentialTokenIssuer,
		v1alpha1.LabelTenantCluster:   cluster,
		v1alpha1.LabelTenantNamespace: namespace,
	}
}

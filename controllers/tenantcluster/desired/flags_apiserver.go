package desired

import (
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

var apiServerPolicy = flagPolicy{
	exact: map[string]flagRule{
		"admission-control-config-file": {reason: reasonFile},
		"client-ca-file":                {reason: reasonFile},
		"egress-selector-config-file":   {reason: reasonFile},
		// Secrets are encrypted at rest with keys kubefarm generates and
		// rotates (docs/encryption.md). Automatic reload stays off: a key
		// change reaches the API servers by a rollout, which the rotation
		// observes before its next step; a reload would change a running
		// server's keys behind its back.
		"encryption-provider-config":                  {reason: reasonFile},
		"encryption-provider-config-automatic-reload": {reason: "key rotation relies on API servers changing keys only by a rollout"},
		"enable-bootstrap-token-auth":                 {reason: "nodes join with bootstrap tokens"},
		"etcd-cafile":                                 {reason: reasonFile},
		"etcd-certfile":                               {reason: reasonFile},
		"etcd-keyfile":                                {reason: reasonFile},
		"etcd-servers":                                {reason: reasonReachable},
		"kubelet-client-certificate":                  {reason: reasonFile},
		"kubelet-client-key":                          {reason: reasonFile},
		"proxy-client-cert-file":                      {reason: reasonFile},
		"proxy-client-key-file":                       {reason: reasonFile},
		"secure-port":                                 {reason: reasonReachable},
		"service-cluster-ip-range":                    {reason: reasonReachable},
		"tls-cert-file":                               {reason: reasonFile},
		"tls-private-key-file":                        {reason: reasonFile},
		"audit-policy-file":                           {reason: reasonFile},
		"endpoint-reconciler-type":                    {reason: "with a NodePort Service kubefarm keeps the tenant's kubernetes Service endpoints itself"},
		"audit-log-path":                              {reason: "it is set from spec.apiServer.audit.mode"},
		"audit-log-maxsize":                           {reason: reasonAuditVolume},
		"audit-log-maxbackup":                         {reason: reasonAuditVolume},
		"audit-webhook-config-file":                   {reason: reasonFile},
		// Static tokens cannot be rotated or revoked without a restart and
		// bypass every credential kubefarm manages.
		"token-auth-file": {reason: reasonIdentity},
		// An authorization config file replaces --authorization-mode and
		// could drop Node or RBAC; kubefarm does not mount one.
		"authorization-config": {reason: reasonFile},
		"authorization-mode": {
			reason: "the Node authorizer confines kubelets to their own node and RBAC carries every binding kubefarm creates",
			check:  allOf(mustContain("Node", "RBAC"), mustNotContain("AlwaysAllow")),
		},
		"enable-admission-plugins": {
			reason: "NodeRestriction stops a kubelet from modifying other nodes and their pods",
			check:  mustContain("NodeRestriction"),
		},
		"disable-admission-plugins": {
			reason: "NodeRestriction and PodSecurity enforce the tenant's node isolation and pod security defaults",
			check:  mustNotContain("NodeRestriction", "PodSecurity"),
		},
	},
	prefixes: map[string]string{
		"service-account-": "service-account tokens are signed and verified with kubefarm's key and issuer",
		"requestheader-":   "request headers let the front proxy assert any user; only kubefarm's front-proxy identity may",
	},
}

// APIServerFlags returns the kube-apiserver flags of a tenant.
func APIServerFlags(c *Cluster) ([]string, error) {
	d := map[string]string{
		"admission-control-config-file": configFile(ConfigKeyAdmission),
		"allow-privileged":              "true",
		"authorization-mode":            "Node,RBAC",
		"client-ca-file":                pkiFile(RoleCA, secretCertKey),
		"enable-admission-plugins":      "NodeRestriction",
		"enable-bootstrap-token-auth":   "true",
		"encryption-provider-config":    pkiFile(RoleEncryptionConfig, EncryptionConfigKey),
		"etcd-cafile":                   pkiFile(RoleEtcdCA, secretCertKey),
		"etcd-certfile":                 pkiFile(RoleAPIServerEtcdClient, secretCertKey),
		"etcd-keyfile":                  pkiFile(RoleAPIServerEtcdClient, secretPrivateKeyKey),
		"etcd-servers":                  strings.Join(c.EtcdClientURLs(), ","),
		"kubelet-client-certificate":    pkiFile(RoleAPIServerKubeletClient, secretCertKey),
		"kubelet-client-key":            pkiFile(RoleAPIServerKubeletClient, secretPrivateKeyKey),
		// Verify kubelets' serving certificates against the cluster CA: the
		// nodes get them through serving CSRs that kubefarm approves only
		// for the machine's own names and addresses, so an impostor on the
		// boot network cannot receive exec and log traffic.
		"kubelet-certificate-authority":      pkiFile(RoleCA, secretCertKey),
		"kubelet-preferred-address-types":    "InternalIP,ExternalIP,Hostname",
		"profiling":                          "false",
		"proxy-client-cert-file":             pkiFile(RoleFrontProxyClient, secretCertKey),
		"proxy-client-key-file":              pkiFile(RoleFrontProxyClient, secretPrivateKeyKey),
		"requestheader-allowed-names":        FrontProxyClientName,
		"requestheader-client-ca-file":       pkiFile(RoleFrontProxyCA, secretCertKey),
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-username-headers":     "X-Remote-User",
		"secure-port":                        strconv.Itoa(int(APIServerPort)),
		"service-account-issuer":             c.ServiceAccountIssuer(),
		// The private key: kube-apiserver derives the public key from it,
		// so one Secret key serves both flags.
		"service-account-key-file":         pkiFile(RoleServiceAccount, secretPrivateKeyKey),
		"service-account-signing-key-file": pkiFile(RoleServiceAccount, secretPrivateKeyKey),
		"service-cluster-ip-range":         c.ServiceCIDR.String(),
		// Graceful rollouts without failed requests: on SIGTERM the server
		// turns /readyz red and keeps serving for the delay, long enough
		// for the endpoints and kube-proxy to stop sending it new
		// connections; afterwards new requests get 429 with Retry-After,
		// which clients retry on another replica, while in-flight ones
		// finish. The pod's grace period covers both.
		"shutdown-delay-duration":   APIServerShutdownDelay.String(),
		"shutdown-send-retry-after": "true",
		"tls-cert-file":             pkiFile(RoleAPIServer, secretCertKey),
		"tls-private-key-file":      pkiFile(RoleAPIServer, secretPrivateKeyKey),
	}
	// Without an external IP the API server would advertise its pod IP,
	// which tenant nodes cannot reach; better to advertise nothing than a
	// wrong address, and the reconciler rebuilds once the IP is known.
	if a := c.AdvertiseAddress(); a.IsValid() {
		d["advertise-address"] = a.String()
	}
	if c.Konnectivity {
		d["egress-selector-config-file"] = configFile(ConfigKeyEgressSelector)
	}
	auditFlags(c.Audit, d)
	if c.ExposeType == v1alpha1.ExposeNodePort {
		// The add-ons write the kubernetes Service's endpoints with the
		// node port (KubernetesServiceEndpoints).
		d["endpoint-reconciler-type"] = "none"
	}
	return mergeFlags(d, apiServerPolicy, c.APIServerArgs, field.NewPath("spec", "apiServer", "extraArgs"))
}

// ServiceAccountIssuer is the issuer of the tenant's service-account tokens,
// the conventional in-cluster URL of the tenant API server.
func (c *Cluster) ServiceAccountIssuer() string {
	return "https://kubernetes.default.svc." + c.ClusterDomain
}

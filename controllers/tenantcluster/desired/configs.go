package desired

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The configuration files kube-apiserver reads are declared here as local
// types rather than imported: the upstream types live in k8s.io/apiserver and
// k8s.io/pod-security-admission, whose API packages pull in modules kubefarm
// does not depend on. The files are written as JSON, which both loaders
// accept (they decode YAML, a superset of JSON), and encoding/json renders
// struct fields in declaration order, so the bytes are deterministic.

// EgressSelectorConfiguration is apiserver.k8s.io/v1beta1
// EgressSelectorConfiguration, limited to the fields kubefarm sets.
type EgressSelectorConfiguration struct {
	APIVersion       string            `json:"apiVersion"`
	Kind             string            `json:"kind"`
	EgressSelections []EgressSelection `json:"egressSelections"`
}

// EgressSelection routes one kind of API server egress.
type EgressSelection struct {
	Name       string           `json:"name"`
	Connection EgressConnection `json:"connection"`
}

// EgressConnection is how egress traffic leaves the API server.
type EgressConnection struct {
	ProxyProtocol string           `json:"proxyProtocol"`
	Transport     *EgressTransport `json:"transport,omitempty"`
}

// EgressTransport is the transport to the proxy.
type EgressTransport struct {
	UDS *EgressUDS `json:"uds,omitempty"`
}

// EgressUDS is a Unix domain socket transport.
type EgressUDS struct {
	UDSName string `json:"udsName"`
}

// EgressSelector builds the egress selector configuration: traffic to the
// tenant's nodes and pods ("cluster": logs, exec, port-forward, webhooks and
// aggregated API servers in the tenant) goes over gRPC to the Konnectivity
// server through the Unix socket in the shared emptyDir. "controlplane" and
// "etcd" traffic stays direct: etcd and the admin cluster are reachable from
// the pod, and the agents are not there.
func EgressSelector() EgressSelectorConfiguration {
	return EgressSelectorConfiguration{
		APIVersion: "apiserver.k8s.io/v1beta1",
		Kind:       "EgressSelectorConfiguration",
		EgressSelections: []EgressSelection{{
			Name: "cluster",
			Connection: EgressConnection{
				ProxyProtocol: "GRPC",
				Transport:     &EgressTransport{UDS: &EgressUDS{UDSName: konnectivitySocket}},
			},
		}},
	}
}

// AdmissionConfiguration is apiserver.config.k8s.io/v1 AdmissionConfiguration.
type AdmissionConfiguration struct {
	APIVersion string                  `json:"apiVersion"`
	Kind       string                  `json:"kind"`
	Plugins    []AdmissionPluginConfig `json:"plugins"`
}

// AdmissionPluginConfig configures one admission plugin inline.
type AdmissionPluginConfig struct {
	Name          string                    `json:"name"`
	Configuration *PodSecurityConfiguration `json:"configuration"`
}

// PodSecurityConfiguration is
// pod-security.admission.config.k8s.io/v1 PodSecurityConfiguration.
type PodSecurityConfiguration struct {
	APIVersion string               `json:"apiVersion"`
	Kind       string               `json:"kind"`
	Defaults   PodSecurityDefaults  `json:"defaults"`
	Exemptions PodSecurityExemption `json:"exemptions"`
}

// PodSecurityDefaults are the levels applied to namespaces without labels.
type PodSecurityDefaults struct {
	Enforce        string `json:"enforce"`
	EnforceVersion string `json:"enforce-version"`
	Audit          string `json:"audit"`
	AuditVersion   string `json:"audit-version"`
	Warn           string `json:"warn"`
	WarnVersion    string `json:"warn-version"`
}

// PodSecurityExemption lists who is exempt. Empty lists are written out
// explicitly so that "no exemptions" is visible in the file.
type PodSecurityExemption struct {
	Usernames      []string `json:"usernames"`
	RuntimeClasses []string `json:"runtimeClasses"`
	Namespaces     []string `json:"namespaces"`
}

// Admission builds the admission configuration with the tenant's Pod Security
// defaults. Versions are "latest" so the levels track the running
// Kubernetes version; there are no exemptions: kube-system add-ons that need
// privileges get a namespace label, which is auditable, rather than a
// cluster-wide exemption.
func Admission(c *Cluster) AdmissionConfiguration {
	return AdmissionConfiguration{
		APIVersion: "apiserver.config.k8s.io/v1",
		Kind:       "AdmissionConfiguration",
		Plugins: []AdmissionPluginConfig{{
			Name: "PodSecurity",
			Configuration: &PodSecurityConfiguration{
				APIVersion: "pod-security.admission.config.k8s.io/v1",
				Kind:       "PodSecurityConfiguration",
				Defaults: PodSecurityDefaults{
					Enforce: string(c.PodSecurity.Enforce), EnforceVersion: "latest",
					Audit: string(c.PodSecurity.Audit), AuditVersion: "latest",
					Warn: string(c.PodSecurity.Warn), WarnVersion: "latest",
				},
				Exemptions: PodSecurityExemption{Usernames: []string{}, RuntimeClasses: []string{}, Namespaces: []string{}},
			},
		}},
	}
}

// ClientCredentials are where a kubeconfig's user and cluster trust come from:
// either PEM bytes embedded in the kubeconfig, or paths of files mounted next
// to it. Set exactly one of the two groups.
type ClientCredentials struct {
	CAData, CertData, KeyData []byte
	CAFile, CertFile, KeyFile string
}

// Kubeconfig renders a kubeconfig with one cluster, user and context, named
// after the tenant. Use embedded data for a kubeconfig handed to people (the
// admin kubeconfig Secret) and file paths for the control plane components:
// client-go reloads a client certificate from files when it changes, so a
// renewal needs no new kubeconfig.
func Kubeconfig(clusterName, server, user string, cred ClientCredentials) ([]byte, error) {
	embedded := len(cred.CAData) > 0 || len(cred.CertData) > 0 || len(cred.KeyData) > 0
	files := cred.CAFile != "" || cred.CertFile != "" || cred.KeyFile != ""
	switch {
	case server == "":
		return nil, fmt.Errorf("kubeconfig for %s: no server URL", user)
	case embedded == files:
		return nil, fmt.Errorf("kubeconfig for %s: set either embedded credentials or file paths", user)
	case embedded && (len(cred.CAData) == 0 || len(cred.CertData) == 0 || len(cred.KeyData) == 0):
		return nil, fmt.Errorf("kubeconfig for %s: CA, certificate and key data are all required", user)
	case files && (cred.CAFile == "" || cred.CertFile == "" || cred.KeyFile == ""):
		return nil, fmt.Errorf("kubeconfig for %s: CA, certificate and key files are all required", user)
	}
	cfg := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{clusterName: {
			Server:                   server,
			CertificateAuthority:     cred.CAFile,
			CertificateAuthorityData: cred.CAData,
		}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{user: {
			ClientCertificate:     cred.CertFile,
			ClientCertificateData: cred.CertData,
			ClientKey:             cred.KeyFile,
			ClientKeyData:         cred.KeyData,
		}},
		Contexts:       map[string]*clientcmdapi.Context{user + "@" + clusterName: {Cluster: clusterName, AuthInfo: user}},
		CurrentContext: user + "@" + clusterName,
	}
	return clientcmd.Write(cfg)
}

// AdminKubeconfig renders the kubeconfig of the admin identity (RoleAdmin)
// with embedded credentials read from its Secret. external selects the
// external endpoint (for people) or the in-cluster Service URL (for the
// manager itself and tools running in the admin cluster).
func AdminKubeconfig(c *Cluster, external bool, caPEM, certPEM, keyPEM []byte) ([]byte, error) {
	server := c.InClusterEndpoint()
	if external {
		if server = c.ExternalEndpoint(); server == "" {
			return nil, fmt.Errorf("tenant %s/%s: external address not known yet", c.Namespace, c.Name)
		}
	}
	return Kubeconfig(c.Name, server, UserAdmin, ClientCredentials{CAData: caPEM, CertData: certPEM, KeyData: keyPEM})
}

// componentKubeconfig is the file-based kubeconfig of a component whose
// client certificate Secret is mounted at /etc/kubernetes/pki/<role>/. It
// verifies the API server with the cluster CA's trust (kubeconfigMounts).
func (c *Cluster) componentKubeconfig(role PKIRole) ([]byte, error) {
	return Kubeconfig(c.Name, c.InClusterEndpoint(), CertificateFor(c, role).Spec.CommonName, ClientCredentials{
		CAFile:   pkiFile(RoleCA, secretCertKey),
		CertFile: pkiFile(role, secretCertKey),
		KeyFile:  pkiFile(role, secretPrivateKeyKey),
	})
}

// ConfigMap builds the ConfigMap with the generated files the control plane
// pods mount at /etc/kubernetes/config. It holds no secrets: kubeconfigs
// reference the mounted certificate files.
func ConfigMap(c *Cluster) (*corev1.ConfigMap, error) {
	data := map[string]string{}
	put := func(key string, v any) error {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		data[key] = string(b) + "\n"
		return nil
	}
	if err := put(ConfigKeyAdmission, Admission(c)); err != nil {
		return nil, err
	}
	if c.Konnectivity {
		if err := put(ConfigKeyEgressSelector, EgressSelector()); err != nil {
			return nil, err
		}
	}
	if c.Audit.Policy != nil {
		data[ConfigKeyAuditPolicy] = string(c.Audit.Policy)
	}
	kubeconfigs := []struct {
		key  string
		role PKIRole
	}{{ConfigKeyControllerManagerConf, RoleControllerManager}, {ConfigKeySchedulerConf, RoleScheduler}}
	if c.Konnectivity {
		kubeconfigs = append(kubeconfigs, struct {
			key  string
			role PKIRole
		}{ConfigKeyKonnectivityConf, RoleKonnectivityClient})
	}
	for _, k := range kubeconfigs {
		b, err := c.componentKubeconfig(k.role)
		if err != nil {
			return nil, err
		}
		data[k.key] = string(b)
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: c.ConfigMapName(), Namespace: c.Namespace, Labels: c.labels(componentConfig)},
		Data:       data,
	}, nil
}

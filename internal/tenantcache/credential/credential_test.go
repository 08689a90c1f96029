package credential

import (
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubefarm/kubefarm/internal/restconfig"
)

// kubeconfig is an internal admin kubeconfig as the TenantCluster
// controller writes it, changed by edit.
func kubeconfig(t *testing.T, edit func(*clientcmdapi.Config)) []byte {
	t.Helper()
	c := clientcmdapi.NewConfig()
	c.Clusters["c1"] = &clientcmdapi.Cluster{Server: "https://c1-apiserver.ns.svc:6443", CertificateAuthorityData: []byte("ca")}
	c.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: []byte("crt"), ClientKeyData: []byte("key")}
	c.Contexts["c1"] = &clientcmdapi.Context{Cluster: "c1", AuthInfo: "admin"}
	c.CurrentContext = "c1"
	if edit != nil {
		edit(c)
	}
	b, err := clientcmd.Write(*c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRESTConfigTakesOnlyEmbeddedCredentials: whatever else the Secret's
// kubeconfig says (files, exec plugins, tokens, impersonation, a proxy) is
// not honoured, because whoever writes Secrets in the tenant's namespace
// writes it.
func TestRESTConfigTakesOnlyEmbeddedCredentials(t *testing.T) {
	cfg, err := RESTConfig(kubeconfig(t, func(c *clientcmdapi.Config) {
		a := c.AuthInfos["admin"]
		a.Token, a.TokenFile = "stolen?", "/var/run/secrets/kubernetes.io/serviceaccount/token"
		a.Exec = &clientcmdapi.ExecConfig{Command: "/bin/sh", APIVersion: "client.authentication.k8s.io/v1"}
		a.Impersonate = "system:admin"
		c.Clusters["c1"].ProxyURL = "http://proxy.example.com"
		c.Clusters["c1"].InsecureSkipTLSVerify = true
	}), "test")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.UserAgent != "test" {
		t.Errorf("user agent %q", cfg.UserAgent)
	}
	if cfg.Host != "https://c1-apiserver.ns.svc:6443" || string(cfg.CAData) != "ca" || string(cfg.CertData) != "crt" || string(cfg.KeyData) != "key" {
		t.Errorf("config %+v", cfg)
	}
	if cfg.BearerToken != "" || cfg.BearerTokenFile != "" || cfg.ExecProvider != nil || cfg.AuthProvider != nil ||
		cfg.Impersonate.UserName != "" || cfg.Proxy != nil || cfg.Insecure {
		t.Errorf("config honours more than the embedded certificate: %+v", cfg)
	}
}

func TestRESTConfigRefusesIncompleteKubeconfigs(t *testing.T) {
	for name, edit := range map[string]func(*clientcmdapi.Config){
		"no current context": func(c *clientcmdapi.Config) { c.CurrentContext = "other" },
		"no user":            func(c *clientcmdapi.Config) { delete(c.AuthInfos, "admin") },
		"CA in a file": func(c *clientcmdapi.Config) {
			c.Clusters["c1"].CertificateAuthorityData, c.Clusters["c1"].CertificateAuthority = nil, "/etc/ca.crt"
		},
		"key in a file": func(c *clientcmdapi.Config) {
			c.AuthInfos["admin"].ClientKeyData, c.AuthInfos["admin"].ClientKey = nil, "/etc/tls.key"
		},
		"a token only": func(c *clientcmdapi.Config) {
			c.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "t"}
		},
		"no server": func(c *clientcmdapi.Config) { c.Clusters["c1"].Server = "" },
	} {
		if _, err := RESTConfig(kubeconfig(t, edit), "test"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := RESTConfig(nil, "test"); err == nil {
		t.Error("an empty Secret: accepted")
	}
}

func TestFingerprintChangesWithEveryPart(t *testing.T) {
	base, err := RESTConfig(kubeconfig(t, nil), "test")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{restconfig.FingerprintString(base): "base"}
	for name, edit := range map[string]func(*clientcmdapi.Config){
		"server": func(c *clientcmdapi.Config) { c.Clusters["c1"].Server = "https://other:6443" },
		"ca":     func(c *clientcmdapi.Config) { c.Clusters["c1"].CertificateAuthorityData = []byte("ca2") },
		"crt":    func(c *clientcmdapi.Config) { c.AuthInfos["admin"].ClientCertificateData = []byte("crt2") },
		"key":    func(c *clientcmdapi.Config) { c.AuthInfos["admin"].ClientKeyData = []byte("key2") },
		// The same bytes moved across a boundary.
		"shifted": func(c *clientcmdapi.Config) {
			c.Clusters["c1"].CertificateAuthorityData = []byte("cac")
			c.AuthInfos["admin"].ClientCertificateData = []byte("rt")
		},
	} {
		cfg, err := RESTConfig(kubeconfig(t, edit), "test")
		if err != nil {
			t.Fatal(err)
		}
		fp := restconfig.FingerprintString(cfg)
		if other, ok := seen[fp]; ok {
			t.Errorf("%s has the fingerprint of %s", name, other)
		}
		seen[fp] = name
	}
	again, _ := RESTConfig(kubeconfig(t, nil), "test")
	if restconfig.FingerprintString(again) != restconfig.FingerprintString(base) {
		t.Error("the same credential has two fingerprints")
	}
}

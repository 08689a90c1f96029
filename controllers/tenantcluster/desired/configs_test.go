package desired

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func TestEgressSelectorJSON(t *testing.T) {
	b, err := json.Marshal(EgressSelector())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"apiserver.k8s.io/v1beta1","kind":"EgressSelectorConfiguration","egressSelections":[` +
		`{"name":"cluster","connection":{"proxyProtocol":"GRPC","transport":{"uds":{"udsName":"/etc/kubernetes/konnectivity-server/konnectivity-server.socket"}}}}]}`
	if string(b) != want {
		t.Errorf("egress selector:\n got %s\nwant %s", b, want)
	}
}

func TestAdmissionConfiguration(t *testing.T) {
	c := resolveTC(t, func(tc *v1alpha1.TenantCluster) {
		tc.Spec.PodSecurity = v1alpha1.PodSecurityDefaults{Enforce: "restricted", Audit: "restricted", Warn: "baseline"}
	})
	b, err := json.Marshal(Admission(c))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"apiserver.config.k8s.io/v1","kind":"AdmissionConfiguration","plugins":[{"name":"PodSecurity","configuration":` +
		`{"apiVersion":"pod-security.admission.config.k8s.io/v1","kind":"PodSecurityConfiguration",` +
		`"defaults":{"enforce":"restricted","enforce-version":"latest","audit":"restricted","audit-version":"latest","warn":"baseline","warn-version":"latest"},` +
		`"exemptions":{"usernames":[],"runtimeClasses":[],"namespaces":[]}}}]}`
	if string(b) != want {
		t.Errorf("admission config:\n got %s\nwant %s", b, want)
	}
}

func TestConfigMapKeys(t *testing.T) {
	for _, on := range []bool{true, false} {
		cm, err := ConfigMap(resolveTC(t, konnectivity(on)))
		if err != nil {
			t.Fatal(err)
		}
		keys := sortedKeys(cm.Data)
		// The audit policy is there by default (mode File); TestAuditModes
		// covers mode None.
		want := []string{ConfigKeyAdmission, ConfigKeyAuditPolicy, ConfigKeyControllerManagerConf, ConfigKeySchedulerConf}
		if on {
			want = append(want, ConfigKeyEgressSelector, ConfigKeyKonnectivityConf)
		}
		slices.Sort(want)
		if !reflect.DeepEqual(keys, want) {
			t.Errorf("konnectivity=%v: keys %v, want %v", on, keys, want)
		}
		for k, v := range cm.Data {
			if strings.Contains(v, "PRIVATE KEY") || strings.Contains(v, "-data") {
				t.Errorf("%s embeds credentials; the ConfigMap must only reference files", k)
			}
		}
	}
}

func TestKubeconfig(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		b, err := Kubeconfig("alpha", "https://192.0.2.1:6443", "kubefarm:admin",
			ClientCredentials{CAData: []byte("ca"), CertData: []byte("cert"), KeyData: []byte("key")})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.Load(b)
		if err != nil {
			t.Fatal(err)
		}
		ctx := cfg.Contexts[cfg.CurrentContext]
		if ctx == nil || ctx.Cluster != "alpha" || ctx.AuthInfo != "kubefarm:admin" {
			t.Fatalf("current context %q = %+v", cfg.CurrentContext, ctx)
		}
		cl, user := cfg.Clusters["alpha"], cfg.AuthInfos["kubefarm:admin"]
		if cl.Server != "https://192.0.2.1:6443" || string(cl.CertificateAuthorityData) != "ca" ||
			string(user.ClientCertificateData) != "cert" || string(user.ClientKeyData) != "key" {
			t.Errorf("round trip lost data: %+v %+v", cl, user)
		}
		again, _ := Kubeconfig("alpha", "https://192.0.2.1:6443", "kubefarm:admin",
			ClientCredentials{CAData: []byte("ca"), CertData: []byte("cert"), KeyData: []byte("key")})
		if string(again) != string(b) {
			t.Errorf("kubeconfig bytes differ between runs")
		}
	})
	t.Run("files", func(t *testing.T) {
		b, err := Kubeconfig("alpha", "https://x:6443", "u", ClientCredentials{CAFile: "/ca", CertFile: "/crt", KeyFile: "/key"})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.Load(b)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Clusters["alpha"].CertificateAuthority != "/ca" || cfg.AuthInfos["u"].ClientCertificate != "/crt" || cfg.AuthInfos["u"].ClientKey != "/key" {
			t.Errorf("file references lost: %s", b)
		}
	})
	bad := []struct {
		name   string
		server string
		cred   ClientCredentials
	}{
		{"no server", "", ClientCredentials{CAFile: "/a", CertFile: "/b", KeyFile: "/c"}},
		{"nothing", "https://x", ClientCredentials{}},
		{"both kinds", "https://x", ClientCredentials{CAFile: "/a", CertFile: "/b", KeyFile: "/c", CAData: []byte("x")}},
		{"partial data", "https://x", ClientCredentials{CAData: []byte("a"), CertData: []byte("b")}},
		{"partial files", "https://x", ClientCredentials{CertFile: "/b", KeyFile: "/c"}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Kubeconfig("alpha", tt.server, "u", tt.cred); err == nil {
				t.Error("no error")
			}
		})
	}
}

func TestAdminKubeconfigEndpoints(t *testing.T) {
	ca, crt, key := []byte("ca"), []byte("crt"), []byte("key")
	cases := []struct {
		name       string
		externalIP string
		port       int32
		external   bool
		want       string
	}{
		{"in-cluster", "", 0, false, "https://alpha-apiserver.tenants.svc:6443"},
		{"in-cluster custom port", "", 443, false, "https://alpha-apiserver.tenants.svc:443"},
		{"external", "192.0.2.4", 0, true, "https://192.0.2.4:6443"},
		{"external ipv6", "2001:db8::4", 443, true, "https://[2001:db8::4]:443"},
		{"external unknown", "", 0, true, ""},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			c := resolveTC(t, func(tc *v1alpha1.TenantCluster) {
				tc.Spec.APIServer.Expose.ExternalIP = tt.externalIP
				tc.Spec.APIServer.Expose.Port = tt.port
			})
			b, err := AdminKubeconfig(c, tt.external, ca, crt, key)
			if tt.want == "" {
				if err == nil {
					t.Fatal("external kubeconfig built without an external address")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := clientcmd.Load(b)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Clusters["alpha"].Server; got != tt.want {
				t.Errorf("server = %s, want %s", got, tt.want)
			}
			if cfg.Contexts[cfg.CurrentContext].AuthInfo != UserAdmin {
				t.Errorf("admin kubeconfig is not for %s", UserAdmin)
			}
		})
	}
}

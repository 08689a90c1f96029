package desired

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func TestResolveAppliesCRDDefaults(t *testing.T) {
	c := resolveTC(t)
	checks := []struct {
		name      string
		got, want any
	}{
		{"apiserver replicas", c.APIServerReplicas, int32(2)},
		{"etcd replicas", c.EtcdReplicas, int32(3)},
		{"etcd storage", c.EtcdStorageSize.String(), "2Gi"},
		{"reclaim", c.VolumeReclaim, v1alpha1.VolumeReclaimRetain},
		{"service CIDR", c.ServiceCIDR.String(), "10.96.0.0/12"},
		{"kubernetes service IP", c.APIServerServiceIP.String(), "10.96.0.1"},
		{"DNS IP", c.DNSServiceIP.String(), "10.96.0.10"},
		{"pod CIDR unset", c.PodCIDR.IsValid(), false},
		{"domain", c.ClusterDomain, "cluster.local"},
		{"expose", c.ExposeType, v1alpha1.ExposeLoadBalancer},
		{"port", c.ServicePort, int32(6443)},
		{"konnectivity", c.Konnectivity, true},
		{"enforce", c.PodSecurity.Enforce, v1alpha1.PodSecurityLevel("baseline")},
		{"audit", c.PodSecurity.Audit, v1alpha1.PodSecurityLevel("restricted")},
		{"warn", c.PodSecurity.Warn, v1alpha1.PodSecurityLevel("restricted")},
		{"admin domain", c.AdminClusterDomain, "cluster.local"},
		{"external address unknown", c.ExternalAddress, ""},
		{"external endpoint unknown", c.ExternalEndpoint(), ""},
		{"in-cluster endpoint", c.InClusterEndpoint(), "https://alpha-apiserver.tenants.svc:6443"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestResolveNetworks(t *testing.T) {
	cases := []struct {
		name                  string
		serviceCIDR, dnsIP    string
		wantAPIIP, wantDNS    string
		externalIP, wantEndpt string
	}{
		{"ipv4 unmasked", "10.100.7.9/16", "", "10.100.0.1", "10.100.0.10", "192.0.2.10", "https://192.0.2.10:6443"},
		{"ipv6", "fd00:10:96::/112", "", "fd00:10:96::1", "fd00:10:96::a", "2001:db8::10", "https://[2001:db8::10]:6443"},
		{"explicit dns ip", "10.96.0.0/12", "10.96.0.53", "10.96.0.1", "10.96.0.53", "", ""},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			c := resolveTC(t, func(tc *v1alpha1.TenantCluster) {
				tc.Spec.Network.ServiceCIDR = tt.serviceCIDR
				tc.Spec.Network.DNSServiceIP = tt.dnsIP
				tc.Spec.APIServer.Expose.ExternalIP = tt.externalIP
			})
			if got := c.APIServerServiceIP.String(); got != tt.wantAPIIP {
				t.Errorf("API server service IP = %s, want %s", got, tt.wantAPIIP)
			}
			if got := c.DNSServiceIP.String(); got != tt.wantDNS {
				t.Errorf("DNS IP = %s, want %s", got, tt.wantDNS)
			}
			if got := c.ExternalEndpoint(); got != tt.wantEndpt {
				t.Errorf("external endpoint = %q, want %q", got, tt.wantEndpt)
			}
		})
	}
}

func TestResolveExternalAddressPrecedence(t *testing.T) {
	opts := testOptions()
	opts.ObservedExternalAddress = "198.51.100.7"
	c := mustResolve(t, newTC(func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.Expose.ExternalIP = "192.0.2.1" }), opts)
	if c.ExternalAddress != "192.0.2.1" {
		t.Errorf("spec externalIP must win over the observed address, got %q", c.ExternalAddress)
	}
	c = mustResolve(t, newTC(), opts)
	if c.ExternalAddress != "198.51.100.7" {
		t.Errorf("observed address not used, got %q", c.ExternalAddress)
	}
}

func TestResolveRejects(t *testing.T) {
	noImages := testOptions()
	noImages.Images.EtcdTag = ""
	cases := []struct {
		name    string
		mod     func(*v1alpha1.TenantCluster)
		opts    *Options
		wantErr string
	}{
		{"long name", func(tc *v1alpha1.TenantCluster) { tc.Name = strings.Repeat("a", 41) }, nil, "metadata.name"},
		{"name starting with digit", func(tc *v1alpha1.TenantCluster) { tc.Name = "1alpha" }, nil, "metadata.name"},
		{"no namespace", func(tc *v1alpha1.TenantCluster) { tc.Namespace = "" }, nil, "metadata.namespace"},
		{"bad version", func(tc *v1alpha1.TenantCluster) { tc.Spec.Version = "1.34" }, nil, "spec.version"},
		{"zero apiserver replicas", func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.Replicas = ptrTo(int32(0)) }, nil, "spec.apiServer.replicas"},
		{"two etcd members", func(tc *v1alpha1.TenantCluster) { tc.Spec.Etcd.Replicas = 2 }, nil, "spec.etcd.replicas"},
		{"zero storage", func(tc *v1alpha1.TenantCluster) { q := resource.MustParse("0"); tc.Spec.Etcd.StorageSize = &q }, nil, "spec.etcd.storageSize"},
		{"bad service CIDR", func(tc *v1alpha1.TenantCluster) { tc.Spec.Network.ServiceCIDR = "10.96.0.0" }, nil, "spec.network.serviceCIDR"},
		{"tiny service CIDR", func(tc *v1alpha1.TenantCluster) { tc.Spec.Network.ServiceCIDR = "10.96.0.0/30" }, nil, "spec.network.serviceCIDR"},
		{"dns ip outside", func(tc *v1alpha1.TenantCluster) { tc.Spec.Network.DNSServiceIP = "10.0.0.10" }, nil, "spec.network.dnsServiceIP"},
		{"bad pod CIDR", func(tc *v1alpha1.TenantCluster) { tc.Spec.Network.PodCIDR = "nope" }, nil, "spec.network.podCIDR"},
		{"bad domain", func(tc *v1alpha1.TenantCluster) { tc.Spec.Network.ClusterDomain = "Bad_Domain" }, nil, "spec.network.clusterDomain"},
		{"externalIP type without IP", func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.Expose.Type = v1alpha1.ExposeExternalIP }, nil, "spec.apiServer.expose.externalIP"},
		{"bad externalIP", func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.Expose.ExternalIP = "host.example" }, nil, "spec.apiServer.expose.externalIP"},
		{"unknown expose", func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.Expose.Type = "Ingress" }, nil, "spec.apiServer.expose.type"},
		{"port clash", func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.Expose.Port = 8132 }, nil, "spec.apiServer.expose.port"},
		{"bad SAN", func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.CertSANs = []string{"ok.example", "not a name"} }, nil, "spec.apiServer.certSANs[1]"},
		{"bad pod security", func(tc *v1alpha1.TenantCluster) { tc.Spec.PodSecurity.Warn = "strict" }, nil, "spec.podSecurity.warn"},
		{"no images", nil, &noImages, "options.images"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTC()
			if tt.mod != nil {
				tt.mod(tc)
			}
			opts := testOptions()
			if tt.opts != nil {
				opts = *tt.opts
			}
			_, err := Resolve(tc, opts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Resolve error = %v, want one naming %s", err, tt.wantErr)
			}
		})
	}
}

func TestResolveKonnectivityPortAllowedWhenOff(t *testing.T) {
	// The agent port only clashes with the API server port when both are on
	// the Service.
	resolveTC(t, konnectivity(false), func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.Expose.Port = 8132 })
}

func TestResolveDoesNotAliasInput(t *testing.T) {
	tc := newTC(func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.CertSANs = []string{"b.example", "a.example"} })
	c := mustResolve(t, tc, testOptions())
	if tc.Spec.APIServer.CertSANs[0] != "b.example" {
		t.Fatalf("Resolve sorted the caller's certSANs in place")
	}
	if strings.Join(c.CertSANs, ",") != "a.example,b.example" {
		t.Fatalf("CertSANs = %v", c.CertSANs)
	}
	class := "fast"
	tc = newTC(func(tc *v1alpha1.TenantCluster) {
		tc.Spec.APIServer.ExtraArgs = map[string]string{"v": "2"}
		tc.Spec.Etcd.StorageClassName = &class
	})
	c = mustResolve(t, tc, testOptions())
	tc.Spec.APIServer.ExtraArgs["v"] = "9"
	class = "slow"
	if c.APIServerArgs["v"] != "2" || *c.EtcdStorageClass != "fast" {
		t.Errorf("Cluster aliases the TenantCluster: args %v class %s", c.APIServerArgs, *c.EtcdStorageClass)
	}
}

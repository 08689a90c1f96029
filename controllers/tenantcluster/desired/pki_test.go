package desired

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func TestIssuers(t *testing.T) {
	c := resolveTC(t)
	issuers := Issuers(c)
	want := []struct {
		name, caSecret string
	}{{"alpha-selfsigned", ""}, {"alpha-ca", "alpha-ca"}, {"alpha-front-proxy-ca", "alpha-front-proxy-ca"}, {"alpha-etcd-ca", "alpha-etcd-ca"}}
	if len(issuers) != len(want) {
		t.Fatalf("got %d issuers, want %d", len(issuers), len(want))
	}
	for i, w := range want {
		is := issuers[i]
		if is.Name != w.name || is.Namespace != "tenants" || is.Kind != "Issuer" || is.APIVersion != "cert-manager.io/v1" {
			t.Errorf("issuer %d = %s/%s %s %s", i, is.Namespace, is.Name, is.APIVersion, is.Kind)
		}
		switch {
		case w.caSecret == "" && is.Spec.SelfSigned == nil:
			t.Errorf("%s is not self-signed", w.name)
		case w.caSecret != "" && (is.Spec.CA == nil || is.Spec.CA.SecretName != w.caSecret):
			t.Errorf("%s: CA issuer secret = %+v, want %s", w.name, is.Spec.CA, w.caSecret)
		}
	}
}

func TestCertificatesAreConsistent(t *testing.T) {
	c := resolveTC(t)
	issuers := map[string]bool{}
	for _, is := range Issuers(c) {
		issuers[is.Name] = true
	}
	seen := map[string]bool{}
	certs := Certificates(c)
	if len(certs) != 17 {
		t.Errorf("got %d certificates, want 17", len(certs))
	}
	for _, cert := range certs {
		role := cert.Labels[v1alpha1.LabelPKIRole]
		if cert.Name != "alpha-"+role || cert.Spec.SecretName != cert.Name || cert.Namespace != "tenants" {
			t.Errorf("certificate %s/%s (role %s) secret %s: names must be <cluster>-<role>", cert.Namespace, cert.Name, role, cert.Spec.SecretName)
		}
		if seen[cert.Name] {
			t.Errorf("duplicate certificate %s", cert.Name)
		}
		seen[cert.Name] = true
		if !issuers[cert.Spec.IssuerRef.Name] || cert.Spec.IssuerRef.Kind != "Issuer" {
			t.Errorf("%s: issuer %+v is not one of the tenant's Issuers", cert.Name, cert.Spec.IssuerRef)
		}
		if cert.Spec.SecretTemplate == nil || cert.Spec.SecretTemplate.Labels[v1alpha1.LabelTenantCluster] != "alpha" {
			t.Errorf("%s: Secret is not labelled with its tenant", cert.Name)
		}
		if cert.Spec.CommonName == "" {
			t.Errorf("%s: no common name", cert.Name)
		}
	}
}

func TestCertificateIdentities(t *testing.T) {
	c := resolveTC(t)
	server := []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageServerAuth}
	client := []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageClientAuth}
	both := []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageServerAuth, cmapi.UsageClientAuth}
	ca := []cmapi.KeyUsage{cmapi.UsageCertSign, cmapi.UsageCRLSign, cmapi.UsageDigitalSignature}
	cases := []struct {
		role   PKIRole
		issuer string
		isCA   bool
		cn     string
		orgs   []string
		usages []cmapi.KeyUsage
	}{
		{RoleCA, "alpha-selfsigned", true, "kubernetes-ca", nil, ca},
		{RoleFrontProxyCA, "alpha-selfsigned", true, "front-proxy-ca", nil, ca},
		{RoleEtcdCA, "alpha-selfsigned", true, "etcd-ca", nil, ca},
		{RoleAPIServer, "alpha-ca", false, "kube-apiserver", nil, server},
		{RoleAPIServerKubeletClient, "alpha-ca", false, "kubefarm:apiserver-kubelet-client", nil, client},
		{RoleAPIServerEtcdClient, "alpha-etcd-ca", false, "kube-apiserver-etcd-client", nil, client},
		{RoleFrontProxyClient, "alpha-front-proxy-ca", false, "front-proxy-client", nil, client},
		{RoleEtcdServer, "alpha-etcd-ca", false, "etcd-server", nil, both},
		{RoleEtcdPeer, "alpha-etcd-ca", false, "etcd-peer", nil, both},
		{RoleControllerManager, "alpha-ca", false, "system:kube-controller-manager", nil, client},
		{RoleScheduler, "alpha-ca", false, "system:kube-scheduler", nil, client},
		{RoleKonnectivityServer, "alpha-ca", false, "konnectivity-server", nil, server},
		{RoleKonnectivityClient, "alpha-ca", false, "system:konnectivity-server", nil, client},
		{RoleAdmin, "alpha-ca", false, "kubefarm:admin", []string{"kubefarm:cluster-admins"}, client},
		{RoleSuperAdmin, "alpha-ca", false, "kubefarm:super-admin", []string{"system:masters"}, client},
		{RoleTokenIssuer, "alpha-ca", false, "kubefarm:token-issuer", nil, client},
	}
	for _, tt := range cases {
		t.Run(string(tt.role), func(t *testing.T) {
			cert := CertificateFor(c, tt.role)
			s := cert.Spec
			if s.IssuerRef.Name != tt.issuer || s.IsCA != tt.isCA || s.CommonName != tt.cn {
				t.Errorf("issuer=%s isCA=%v cn=%q, want %s %v %q", s.IssuerRef.Name, s.IsCA, s.CommonName, tt.issuer, tt.isCA, tt.cn)
			}
			var orgs []string
			if s.Subject != nil {
				orgs = s.Subject.Organizations
			}
			if !reflect.DeepEqual(orgs, tt.orgs) {
				t.Errorf("organizations = %v, want %v", orgs, tt.orgs)
			}
			if !reflect.DeepEqual(s.Usages, tt.usages) {
				t.Errorf("usages = %v, want %v", s.Usages, tt.usages)
			}
			wantRotation := cmapi.RotationPolicyAlways
			if tt.isCA {
				wantRotation = cmapi.RotationPolicyNever
			}
			if s.PrivateKey.RotationPolicy != wantRotation {
				t.Errorf("rotation policy = %s, want %s", s.PrivateKey.RotationPolicy, wantRotation)
			}
			if tt.isCA != (s.Duration.Duration > leafDuration.Duration) {
				t.Errorf("duration %s: CAs must outlive leaves", s.Duration.Duration)
			}
		})
	}
	t.Run("only super-admin is system:masters", func(t *testing.T) {
		for _, cert := range Certificates(c) {
			if cert.Spec.Subject != nil && slices.Contains(cert.Spec.Subject.Organizations, GroupMasters) && cert.Name != "alpha-super-admin" {
				t.Errorf("%s is in system:masters", cert.Name)
			}
		}
	})
	t.Run("service-account key", func(t *testing.T) {
		pk := CertificateFor(c, RoleServiceAccount).Spec.PrivateKey
		if pk.Algorithm != cmapi.RSAKeyAlgorithm || pk.Size != 2048 || pk.RotationPolicy != cmapi.RotationPolicyNever {
			t.Errorf("service-account key = %+v, want RSA 2048 never rotated", pk)
		}
	})
}

func TestAPIServerSANs(t *testing.T) {
	opts := testOptions()
	opts.AdminClusterDomain = "admin.local"
	c := mustResolve(t, newTC(func(tc *v1alpha1.TenantCluster) {
		tc.Spec.Network.ClusterDomain = "tenant.local"
		tc.Spec.Network.ServiceCIDR = "10.32.0.0/16"
		tc.Spec.APIServer.Expose.ExternalIP = "192.0.2.10"
		tc.Spec.APIServer.CertSANs = []string{"api.example.com", "203.0.113.5", "api.example.com", "2001:db8::1"}
	}), opts)
	cert := CertificateFor(c, RoleAPIServer)
	wantDNS := []string{
		"alpha-apiserver", "alpha-apiserver.tenants", "alpha-apiserver.tenants.svc", "alpha-apiserver.tenants.svc.admin.local",
		"api.example.com",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.tenant.local",
	}
	slices.Sort(wantDNS)
	wantIPs := []string{"10.32.0.1", "192.0.2.10", "2001:db8::1", "203.0.113.5"}
	if !reflect.DeepEqual(cert.Spec.DNSNames, wantDNS) {
		t.Errorf("DNS SANs:\n got %v\nwant %v", cert.Spec.DNSNames, wantDNS)
	}
	if !reflect.DeepEqual(cert.Spec.IPAddresses, wantIPs) {
		t.Errorf("IP SANs:\n got %v\nwant %v", cert.Spec.IPAddresses, wantIPs)
	}
	// The in-cluster URL the components use must be covered.
	if host := strings.TrimSuffix(strings.TrimPrefix(c.InClusterEndpoint(), "https://"), ":6443"); !slices.Contains(cert.Spec.DNSNames, host) {
		t.Errorf("in-cluster host %s not in SANs", host)
	}
	// Konnectivity agents dial the same external names.
	k := CertificateFor(c, RoleKonnectivityServer)
	for _, ip := range []string{"192.0.2.10", "203.0.113.5"} {
		if !slices.Contains(k.Spec.IPAddresses, ip) {
			t.Errorf("konnectivity server cert lacks %s: %v", ip, k.Spec.IPAddresses)
		}
	}
	if slices.Contains(k.Spec.DNSNames, "kubernetes.default") {
		t.Errorf("konnectivity server cert carries the tenant's in-cluster API names")
	}
}

func TestSANsFollowObservedAddress(t *testing.T) {
	cases := []struct {
		observed     string
		wantIP, want string
	}{
		{"198.51.100.7", "198.51.100.7", ""},
		{"lb-123.elb.example", "", "lb-123.elb.example"},
	}
	for _, tt := range cases {
		t.Run(tt.observed, func(t *testing.T) {
			opts := testOptions()
			opts.ObservedExternalAddress = tt.observed
			c := mustResolve(t, newTC(), opts)
			for _, role := range []PKIRole{RoleAPIServer, RoleKonnectivityServer} {
				s := CertificateFor(c, role).Spec
				if tt.wantIP != "" && !slices.Contains(s.IPAddresses, tt.wantIP) {
					t.Errorf("%s: IP SANs %v lack %s", role, s.IPAddresses, tt.wantIP)
				}
				if tt.want != "" && !slices.Contains(s.DNSNames, tt.want) {
					t.Errorf("%s: DNS SANs %v lack %s", role, s.DNSNames, tt.want)
				}
			}
		})
	}
}

// matchesSAN is RFC 6125 matching as Go's crypto/x509 does it: a wildcard
// covers exactly one leftmost label.
func matchesSAN(host string, sans []string) bool {
	for _, s := range sans {
		if s == host {
			return true
		}
		if rest, ok := strings.CutPrefix(s, "*."); ok {
			if _, after, found := strings.Cut(host, "."); found && after == rest {
				return true
			}
		}
	}
	return false
}

func TestEtcdSANsCoverEveryMember(t *testing.T) {
	c := resolveTC(t)
	for _, role := range []PKIRole{RoleEtcdServer, RoleEtcdPeer} {
		s := CertificateFor(c, role).Spec
		var hosts []string
		for _, u := range c.EtcdClientURLs() {
			host, _, _ := strings.Cut(strings.TrimPrefix(u, "https://"), ":")
			hosts = append(hosts, host)
		}
		// The short form, which the admin cluster's search path resolves.
		hosts = append(hosts, "alpha-etcd-2.alpha-etcd.tenants.svc", "localhost")
		for _, h := range hosts {
			if !matchesSAN(h, s.DNSNames) {
				t.Errorf("%s: %s not covered by %v", role, h, s.DNSNames)
			}
		}
		if !slices.Contains(s.IPAddresses, "127.0.0.1") {
			t.Errorf("%s: loopback missing", role)
		}
	}
}

func TestAllIPSANsParse(t *testing.T) {
	c := resolveTC(t, func(tc *v1alpha1.TenantCluster) {
		tc.Spec.APIServer.CertSANs = []string{"2001:0db8:0:0::1"}
	})
	for _, cert := range Certificates(c) {
		for _, ip := range cert.Spec.IPAddresses {
			a, err := netip.ParseAddr(ip)
			if err != nil || a.String() != ip {
				t.Errorf("%s: IP SAN %q not canonical", cert.Name, ip)
			}
		}
	}
}

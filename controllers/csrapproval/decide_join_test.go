package csrapproval

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

// The join fixtures: TenantCluster alpha in namespace tenants, whose Machine
// workers-m2 (hostname m2) got token abc123.
const (
	joinTenant = "alpha"
	joinID     = "abc123"
)

var joinNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// joinTemplate is what the kubelet of Machine workers-m2 asks for
// (k8s.io/kubernetes pkg/kubelet/certificate/bootstrap requestNodeCertificate).
func joinTemplate() *x509.CertificateRequest {
	return &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:m2", Organization: []string{"system:nodes"}}}
}

func joinRequest(req []byte) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "node-csr-abcde"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    req,
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Username:   "system:bootstrap:" + joinID,
			Groups:     []string{"system:bootstrappers", bootstraptoken.DefaultGroup, "system:authenticated"},
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
}

// joinToken is the Secret kubefarm-pxe makes for workers-m2, valid for an
// hour from joinNow.
func joinToken(t testing.TB) *corev1.Secret {
	tok, err := bootstraptoken.Parse(joinID + ".0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	return bootstraptoken.Secret(tok, bootstraptoken.Options{Machine: "workers-m2", TTL: time.Hour,
		Now: func() time.Time { return joinNow }})
}

var joinMachines = map[string]*kubefarmv1.Machine{
	"workers-m2": {ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "workers-m2"},
		Spec: kubefarmv1.MachineSpec{Cluster: joinTenant, Hostname: "m2", IP: "10.28.0.12"}},
	"workers-m3": {ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "workers-m3"},
		Spec: kubefarmv1.MachineSpec{Cluster: joinTenant, Hostname: "m3", IP: "10.28.0.13"}},
	"beta-m9": {ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "beta-m9"},
		Spec: kubefarmv1.MachineSpec{Cluster: "beta", Hostname: "m9", IP: "10.29.0.9"}},
	"nameless": {ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "nameless"},
		Spec: kubefarmv1.MachineSpec{Cluster: joinTenant}},
}

// joinLookup finds the token s (none when nil) and joinMachines.
func joinLookup(s *corev1.Secret) JoinLookup {
	return JoinLookup{
		Token: func(id string) (*corev1.Secret, bool) {
			if s == nil || s.Name != bootstraptoken.SecretName(id) {
				return nil, false
			}
			return s, true
		},
		Machine: func(name string) (*kubefarmv1.Machine, bool) {
			m, ok := joinMachines[name]
			return m, ok
		},
	}
}

func TestDecideJoin(t *testing.T) {
	valid := pemOf(der(t, joinTemplate(), "p256"))
	with := func(f func(*x509.CertificateRequest)) []byte {
		tmpl := joinTemplate()
		f(tmpl)
		return pemOf(der(t, tmpl, "p256"))
	}
	withKey := func(key string) []byte { return pemOf(der(t, joinTemplate(), key)) }
	csr := func(req []byte, f func(*certificatesv1.CertificateSigningRequest)) *certificatesv1.CertificateSigningRequest {
		c := joinRequest(req)
		if f != nil {
			f(c)
		}
		return c
	}
	usages := func(u ...certificatesv1.KeyUsage) func(*certificatesv1.CertificateSigningRequest) {
		return func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Usages = u }
	}
	token := func(f func(*corev1.Secret)) *corev1.Secret {
		s := joinToken(t)
		if f != nil {
			f(s)
		}
		return s
	}
	// Tampered after signing: asked for m3 and now asks for m2.
	tmpl := joinTemplate()
	tmpl.Subject.CommonName = "system:node:m3"
	forged := der(t, tmpl, "p256")
	i := bytes.LastIndex(forged, []byte("m3"))
	forged[i+1] = '2'
	padded := func(n int) []byte { return append(bytes.Clone(valid), bytes.Repeat([]byte("\n"), n-len(valid))...) }
	const (
		ds = certificatesv1.UsageDigitalSignature
		ke = certificatesv1.UsageKeyEncipherment
		ca = certificatesv1.UsageClientAuth
		sa = certificatesv1.UsageServerAuth
	)

	for _, tc := range []struct {
		name    string
		csr     *certificatesv1.CertificateSigningRequest
		token   *corev1.Secret
		verdict Verdict
		reason  string
		msg     string // a fragment of the message
	}{
		{"the kubelet's own request", csr(valid, nil), nil, Approve, kubefarmv1.ReasonCSRJoinApproved, "Machine tenants/workers-m2"},
		{"RSA key with key encipherment", csr(withKey("rsa2048"), usages(ds, ke, ca)), nil, Approve, kubefarmv1.ReasonCSRJoinApproved, "system:node:m2"},
		{"usages in another order", csr(valid, usages(ca, ds)), nil, Approve, kubefarmv1.ReasonCSRJoinApproved, ""},
		{"Ed25519 key", csr(withKey("ed25519"), nil), nil, Approve, kubefarmv1.ReasonCSRJoinApproved, ""},
		{"exactly the size limit", csr(padded(MaxRequestBytes), nil), nil, Approve, kubefarmv1.ReasonCSRJoinApproved, ""},

		{"no request object", nil, nil, Ignore, kubefarmv1.ReasonCSRNotKubeletClient, ""},
		{"a serving request", csr(valid, func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.SignerName = certificatesv1.KubeletServingSignerName
		}), nil, Ignore, kubefarmv1.ReasonCSRNotKubeletClient, "kubernetes.io/kubelet-serving"},
		{"a node's renewal", csr(valid, func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Username, c.Spec.Groups = "system:node:m2", []string{"system:nodes", "system:authenticated"}
		}), nil, Ignore, kubefarmv1.ReasonCSRNotBootstrap, "kube-controller-manager"},
		{"a node asking for another node's name", csr(with(func(r *x509.CertificateRequest) { r.Subject.CommonName = "system:node:m3" }),
			func(c *certificatesv1.CertificateSigningRequest) {
				c.Spec.Username, c.Spec.Groups = "system:node:m2", []string{"system:nodes", "system:authenticated"}
			}), nil, Deny, kubefarmv1.ReasonCSRNotSelf, `"system:node:m3"`},
		{"a user's request", csr(valid, func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Username = "alice" }), nil, Ignore, kubefarmv1.ReasonCSRNotBootstrap, `"alice"`},
		{"already approved", csr(valid, func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: "True"}}
		}), nil, Ignore, kubefarmv1.ReasonCSRAlreadyDecided, "Approved"},
		{"already failed", csr(valid, func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateFailed, Status: "True"}}
		}), nil, Ignore, kubefarmv1.ReasonCSRAlreadyDecided, "Failed"},

		{"requester is no token id", csr(valid, func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Username = "system:bootstrap:ABC123" }),
			nil, Deny, kubefarmv1.ReasonCSRUnknownToken, "ABC123"},
		{"no such token", csr(valid, nil), token(func(s *corev1.Secret) { s.Name = bootstraptoken.SecretName("zzz999") }),
			Deny, kubefarmv1.ReasonCSRUnknownToken, "kube-system/bootstrap-token-abc123"},
		{"requester not in kubefarm's group", csr(valid, func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Groups = []string{"system:bootstrappers", "system:authenticated"}
		}), nil, Deny, kubefarmv1.ReasonCSRForeignToken, bootstraptoken.DefaultGroup},
		{"token Secret of another type", csr(valid, nil), token(func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque }),
			Deny, kubefarmv1.ReasonCSRForeignToken, "Opaque"},
		{"token without the machine label", csr(valid, nil), token(func(s *corev1.Secret) { s.Labels = nil }),
			Deny, kubefarmv1.ReasonCSRForeignToken, kubefarmv1.LabelMachine},
		{"token in another group too", csr(valid, nil), token(func(s *corev1.Secret) {
			s.Data[bootstraptoken.KeyExtraGroups] = []byte(bootstraptoken.DefaultGroup + ",system:bootstrappers:admins")
		}), Deny, kubefarmv1.ReasonCSRForeignToken, "system:bootstrappers:admins"},
		{"expired token", csr(valid, nil), token(func(s *corev1.Secret) {
			s.Data[bootstraptoken.KeyExpiration] = []byte(joinNow.Add(-time.Second).Format(time.RFC3339))
		}), Deny, kubefarmv1.ReasonCSRTokenExpired, "expired"},
		{"token for a Machine that does not exist", csr(valid, nil), token(func(s *corev1.Secret) { s.Labels[kubefarmv1.LabelMachine] = "ghost" }),
			Deny, kubefarmv1.ReasonCSRNoMachine, `"ghost"`},
		{"token for a Machine without hostname", csr(valid, nil), token(func(s *corev1.Secret) { s.Labels[kubefarmv1.LabelMachine] = "nameless" }),
			Deny, kubefarmv1.ReasonCSRNoMachine, "no hostname"},
		{"token for another tenant's Machine", csr(with(func(r *x509.CertificateRequest) { r.Subject.CommonName = "system:node:m9" }), nil),
			token(func(s *corev1.Secret) { s.Labels[kubefarmv1.LabelMachine] = "beta-m9" }), Deny, kubefarmv1.ReasonCSRForeignMachine, `"beta"`},

		{"another Machine's name", csr(with(func(r *x509.CertificateRequest) { r.Subject.CommonName = "system:node:m3" }), nil),
			nil, Deny, kubefarmv1.ReasonCSRCommonName, `"system:node:m3"`},
		{"an API server identity", csr(with(func(r *x509.CertificateRequest) { r.Subject.CommonName = "system:kube-controller-manager" }), nil),
			nil, Deny, kubefarmv1.ReasonCSRCommonName, "want \"system:node:m2\""},
		{"no CN", csr(with(func(r *x509.CertificateRequest) { r.Subject.CommonName = "" }), nil), nil, Deny, kubefarmv1.ReasonCSRCommonName, "0 CN"},
		{"two CNs", csr(with(func(r *x509.CertificateRequest) {
			cn := pkix.AttributeTypeAndValue{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: "system:node:m2"}
			r.Subject.ExtraNames = []pkix.AttributeTypeAndValue{cn, cn, {Type: asn1.ObjectIdentifier{2, 5, 4, 10}, Value: "system:nodes"}}
		}), nil), nil, Deny, kubefarmv1.ReasonCSRCommonName, "2 CN"},
		{"O system:masters", csr(with(func(r *x509.CertificateRequest) { r.Subject.Organization = []string{"system:masters"} }), nil),
			nil, Deny, kubefarmv1.ReasonCSROrganization, "system:masters"},
		{"a second O", csr(with(func(r *x509.CertificateRequest) { r.Subject.Organization = []string{"system:nodes", "system:masters"} }), nil),
			nil, Deny, kubefarmv1.ReasonCSROrganization, "system:masters"},
		{"no O", csr(with(func(r *x509.CertificateRequest) { r.Subject.Organization = nil }), nil), nil, Deny, kubefarmv1.ReasonCSROrganization, "0 O"},
		{"an OU", csr(with(func(r *x509.CertificateRequest) { r.Subject.OrganizationalUnit = []string{"ops"} }), nil),
			nil, Deny, kubefarmv1.ReasonCSRExtraSubject, "2.5.4.11"},
		{"a serial number", csr(with(func(r *x509.CertificateRequest) { r.Subject.SerialNumber = "1" }), nil),
			nil, Deny, kubefarmv1.ReasonCSRExtraSubject, "2.5.4.5"},
		{"DNS SAN", csr(with(func(r *x509.CertificateRequest) { r.DNSNames = []string{"m2"} }), nil), nil, Deny, kubefarmv1.ReasonCSRSANs, "1 DNS"},
		{"IP SAN", csr(with(func(r *x509.CertificateRequest) { r.IPAddresses = []net.IP{net.IPv4(10, 28, 0, 12)} }), nil), nil, Deny, kubefarmv1.ReasonCSRSANs, "1 IP"},
		{"email SAN", csr(with(func(r *x509.CertificateRequest) { r.EmailAddresses = []string{"root@m2"} }), nil), nil, Deny, kubefarmv1.ReasonCSRSANs, "1 email"},
		{"URI SAN", csr(with(func(r *x509.CertificateRequest) {
			r.URIs = []*url.URL{{Scheme: "spiffe", Host: "farm", Path: "/ns/kube-system/sa/admin"}}
		}), nil), nil, Deny, kubefarmv1.ReasonCSRSANs, "1 URI"},
		{"server auth too", csr(valid, usages(ds, ca, sa)), nil, Deny, kubefarmv1.ReasonCSRClientUsages, "server auth"},
		{"no client auth", csr(valid, usages(ds)), nil, Deny, kubefarmv1.ReasonCSRClientUsages, ""},
		{"a usage twice", csr(valid, usages(ds, ca, ca)), nil, Deny, kubefarmv1.ReasonCSRClientUsages, ""},
		{"CA usage", csr(valid, usages(ds, ca, certificatesv1.UsageCertSign)), nil, Deny, kubefarmv1.ReasonCSRClientUsages, "cert sign"},
		{"no usages", csr(valid, usages()), nil, Deny, kubefarmv1.ReasonCSRClientUsages, ""},
		{"not PEM", csr([]byte("MIIB..."), nil), nil, Deny, kubefarmv1.ReasonCSRMalformed, "not PEM"},
		{"garbage DER", csr(pemOf([]byte("not DER at all")), nil), nil, Deny, kubefarmv1.ReasonCSRMalformed, "does not parse"},
		{"two requests", csr(append(bytes.Clone(valid), valid...), nil), nil, Deny, kubefarmv1.ReasonCSRMalformed, "after its PEM block"},
		{"oversized", csr(padded(MaxRequestBytes+1), nil), nil, Deny, kubefarmv1.ReasonCSRTooLarge, "16385 bytes"},
		{"tampered after signing", csr(pemOf(forged), nil), nil, Deny, kubefarmv1.ReasonCSRBadSignature, ""},
		{"RSA 1024 key", csr(withKey("rsa1024"), usages(ds, ke, ca)), nil, Deny, kubefarmv1.ReasonCSRWeakKey, "1024 bits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.token
			if s == nil {
				s = joinToken(t)
			}
			d := DecideJoin(tc.csr, joinTenant, joinNow, joinLookup(s))
			if d.Verdict != tc.verdict || d.Reason != tc.reason || !strings.Contains(d.Message, tc.msg) {
				t.Fatalf("DecideJoin = %v %s %q, want %v %s with %q", d.Verdict, d.Reason, d.Message, tc.verdict, tc.reason, tc.msg)
			}
			if d.Message == "" {
				t.Fatal("no message")
			}
		})
	}
}

// TestDecideJoinLooksUpOnlyTokens: nothing is looked up for a request the
// manager leaves alone (a renewal must not cost a read of the tenant), and
// the Machine only once the token is known to be kubefarm's.
func TestDecideJoinLooksUpOnlyTokens(t *testing.T) {
	var looked []string
	l := JoinLookup{
		Token: func(id string) (*corev1.Secret, bool) {
			looked = append(looked, "token "+id)
			return nil, false
		},
		Machine: func(name string) (*kubefarmv1.Machine, bool) {
			looked = append(looked, "machine "+name)
			return nil, false
		},
	}
	renewal := joinRequest(nil)
	renewal.Spec.Username = "system:node:m2"
	DecideJoin(renewal, joinTenant, joinNow, l)
	if len(looked) != 0 {
		t.Fatalf("a renewal looked up %v", looked)
	}
	d := DecideJoin(joinRequest(nil), joinTenant, joinNow, l)
	if d.Reason != kubefarmv1.ReasonCSRUnknownToken || !slices.Equal(looked, []string{"token " + joinID}) {
		t.Fatalf("decision %+v after lookups %v", d, looked)
	}
}

// TestJoinTokenID: the token id of a join request, and none for others.
func TestJoinTokenID(t *testing.T) {
	if id, ok := JoinTokenID(joinRequest(nil)); !ok || id != joinID {
		t.Errorf("JoinTokenID = %q, %v", id, ok)
	}
	serving := joinRequest(nil)
	serving.Spec.SignerName = certificatesv1.KubeletServingSignerName
	renewal := joinRequest(nil)
	renewal.Spec.Username = "system:node:m2"
	for _, c := range []*certificatesv1.CertificateSigningRequest{nil, serving, renewal} {
		if id, ok := JoinTokenID(c); ok {
			t.Errorf("JoinTokenID of a request made without a token = %q", id)
		}
	}
}

// joinOracle is an independent, looser statement of what an approved join
// request must be: one CSR whose signature verifies, for m2's node name in
// system:nodes and nothing else.
func joinOracle(req []byte) string {
	r, why := oracleParse(req)
	if r == nil {
		return why
	}
	if r.Subject.String() != "CN=system:node:m2,O=system:nodes" && r.Subject.String() != "O=system:nodes,CN=system:node:m2" {
		return "subject " + r.Subject.String()
	}
	if len(r.DNSNames)+len(r.IPAddresses)+len(r.EmailAddresses)+len(r.URIs) > 0 {
		return "SANs"
	}
	return ""
}

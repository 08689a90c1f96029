package csrapproval

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

var keys = sync.OnceValue(func() map[string]crypto.Signer {
	out := map[string]crypto.Signer{}
	for name, gen := range map[string]func() (crypto.Signer, error){
		"p256":    func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) },
		"p224":    func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P224(), rand.Reader) },
		"rsa2048": func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, 2048) },
		"rsa1024": func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, 1024) },
		"ed25519": func() (crypto.Signer, error) {
			_, k, err := ed25519.GenerateKey(rand.Reader)
			return k, err
		},
	} {
		k, err := gen()
		if err != nil {
			panic(err)
		}
		out[name] = k
	}
	return out
})

// template is what a kubelet of Machine m2 asks for.
func template() *x509.CertificateRequest {
	return &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:m2", Organization: []string{"system:nodes"}},
		DNSNames:    []string{"m2"},
		IPAddresses: []net.IP{net.ParseIP("10.28.0.12")},
	}
}

func der(t testing.TB, tmpl *x509.CertificateRequest, key string) []byte {
	t.Helper()
	b, err := x509.CreateCertificateRequest(rand.Reader, tmpl, keys()[key])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func pemOf(d []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: d})
}

func request(req []byte) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "csr-abcde"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    req,
			SignerName: certificatesv1.KubeletServingSignerName,
			Username:   "system:node:m2",
			Groups:     []string{"system:nodes", "system:authenticated"},
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}
}

var machines = map[string]Identity{
	"m2": IdentityOf(&kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "workers-m2"},
		Spec:       kubefarmv1.MachineSpec{Hostname: "m2", IP: "10.28.0.12"},
	}, domainPool("farm.local")),
	"m3": IdentityOf(&kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "workers-m3"},
		Spec:       kubefarmv1.MachineSpec{Hostname: "m3", IP: "10.28.0.13"},
	}, domainPool("farm.local")),
}

func lookup(name string) (Identity, bool) {
	id, ok := machines[name]
	return id, ok
}

func TestIdentityOf(t *testing.T) {
	id := machines["m2"]
	if id.Machine != "tenants/workers-m2" || strings.Join(id.DNSNames, ",") != "m2,m2.farm.local" ||
		len(id.IPs) != 1 || !id.IPs[0].Equal(net.IPv4(10, 28, 0, 12)) {
		t.Fatalf("IdentityOf = %+v", id)
	}
	noDomain := IdentityOf(&kubefarmv1.Machine{Spec: kubefarmv1.MachineSpec{Hostname: "h", IP: "bad"}}, nil)
	if strings.Join(noDomain.DNSNames, ",") != "h" || len(noDomain.IPs) != 0 {
		t.Fatalf("IdentityOf without a pool and with a bad IP = %+v", noDomain)
	}
}

func domainPool(domain string) *kubefarmv1.NodePool {
	p := &kubefarmv1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "workers"}}
	p.Spec.Network.Domain = domain
	return p
}

// A pool whose hostNetwork puts the node on a VLAN (nodeLink) has the
// kubelet report that VLAN's address: the approver must let it be certified,
// and only the machine's own.
func TestIdentityOfNodeLink(t *testing.T) {
	vlanPool := func(nodeLink string, entries ...kubefarmv1.MachineEntry) *kubefarmv1.NodePool {
		p := domainPool("")
		p.Spec.Machines = entries
		p.Spec.HostNetwork = &kubefarmv1.HostNetwork{
			VLANs:    []kubefarmv1.VLAN{{Name: "data", Link: "boot", ID: 29, AddressFromBoot: "10.29.0.0/16"}},
			NodeLink: nodeLink,
		}
		return p
	}
	m := &kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "workers-m2"},
		Spec:       kubefarmv1.MachineSpec{Hostname: "m2", IP: "10.28.3.4", Pool: "workers"},
	}
	ips := func(id Identity) string {
		var out []string
		for _, ip := range id.IPs {
			out = append(out, ip.String())
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		name string
		pool *kubefarmv1.NodePool
		want string
	}{
		{"nodeLink on the VLAN: its derived address too", vlanPool("data"), "10.28.3.4,10.29.3.4"},
		{"the machine's own entry wins over the rule", vlanPool("data", kubefarmv1.MachineEntry{Name: "m2",
			Addresses: []kubefarmv1.MachineAddress{{Link: "data", Address: "10.29.9.9/16"}}}), "10.28.3.4,10.29.9.9"},
		{"another entry's address is not this machine's", vlanPool("data", kubefarmv1.MachineEntry{Name: "m3",
			Addresses: []kubefarmv1.MachineAddress{{Link: "data", Address: "10.29.9.9/16"}}}), "10.28.3.4,10.29.3.4"},
		{"no nodeLink: the node keeps its boot address", vlanPool(""), "10.28.3.4"},
		{"no hostNetwork", domainPool(""), "10.28.3.4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ips(IdentityOf(m, tc.pool)); got != tc.want {
				t.Fatalf("IPs = %s, want %s", got, tc.want)
			}
		})
	}
	// The derived address is approved for this machine and no other.
	valid := pemOf(der(t, func() *x509.CertificateRequest {
		tmpl := template()
		tmpl.IPAddresses = []net.IP{net.IPv4(10, 29, 3, 4)}
		return tmpl
	}(), "p256"))
	withVLAN := func(string) (Identity, bool) { return IdentityOf(m, vlanPool("data")), true }
	if d := Decide(request(valid), withVLAN); d.Verdict != Approve {
		t.Fatalf("the nodeLink address: %+v", d)
	}
	if d := Decide(request(valid), lookup); d.Verdict != Deny {
		t.Fatalf("another machine's nodeLink address: %+v", d)
	}
}

func TestDecide(t *testing.T) {
	valid := pemOf(der(t, template(), "p256"))
	with := func(f func(*x509.CertificateRequest)) []byte {
		tmpl := template()
		f(tmpl)
		return pemOf(der(t, tmpl, "p256"))
	}
	csr := func(req []byte, f func(*certificatesv1.CertificateSigningRequest)) *certificatesv1.CertificateSigningRequest {
		c := request(req)
		if f != nil {
			f(c)
		}
		return c
	}
	withKey := func(key string) []byte { return pemOf(der(t, template(), key)) }

	// Tampered after signing: the request asked for m3's name and now asks
	// for m2's, which would pass every other check.
	tmpl := template()
	tmpl.DNSNames = []string{"m3"}
	forged := der(t, tmpl, "p256")
	i := bytes.LastIndex(forged, []byte("m3"))
	forged[i+1] = '2'
	// A flipped bit in the signature itself.
	badSig := der(t, template(), "p256")
	badSig[len(badSig)-1] ^= 0x01

	padded := func(n int) []byte { return append(bytes.Clone(valid), bytes.Repeat([]byte("\n"), n-len(valid))...) }

	for _, tc := range []struct {
		name    string
		csr     *certificatesv1.CertificateSigningRequest
		verdict Verdict
		reason  string
		msg     string // a fragment of the message
	}{
		{"kubelet's own request", csr(valid, nil), Approve, kubefarmv1.ReasonCSRApproved, "Machine tenants/workers-m2"},
		{"FQDN in the pool's domain, RSA-style usages", csr(with(func(r *x509.CertificateRequest) { r.DNSNames = []string{"m2", "m2.farm.local"} }),
			func(c *certificatesv1.CertificateSigningRequest) {
				c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageKeyEncipherment)
			}), Approve, kubefarmv1.ReasonCSRApproved, ""},
		{"IP SAN only", csr(with(func(r *x509.CertificateRequest) { r.DNSNames = nil }), nil), Approve, kubefarmv1.ReasonCSRApproved, ""},
		{"DNS SAN only", csr(with(func(r *x509.CertificateRequest) { r.IPAddresses = nil }), nil), Approve, kubefarmv1.ReasonCSRApproved, ""},
		{"RSA 2048 key", csr(withKey("rsa2048"), nil), Approve, kubefarmv1.ReasonCSRApproved, ""},
		{"Ed25519 key", csr(withKey("ed25519"), nil), Approve, kubefarmv1.ReasonCSRApproved, ""},
		{"exactly the size limit", csr(padded(MaxRequestBytes), nil), Approve, kubefarmv1.ReasonCSRApproved, ""},

		{"other signer", csr(valid, func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.SignerName = certificatesv1.KubeAPIServerClientKubeletSignerName
		}), Ignore, kubefarmv1.ReasonCSROtherSigner, "kubernetes.io/kube-apiserver-client-kubelet"},
		{"already approved", csr(valid, func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: "True"}}
		}), Ignore, kubefarmv1.ReasonCSRAlreadyDecided, "Approved"},
		{"already denied, bad request", csr([]byte("junk"), func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied, Status: "True"}}
		}), Ignore, kubefarmv1.ReasonCSRAlreadyDecided, "Denied"},
		{"already issued", csr(valid, func(c *certificatesv1.CertificateSigningRequest) { c.Status.Certificate = []byte("x") }), Ignore, kubefarmv1.ReasonCSRAlreadyDecided, ""},
		{"no request object", nil, Ignore, kubefarmv1.ReasonCSROtherSigner, ""},

		{"requester not a node", csr(valid, func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Username = "alice" }), Deny, kubefarmv1.ReasonCSRNotANode, `"alice"`},
		{"requester node without a name", csr(valid, func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Username = "system:node:" }), Deny, kubefarmv1.ReasonCSRNotANode, ""},
		{"requester not in system:nodes", csr(valid, func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Groups = []string{"system:authenticated"}
		}), Deny, kubefarmv1.ReasonCSRNotANode, "system:nodes"},
		{"requester not a Machine", csr(with(func(r *x509.CertificateRequest) { r.Subject.CommonName = "system:node:ghost" }),
			func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Username = "system:node:ghost" }), Deny, kubefarmv1.ReasonCSRUnknownNode, `"ghost"`},
		{"another Machine's IP", csr(with(func(r *x509.CertificateRequest) {
			r.IPAddresses = append(r.IPAddresses, net.ParseIP("10.28.0.13"))
		}), nil), Deny, kubefarmv1.ReasonCSRForeignSAN, "IP SAN 10.28.0.13"},
		{"another Machine's name", csr(with(func(r *x509.CertificateRequest) { r.DNSNames = []string{"m2", "m3"} }), nil), Deny, kubefarmv1.ReasonCSRForeignSAN, `DNS SAN "m3"`},
		{"name in another domain", csr(with(func(r *x509.CertificateRequest) { r.DNSNames = []string{"m2.evil.example"} }), nil), Deny, kubefarmv1.ReasonCSRForeignSAN, "m2.evil.example"},
		{"API server name", csr(with(func(r *x509.CertificateRequest) { r.DNSNames = []string{"kubernetes.default.svc"} }), nil), Deny, kubefarmv1.ReasonCSRForeignSAN, ""},
		{"email SAN", csr(with(func(r *x509.CertificateRequest) { r.EmailAddresses = []string{"root@m2"} }), nil), Deny, kubefarmv1.ReasonCSRForbiddenSAN, "root@m2"},
		{"URI SAN", csr(with(func(r *x509.CertificateRequest) {
			r.URIs = []*url.URL{{Scheme: "spiffe", Host: "farm", Path: "/ns/kube-system/sa/admin"}}
		}), nil), Deny, kubefarmv1.ReasonCSRForbiddenSAN, "spiffe://"},
		{"no SAN", csr(with(func(r *x509.CertificateRequest) { r.DNSNames, r.IPAddresses = nil, nil }), nil), Deny, kubefarmv1.ReasonCSRNoSAN, ""},
		{"client auth usage", csr(valid, func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageClientAuth)
		}), Deny, kubefarmv1.ReasonCSRUsages, `"client auth"`},
		{"no server auth", csr(valid, func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature}
		}), Deny, kubefarmv1.ReasonCSRUsages, `"server auth"`},
		{"no usages", csr(valid, func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Usages = nil }), Deny, kubefarmv1.ReasonCSRUsages, ""},
		{"CA usage", csr(valid, func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageCertSign)
		}), Deny, kubefarmv1.ReasonCSRUsages, ""},
		{"CN of another node", csr(with(func(r *x509.CertificateRequest) { r.Subject.CommonName = "system:node:m3" }), nil), Deny, kubefarmv1.ReasonCSRSubject, `"system:node:m3"`},
		{"no O", csr(with(func(r *x509.CertificateRequest) { r.Subject.Organization = nil }), nil), Deny, kubefarmv1.ReasonCSRSubject, "0 O"},
		{"O system:masters", csr(with(func(r *x509.CertificateRequest) {
			r.Subject.Organization = []string{"system:nodes", "system:masters"}
		}), nil), Deny, kubefarmv1.ReasonCSRSubject, "system:masters"},
		{"an OU", csr(with(func(r *x509.CertificateRequest) { r.Subject.OrganizationalUnit = []string{"ops"} }), nil), Deny, kubefarmv1.ReasonCSRSubject, "2.5.4.11"},
		{"two CNs", csr(with(func(r *x509.CertificateRequest) {
			// ExtraNames replace the CommonName field, so both come from here.
			cn := pkix.AttributeTypeAndValue{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: "system:node:m2"}
			r.Subject.ExtraNames = []pkix.AttributeTypeAndValue{cn, cn}
		}), nil), Deny, kubefarmv1.ReasonCSRSubject, "2 CN"},
		{"not PEM", csr([]byte("MIIB..."), nil), Deny, kubefarmv1.ReasonCSRMalformed, "not PEM"},
		{"a certificate, not a request", csr(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}), nil), Deny, kubefarmv1.ReasonCSRMalformed, `"CERTIFICATE"`},
		{"PEM headers", csr(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Headers: map[string]string{"a": "b"}, Bytes: der(t, template(), "p256")}), nil), Deny, kubefarmv1.ReasonCSRMalformed, "headers"},
		{"two requests", csr(append(bytes.Clone(valid), with(func(r *x509.CertificateRequest) { r.DNSNames = []string{"m3"} })...), nil), Deny, kubefarmv1.ReasonCSRMalformed, "after its PEM block"},
		{"garbage DER", csr(pemOf([]byte("not DER at all")), nil), Deny, kubefarmv1.ReasonCSRMalformed, "does not parse"},
		{"oversized", csr(padded(MaxRequestBytes+1), nil), Deny, kubefarmv1.ReasonCSRTooLarge, "16385 bytes"},
		{"tampered after signing", csr(pemOf(forged), nil), Deny, kubefarmv1.ReasonCSRBadSignature, ""},
		{"tampered signature", csr(pemOf(badSig), nil), Deny, kubefarmv1.ReasonCSRBadSignature, ""},
		{"P-224 key", csr(withKey("p224"), nil), Deny, kubefarmv1.ReasonCSRWeakKey, "P-256"},
		{"RSA 1024 key", csr(withKey("rsa1024"), nil), Deny, kubefarmv1.ReasonCSRWeakKey, "1024 bits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.csr, lookup)
			if d.Verdict != tc.verdict || d.Reason != tc.reason || !strings.Contains(d.Message, tc.msg) {
				t.Fatalf("Decide = %v %s %q, want %v %s with %q", d.Verdict, d.Reason, d.Message, tc.verdict, tc.reason, tc.msg)
			}
			if d.Message == "" {
				t.Fatal("no message")
			}
		})
	}
}

// TestDecideLookupOnlyForNodes: the lookup (an index read in the
// controller) runs for node requesters only, and its answer decides.
func TestDecideLookupOnlyForNodes(t *testing.T) {
	called := false
	d := Decide(request(pemOf(der(t, template(), "p256"))), func(string) (Identity, bool) { called = true; return Identity{}, false })
	if !called || d.Verdict != Deny {
		t.Fatalf("lookup called %v, decision %+v", called, d)
	}
	called = false
	c := request(nil)
	c.Spec.Username = "system:serviceaccount:kube-system:x"
	Decide(c, func(string) (Identity, bool) { called = true; return Identity{}, false })
	if called {
		t.Fatal("lookup called for a requester that is not a node")
	}
}

// TestMessagesBounded: the message quotes the request, and the request is
// the node's to write; a long CN must not become a long condition.
func TestMessagesBounded(t *testing.T) {
	tmpl := template()
	tmpl.Subject.CommonName = strings.Repeat("x", 4000)
	d := Decide(request(pemOf(der(t, tmpl, "p256"))), lookup)
	if d.Reason != kubefarmv1.ReasonCSRSubject || len(d.Message) > 300 {
		t.Fatalf("Decide = %s, %d-byte message", d.Reason, len(d.Message))
	}
}

// oracleParse is what both oracles ask first: a request within the size
// bound that is one PEM CSR whose signature verifies; nil and why not.
func oracleParse(req []byte) (*x509.CertificateRequest, string) {
	if len(req) > MaxRequestBytes {
		return nil, "too large"
	}
	b, _ := pem.Decode(req)
	if b == nil {
		return nil, "no PEM"
	}
	r, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, "no parse"
	}
	if r.CheckSignature() != nil {
		return nil, "bad signature"
	}
	return r, ""
}

// oracle is an independent, looser statement of what an approved request
// must be, for the fuzz target: its bytes parse as one CSR whose signature
// verifies and which names m2 and only m2's addresses.
func oracle(req []byte) string {
	r, why := oracleParse(req)
	if r == nil {
		return why
	}
	if r.Subject.CommonName != "system:node:m2" || len(r.Subject.Organization) != 1 || r.Subject.Organization[0] != "system:nodes" {
		return "subject"
	}
	if len(r.EmailAddresses)+len(r.URIs) > 0 || len(r.DNSNames)+len(r.IPAddresses) == 0 {
		return "SAN types"
	}
	for _, n := range r.DNSNames {
		if n != "m2" && n != "m2.farm.local" {
			return "DNS SAN"
		}
	}
	for _, ip := range r.IPAddresses {
		if !ip.Equal(net.IPv4(10, 28, 0, 12)) {
			return "IP SAN"
		}
	}
	return ""
}

// FuzzDecide feeds arbitrary bytes as spec.request, both as given and as the
// DER inside a PEM block (mutating base64 rarely reaches the ASN.1 parser),
// to both decisions: as a node's serving request to Decide, and as a join
// request with a valid kubefarm token to DecideJoin. Neither must panic or
// ignore the request, nor approve what its oracle rejects.
func FuzzDecide(f *testing.F) {
	d := der(f, template(), "p256")
	f.Add(pemOf(d))
	f.Add(d)
	tmpl := template()
	tmpl.DNSNames = []string{"m3"}
	f.Add(der(f, tmpl, "p256"))
	f.Add(der(f, template(), "ed25519"))
	f.Add(der(f, joinTemplate(), "p256"))
	jt := joinTemplate()
	jt.Subject.OrganizationalUnit = []string{"ops"}
	f.Add(der(f, jt, "p256"))
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE REQUEST-----\n"))
	token := joinToken(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, req := range [][]byte{data, pemOf(data)} {
			got := Decide(request(req), lookup)
			if got.Verdict == Ignore {
				t.Fatalf("a kubelet-serving request from a node was ignored: %+v", got)
			}
			if got.Verdict == Approve {
				if why := oracle(req); why != "" {
					t.Fatalf("approved a request the oracle rejects (%s): %q", why, req)
				}
			}
			got = DecideJoin(joinRequest(req), joinTenant, joinNow, joinLookup(token))
			if got.Verdict == Ignore {
				t.Fatalf("a join request was ignored: %+v", got)
			}
			if got.Verdict == Approve {
				if why := joinOracle(req); why != "" {
					t.Fatalf("approved a join request the oracle rejects (%s): %q", why, req)
				}
			}
		}
	})
}

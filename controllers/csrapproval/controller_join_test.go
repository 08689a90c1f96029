package csrapproval_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/csrapproval"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

// The joins, on the same stand-in: a joining machine is an envtest user
// system:bootstrap:<id> in kubefarm's group, as the token authenticator
// would make it, and its token is a Secret in the stand-in's kube-system
// as kubefarm-pxe creates it. No kube-controller-manager runs, so no one
// else approves, and no certificate is issued.

// checkJoins: the kubelet's own request for the token's Machine is approved
// and its token deleted; each rule, broken, is a denial with its reason
// and the token left alone; a renewal is left to kube-controller-manager.
func (f *fixture) checkJoins(t *testing.T) {
	ctx := context.Background()
	// Machine beta-m9 belongs to another TenantCluster in the same
	// namespace, which a token label can name.
	beta := &kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.tc.Namespace, Name: "beta-m9"},
		Spec: kubefarmv1.MachineSpec{Pool: "beta-pool", Cluster: "beta", Hostname: "m9",
			MACs: []string{"02:00:00:99:00:09"}, IP: "10.99.0.9", DesiredImage: "image-beta"},
	}
	if err := f.env.Client.Create(ctx, beta); err != nil {
		t.Fatal(err)
	}

	// Left alone: a node's renewal (kube-controller-manager's
	// selfnodeclient approves it). Made first, in the same watch as the
	// join below, so that the join's approval shows the renewal was seen.
	renewal := f.createClientCSR(t, envtest.User{Name: "system:node:m1", Groups: []string{"system:nodes"}},
		pemCSR(t, kubeletRequest("m1"), p256(t)), clientUsages)

	t.Run("the kubelet's own request is approved and its token deleted", func(t *testing.T) {
		token := f.createToken(t, "workers-m1", nil)
		csr := f.createJoinCSR(t, tokenID(token), []string{bootstraptoken.DefaultGroup}, nil, nil)
		c := f.waitDecided(t, csr)
		if c.Type != certificatesv1.CertificateApproved || c.Reason != kubefarmv1.ReasonCSRJoinApproved {
			t.Fatalf("condition %s/%s (%s), want Approved/%s", c.Type, c.Reason, c.Message, kubefarmv1.ReasonCSRJoinApproved)
		}
		f.waitTokenGone(t, token)
		f.waitEvent(t, "Machine", "workers-m1", corev1.EventTypeNormal, kubefarmv1.ReasonCSRJoinApproved, csr)

		// Used once: the same token for a second certificate is denied.
		again := f.createJoinCSR(t, tokenID(token), []string{bootstraptoken.DefaultGroup}, nil, nil)
		if c := f.waitDecided(t, again); c.Type != certificatesv1.CertificateDenied || c.Reason != kubefarmv1.ReasonCSRUnknownToken {
			t.Fatalf("a second request with the used token: %s/%s (%s), want Denied/%s", c.Type, c.Reason, c.Message, kubefarmv1.ReasonCSRUnknownToken)
		}
	})
	t.Run("a node asking for another node's name is denied", func(t *testing.T) {
		// Root on node m1 with its own client certificate.
		csr := f.createClientCSR(t, envtest.User{Name: "system:node:m1", Groups: []string{"system:nodes"}},
			pemCSR(t, kubeletRequest("m2"), p256(t)), clientUsages)
		if c := f.waitDecided(t, csr); c.Type != certificatesv1.CertificateDenied || c.Reason != kubefarmv1.ReasonCSRNotSelf ||
			!strings.Contains(c.Message, "system:node:m2") {
			t.Fatalf("condition %s/%s (%s), want Denied/%s naming system:node:m2", c.Type, c.Reason, c.Message, kubefarmv1.ReasonCSRNotSelf)
		}
	})
	t.Run("a renewal is left to kube-controller-manager", func(t *testing.T) {
		got := &certificatesv1.CertificateSigningRequest{}
		if err := f.env.Client.Get(ctx, client.ObjectKey{Name: renewal}, got); err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Conditions) != 0 {
			t.Fatalf("a renewal got conditions %+v", got.Status.Conditions)
		}
	})

	expired := func(s *corev1.Secret) {
		s.Data[bootstraptoken.KeyExpiration] = []byte(time.Now().Add(-time.Minute).UTC().Format(time.RFC3339))
	}
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		machine string               // the token's label; "" for no token at all
		token   func(*corev1.Secret) // edits the token Secret
		groups  []string             // the requester's extra groups
		subject *pkix.Name           // nil: the kubelet's, for m1
		key     crypto.Signer        // nil: a P-256 key
		edit    func(*x509.CertificateRequest)
		usages  []certificatesv1.KeyUsage
		request func([]byte) []byte // edits the PEM
		reason  string
		msg     string
	}{
		{name: "no such token", reason: kubefarmv1.ReasonCSRUnknownToken, msg: "does not exist"},
		{name: "requester not in kubefarm's group", machine: "workers-m1", groups: []string{"system:bootstrappers:other"},
			reason: kubefarmv1.ReasonCSRForeignToken, msg: bootstraptoken.DefaultGroup},
		{name: "a token without the machine label", machine: "workers-m1", token: func(s *corev1.Secret) { s.Labels = nil },
			reason: kubefarmv1.ReasonCSRForeignToken, msg: kubefarmv1.LabelMachine},
		{name: "an expired token", machine: "workers-m1", token: expired, reason: kubefarmv1.ReasonCSRTokenExpired, msg: "expired"},
		{name: "a token for no Machine", machine: "ghost", reason: kubefarmv1.ReasonCSRNoMachine, msg: `"ghost"`},
		{name: "a token for another tenant's Machine", machine: "beta-m9", subject: joinSubject("m9"),
			reason: kubefarmv1.ReasonCSRForeignMachine, msg: "TenantCluster \"beta\""},
		{name: "another Machine's node name", machine: "workers-m1", subject: joinSubject("m2"),
			reason: kubefarmv1.ReasonCSRCommonName, msg: `"system:node:m2"`},
		{name: "O system:masters", machine: "workers-m1",
			subject: &pkix.Name{CommonName: "system:node:m1", Organization: []string{"system:masters"}},
			reason:  kubefarmv1.ReasonCSROrganization, msg: "system:masters"},
		{name: "an OU", machine: "workers-m1",
			subject: &pkix.Name{CommonName: "system:node:m1", Organization: []string{"system:nodes"}, OrganizationalUnit: []string{"ops"}},
			reason:  kubefarmv1.ReasonCSRExtraSubject, msg: "2.5.4.11"},
		{name: "a DNS SAN", machine: "workers-m1", edit: func(r *x509.CertificateRequest) { r.DNSNames = []string{"m1"} },
			reason: kubefarmv1.ReasonCSRSANs, msg: "1 DNS"},
		{name: "server auth", machine: "workers-m1",
			usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth, certificatesv1.UsageServerAuth},
			reason: kubefarmv1.ReasonCSRClientUsages, msg: "server auth"},
		{name: "data after the request", machine: "workers-m1", request: func(b []byte) []byte { return append(b, "trailing"...) },
			reason: kubefarmv1.ReasonCSRMalformed, msg: "after its PEM block"},
		{name: "a huge request", machine: "workers-m1",
			request: func(b []byte) []byte { return append(b, bytes.Repeat([]byte("\n"), csrapproval.MaxRequestBytes)...) },
			reason:  kubefarmv1.ReasonCSRTooLarge, msg: "bytes, over"},
		{name: "a weak key", machine: "workers-m1", key: rsa1024,
			usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth},
			reason: kubefarmv1.ReasonCSRWeakKey, msg: "1024 bits"},
	} {
		t.Run("denied: "+tc.name, func(t *testing.T) {
			id := "zz0000"
			var token *corev1.Secret
			if tc.machine != "" {
				token = f.createToken(t, tc.machine, tc.token)
				id = tokenID(token)
			}
			groups := tc.groups
			if groups == nil {
				groups = []string{bootstraptoken.DefaultGroup}
			}
			subject := tc.subject
			if subject == nil {
				subject = joinSubject("m1")
			}
			key := tc.key
			if key == nil {
				key = p256(t)
			}
			tmpl := &x509.CertificateRequest{Subject: *subject}
			if tc.edit != nil {
				tc.edit(tmpl)
			}
			req := pemCSR(t, tmpl, key)
			if tc.request != nil {
				req = tc.request(req)
			}
			csr := f.createJoinCSR(t, id, groups, req, tc.usages)
			c := f.waitDecided(t, csr)
			if c.Type != certificatesv1.CertificateDenied || c.Reason != tc.reason || !strings.Contains(c.Message, tc.msg) {
				t.Fatalf("condition %s/%s (%s), want Denied/%s with %q", c.Type, c.Reason, c.Message, tc.reason, tc.msg)
			}
			if token != nil {
				// A denial leaves the token to the machine it was
				// issued for.
				if err := f.env.Client.Get(ctx, client.ObjectKeyFromObject(token), &corev1.Secret{}); err != nil {
					t.Errorf("token after a denial: %v", err)
				}
			}
		})
	}

	t.Run("a bad signature never reaches the manager", func(t *testing.T) {
		// The API server checks the signature itself; InvalidSignature is
		// the manager's own check behind it (table-tested in DecideJoin).
		der := derCSR(t, kubeletRequest("m1"), p256(t))
		der[len(der)-1] ^= 1
		u, err := f.env.AddUser(envtest.User{Name: "system:bootstrap:zz0001", Groups: []string{bootstraptoken.DefaultGroup}})
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(u.Config())
		if err != nil {
			t.Fatal(err)
		}
		_, err = cs.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"},
			Spec: certificatesv1.CertificateSigningRequestSpec{Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
				SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName, Usages: clientUsages},
		}, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("a request with a bad signature: %v, want the API server's 422", err)
		}
	})
}

var clientUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}

func joinSubject(host string) *pkix.Name {
	return &pkix.Name{CommonName: "system:node:" + host, Organization: []string{"system:nodes"}}
}

func p256(t *testing.T) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func derCSR(t *testing.T, tmpl *x509.CertificateRequest, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func pemCSR(t *testing.T, tmpl *x509.CertificateRequest, key crypto.Signer) []byte {
	t.Helper()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: derCSR(t, tmpl, key)})
}

// kubeletRequest is what the kubelet of host asks for: its node name in
// system:nodes, nothing else.
func kubeletRequest(host string) *x509.CertificateRequest {
	return &x509.CertificateRequest{Subject: *joinSubject(host)}
}

func tokenID(s *corev1.Secret) string { return strings.TrimPrefix(s.Name, bootstraptoken.SecretPrefix) }

// createToken creates a bootstrap token Secret for machine as kubefarm-pxe
// does, edited by edit, in the stand-in's kube-system (which the API server
// creates shortly after it starts).
func (f *fixture) createToken(t *testing.T, machine string, edit func(*corev1.Secret)) *corev1.Secret {
	t.Helper()
	tok, err := bootstraptoken.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s := bootstraptoken.Secret(tok, bootstraptoken.Options{Machine: machine, TTL: time.Hour})
	if edit != nil {
		edit(s)
	}
	f.eventually(t, "creating token "+tok.ID, func(ctx context.Context) (bool, error) {
		err := f.env.Client.Create(ctx, s)
		return err == nil, client.IgnoreNotFound(err)
	})
	return s
}

// createJoinCSR creates a kubelet client CSR as the bearer of token id in
// groups (besides system:bootstrappers): the kubelet's request for m1
// (request nil) with the kubelet's usages (usages nil), unless given.
func (f *fixture) createJoinCSR(t *testing.T, id string, groups []string, request []byte, usages []certificatesv1.KeyUsage) string {
	t.Helper()
	if request == nil {
		request = pemCSR(t, kubeletRequest("m1"), p256(t))
	}
	if usages == nil {
		usages = clientUsages
	}
	return f.createClientCSR(t, envtest.User{Name: "system:bootstrap:" + id, Groups: append([]string{"system:bootstrappers"}, groups...)}, request, usages)
}

// createClientCSR creates a kube-apiserver-client-kubelet CSR as user.
func (f *fixture) createClientCSR(t *testing.T, user envtest.User, request []byte, usages []certificatesv1.KeyUsage) string {
	t.Helper()
	u, err := f.env.AddUser(user)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(u.Config(), client.Options{Scheme: f.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: request, SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName, Usages: usages,
		},
	}
	if err := c.Create(context.Background(), csr); err != nil {
		t.Fatal(err)
	}
	return csr.Name
}

// approve approves CSR name as the stand-in's admin, with reason.
func (f *fixture) approve(t *testing.T, name, reason string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(f.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	csr, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: reason, Message: "approved by the test"})
	if _, err := cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitTokenGone waits until token's Secret is deleted.
func (f *fixture) waitTokenGone(t *testing.T, token *corev1.Secret) {
	t.Helper()
	f.eventually(t, fmt.Sprintf("token Secret %s deleted", token.Name), func(ctx context.Context) (bool, error) {
		err := f.env.Client.Get(ctx, client.ObjectKeyFromObject(token), &corev1.Secret{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

package testenv_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{CertManager: true}, &env) }

// TestCertificateChain drives the real cert-manager controllers through the
// chain every tenant PKI uses: a self-signed Issuer signs a CA Certificate, a
// CA Issuer uses it, and a leaf Certificate is issued by that CA.
func TestCertificateChain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "pki-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	create := func(obj client.Object) {
		t.Helper()
		obj.SetNamespace(ns.Name)
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}

	create(&certmanagerv1.Issuer{
		ObjectMeta: metav1.ObjectMeta{Name: "selfsigned"},
		Spec:       certmanagerv1.IssuerSpec{IssuerConfig: certmanagerv1.IssuerConfig{SelfSigned: &certmanagerv1.SelfSignedIssuer{}}},
	})
	create(&certmanagerv1.Certificate{
		ObjectMeta: metav1.ObjectMeta{Name: "root-ca"},
		Spec: certmanagerv1.CertificateSpec{
			IsCA:       true,
			CommonName: "kubefarm test root",
			SecretName: "root-ca",
			PrivateKey: &certmanagerv1.CertificatePrivateKey{Algorithm: certmanagerv1.ECDSAKeyAlgorithm, Size: 256},
			IssuerRef:  cmmeta.IssuerReference{Name: "selfsigned", Kind: "Issuer"},
		},
	})
	create(&certmanagerv1.Issuer{
		ObjectMeta: metav1.ObjectMeta{Name: "ca"},
		Spec:       certmanagerv1.IssuerSpec{IssuerConfig: certmanagerv1.IssuerConfig{CA: &certmanagerv1.CAIssuer{SecretName: "root-ca"}}},
	})
	wantDNS := []string{"kube-apiserver", "kube-apiserver.cluster1.svc", "kube-apiserver.cluster1.svc.cluster.local"}
	wantIPs := []string{"10.96.0.1", "192.0.2.10"}
	create(&certmanagerv1.Certificate{
		ObjectMeta: metav1.ObjectMeta{Name: "apiserver"},
		Spec: certmanagerv1.CertificateSpec{
			CommonName:  "kube-apiserver",
			DNSNames:    wantDNS,
			IPAddresses: wantIPs,
			SecretName:  "apiserver",
			Usages:      []certmanagerv1.KeyUsage{certmanagerv1.UsageDigitalSignature, certmanagerv1.UsageKeyEncipherment, certmanagerv1.UsageServerAuth},
			IssuerRef:   cmmeta.IssuerReference{Name: "ca", Kind: "Issuer"},
		},
	})

	secret := &corev1.Secret{}
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := env.CertManagerRunning(); err != nil {
			return false, err
		}
		cert := &certmanagerv1.Certificate{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "apiserver"}, cert); err != nil {
			return false, err
		}
		for _, c := range cert.Status.Conditions {
			if c.Type == certmanagerv1.CertificateConditionReady && c.Status == cmmeta.ConditionTrue {
				return true, env.Client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "apiserver"}, secret)
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("leaf certificate never became Ready: %v; cert-manager log: %s", err, env.CertManagerLog())
	}

	leaf := parseCert(t, secret.Data["tls.crt"])
	ca := parseCert(t, secret.Data["ca.crt"])
	if !ca.IsCA || ca.Subject.CommonName != "kubefarm test root" {
		t.Errorf("ca.crt is %q (IsCA=%v), want the root CA", ca.Subject.CommonName, ca.IsCA)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "kube-apiserver.cluster1.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("leaf does not verify against the CA for server auth: %v", err)
	}
	if leaf.Subject.CommonName != "kube-apiserver" {
		t.Errorf("leaf CN = %q", leaf.Subject.CommonName)
	}
	for _, name := range wantDNS {
		if !slices.Contains(leaf.DNSNames, name) {
			t.Errorf("leaf lacks DNS SAN %q: %v", name, leaf.DNSNames)
		}
	}
	var gotIPs []string
	for _, ip := range leaf.IPAddresses {
		gotIPs = append(gotIPs, ip.String())
	}
	for _, ip := range wantIPs {
		if !slices.Contains(gotIPs, ip) {
			t.Errorf("leaf lacks IP SAN %s: %v", ip, gotIPs)
		}
	}
	if leaf.KeyUsage&x509.KeyUsageDigitalSignature == 0 || leaf.KeyUsage&x509.KeyUsageKeyEncipherment == 0 {
		t.Errorf("leaf key usage %b lacks digital signature or key encipherment", leaf.KeyUsage)
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("leaf extended key usage = %v, want only server auth", leaf.ExtKeyUsage)
	}
	if leaf.IsCA {
		t.Error("leaf is a CA")
	}
}

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("no PEM certificate in %q", data)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

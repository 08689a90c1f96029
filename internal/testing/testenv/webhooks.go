package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// IssueServingCertificate has the real cert-manager controllers issue a
// webhook serving certificate for 127.0.0.1, through the same chain the
// operator chart uses (self-signed Issuer -> CA Certificate -> CA Issuer ->
// leaf). It writes tls.crt and tls.key into a new folder under Dir and returns
// the folder and the CA bundle a webhook configuration must carry.
func (e *Env) IssueServingCertificate(ctx context.Context, namespace string) (certDir string, caPEM []byte, err error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := e.Client.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		return "", nil, err
	}
	objs := []client.Object{
		&certmanagerv1.Issuer{
			ObjectMeta: metav1.ObjectMeta{Name: "webhook-selfsigned", Namespace: namespace},
			Spec:       certmanagerv1.IssuerSpec{IssuerConfig: certmanagerv1.IssuerConfig{SelfSigned: &certmanagerv1.SelfSignedIssuer{}}},
		},
		&certmanagerv1.Certificate{
			ObjectMeta: metav1.ObjectMeta{Name: "webhook-ca", Namespace: namespace},
			Spec: certmanagerv1.CertificateSpec{
				IsCA: true, CommonName: "kubefarm webhook CA", SecretName: "webhook-ca",
				IssuerRef: cmmeta.IssuerReference{Name: "webhook-selfsigned", Kind: "Issuer"},
			},
		},
		&certmanagerv1.Issuer{
			ObjectMeta: metav1.ObjectMeta{Name: "webhook-ca", Namespace: namespace},
			Spec:       certmanagerv1.IssuerSpec{IssuerConfig: certmanagerv1.IssuerConfig{CA: &certmanagerv1.CAIssuer{SecretName: "webhook-ca"}}},
		},
		&certmanagerv1.Certificate{
			ObjectMeta: metav1.ObjectMeta{Name: "webhook-serving", Namespace: namespace},
			Spec: certmanagerv1.CertificateSpec{
				CommonName: "kubefarm-webhook", DNSNames: []string{"localhost"}, IPAddresses: []string{"127.0.0.1"},
				SecretName: "webhook-serving",
				Usages:     []certmanagerv1.KeyUsage{certmanagerv1.UsageDigitalSignature, certmanagerv1.UsageServerAuth},
				IssuerRef:  cmmeta.IssuerReference{Name: "webhook-ca", Kind: "Issuer"},
			},
		},
	}
	for _, obj := range objs {
		if err := e.Client.Create(ctx, obj); err != nil {
			return "", nil, fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	secret := &corev1.Secret{}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := e.CertManagerRunning(); err != nil {
			return false, err
		}
		err := e.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "webhook-serving"}, secret)
		if client.IgnoreNotFound(err) != nil {
			return false, err
		}
		return err == nil && len(secret.Data["tls.crt"]) > 0 && len(secret.Data["ca.crt"]) > 0, nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("waiting for the webhook serving certificate: %w (cert-manager log: %s)", err, e.CertManagerLog())
	}
	certDir = filepath.Join(e.Dir, "webhook-certs-"+namespace)
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return "", nil, err
	}
	for _, key := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(certDir, key), secret.Data[key], 0o600); err != nil {
			return "", nil, err
		}
	}
	return certDir, secret.Data["ca.crt"], nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// InstallWebhooks creates the generated ValidatingWebhookConfigurations of
// config/webhook, unchanged but for where they call: https://127.0.0.1:port
// with caBundle, instead of the in-cluster Service.
func (e *Env) InstallWebhooks(ctx context.Context, port int, caPEM []byte) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	f, err := os.Open(filepath.Join(root, "config", "webhook", "manifests.yaml"))
	if err != nil {
		return err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	installed := 0
	for {
		cfg := &admissionv1.ValidatingWebhookConfiguration{}
		if err := dec.Decode(cfg); err != nil {
			break
		}
		if cfg.Kind != "ValidatingWebhookConfiguration" {
			continue
		}
		for i := range cfg.Webhooks {
			cc := &cfg.Webhooks[i].ClientConfig
			url := fmt.Sprintf("https://127.0.0.1:%d%s", port, *cc.Service.Path)
			cc.Service, cc.URL, cc.CABundle = nil, &url, caPEM
		}
		if err := e.Client.Create(ctx, cfg); err != nil {
			return fmt.Errorf("installing webhook configuration %s: %w", cfg.Name, err)
		}
		installed++
	}
	if installed == 0 {
		return fmt.Errorf("no ValidatingWebhookConfiguration in config/webhook/manifests.yaml")
	}
	return nil
}

// WaitWebhookDown waits until admit, a dry-run request the stopped webhook
// would admit, fails to reach it. A stopped server still finishes requests
// on the HTTP/2 connections it is draining, so the API server can get one
// more answer from it just after it stopped; a webhook that fails open
// would be admitted for the whole minute, and the test fails.
func WaitWebhookDown(t testing.TB, kind string, admit func(context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true,
		func(ctx context.Context) (bool, error) {
			last = admit(ctx)
			return last != nil && strings.Contains(last.Error(), "failed calling webhook"), nil
		})
	if err != nil {
		t.Fatalf("a %s still passed admission a minute after its webhook stopped (last answer: %v)", kind, last)
	}
}

package encryptiontest_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubefarm/kubefarm/controllers/tenantcluster"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// server is kube-apiserver and etcd from envtest, with an API server that
// can be restarted on another encryption configuration while etcd and the
// client credentials stay. A restart stands in for the rollout of the API
// server Deployment: either way a server reads the configuration when it
// starts (automatic reload is off, as in kubefarm's flags).
type server struct {
	t       *testing.T
	env     *envtest.Environment
	client  client.Client
	etcd    *clientv3.Client
	cfgPath string
}

func startServer(t *testing.T) *server {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin")
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			t.Fatalf("%s is missing from %s: run `make envtest-tools`: %v", name, bin, err)
		}
	}
	dir := t.TempDir()
	s := &server{t: t, cfgPath: filepath.Join(dir, desired.EncryptionConfigKey)}
	s.env = &envtest.Environment{
		BinaryAssetsDirectory:    bin,
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	// A fixed certificate directory (not envtest's throw-away one) keeps
	// the serving certificate across restarts, so the client's
	// configuration stays valid.
	api := s.env.ControlPlane.GetAPIServer()
	api.CertDir = filepath.Join(dir, "apiserver")
	if err := os.Mkdir(api.CertDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg, err := s.env.Start()
	t.Cleanup(func() {
		if err := s.env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	if s.client, err = client.New(cfg, client.Options{}); err != nil {
		t.Fatal(err)
	}
	s.etcd, err = clientv3.New(clientv3.Config{
		Endpoints:   []string{s.env.ControlPlane.Etcd.URL.String()},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.etcd.Close() })
	return s
}

// restart writes the configuration rendered from keys and restarts the
// API server on it.
func (s *server) restart(keys desired.EncryptionKeys) {
	s.t.Helper()
	cfg, err := desired.EncryptionConfiguration(keys)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(s.cfgPath, cfg, 0o600); err != nil {
		s.t.Fatal(err)
	}
	api := s.env.ControlPlane.APIServer
	api.Configure().Set("encryption-provider-config", s.cfgPath)
	if err := api.Stop(); err != nil {
		s.t.Fatalf("stopping kube-apiserver: %v", err)
	}
	// Start returns once /healthz answers.
	if err := api.Start(); err != nil {
		s.t.Fatalf("starting kube-apiserver on keys %v: %v", keys.Order(), err)
	}
}

// stored is the value of a Secret as etcd holds it.
func (s *server) stored(ctx context.Context, ns, name string) []byte {
	s.t.Helper()
	resp, err := s.etcd.Get(ctx, "/registry/secrets/"+ns+"/"+name)
	if err != nil {
		s.t.Fatalf("reading etcd: %v", err)
	}
	if len(resp.Kvs) != 1 {
		s.t.Fatalf("etcd has %d values for secret %s/%s", len(resp.Kvs), ns, name)
	}
	return resp.Kvs[0].Value
}

// expectEncrypted asserts that etcd holds the Secret encrypted with key,
// and nowhere the plaintext.
func (s *server) expectEncrypted(ctx context.Context, ns, name, key string, plaintext []byte) {
	s.t.Helper()
	v := s.stored(ctx, ns, name)
	prefix := "k8s:enc:secretbox:v1:" + key + ":"
	if !bytes.HasPrefix(v, []byte(prefix)) {
		s.t.Errorf("etcd value of %s/%s starts with %q, want %q", ns, name, v[:min(len(v), len(prefix))], prefix)
	}
	if bytes.Contains(v, plaintext) {
		s.t.Errorf("etcd value of %s/%s contains the plaintext", ns, name)
	}
}

// expectReadable asserts the API server serves the Secret's plaintext.
func (s *server) expectReadable(ctx context.Context, ns, name string, plaintext []byte) {
	s.t.Helper()
	got := &corev1.Secret{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, got); err != nil {
		s.t.Errorf("reading %s/%s through the API server: %v", ns, name, err)
		return
	}
	if !bytes.Equal(got.Data["password"], plaintext) {
		s.t.Errorf("%s/%s: data %q, want the plaintext", ns, name, got.Data["password"])
	}
}

func randomKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, desired.EncryptionKeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSecretsEncryptedInEtcd: a Secret written before encryption is on is
// plaintext in etcd (so the check below can tell); with kubefarm's
// configuration new Secrets are secretbox ciphertext under the write key;
// a rotation driven by desired.DecideRotation and desired.Advance, with
// tenantcluster.RewriteSecrets for its rewrite, leaves every Secret,
// the old plaintext one included, encrypted with the new key and
// readable once the old key is gone, and a value still encrypted with
// the old key is then unreadable (so the rewrite was needed).
func TestSecretsEncryptedInEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	s := startServer(t)

	const ns = "encryption"
	if err := s.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	plaintexts := map[string][]byte{}
	create := func(name string) {
		t.Helper()
		p := []byte("kubefarm-plaintext-" + name + "-" + hex.EncodeToString(randomKey(t)[:8]))
		plaintexts[name] = p
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"password": p}}
		if err := s.client.Create(ctx, sec); err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
	}

	// Before encryption: plaintext, which the assertions must catch.
	create("legacy")
	if v := s.stored(ctx, ns, "legacy"); !bytes.Contains(v, plaintexts["legacy"]) || bytes.HasPrefix(v, []byte("k8s:enc:")) {
		t.Fatalf("without encryption etcd should hold the plaintext; got %q", v)
	}

	// Encryption on, one key.
	raw, err := desired.NewEncryptionKeySecret(&desired.Cluster{Name: "t", Namespace: ns}, randomKey(t), "")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := desired.ParseEncryptionKeys(raw)
	if err != nil {
		t.Fatal(err)
	}
	s.restart(keys)
	create("first")
	s.expectEncrypted(ctx, ns, "first", "key-1", plaintexts["first"])
	// Written before: still plaintext, still readable (identity is last).
	s.expectReadable(ctx, ns, "legacy", plaintexts["legacy"])
	if v := s.stored(ctx, ns, "legacy"); bytes.HasPrefix(v, []byte("k8s:enc:")) {
		t.Fatalf("legacy was rewritten before any write: %q", v[:20])
	}
	oldCiphertext := s.stored(ctx, ns, "first")

	// The rotation, step by step as the controller takes it; each step
	// that changes the configuration is followed by the "rollout".
	const request = "rotate-1"
	var steps []desired.RotationStep
	for range 10 {
		step := desired.DecideRotation(keys, request, true)
		steps = append(steps, step)
		if step == desired.StepNone {
			break
		}
		if step == desired.StepRewrite {
			n, err := tenantcluster.RewriteSecrets(ctx, s.client)
			if err != nil {
				t.Fatalf("RewriteSecrets: %v", err)
			}
			if n < 3 {
				t.Errorf("RewriteSecrets wrote %d Secrets, want at least legacy, first, second", n)
			}
		}
		next, err := keys.Advance(step, randomKey(t), request)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		keys = next
		if step.ChangesConfig() {
			s.restart(keys)
		}
		switch step {
		case desired.StepAddKey:
			// key-2 is listed but does not write yet.
			create("second")
			s.expectEncrypted(ctx, ns, "second", "key-1", plaintexts["second"])
		case desired.StepPromote:
			create("third")
			s.expectEncrypted(ctx, ns, "third", "key-2", plaintexts["third"])
			// Not rewritten by the promotion alone.
			s.expectEncrypted(ctx, ns, "first", "key-1", plaintexts["first"])
			// A backup now holds values of both keys.
			checkSnapshotKeys(t, ctx, s, keys, []string{"key-1", "key-2"})
		case desired.StepRewrite:
			for _, name := range []string{"legacy", "first", "second", "third"} {
				s.expectEncrypted(ctx, ns, name, "key-2", plaintexts[name])
			}
		}
	}
	want := []desired.RotationStep{desired.StepAddKey, desired.StepPromote, desired.StepRewrite, desired.StepDropOld, desired.StepNone}
	if strings.Join(stepNames(steps), ",") != strings.Join(stepNames(want), ",") {
		t.Fatalf("steps %v, want %v", steps, want)
	}
	if _, ok := keys.Keys["key-1"]; ok || keys.Write != "key-2" {
		t.Fatalf("after the rotation: keys %v, write %s", keys.Order(), keys.Write)
	}

	// Only key-2 left: everything reads, new writes use it.
	for _, name := range []string{"legacy", "first", "second", "third"} {
		s.expectReadable(ctx, ns, name, plaintexts[name])
	}
	create("fourth")
	s.expectEncrypted(ctx, ns, "fourth", "key-2", plaintexts["fourth"])

	// A value encrypted with the dropped key no longer reads: without the
	// rewrite, "first" would have been lost with key-1. (Put back where it
	// was written, so nothing but the key differs.)
	if _, err := s.etcd.Put(ctx, "/registry/secrets/"+ns+"/first", string(oldCiphertext)); err != nil {
		t.Fatal(err)
	}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "first"}, &corev1.Secret{}); err == nil {
		t.Error("a value encrypted with the dropped key-1 was still readable")
	}
}

func stepNames(steps []desired.RotationStep) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = string(s)
	}
	return out
}

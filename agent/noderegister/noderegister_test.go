package noderegister

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// A real kube-apiserver with the Node authorizer and NodeRestriction, as a
// tenant's runs: a node's certificate may create its own Node and no other.
func TestCreate(t *testing.T) {
	env := testenv.StartT(t, testenv.Options{APIServerFlags: map[string]string{
		"authorization-mode": "Node,RBAC", "enable-admission-plugins": "NodeRestriction",
	}})
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	u, err := env.AddUser(envtest.User{Name: "system:node:node-1", Groups: []string{"system:nodes"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := u.Config()
	dir := t.TempDir()
	ca, cert := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "kubelet-client-current.pem")
	if err := os.WriteFile(ca, cfg.CAData, 0o644); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"zone": "b"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: "kubefarm.io/network-unavailable", Effect: corev1.TaintEffectNoSchedule},
		}},
	}
	ctx := context.Background()

	// The certificate appears after Create has started waiting for it,
	// as the kubelet's does after its CSR is approved.
	type result struct {
		out Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := Create(ctx, cfg.Host, ca, cert, node, 20*time.Millisecond, time.Minute)
		done <- result{out, err}
	}()
	if err := os.WriteFile(cert, append(append([]byte{}, cfg.CertData...), cfg.KeyData...), 0o600); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.out != Created {
		t.Fatalf("Create = %q, %v; want created", r.out, r.err)
	}
	got, err := admin.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The API server adds node.kubernetes.io/not-ready to a new Node, as
	// it does to a kubelet's.
	hasTaint := false
	for _, taint := range got.Spec.Taints {
		hasTaint = hasTaint || taint.Key == "kubefarm.io/network-unavailable" && taint.Effect == corev1.TaintEffectNoSchedule
	}
	if got.Labels["zone"] != "b" || !hasTaint {
		t.Errorf("created Node: labels %v, taints %v", got.Labels, got.Spec.Taints)
	}

	// The kubelet was first (or this ran before): nothing to do.
	if out, err := Create(ctx, cfg.Host, ca, cert, node, 20*time.Millisecond, time.Minute); err != nil || out != Existed {
		t.Errorf("second Create = %q, %v; want already registered", out, err)
	}

	// Node 1's certificate cannot create another node: refused until the
	// deadline, and the error says why.
	other := node.DeepCopy()
	other.Name = "node-2"
	_, err = Create(ctx, cfg.Host, ca, cert, other, 50*time.Millisecond, 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("node-1 creating node-2: %v, want a 403 refusal", err)
	}
	if _, err := admin.CoreV1().Nodes().Get(ctx, "node-2", metav1.GetOptions{}); err == nil {
		t.Errorf("node-2 exists")
	}

	// No certificate ever: the deadline, saying so.
	_, err = Create(ctx, cfg.Host, ca, filepath.Join(dir, "missing.pem"), node, 20*time.Millisecond, 200*time.Millisecond)
	if !errors.Is(err, errNoCert) {
		t.Errorf("without a certificate: %v", err)
	}
}

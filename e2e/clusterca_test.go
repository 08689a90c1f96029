//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// The cluster CA's rotation on the tenant with its netbooted nodes
// (docs/pki.md, "The cluster CA"), in two halves around the join
// scenario's rolling reboot-to-update, which reboots both machines: the
// rotation asks them to reboot anyway, and one reboot serves both.

// pollCARotated polls the TenantCluster's CARotated condition for up to
// ten minutes until done says so, logging each new reason; it returns
// the last reason seen.
func pollCARotated(ctx context.Context, t *testing.T, c client.Client, key client.ObjectKey,
	done func(context.Context, *metav1.Condition) (bool, error)) (string, error) {
	start, last := time.Now(), ""
	err := pollErr(ctx, 10*time.Minute, func(ctx context.Context) (bool, error) {
		tc := &kubefarmv1.TenantCluster{}
		if err := c.Get(ctx, key, tc); err != nil {
			return false, nil
		}
		cond := meta.FindStatusCondition(tc.Status.Conditions, kubefarmv1.ConditionCARotated)
		if cond == nil {
			return false, nil
		}
		if cond.Reason != last {
			t.Logf("%.0fs: CARotated %s %s: %s", time.Since(start).Seconds(), cond.Status, cond.Reason, cond.Message)
			last = cond.Reason
		}
		return done(ctx, cond)
	})
	return last, err
}

// startClusterCARotation requests the rotation and waits, under a loop of
// tenant API calls with the admin kubeconfig read before it, until the
// clients moved to the new CA and every Machine of the tenant was asked to
// reboot. It returns the admin kubeconfig as it is then (both CAs trusted,
// a client certificate of the new one), which stays valid to the end.
func startClusterCARotation(t *testing.T, ctx context.Context, c client.Client, cs kubernetes.Interface, key client.ObjectKey, tenantCfg *rest.Config) *rest.Config {
	load := startLoad(t, tenantCfg)
	if err := requestCARotation(ctx, c, key, desired.RoleCA); err != nil {
		load.stop()
		t.Fatal(err)
	}
	start := time.Now()
	last, err := pollCARotated(ctx, t, c, key, func(ctx context.Context, cond *metav1.Condition) (bool, error) {
		if cond.Reason != string(desired.CAStepWaitNodes) {
			return false, nil
		}
		machines := &kubefarmv1.MachineList{}
		if err := c.List(ctx, machines, client.InNamespace(key.Namespace), client.MatchingLabels{kubefarmv1.LabelTenantCluster: key.Name}); err != nil {
			return false, nil
		}
		for _, m := range machines.Items {
			rr := meta.FindStatusCondition(m.Status.Conditions, kubefarmv1.ConditionRebootRequired)
			if rr == nil || rr.Status != metav1.ConditionTrue || rr.Reason != kubefarmv1.ReasonClusterCARotation {
				return false, nil
			}
		}
		return len(machines.Items) > 0, nil
	})
	ok, failed, errs := load.stop()
	if err != nil {
		t.Fatalf("the cluster CA rotation never reached %s (last %s): %v", desired.CAStepWaitNodes, last, err)
	}
	t.Logf("cluster CA: clients moved and Machines asked to reboot in %.1fs; %d API calls succeeded, %d failed", time.Since(start).Seconds(), ok, failed)
	if failed > 0 {
		t.Errorf("%d tenant API calls failed while the clients moved to the new cluster CA: %s", failed, strings.Join(errs, "; "))
	}
	tc := &kubefarmv1.TenantCluster{}
	if err := c.Get(ctx, key, tc); err != nil {
		t.Fatal(err)
	}
	cfg := tenantConfig(t, ctx, cs, tc)
	if n := len(pemCertificates(cfg.CAData)); n != 2 {
		t.Errorf("the admin kubeconfig trusts %d CA certificates during the rotation, want both generations", n)
	}
	return cfg
}

// finishClusterCARotation waits, under a loop of tenant API calls with
// tenantCfg, for the rotation to end once the machines rebooted, checks
// that the API server serves a certificate of the new CA, and returns the
// admin kubeconfig as it is at the end.
func finishClusterCARotation(t *testing.T, ctx context.Context, c client.Client, cs kubernetes.Interface, key client.ObjectKey, tenantCfg *rest.Config) *rest.Config {
	load := startLoad(t, tenantCfg)
	start := time.Now()
	last, err := pollCARotated(ctx, t, c, key, func(ctx context.Context, cond *metav1.Condition) (bool, error) {
		done, _ := rotatedCA(ctx, cs, key.Namespace, key.Name, desired.RoleCA, desired.RoleAPIServer)
		return done && cond.Status == metav1.ConditionTrue, nil
	})
	ok, failed, errs := load.stop()
	if err != nil {
		t.Fatalf("the cluster CA rotation never finished (last %s): %v", last, err)
	}
	// When the second machine's reboot ends the rollout's wait last, the
	// serving switch and the drop happen under the rollout's own loop of
	// calls, and this step finds the rotation over.
	t.Logf("cluster CA: serving certificates moved, old CA dropped and deleted %.1fs after this step began; %d API calls succeeded, %d failed", time.Since(start).Seconds(), ok, failed)
	if failed > 0 {
		t.Errorf("%d tenant API calls failed while the servers moved to the new cluster CA: %s", failed, strings.Join(errs, "; "))
	}
	// The request is handled: taking it away starts nothing, and leaves
	// the TenantCluster as the release renders it (the ArgoCD diff).
	tc := &kubefarmv1.TenantCluster{}
	if err := c.Get(ctx, key, tc); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(tc.DeepCopy())
	delete(tc.Annotations, desired.RotateCAAnnotation(desired.RoleCA))
	if err := c.Patch(ctx, tc, patch); err != nil {
		t.Fatal(err)
	}
	cfg := tenantConfig(t, ctx, cs, tc)
	cas := pemCertificates(cfg.CAData)
	if len(cas) != 1 || cas[0].Subject.CommonName != "kubernetes-ca-2" {
		t.Fatalf("after the rotation the admin kubeconfig trusts %d CA certificates, want generation 2 alone", len(cas))
	}
	// What the API server serves, as the nodes see it: signed by the new CA.
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{InsecureSkipVerify: true}) // #nosec G402 -- the certificate is checked below, against the new CA.
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	served := conn.ConnectionState().PeerCertificates[0]
	if err := served.CheckSignatureFrom(cas[0]); err != nil {
		t.Errorf("the API server serves %s, not signed by the new cluster CA: %v", served.Subject.CommonName, err)
	}
	return cfg
}

// pemCertificates parses every certificate of a PEM bundle.
func pemCertificates(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return out
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

// setPoolPaused pauses the pool's rollout, or takes the pause away again
// (removed, not false: the pool is left as the release renders it).
func setPoolPaused(ctx context.Context, c client.Client, pool client.ObjectKey, paused bool) error {
	obj := &kubefarmv1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: pool.Namespace, Name: pool.Name}}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"rollout":{"paused":true}}}`))
	if !paused {
		patch = client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/spec/rollout/paused"}]`))
	}
	if err := c.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("setting %s's rollout paused=%v: %w", pool.Name, paused, err)
	}
	return nil
}

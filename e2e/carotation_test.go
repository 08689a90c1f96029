//go:build e2e

package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// rotatedCA tells whether ca's rotation is over on the real tenant: its
// trust Secret trusts generation 2 alone, the first generation's Secret
// is gone, and the given leaf is signed by generation 2. The string says
// where it stands.
func rotatedCA(ctx context.Context, cs kubernetes.Interface, ns, tenant string, ca, leaf desired.PKIRole) (bool, string) {
	trust, err := cs.CoreV1().Secrets(ns).Get(ctx, tenant+"-"+string(ca)+"-trust", metav1.GetOptions{})
	if err != nil {
		return false, fmt.Sprintf("%s: no trust Secret: %v", ca, err)
	}
	rec, err := desired.ParseCATrust(trust)
	if err != nil {
		return false, err.Error()
	}
	if len(rec.Trusted) != 1 || rec.Trusted[0] != 2 || rec.Signer != 2 {
		return false, fmt.Sprintf("%s: record %+v", ca, rec)
	}
	if _, err := cs.CoreV1().Secrets(ns).Get(ctx, tenant+"-"+string(ca), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return false, fmt.Sprintf("%s: generation 1's Secret is still there (%v)", ca, err)
	}
	s, err := cs.CoreV1().Secrets(ns).Get(ctx, tenant+"-"+string(leaf), metav1.GetOptions{})
	if err != nil {
		return false, fmt.Sprintf("%s: %v", leaf, err)
	}
	caCert, leafCert := firstPEMCert(trust.Data["tls.crt"]), firstPEMCert(s.Data["tls.crt"])
	if caCert == nil || leafCert == nil || leafCert.CheckSignatureFrom(caCert) != nil {
		return false, fmt.Sprintf("%s is not signed by %s generation 2 yet", leaf, ca)
	}
	return true, ""
}

func firstPEMCert(data []byte) *x509.Certificate {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil
	}
	return c
}

// checkCARotationUnderLoad rotates the etcd and the front-proxy CAs of the
// running tenant at once while a loop of tenant API calls runs: every
// etcd member and API server rolls three times (both trusted, new leaves,
// old dropped), and no call may fail but etcd's refusal of a write in
// flight when its leader hands over.
func checkCARotationUnderLoad(ctx context.Context, t *testing.T, c client.Client, cs kubernetes.Interface, key client.ObjectKey,
	tenantCfg *rest.Config, ready func(context.Context) (bool, error),
	waitFor func(t *testing.T, what string, timeout time.Duration, cond func(context.Context) (bool, error))) {
	load := startLoad(t, tenantCfg)
	// Not the cluster CA: its rotation waits for the nodes' reboots and
	// moves the clients' certificates, which this loop's client (a fixed
	// rest.Config) does not follow.
	if err := requestCARotation(ctx, c, key, desired.RoleEtcdCA, desired.RoleFrontProxyCA); err != nil {
		load.stop()
		t.Fatal(err)
	}
	start := time.Now()
	last, waitingOn := "", ""
	defer func() {
		if t.Failed() {
			t.Logf("the rotation was waiting on: %s", waitingOn)
		}
	}()
	waitFor(t, "the CA rotation never finished", 12*time.Minute, func(ctx context.Context) (bool, error) {
		done := true
		for _, p := range []struct{ ca, leaf desired.PKIRole }{
			{desired.RoleEtcdCA, desired.RoleEtcdServer}, {desired.RoleFrontProxyCA, desired.RoleFrontProxyClient},
		} {
			ok, msg := rotatedCA(ctx, cs, key.Namespace, key.Name, p.ca, p.leaf)
			if !ok {
				done, waitingOn = false, msg
			}
		}
		if ok, _ := ready(ctx); !ok {
			done = false
		}
		got := &kubefarmv1.TenantCluster{}
		if err := c.Get(ctx, key, got); err != nil {
			return false, nil
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionCARotated)
		if cond != nil && cond.Reason != last {
			t.Logf("%.0fs: CARotated %s %s: %s", time.Since(start).Seconds(), cond.Status, cond.Reason, cond.Message)
			last = cond.Reason
		}
		return done && cond != nil && cond.Status == metav1.ConditionTrue, nil
	})
	ok, failed, errs := load.stop()
	t.Logf("etcd and front-proxy CAs rotated in %.1fs; %d API calls succeeded, %d failed", time.Since(start).Seconds(), ok, failed)
	// The rotation rolls etcd three times (both trusted, new leaves, old
	// dropped); each roll restarts the leader once, and etcd hands its
	// leadership over on the way out, dropping the proposals in flight:
	// the old leader's own as "raft proposal dropped" or "leader
	// changed", a follower's forwarded one as "request timed out" once
	// its wait runs out. Neither etcd's client nor the API server retries
	// a write that failed so (docs/etcd.md, the same cost as in
	// TestTenantEtcdScaling): at most one per roll; any other failure
	// fails the test.
	moves := 0
	for _, e := range errs {
		if strings.Contains(e, "raft proposal dropped") || strings.Contains(e, "leader changed") || strings.Contains(e, "etcdserver: request timed out") {
			moves++
		}
	}
	if moves > 0 {
		t.Logf("%d writes refused by etcd during a leader move: %s", moves, strings.Join(errs, "\n"))
	}
	if failed > moves || moves > 3 || ok == 0 {
		t.Errorf("%d calls failed (%d of them etcd's leader-move refusals), %d succeeded: %s", failed, moves, ok, strings.Join(errs, "\n"))
	}
	pods, err := cs.CoreV1().Pods(key.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, v := range p.Spec.Volumes {
			if v.Secret != nil && (v.Secret.SecretName == key.Name+"-etcd-ca" || v.Secret.SecretName == key.Name+"-front-proxy-ca") {
				t.Errorf("pod %s still mounts the retired CA Secret %s", p.Name, v.Secret.SecretName)
			}
		}
	}
}

// requestCARotation annotates the TenantCluster to rotate each of cas.
func requestCARotation(ctx context.Context, c client.Client, key client.ObjectKey, cas ...desired.PKIRole) error {
	tc := &kubefarmv1.TenantCluster{}
	if err := c.Get(ctx, key, tc); err != nil {
		return err
	}
	patch := client.MergeFrom(tc.DeepCopy())
	if tc.Annotations == nil {
		tc.Annotations = map[string]string{}
	}
	for _, ca := range cas {
		tc.Annotations[desired.RotateCAAnnotation(ca)] = "e2e"
	}
	return c.Patch(ctx, tc, patch)
}

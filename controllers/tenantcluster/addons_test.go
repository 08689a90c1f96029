package tenantcluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// testAddonsResync is the add-on resync of the manager under test: short,
// so that the repair of a deleted add-on is seen within a test.
const testAddonsResync = 2 * time.Second

// tenantServiceCIDR is the fake tenant's (envtest's) service network: the
// example's, so the add-ons' ClusterIPs (the DNS Service) are valid there.
const tenantServiceCIDR = "10.96.0.0/12"

// addonObjects are add-ons every example tenant has, read back from the
// fake tenant.
func addonObjects() []client.Object {
	return []client.Object{
		&corev1.ConfigMap{ObjectMeta: objMeta("kube-public", "cluster-info")},
		&corev1.ConfigMap{ObjectMeta: objMeta("kube-system", desired.KubeletConfigMapName)},
		// kubefarm-pxe's token issuer may manage bootstrap tokens.
		&rbacv1.Role{ObjectMeta: objMeta("kube-system", "kubefarm:token-issuer")},
		&rbacv1.RoleBinding{ObjectMeta: objMeta("kube-system", "kubefarm:token-issuer")},
		&appsv1.DaemonSet{ObjectMeta: objMeta("kube-system", "konnectivity-agent")},
		&appsv1.DaemonSet{ObjectMeta: objMeta("kube-system", "kube-proxy")},
		&appsv1.Deployment{ObjectMeta: objMeta("kube-system", "coredns")},
		&corev1.Service{ObjectMeta: objMeta("kube-system", "kube-dns")},
		// ...and may only create kubefarm bootstrap tokens with it.
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: objMeta("", desired.TokenIssuerPolicyName)},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: objMeta("", desired.TokenIssuerPolicyName)},
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: objMeta("", desired.ProbeHostPolicyName)},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: objMeta("", desired.ProbeHostPolicyName)},
	}
}

// checkTenantAddons: the add-ons are in the tenant, point nodes at the
// external endpoint, and a deleted one comes back within the resync.
func checkTenantAddons(ctx context.Context, t *testing.T, endpoint string) {
	t.Helper()
	for _, o := range addonObjects() {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Errorf("%T %s in the tenant: %v", o, client.ObjectKeyFromObject(o), err)
			continue
		}
		if o.GetLabels()[desired.LabelManagedBy] != "kubefarm" {
			t.Errorf("%T %s lacks the managed-by label", o, o.GetName())
		}
	}
	info := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kube-public", Name: "cluster-info"}, info); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load([]byte(info.Data["kubeconfig"]))
	if err != nil {
		t.Fatalf("cluster-info kubeconfig: %v", err)
	}
	for _, cl := range kc.Clusters {
		if cl.Server != endpoint || len(cl.CertificateAuthorityData) == 0 {
			t.Errorf("cluster-info points nodes at %s (CA %d bytes), want %s with the CA", cl.Server, len(cl.CertificateAuthorityData), endpoint)
		}
	}
	dns := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-dns"}, dns); err != nil {
		t.Fatal(err)
	}
	if dns.Spec.ClusterIP != "10.96.0.10" {
		t.Errorf("kube-dns ClusterIP %s, want 10.96.0.10 (the tenth address of the service network)", dns.Spec.ClusterIP)
	}

	// A tenant made by an earlier kubefarm still has the bootstrappers'
	// nodeclient auto-approval, which would approve a token's request
	// for any node name: the next resync deletes it.
	retired := desired.RetiredAddons()[0].(*rbacv1.ClusterRoleBinding)
	if retired.Name != desired.RetiredNodeClientApproval {
		t.Fatalf("retired add-on %s", retired.Name)
	}
	if err := env.Client.Create(ctx, retired.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "the retired nodeclient auto-approval deleted", time.Minute, func(ctx context.Context) (bool, string, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(retired), &rbacv1.ClusterRoleBinding{})
		return apierrors.IsNotFound(err), fmt.Sprint(err), client.IgnoreNotFound(err)
	})

	// Someone deletes CoreDNS inside the tenant: the next resync puts it back.
	coredns := &appsv1.Deployment{ObjectMeta: objMeta("kube-system", "coredns")}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(coredns), coredns); err != nil {
		t.Fatal(err)
	}
	oldUID := coredns.UID
	if err := env.Client.Delete(ctx, coredns); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "deleted CoreDNS re-applied", time.Minute, func(ctx context.Context) (bool, string, error) {
		got := &appsv1.Deployment{}
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(coredns), got)
		if apierrors.IsNotFound(err) {
			return false, "not there", nil
		}
		if err != nil {
			return false, "", err
		}
		return got.UID != oldUID && got.DeletionTimestamp.IsZero(), "uid " + string(got.UID), nil
	})
}

// addonVersions are the resourceVersions of the add-ons, to prove an
// idempotent pass writes nothing in the tenant.
func addonVersions(ctx context.Context, t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range addonObjects() {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("%T %s/%s", o, o.GetNamespace(), o.GetName())] = o.GetResourceVersion()
	}
	return out
}

// checkAddonSwitchOff: turning CoreDNS off deletes kubefarm's CoreDNS from
// the tenant, and AddonsReady says so.
func checkAddonSwitchOff(ctx context.Context, t *testing.T, key types.NamespacedName) {
	t.Helper()
	cur, err := getTC(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cur.DeepCopy())
	off := false
	cur.Spec.Addons.CoreDNS = &off
	if err := env.Client.Patch(ctx, cur, patch); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "CoreDNS deleted once switched off", time.Minute, func(ctx context.Context) (bool, string, error) {
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		err = env.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, &appsv1.Deployment{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, "", err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAddonsReady)
		return apierrors.IsNotFound(err) && c != nil && c.ObservedGeneration == got.Generation &&
			strings.Contains(c.Message, "switched off and deleted"), conditionsString(got), nil
	})
}

func objMeta(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}

package tenantcluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// DefaultAddonsResync is how often the tenant's add-ons are applied again
// although nothing in the admin cluster changed: someone may delete or edit
// them inside the tenant, and no watch reaches in there. An apply that
// changes nothing writes nothing to the tenant's etcd, and one pass a
// minute per tenant costs less than a set of watches per tenant would.
const DefaultAddonsResync = time.Minute

// reconcileTenantObjects writes, into the tenant cluster, kubefarm's RBAC
// bindings (without which the admin kubeconfig can do nothing) and then the
// add-ons, and deletes add-ons a switch turned off. It returns AddonsReady
// and whether the RBAC bindings are in place.
func (r *Reconciler) reconcileTenantObjects(ctx context.Context, s *scope) (cond metav1.Condition, rbacApplied bool) {
	tc, c, secrets := s.tc, s.cluster, s.secrets
	fail := func(reason, format string, args ...any) (metav1.Condition, bool) {
		return notReady(v1alpha1.ConditionAddonsReady, reason, fmt.Sprintf(format, args...)), rbacApplied
	}
	cfg, err := tenantRESTConfig(c, secrets)
	if err != nil {
		return fail(v1alpha1.ReasonApplyFailed, "%v", err)
	}
	tenant, err := r.TenantClients.Get(s.key(), cfg)
	if err != nil {
		return fail(v1alpha1.ReasonApplyFailed, "tenant client: %v", err)
	}
	rbac := make([]client.Object, 0, 3)
	for _, crb := range desired.TenantRBAC(c) {
		rbac = append(rbac, crb)
	}
	if err := applyInTenant(ctx, tenant, rbac); err != nil {
		return fail(v1alpha1.ReasonApplyFailed, "%v", err)
	}
	rbacApplied = true

	if s.endpoint == "" {
		return fail(v1alpha1.ReasonEndpointPending, "the add-ons need the external endpoint nodes use, which is not known yet")
	}
	in := addonInputs(tc, c, secrets, s.service, s.endpoint)
	objs, err := desired.Addons(c, in)
	if err != nil {
		return fail(v1alpha1.ReasonApplyFailed, "%v", err)
	}
	if err := applyInTenant(ctx, tenant, objs); err != nil {
		return fail(v1alpha1.ReasonApplyFailed, "%v", err)
	}
	pruned, err := pruneAddons(ctx, tenant, c, in, objs)
	if err != nil {
		return fail(v1alpha1.ReasonApplyFailed, "%v", err)
	}
	msg := fmt.Sprintf("%d objects applied in the tenant cluster", len(objs)+len(rbac))
	if pruned > 0 {
		msg += fmt.Sprintf("; %d switched off and deleted", pruned)
	}
	return metav1.Condition{Type: v1alpha1.ConditionAddonsReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonApplied, Message: msg}, rbacApplied
}

// addonInputs gathers what the add-on builders need beyond the Cluster.
func addonInputs(tc *v1alpha1.TenantCluster, c *desired.Cluster, secrets desired.SecretData, svc *corev1.Service, endpoint string) desired.AddonInputs {
	on := func(b *bool) bool { return b == nil || *b }
	in := desired.AddonInputs{
		Endpoint:        endpoint,
		CACert:          c.TrustPEM(desired.RoleCA, secrets),
		KubeProxyMode:   tc.Spec.KubeProxy.Mode,
		CoreDNS:         on(tc.Spec.Addons.CoreDNS),
		ProbeHostPolicy: on(tc.Spec.Addons.ProbeHostPolicy),
	}
	// With NodePort, agents reach konnectivity-server through the node
	// port of the Service's Konnectivity port, which only the live
	// Service knows.
	if c.ExposeType == v1alpha1.ExposeNodePort && svc != nil && c.ExternalAddress != "" {
		for _, p := range svc.Spec.Ports {
			if p.Name == "konnectivity" && p.NodePort != 0 {
				in.KonnectivityEndpoint = net.JoinHostPort(c.ExternalAddress, strconv.Itoa(int(p.NodePort)))
			}
		}
	}
	return in
}

// pruneAddons deletes the add-ons the TenantCluster no longer wants (CoreDNS
// or the probe-host policy switched off, kube-proxy mode none): the objects
// every switch on would yield, and those earlier versions applied
// (desired.RetiredAddons), minus the wanted ones. Only objects that
// carry kubefarm's managed-by label are deleted, so a kube-proxy or CoreDNS
// the tenant installed itself after switching ours off is left alone.
func pruneAddons(ctx context.Context, tenant client.Client, c *desired.Cluster, in desired.AddonInputs, wanted []client.Object) (int, error) {
	all := in
	all.CoreDNS, all.ProbeHostPolicy = true, true
	if all.KubeProxyMode == "none" {
		all.KubeProxyMode = "iptables"
	}
	full := *c
	full.Konnectivity = true
	candidates, err := desired.Addons(&full, all)
	if err != nil {
		return 0, err
	}
	// The kubernetes Service's endpoints are kubefarm's only while the API
	// server Service is NodePort; afterwards the API servers' own
	// reconciler writes them again.
	candidates = append(candidates, desired.KubernetesServiceEndpointNames()...)
	// Objects earlier versions applied and this one no longer does (the
	// bootstrappers' nodeclient auto-approval) go the same way.
	candidates = append(candidates, desired.RetiredAddons()...)
	keep := map[string]bool{}
	for _, o := range wanted {
		keep[addonKey(o)] = true
	}
	deleted := 0
	for _, o := range candidates {
		if keep[addonKey(o)] {
			continue
		}
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GetObjectKind().GroupVersionKind())
		err := tenant.Get(ctx, client.ObjectKeyFromObject(o), live)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return deleted, fmt.Errorf("reading %s %s in the tenant cluster: %w", live.GetKind(), objectName(o), err)
		}
		if live.GetLabels()[desired.LabelManagedBy] != "kubefarm" || !live.GetDeletionTimestamp().IsZero() {
			continue
		}
		uid := live.GetUID()
		if err := tenant.Delete(ctx, live, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return deleted, fmt.Errorf("deleting %s %s in the tenant cluster: %w", live.GetKind(), objectName(o), err)
		}
		deleted++
	}
	return deleted, nil
}

func addonKey(o client.Object) string {
	return o.GetObjectKind().GroupVersionKind().GroupKind().String() + " " + objectName(o)
}

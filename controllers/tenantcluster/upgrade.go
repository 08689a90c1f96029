package tenantcluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/conditions"
	"github.com/kubefarm/kubefarm/internal/kubeversion"
	"github.com/kubefarm/kubefarm/internal/tenantcache"
	"github.com/kubefarm/kubefarm/internal/upgradeplan"
)

// TenantNodes gives the controller a tenant's Nodes, as a watch last saw
// them, for the kubelet skew check before a step that raises the minor.
type TenantNodes interface {
	NodeList(ctx context.Context, tenant types.NamespacedName) ([]*corev1.Node, error)
}

// CachedTenantNodes reads a tenant's Nodes from the manager's tenant cache
// (its shared Node informer, which the rollout and machinenode use too), so
// the check costs the tenant no request.
type CachedTenantNodes struct {
	Cache *tenantcache.Cache
}

// nodesSyncTimeout bounds the wait for a tenant's first Node list.
const nodesSyncTimeout = 10 * time.Second

// NodeList implements TenantNodes. Its errors name the TenantCluster.
func (t CachedTenantNodes) NodeList(ctx context.Context, tenant types.NamespacedName) ([]*corev1.Node, error) {
	tc, err := t.Cache.Get(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return tc.NodeList(ctx, nodesSyncTimeout)
}

func (r *Reconciler) versionWindow() kubeversion.Window {
	if r.VersionWindow == (kubeversion.Window{}) {
		return kubeversion.DefaultWindow()
	}
	return r.VersionWindow
}

// planVersion decides the version this pass rolls the control plane to
// (internal/upgradeplan): spec.version, or, when it is more than a minor
// ahead of status.observedVersion, the next minor in between; or
// status.observedVersion, where a refused step holds the control plane.
// The builders then run s.cluster at that version, and observeRollout
// moves status.observedVersion to it once every component runs it, which
// brings the next pass and the next step. VersionRolledOut tells the story;
// it is not an input of Ready, since the control plane serves throughout.
func (r *Reconciler) planVersion(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.cluster
	live := &appsv1.Deployment{}
	found, err := r.getLive(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.APIServerServiceName()}, live)
	if err != nil {
		return ctrl.Result{}, err
	}
	if found {
		s.apiServerBefore = imageVersion(live, desired.ComponentAPIServer)
	}
	in := upgradeplan.Input{Observed: s.tc.Status.ObservedVersion, Desired: c.Version, APIServer: s.apiServerBefore,
		Window: r.versionWindow()}
	var result ctrl.Result
	if upgradeplan.NeedsKubelets(in) {
		if in.Kubelets, err = r.kubeletVersions(ctx, s); err != nil {
			// Fail closed: an unchecked step could strand kubelets.
			s.version = upgradeplan.Decision{Version: in.Observed, Held: true, Reason: v1alpha1.ReasonNodesUnreadable,
				Message: fmt.Sprintf("the upgrade from %s to %s is held: the tenant's Nodes could not be read to check their kubelets' skew: %v",
					in.Observed, in.Desired, err)}
			result.RequeueAfter = tenantRetry
		}
	}
	if !s.version.Held {
		s.version = upgradeplan.Plan(in)
	}
	if s.version.Held {
		// Re-planned on the next pass: at the latest the add-ons'
		// resync, which also brings kubelets a NodePool updated meanwhile.
		log.FromContext(ctx).Info("version step held", "reason", s.version.Reason, "message", s.version.Message)
	}
	c.Version = s.version.Version
	r.setCondition(s.tc, conditions.New(v1alpha1.ConditionVersionRolledOut, s.version.Done(), s.version.Reason, s.version.Message))
	return result, nil
}

// kubeletVersions maps each of the tenant's Nodes to its kubelet version:
// from TenantNodes when set, otherwise listed once through the add-ons'
// client (only the passes that would start a minor step get here).
func (r *Reconciler) kubeletVersions(ctx context.Context, s *scope) (map[string]string, error) {
	var nodes []*corev1.Node
	if r.TenantNodes != nil {
		var err error
		if nodes, err = r.TenantNodes.NodeList(ctx, s.key()); err != nil {
			return nil, err
		}
	} else {
		cfg, err := tenantRESTConfig(s.cluster, s.secrets)
		if err != nil {
			return nil, err
		}
		tenant, err := r.TenantClients.Get(s.key(), cfg)
		if err != nil {
			return nil, fmt.Errorf("tenant client: %w", err)
		}
		list := &corev1.NodeList{}
		if err := tenant.List(ctx, list); err != nil {
			return nil, fmt.Errorf("listing the tenant's Nodes: %w", err)
		}
		for i := range list.Items {
			nodes = append(nodes, &list.Items[i])
		}
	}
	versions := make(map[string]string, len(nodes))
	for _, n := range nodes {
		versions[n.Name] = n.Status.NodeInfo.KubeletVersion
	}
	return versions, nil
}

// recordStepStarted records an event when this pass moved the API servers'
// template to an upgrade's next step: one per step, whatever the passes
// in between.
func (r *Reconciler) recordStepStarted(s *scope) {
	d := s.version
	if d.Reason != v1alpha1.ReasonUpgradingStep || s.apiServerBefore == "" || s.apiServerBefore == d.Version ||
		imageVersion(s.apiServer, desired.ComponentAPIServer) != d.Version {
		return
	}
	r.Recorder.Eventf(s.tc, nil, corev1.EventTypeNormal, "UpgradeStepStarted", "Upgrade", "rolling the control plane %s", d.Message)
}

// imageVersion is the tag of the named container's image in d's template,
// the Kubernetes version it runs; "" when d or the container is missing.
func imageVersion(d *appsv1.Deployment, container string) string {
	if d == nil {
		return ""
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == container {
			if i := strings.LastIndex(c.Image, ":"); i >= 0 {
				return c.Image[i+1:]
			}
		}
	}
	return ""
}

// reconcileFollowers applies kube-controller-manager and kube-scheduler at
// the version followerVersion allows: in an upgrade they follow the API
// servers, never lead them.
func (r *Reconciler) reconcileFollowers(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.cluster
	follower := c
	if v := followerVersion(c.Version, s.tc.Status.ObservedVersion, s.apiServer); v != c.Version {
		held := *c
		held.Version = v
		follower = &held
		// Not a reason for Ready=False: the control plane serves
		// throughout; status.observedVersion tells the upgrade's progress.
		log.FromContext(ctx).Info("upgrade in progress: controller-manager and scheduler wait for the API servers", "running", v, "desired", c.Version)
	}
	for _, b := range []struct {
		what  string
		build func(*desired.Cluster, *corev1.ConfigMap, desired.SecretData) (*appsv1.Deployment, error)
	}{{"kube-controller-manager", desired.ControllerManagerDeployment}, {"kube-scheduler", desired.SchedulerDeployment}} {
		d, err := b.build(follower, s.config, s.secrets)
		if err != nil {
			return ctrl.Result{}, err
		}
		got := &appsv1.Deployment{}
		if err := r.apply(ctx, s.tc, d, got); err != nil {
			return ctrl.Result{}, err
		}
		s.followers = append(s.followers, got)
		if ok, msg := deploymentAvailable(got, b.what); !ok {
			s.notReady = append(s.notReady, msg)
		}
	}
	return ctrl.Result{}, nil
}

// observeRollout notes an endpoint still unknown against Ready, and moves
// status.observedVersion only when every component runs the version this
// pass rolls to (planVersion's), so during an upgrade it keeps naming the
// version still (partly) running, and moves step by step.
func (r *Reconciler) observeRollout(_ context.Context, s *scope) (ctrl.Result, error) {
	if s.endpoint == "" {
		s.notReady = append(s.notReady, "the external endpoint is not known yet (waiting for the Service's address)")
	}
	allRolledOut := rolledOut(s.apiServer)
	for _, d := range s.followers {
		allRolledOut = allRolledOut && rolledOut(d)
	}
	if allRolledOut {
		s.tc.Status.ObservedVersion = s.cluster.Version
		if s.cluster.Version == s.tc.Spec.Version {
			r.setCondition(s.tc, conditions.New(v1alpha1.ConditionVersionRolledOut, true, v1alpha1.ReasonRolledOut,
				"every component runs "+s.cluster.Version))
		}
		// Otherwise an intermediate step finished: the status change
		// brings the next pass, which plans the next step.
	}
	return ctrl.Result{}, nil
}

package tenantcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/conditions"
	"github.com/kubefarm/kubefarm/internal/etcdmembers"
)

// A change of spec.etcd.replicas, one etcd membership step per pass
// (docs/etcd.md, Scaling; the steps are internal/etcdmembers').

// etcdScaleRequeue is the next pass while a change is in progress: a
// learner catches up, or etcd's own health check lets the next change
// through, within seconds.
const etcdScaleRequeue = 2 * time.Second

// etcdScaleRetry is the next pass after a failed step.
const etcdScaleRetry = 10 * time.Second

// DialEtcd makes an etcd client of one endpoint (member 0's client URL)
// with the given TLS configuration. The manager's dials the tenant's
// etcd; tests pass one that reaches their own etcd processes.
type DialEtcd func(ctx context.Context, endpoint string, tlsConfig *tls.Config) (*clientv3.Client, error)

// dialEtcd is the DialEtcd of the manager.
func dialEtcd(ctx context.Context, endpoint string, tlsConfig *tls.Config) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		TLS:         tlsConfig,
		DialTimeout: 5 * time.Second,
		Context:     ctx,
		// Its errors are returned and reported; its own logging would
		// only repeat them in another format.
		Logger: zap.NewNop(),
	})
}

// etcdScaling says whether a membership change is under way: the live
// StatefulSet runs another count than the spec's, or a step marked it
// (v1alpha1.AnnotationEtcdScaling) or the last pass left EtcdScaling True: a
// change whose StatefulSet already has the spec's count but whose last
// learner is not promoted yet, or one interrupted. The mark is what
// survives a lost status write.
// Nothing changes before etcd was bootstrapped: a first bootstrap, or a
// restore, creates the spec's members at once.
func etcdScaling(tc *v1alpha1.TenantCluster, live *appsv1.StatefulSet, state desired.EtcdClusterState, want int32) bool {
	if live == nil || state != desired.EtcdClusterExisting || live.Spec.Replicas == nil {
		return false
	}
	_, marked := live.Annotations[v1alpha1.AnnotationEtcdScaling]
	return *live.Spec.Replicas != want || marked || meta.IsStatusConditionTrue(tc.Status.Conditions, v1alpha1.ConditionEtcdScaling)
}

// reconcileEtcdMembers makes at most one membership step and sets
// s.cluster's EtcdMembers and EtcdServers for the objects this pass
// applies: during a change the StatefulSet runs exactly etcd's members,
// the initial cluster lists them, and the API servers (and the backup)
// use member 0 only. Member 0 is never removed, and a learner, which
// refuses most requests, must never be an API server's endpoint.
func (r *Reconciler) reconcileEtcdMembers(ctx context.Context, s *scope, live *appsv1.StatefulSet, state desired.EtcdClusterState) (ctrl.Result, error) {
	c := s.cluster
	if live != nil && live.Spec.Replicas != nil && state != desired.EtcdClusterExisting && *live.Spec.Replicas != c.EtcdReplicas {
		// The spec changed while the first members bootstrap: they
		// bootstrap as they started (a member that already has data keeps
		// its initial cluster, another listing more members would never
		// join it), and the change starts once the cluster exists.
		c.EtcdMembers, c.EtcdServers = *live.Spec.Replicas, *live.Spec.Replicas
		return ctrl.Result{RequeueAfter: etcdScaleRequeue}, nil
	}
	if !etcdScaling(s.tc, live, state, c.EtcdReplicas) {
		return ctrl.Result{}, nil
	}
	c.EtcdMembers, c.EtcdServers, c.EtcdScaling = *live.Spec.Replicas, 1, true
	scaling := func(reason, format string, args ...any) {
		r.setCondition(s.tc, conditions.New(v1alpha1.ConditionEtcdScaling, true, reason, fmt.Sprintf(format, args...)))
	}
	if ok, why := r.apiServersOnMemberZero(ctx, c); !ok {
		scaling(v1alpha1.ReasonWaitingForAPIServers, "from %d to %d etcd members: %s", *live.Spec.Replicas, c.EtcdReplicas, why)
		return ctrl.Result{RequeueAfter: etcdScaleRequeue}, nil
	}
	res, err := r.etcdStep(ctx, s, live.Status.ReadyReplicas)
	if err != nil {
		// Not an error of the pass: the rest of the control plane (its
		// certificates, its API servers) is still kept up to date while
		// etcd cannot be changed, with the counts as they are.
		msg := err.Error()
		if prev := meta.FindStatusCondition(s.tc.Status.Conditions, v1alpha1.ConditionEtcdScaling); prev == nil || prev.Message != msg {
			r.Recorder.Eventf(s.tc, nil, corev1.EventTypeWarning, "EtcdScaleStepFailed", "ScaleEtcd", "%s", msg)
		}
		log.FromContext(ctx).Info("etcd membership step failed", "error", msg)
		scaling(v1alpha1.ReasonStepFailed, "%s", msg)
		return ctrl.Result{RequeueAfter: etcdScaleRetry}, nil
	}
	if res.Changed {
		r.Recorder.Eventf(s.tc, nil, corev1.EventTypeNormal, res.Reason, "ScaleEtcd", "%s", res.Message)
		log.FromContext(ctx).Info("etcd membership step", "step", res.Reason, "detail", res.Message)
	}
	if res.Done {
		// The API servers go back to listing every member: their second
		// rollout of the change.
		c.EtcdMembers, c.EtcdServers, c.EtcdScaling = c.EtcdReplicas, c.EtcdReplicas, false
		r.setCondition(s.tc, conditions.New(v1alpha1.ConditionEtcdScaling, false, v1alpha1.ReasonMembersMatch, res.Message))
		return ctrl.Result{}, nil
	}
	c.EtcdMembers, s.etcdVoting = res.Members, res.Voting
	scaling(res.Reason, "towards %d etcd members: %s", c.EtcdReplicas, res.Message)
	return ctrl.Result{RequeueAfter: etcdScaleRequeue}, nil
}

// etcdStep dials member 0 and makes one step.
func (r *Reconciler) etcdStep(ctx context.Context, s *scope, ready int32) (etcdmembers.Result, error) {
	c := s.cluster
	tlsConfig, err := desired.EtcdClientTLS(c, s.secrets)
	if err != nil {
		return etcdmembers.Result{}, err
	}
	dial := r.DialEtcd
	if dial == nil {
		dial = dialEtcd
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cli, err := dial(ctx, c.EtcdClientURL(0), tlsConfig)
	if err != nil {
		return etcdmembers.Result{}, fmt.Errorf("dialing etcd member 0 (%s): %w", c.EtcdClientURL(0), err)
	}
	defer cli.Close()
	return etcdmembers.Step(ctx, cli, etcdmembers.Input{Want: c.EtcdReplicas, Ready: ready, PeerURL: c.EtcdPeerURL})
}

// apiServersOnMemberZero says whether every API server runs with member 0
// as its only etcd server: the Deployment, as the last pass applied it
// with EtcdServers 1, fully rolled out, no pod of an older template left.
// No Deployment yet is fine: no API server uses etcd.
func (r *Reconciler) apiServersOnMemberZero(ctx context.Context, c *desired.Cluster) (bool, string) {
	d := &appsv1.Deployment{}
	found, err := r.getLive(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.APIServerServiceName()}, d)
	if err != nil {
		return false, err.Error()
	}
	if !found {
		return true, ""
	}
	want := "--etcd-servers=" + c.EtcdClientURL(0)
	if !apiServerHasArg(&d.Spec.Template.Spec, want) {
		return false, "the API servers are being moved to etcd member 0 only"
	}
	if !rolledOut(d) {
		return false, "waiting until every API server uses etcd member 0 only (rollout in progress)"
	}
	// A rolled-out Deployment does not count its terminating pods, and a
	// terminating API server still serves the requests on its open
	// connections, with its own connections to the other members: removing
	// one of those resets a tenant's request (CI saw it). So every pod,
	// terminating ones included, must be of the new template. Read
	// uncached: only while a change waits here. (apps/v1 requires the
	// selector.)
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
		return false, "listing the API server pods: " + err.Error()
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; !apiServerHasArg(&p.Spec, want) {
			return false, fmt.Sprintf("waiting until API server pod %s, which may still use the other etcd members, is gone", p.Name)
		}
	}
	return true, ""
}

// apiServerHasArg says whether pod's kube-apiserver container has arg.
func apiServerHasArg(pod *corev1.PodSpec, arg string) bool {
	i := slices.IndexFunc(pod.Containers, func(ctr corev1.Container) bool { return ctr.Name == desired.ComponentAPIServer })
	return i >= 0 && slices.Contains(pod.Containers[i].Args, arg)
}

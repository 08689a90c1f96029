package machinenode

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/conditions"
	"github.com/kubefarm/kubefarm/internal/ssa"
	"github.com/kubefarm/kubefarm/internal/tenantcache"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// tenantTimeout bounds one request to a tenant, so that a tenant that stops
// answering holds its own worker for this long at most.
const tenantTimeout = 30 * time.Second

// syncer is what every tenant's worker shares: the admin cluster's cache
// and client, and the event recorder.
type syncer struct {
	client   client.Client
	recorder events.EventRecorder
}

// watch is the controller's tenantcache.Watch: the tenant's shared Node
// informer feeds one queue of node names per tenant, and one worker brings
// each node and its Machine in step. Once the Node list is complete (an
// absent Node is NodeNotFound only then), every Machine of the tenant is
// queued too, so that a Machine whose node never registered is told so.
func (s *syncer) watch() tenantcache.Watch {
	return tenantcache.Watch{
		Name: "machinenode", What: "a node and its Machine",
		Sources: []tenantcache.Source{tenantcache.Nodes},
		Synced: func(ctx context.Context, t *tenantcache.Tenant, enqueue func(string)) error {
			return s.enqueueMachines(ctx, t.Key(), enqueue)
		},
		Handle: func(ctx context.Context, t *tenantcache.Tenant, name string) error {
			cs, err := t.Client(FieldOwner)
			if err != nil {
				return err
			}
			store, err := t.Store(tenantcache.Nodes)
			if err != nil {
				return err
			}
			w := &nodeWorker{syncer: s, tenant: t.Object(), client: cs, store: store}
			return w.handle(ctx, name)
		},
	}
}

// enqueueMachines enqueues the hostname of every Machine of tenant.
func (s *syncer) enqueueMachines(ctx context.Context, tenant types.NamespacedName, enqueue func(string)) error {
	list := &kubefarmv1.MachineList{}
	if err := s.client.List(ctx, list, client.InNamespace(tenant.Namespace)); err != nil {
		return fmt.Errorf("listing the Machines of TenantCluster %s: %w", tenant, err)
	}
	for _, m := range list.Items {
		if m.Spec.Cluster == tenant.Name && m.Spec.Hostname != "" {
			enqueue(m.Spec.Hostname)
		}
	}
	return nil
}

type nodeWorker struct {
	*syncer
	// tenant is the TenantCluster as it was when the connection started;
	// only its identity is used.
	tenant *kubefarmv1.TenantCluster
	client kubernetes.Interface
	store  cache.Store
}

func (w *nodeWorker) key() types.NamespacedName {
	return types.NamespacedName{Namespace: w.tenant.Namespace, Name: w.tenant.Name}
}

// handle brings the Machine of node name and the Node in step: NodeReady
// first (it is the admin cluster's and needs nothing of the Node), then the
// labels, then the taint, so that no pod is scheduled onto the node before
// it carries its role labels.
func (w *nodeWorker) handle(ctx context.Context, name string) error {
	machines, err := tenantcache.MachinesOfNode(ctx, w.syncer.client, w.key(), name)
	if err != nil {
		return err
	}
	if len(machines) != 1 {
		if len(machines) > 1 {
			log.FromContext(ctx).Info("more than one Machine has this hostname; leaving the node alone", "node", name)
		}
		return nil
	}
	m := &machines[0]
	if !m.DeletionTimestamp.IsZero() {
		return nil
	}
	var node *corev1.Node
	if o, ok, err := w.store.GetByKey(name); err != nil {
		return err
	} else if ok {
		node = o.(*corev1.Node)
	}
	if err := w.writeNodeReady(ctx, m, name, node); err != nil {
		return err
	}
	if node == nil {
		return nil
	}
	if err := w.applyLabels(ctx, m, node); err != nil {
		return err
	}
	return w.liftTaint(ctx, m, node)
}

// writeNodeReady applies the Machine's NodeReady condition, and only it,
// under FieldOwner, when it says something new; an Event tells the
// change.
func (w *nodeWorker) writeNodeReady(ctx context.Context, m *kubefarmv1.Machine, name string, node *corev1.Node) error {
	want := NodeReadyCondition(name, node)
	if have := meta.FindStatusCondition(m.Status.Conditions, want.Type); have != nil &&
		have.Status == want.Status && have.Reason == want.Reason && have.Message == want.Message &&
		have.ObservedGeneration == m.Generation {
		return nil
	}
	after := slices.Clone(m.Status.Conditions)
	conditions.Set(&after, m.Generation, want)
	patch := &kubefarmv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name}}
	patch.Status.Conditions = []metav1.Condition{*meta.FindStatusCondition(after, want.Type)}
	if err := ssa.ApplyStatus(ctx, w.syncer.client, FieldOwner, patch); err != nil {
		return err
	}
	conditions.EmitTransitions(w.recorder, m, m.Status.Conditions, after)
	return nil
}

// applyLabels applies the labels of NodeLabels to the Node under
// FieldOwner when the Node lacks one or the manager owns others (a tag
// dropped from the pool: applying gives them up, and the API server
// removes them). The apply carries the resourceVersion it was decided on,
// so it never creates a Node that was deleted meanwhile.
func (w *nodeWorker) applyLabels(ctx context.Context, m *kubefarmv1.Machine, node *corev1.Node) error {
	pool := &kubefarmv1.NodePool{}
	switch err := w.syncer.client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Pool}, pool); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	want, err := NodeLabels(pool, m)
	if err != nil {
		// The pool's tags do not resolve: the NodePool controller
		// reports it; the pool's next change brings the next pass.
		log.FromContext(ctx).Info("not labelling the node: its tags do not resolve", "node", node.Name, "error", err.Error())
		return nil
	}
	owned, err := OwnedLabels(node, FieldOwner)
	if err != nil {
		return err
	}
	if LabelsCurrent(node, owned, want) {
		return nil
	}
	apply := corev1ac.Node(node.Name).WithResourceVersion(node.ResourceVersion).WithLabels(want)
	if apply.Labels == nil {
		// No labels to own: an empty map gives up the ones owned.
		apply.Labels = map[string]string{}
	}
	ctx, cancel := context.WithTimeout(ctx, tenantTimeout)
	defer cancel()
	if _, err := w.client.CoreV1().Nodes().Apply(ctx, apply, metav1.ApplyOptions{FieldManager: FieldOwner, Force: true}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			// Gone, or changed since the watch's copy (the kubelet's
			// status updates do that): the watch brings the newer copy,
			// which enqueues the node again.
			log.FromContext(ctx).V(1).Info("the node changed while its labels were decided", "node", node.Name, "error", err.Error())
			return nil
		}
		return fmt.Errorf("applying the labels of node %s: %w", node.Name, err)
	}
	keys := slices.Sorted(maps.Keys(want))
	w.recorder.Eventf(m, nil, corev1.EventTypeNormal, ReasonNodeLabelsApplied, "Label",
		"node %s: applied the labels the kubelet may not set: [%s]", node.Name, strings.Join(keys, ", "))
	return nil
}

// liftTaint removes the network-unavailable taint when DecideTaint says
// so, with a JSON patch that tests the taint at its index before removing
// it: no other taint is dropped, and a Node that changed meanwhile fails
// the test and is decided again from the watch's newer copy.
func (w *nodeWorker) liftTaint(ctx context.Context, m *kubefarmv1.Machine, node *corev1.Node) error {
	verdict, why := DecideTaint(m.Status, node)
	if verdict != LiftTaint {
		if verdict == KeepTaint {
			// A False verdict has its Warning (NetworkUnverified) from
			// kubefarm-pxe, which received it; nothing to add here.
			log.FromContext(ctx).V(1).Info("keeping the network taint", "node", node.Name, "why", why)
		}
		return nil
	}
	i := networkTaintIndex(node)
	path := fmt.Sprintf("/spec/taints/%d", i)
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": path, "value": node.Spec.Taints[i]},
		{"op": "remove", "path": path},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, tenantTimeout)
	defer cancel()
	if _, err := w.client.CoreV1().Nodes().Patch(ctx, node.Name, types.JSONPatchType, patch,
		metav1.PatchOptions{FieldManager: FieldOwner}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("removing the network taint of node %s: %w", node.Name, err)
	}
	w.recorder.Eventf(m, nil, corev1.EventTypeNormal, ReasonNetworkTaintLifted, "Untaint",
		"lifted %s:%s from node %s: %s", nodeconfig.NetworkUnavailableTaint.Key, nodeconfig.NetworkUnavailableTaint.Effect, node.Name, why)
	return nil
}

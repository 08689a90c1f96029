package machinenode

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/conditions"
	"github.com/kubefarm/kubefarm/internal/ssa"
	"github.com/kubefarm/kubefarm/internal/tenantwatch"
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

// nodeWatch is the Node watch of one tenant: an informer of the tenant's
// Nodes feeding a queue of node names, and one worker.
type nodeWatch struct {
	tenant types.NamespacedName
	queue  workqueue.TypedRateLimitingInterface[string]
	cancel context.CancelFunc
	done   chan struct{}
}

// enqueue asks for node's Machine and Node to be brought in step; a no-op
// once the watch stops.
func (w *nodeWatch) enqueue(node string) {
	if node != "" {
		w.queue.Add(node)
	}
}

// Stop stops the watch and waits until its goroutines have returned, so
// that nothing acts for the tenant once Stop has.
func (w *nodeWatch) Stop() {
	w.cancel()
	<-w.done
}

// trimNode keeps what the decisions read: the managed fields of this
// controller only (for the labels it owns) and no image list, which is
// most of a Node's status.
func trimNode(o any) (any, error) {
	if n, ok := o.(*corev1.Node); ok {
		n.ManagedFields = slices.DeleteFunc(n.ManagedFields, func(mf metav1.ManagedFieldsEntry) bool {
			return mf.Manager != FieldOwner
		})
		n.Status.Images = nil
	}
	return o, nil
}

// startNodeWatch starts the Node watch of tenant tc through cfg, in the
// background (a tenantwatch.StartFunc).
func (s *syncer) startNodeWatch(tc *kubefarmv1.TenantCluster, cfg *rest.Config) (*nodeWatch, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("making the client of tenant %s/%s: %w", tc.Namespace, tc.Name, err)
	}
	informer := coreinformers.NewNodeInformer(cs, 0, cache.Indexers{})
	if err := informer.SetTransform(trimNode); err != nil {
		return nil, err
	}
	key := types.NamespacedName{Namespace: tc.Namespace, Name: tc.Name}
	logger := log.Log.WithName("machinenode").WithValues("tenantCluster", key.String())
	if err := tenantwatch.LogWatchErrors(informer, logger, "Nodes"); err != nil {
		return nil, err
	}
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	enqueue := func(o any) {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if n, ok := o.(*corev1.Node); ok {
			queue.Add(n.Name)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, o any) { enqueue(o) },
		DeleteFunc: enqueue,
	}); err != nil {
		return nil, err
	}

	ctx, cancel := context.WithCancel(log.IntoContext(context.Background(), logger))
	w := &nodeWatch{tenant: key, queue: queue, cancel: cancel, done: make(chan struct{})}
	worker := &nodeWorker{syncer: s, tenant: tc.DeepCopy(), client: cs, store: informer.GetStore(), queue: queue}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); informer.RunWithContext(ctx) }()
	go func() {
		defer wg.Done()
		// Not before the Node list is complete: an absent Node is
		// NodeNotFound only then.
		if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			return
		}
		if err := worker.enqueueMachines(ctx); err != nil {
			logger.Error(err, "listing the tenant's Machines; their nodes are synced as they change")
		}
		worker.run(ctx)
	}()
	go func() {
		<-ctx.Done()
		queue.ShutDown()
		wg.Wait()
		close(w.done)
	}()
	return w, nil
}

type nodeWorker struct {
	*syncer
	// tenant is the TenantCluster as it was when the watch started; only
	// its identity is used.
	tenant *kubefarmv1.TenantCluster
	client kubernetes.Interface
	store  cache.Store
	queue  workqueue.TypedRateLimitingInterface[string]
}

func (w *nodeWorker) key() types.NamespacedName {
	return types.NamespacedName{Namespace: w.tenant.Namespace, Name: w.tenant.Name}
}

// enqueueMachines enqueues the hostname of every Machine of the tenant.
func (w *nodeWorker) enqueueMachines(ctx context.Context) error {
	list := &kubefarmv1.MachineList{}
	if err := w.syncer.client.List(ctx, list, client.InNamespace(w.tenant.Namespace)); err != nil {
		return err
	}
	for _, m := range list.Items {
		if m.Spec.Cluster == w.tenant.Name && m.Spec.Hostname != "" {
			w.queue.Add(m.Spec.Hostname)
		}
	}
	return nil
}

func (w *nodeWorker) run(ctx context.Context) {
	tenantwatch.Drain(ctx, w.queue, "a node and its Machine", w.handle)
}

// handle brings the Machine of node name and the Node in step: NodeReady
// first (it is the admin cluster's and needs nothing of the Node), then the
// labels, then the taint, so that no pod is scheduled onto the node before
// it carries its role labels.
func (w *nodeWorker) handle(ctx context.Context, name string) error {
	machines, err := tenantwatch.MachinesOfNode(ctx, w.syncer.client, w.key(), name)
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

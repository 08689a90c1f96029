package csrapproval

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	certinformers "k8s.io/client-go/informers/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/tenantwatch"
)

// FieldOwner is the field manager of the approvals the controller writes in
// the tenants.
const FieldOwner = "kubefarm-csrapproval"

// approvalTimeout bounds one approval request to a tenant, so that a tenant
// that stops answering holds its own worker for this long at most (and
// never anyone else's).
const approvalTimeout = 30 * time.Second

// kubeletServingSelector is the only kind of request the watch asks for:
// the tenant's API server filters the rest out, so the manager neither
// receives nor keeps client-certificate requests, which are most of them.
var kubeletServingSelector = "spec.signerName=" + certificatesv1.KubeletServingSignerName

// tenantWatch is the CSR watch of one tenant: an informer of the tenant's
// kubelet-serving CSRs feeding a queue of CSR names, and one worker that
// decides them in turn. One worker is enough (a tenant's nodes ask for a
// certificate about once a year each) and keeps a tenant's load on the
// manager, and the manager's on the tenant, at one request at a time. The
// queue is the tenant's own, so a tenant that is slow or unreachable holds
// up only its own requests.
type tenantWatch struct {
	tenant types.NamespacedName
	cancel context.CancelFunc
	done   chan struct{}
}

// approver is what every tenant's worker shares: the admin cluster's cache
// for the Machines, and the event recorder.
type approver struct {
	machines machineFinder
	recorder events.EventRecorder
}

// startTenantWatch starts the watch of tenant tc through cfg, in the
// background: it does not wait for the tenant to answer, so one
// unreachable tenant does not slow the start of the others (a
// tenantwatch.StartFunc). Stop it with Stop.
func (a *approver) startTenantWatch(tc *kubefarmv1.TenantCluster, cfg *rest.Config) (*tenantWatch, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("making the client of tenant %s/%s: %w", tc.Namespace, tc.Name, err)
	}
	informer := certinformers.NewFilteredCertificateSigningRequestInformer(cs, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = kubeletServingSelector })
	// Managed fields are most of a CSR after its request; nothing here
	// reads them.
	if err := informer.SetTransform(func(o any) (any, error) {
		if m, ok := o.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		return o, nil
	}); err != nil {
		return nil, err
	}
	key := types.NamespacedName{Namespace: tc.Namespace, Name: tc.Name}
	logger := log.Log.WithName("csrapproval").WithValues("tenantCluster", key.String())
	if err := tenantwatch.LogWatchErrors(informer, logger, "CertificateSigningRequests"); err != nil {
		return nil, err
	}
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	enqueue := func(o any) {
		if csr, ok := o.(*certificatesv1.CertificateSigningRequest); ok {
			queue.Add(csr.Name)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, o any) { enqueue(o) },
	}); err != nil {
		return nil, err
	}

	ctx, cancel := context.WithCancel(log.IntoContext(context.Background(), logger))
	w := &tenantWatch{tenant: key, cancel: cancel, done: make(chan struct{})}
	worker := &tenantWorker{approver: a, tenant: tc.DeepCopy(), client: cs, store: informer.GetStore(), queue: queue}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); informer.RunWithContext(ctx) }()
	go func() { defer wg.Done(); worker.run(ctx) }()
	go func() {
		<-ctx.Done()
		queue.ShutDown()
		wg.Wait()
		close(w.done)
	}()
	return w, nil
}

// Stop stops the watch and waits until its goroutines have returned, so
// that nothing approves for the tenant once Stop has.
func (w *tenantWatch) Stop() {
	w.cancel()
	<-w.done
}

type tenantWorker struct {
	*approver
	// tenant is the TenantCluster as it was when the watch started; only
	// its identity (name, namespace, UID) is used, for lookups and events.
	tenant *kubefarmv1.TenantCluster
	client kubernetes.Interface
	store  cache.Store
	queue  workqueue.TypedRateLimitingInterface[string]
}

func (w *tenantWorker) run(ctx context.Context) {
	tenantwatch.Drain(ctx, w.queue, "a CertificateSigningRequest", w.handle)
}

// handle decides the CSR called name as the watch last saw it and writes
// the decision. It logs and records the CSR's name, requester, verdict and
// reason, never its request: the PEM is the node's, and of no use to a
// reader of logs or events.
func (w *tenantWorker) handle(ctx context.Context, name string) error {
	o, ok, err := w.store.GetByKey(name)
	if err != nil || !ok {
		return err
	}
	csr := o.(*certificatesv1.CertificateSigningRequest)
	var machine *kubefarmv1.Machine
	var lookupErr error
	tenant := types.NamespacedName{Namespace: w.tenant.Namespace, Name: w.tenant.Name}
	d := Decide(csr, func(node string) (Identity, bool) {
		m, id, ok, err := w.machines.find(ctx, tenant, node)
		machine, lookupErr = m, err
		return id, ok
	})
	if lookupErr != nil {
		// No answer is not "no Machine": deny nothing on a cache error.
		return lookupErr
	}
	var condition certificatesv1.RequestConditionType
	switch d.Verdict {
	case Approve:
		condition = certificatesv1.CertificateApproved
	case Deny:
		condition = certificatesv1.CertificateDenied
	default:
		return nil
	}
	if err := w.writeDecision(ctx, csr, condition, d); err != nil {
		return err
	}
	w.record(csr, machine, d)
	log.FromContext(ctx).Info("decided a kubelet serving CertificateSigningRequest", "csr", csr.Name,
		"requester", csr.Spec.Username, "verdict", d.Verdict.String(), "reason", d.Reason, "message", d.Message)
	return nil
}

// writeDecision adds the condition through the approval subresource, on the
// resourceVersion the decision was made on: if the CSR changed meanwhile,
// the conflict sends it back to the queue and the watch's newer copy is
// decided instead.
func (w *tenantWorker) writeDecision(ctx context.Context, csr *certificatesv1.CertificateSigningRequest,
	typ certificatesv1.RequestConditionType, d Decision) error {
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: typ, Status: corev1.ConditionTrue, Reason: d.Reason, Message: d.Message,
		LastUpdateTime: metav1.Now(),
	})
	ctx, cancel := context.WithTimeout(ctx, approvalTimeout)
	defer cancel()
	_, err := w.client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr,
		metav1.UpdateOptions{FieldManager: FieldOwner})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		return errors.New("the CertificateSigningRequest changed while it was decided")
	case err != nil:
		return fmt.Errorf("writing %s: %w", typ, err)
	}
	return nil
}

// record leaves an Event on the requester's Machine in the admin cluster,
// where the operator looks at a machine's story; on the TenantCluster when
// the requester is no Machine (or an ambiguous one).
func (w *tenantWorker) record(csr *certificatesv1.CertificateSigningRequest, machine *kubefarmv1.Machine, d Decision) {
	var regarding runtime.Object = w.tenant
	if machine != nil {
		regarding = machine
	}
	typ, action, verb := corev1.EventTypeNormal, "Approve", "approved"
	if d.Verdict == Deny {
		typ, action, verb = corev1.EventTypeWarning, "Deny", "denied"
	}
	w.recorder.Eventf(regarding, nil, typ, d.Reason, action,
		"%s kubelet serving CSR %s of %s: %s", verb, csr.Name, csr.Spec.Username, d.Message)
}

package csrapproval

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"

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
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
	"github.com/kubefarm/kubefarm/internal/tenantwatch"
)

// FieldOwner is the field manager of the approvals the controller writes in
// the tenants.
const FieldOwner = "kubefarm-csrapproval"

// approvalTimeout bounds one approval request to a tenant, so that a tenant
// that stops answering holds its own worker for this long at most (and
// never anyone else's).
const approvalTimeout = 30 * time.Second

// The watches ask for two kinds of request only, each by its own field
// selector (a field selector cannot say "either"): kubelet serving
// requests, and kubelet client requests, among which the joins. The
// tenant's API server filters the rest out, so the manager neither receives
// nor keeps other signers' requests.
var (
	kubeletServingSelector = "spec.signerName=" + certificatesv1.KubeletServingSignerName
	kubeletClientSelector  = "spec.signerName=" + certificatesv1.KubeAPIServerClientKubeletSignerName
)

// tenantWatch is the CSR watch of one tenant: two informers (serving and
// client requests) feeding one queue of CSR names, and one worker that
// decides them in turn. One worker is enough (a tenant's nodes ask for a
// certificate about once a year each, and join once per boot) and keeps a
// tenant's load on the manager, and the manager's on the tenant, at one
// request at a time. The queue is the tenant's own, so a tenant that is
// slow or unreachable holds up only its own requests.
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
	key := types.NamespacedName{Namespace: tc.Namespace, Name: tc.Name}
	logger := log.Log.WithName("csrapproval").WithValues("tenantCluster", key.String())
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	serving, err := csrInformer(cs, kubeletServingSelector, queue, logger, "kubelet serving CertificateSigningRequests")
	if err != nil {
		queue.ShutDown()
		return nil, err
	}
	clients, err := csrInformer(cs, kubeletClientSelector, queue, logger, "kubelet client CertificateSigningRequests")
	if err != nil {
		queue.ShutDown()
		return nil, err
	}

	ctx, cancel := context.WithCancel(log.IntoContext(context.Background(), logger))
	w := &tenantWatch{tenant: key, cancel: cancel, done: make(chan struct{})}
	worker := &tenantWorker{approver: a, tenant: tc.DeepCopy(), client: cs,
		serving: serving.GetStore(), clients: clients.GetStore(), queue: queue}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); serving.RunWithContext(ctx) }()
	go func() { defer wg.Done(); clients.RunWithContext(ctx) }()
	go func() { defer wg.Done(); worker.run(ctx) }()
	go func() {
		<-ctx.Done()
		queue.ShutDown()
		wg.Wait()
		close(w.done)
	}()
	return w, nil
}

// csrInformer is an informer of the tenant's CSRs that match selector,
// adding the name of every one it sees to queue.
func csrInformer(cs kubernetes.Interface, selector string, queue workqueue.TypedInterface[string],
	logger logr.Logger, what string) (cache.SharedIndexInformer, error) {
	informer := certinformers.NewFilteredCertificateSigningRequestInformer(cs, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = selector })
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
	if err := tenantwatch.LogWatchErrors(informer, logger, what); err != nil {
		return nil, err
	}
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
	return informer, nil
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
	// serving and clients are the two informers' stores; a CSR name is in
	// one of them (a CSR's signer is immutable).
	serving, clients cache.Store
	queue            workqueue.TypedRateLimitingInterface[string]
}

func (w *tenantWorker) run(ctx context.Context) {
	tenantwatch.Drain(ctx, w.queue, "a CertificateSigningRequest", w.handle)
}

// handle decides the CSR called name as the watches last saw it and writes
// the decision. It logs and records the CSR's name, requester, verdict and
// reason, never its request: the PEM is the node's, and of no use to a
// reader of logs or events.
func (w *tenantWorker) handle(ctx context.Context, name string) error {
	if o, ok, err := w.serving.GetByKey(name); err != nil || ok {
		if err != nil {
			return err
		}
		return w.handleServing(ctx, o.(*certificatesv1.CertificateSigningRequest))
	}
	o, ok, err := w.clients.GetByKey(name)
	if err != nil || !ok {
		return err
	}
	return w.handleJoin(ctx, o.(*certificatesv1.CertificateSigningRequest))
}

func (w *tenantWorker) handleServing(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) error {
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
	return w.apply(ctx, csr, machine, d, "kubelet serving")
}

// handleJoin decides a kubelet client CSR (DecideJoin), and deletes the
// bootstrap token of every join it approved: on approval, and again
// whenever the watch sees the approved request while its token is still
// there (the deletion failed, or the manager stopped in between), so that
// a token gets one certificate however the manager fares.
func (w *tenantWorker) handleJoin(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) error {
	if id, ok := JoinTokenID(csr); ok && bootstraptoken.ValidID(id) && approvedJoin(csr) {
		return w.deleteToken(ctx, csr, id, nil)
	}
	var (
		machine   *kubefarmv1.Machine
		token     *corev1.Secret
		lookupErr error
	)
	d := DecideJoin(csr, w.tenant.Name, time.Now(), JoinLookup{
		Token: func(id string) (*corev1.Secret, bool) {
			token, lookupErr = w.getToken(ctx, id)
			return token, token != nil
		},
		Machine: func(name string) (*kubefarmv1.Machine, bool) {
			m := &kubefarmv1.Machine{}
			err := w.machines.reader.Get(ctx, types.NamespacedName{Namespace: w.tenant.Namespace, Name: name}, m)
			switch {
			case apierrors.IsNotFound(err):
				return nil, false
			case err != nil:
				lookupErr = fmt.Errorf("reading Machine %s/%s: %w", w.tenant.Namespace, name, err)
				return nil, false
			}
			if m.Spec.Cluster == w.tenant.Name {
				machine = m
			}
			return m, true
		},
	})
	if lookupErr != nil {
		// No answer is not "no token" or "no Machine": deny nothing on
		// a failed read.
		return lookupErr
	}
	if err := w.apply(ctx, csr, machine, d, "kubelet client"); err != nil || d.Verdict != Approve {
		return err
	}
	id, _ := JoinTokenID(csr)
	return w.deleteToken(ctx, csr, id, &token.UID)
}

// approvedJoin says whether csr carries the manager's own join approval.
func approvedJoin(csr *certificatesv1.CertificateSigningRequest) bool {
	return slices.ContainsFunc(csr.Status.Conditions, func(c certificatesv1.CertificateSigningRequestCondition) bool {
		return c.Type == certificatesv1.CertificateApproved && c.Reason == ReasonJoinApproved
	})
}

// getToken reads the tenant's Secret of token id; nil, nil when there is
// none. It is one read per join, from the API server: caching kube-system's
// Secrets would put every credential of the namespace in the manager's
// memory.
func (w *tenantWorker) getToken(ctx context.Context, id string) (*corev1.Secret, error) {
	ctx, cancel := context.WithTimeout(ctx, approvalTimeout)
	defer cancel()
	s, err := w.client.CoreV1().Secrets(bootstraptoken.Namespace).Get(ctx, bootstraptoken.SecretName(id), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s/%s: %w", bootstraptoken.Namespace, bootstraptoken.SecretName(id), err)
	}
	return s, nil
}

// deleteToken deletes the Secret of token id, used by csr. With uid, only
// that Secret (the one the approval was decided on). Without, the Secret is
// read first and deleted only if it is older than csr: a Secret made after
// the request is a new token that happens to have the id, not the one used.
// The API server caches a successful token authentication for ten seconds,
// so the token works that much longer for whoever used it last.
func (w *tenantWorker) deleteToken(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, id string, uid *types.UID) error {
	if uid == nil {
		s, err := w.getToken(ctx, id)
		if err != nil || s == nil || s.CreationTimestamp.After(csr.CreationTimestamp.Time) {
			return err
		}
		uid = &s.UID
	}
	ctx, cancel := context.WithTimeout(ctx, approvalTimeout)
	defer cancel()
	err := w.client.CoreV1().Secrets(bootstraptoken.Namespace).Delete(ctx, bootstraptoken.SecretName(id),
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: uid}})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil
	case err != nil:
		return fmt.Errorf("deleting used bootstrap token Secret %s/%s of CertificateSigningRequest %s: %w",
			bootstraptoken.Namespace, bootstraptoken.SecretName(id), csr.Name, err)
	}
	log.FromContext(ctx).Info("deleted a used bootstrap token", "csr", csr.Name, "token", id)
	return nil
}

// apply writes d (if it is a verdict) on csr, then records and logs it.
// what says which kind of request it is, for people.
func (w *tenantWorker) apply(ctx context.Context, csr *certificatesv1.CertificateSigningRequest,
	machine *kubefarmv1.Machine, d Decision, what string) error {
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
	w.record(csr, machine, d, what)
	log.FromContext(ctx).Info("decided a "+what+" CertificateSigningRequest", "csr", csr.Name,
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
// the requester is no Machine of the tenant (or an ambiguous one).
func (w *tenantWorker) record(csr *certificatesv1.CertificateSigningRequest, machine *kubefarmv1.Machine, d Decision, what string) {
	var regarding runtime.Object = w.tenant
	if machine != nil {
		regarding = machine
	}
	typ, action, verb := corev1.EventTypeNormal, "Approve", "approved"
	if d.Verdict == Deny {
		typ, action, verb = corev1.EventTypeWarning, "Deny", "denied"
	}
	w.recorder.Eventf(regarding, nil, typ, d.Reason, action,
		"%s %s CSR %s of %s: %s", verb, what, csr.Name, csr.Spec.Username, d.Message)
}

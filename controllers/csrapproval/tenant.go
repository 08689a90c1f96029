package csrapproval

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
	"github.com/kubefarm/kubefarm/internal/tenantcache"
)

// FieldOwner is the field manager of the approvals the controller writes in
// the tenants.
const FieldOwner = "kubefarm-csrapproval"

// approvalTimeout bounds one approval request to a tenant, so that a tenant
// that stops answering holds its own worker for this long at most (and
// never anyone else's).
const approvalTimeout = 30 * time.Second

// The watch asks for two kinds of request only, each by its own field
// selector (tenantcache.CSRs): kubelet serving requests, and kubelet client
// requests, among which the joins. The tenant's API server filters the
// rest out, so the manager neither receives nor keeps other signers'
// requests.
var (
	servingCSRs = tenantcache.CSRs(certificatesv1.KubeletServingSignerName)
	clientCSRs  = tenantcache.CSRs(certificatesv1.KubeAPIServerClientKubeletSignerName)
)

// approver is what every tenant's worker shares: the admin cluster's cache
// for the Machines, and the event recorder.
type approver struct {
	machines machineFinder
	recorder events.EventRecorder
}

// watch is the approval's tenantcache.Watch: both kinds of request feed
// one queue of CSR names per tenant, which one worker decides in turn.
func (a *approver) watch() tenantcache.Watch {
	return tenantcache.Watch{
		Name: "csrapproval", What: "a CertificateSigningRequest",
		Sources: []tenantcache.Source{servingCSRs, clientCSRs},
		Handle: func(ctx context.Context, t *tenantcache.Tenant, name string) error {
			w, err := a.worker(t)
			if err != nil {
				return err
			}
			return w.handle(ctx, name)
		},
	}
}

// worker is the view of tenant t one CSR is decided with.
func (a *approver) worker(t *tenantcache.Tenant) (*tenantWorker, error) {
	cs, err := t.Client(FieldOwner)
	if err != nil {
		return nil, err
	}
	serving, err := t.Store(servingCSRs)
	if err != nil {
		return nil, err
	}
	clients, err := t.Store(clientCSRs)
	if err != nil {
		return nil, err
	}
	return &tenantWorker{approver: a, tenant: t.Object(), client: cs, serving: serving, clients: clients}, nil
}

type tenantWorker struct {
	*approver
	// tenant is the TenantCluster as it was when the connection started;
	// only its identity (name, namespace, UID) is used, for lookups and
	// events.
	tenant *kubefarmv1.TenantCluster
	client kubernetes.Interface
	// serving and clients are the two informers' stores; a CSR name is in
	// one of them (a CSR's signer is immutable).
	serving, clients cache.Store
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
		return c.Type == certificatesv1.CertificateApproved && c.Reason == kubefarmv1.ReasonCSRJoinApproved
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

package tenantcluster

import (
	"context"
	"fmt"
	"strings"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/upgradeplan"
)

// scope is one pass over one TenantCluster. Each phase reads what the
// earlier ones left here and adds its own: so every object is built once
// per pass, and what a later phase derives from it (the pods' checksums
// from the ConfigMap, the add-ons from the Service) is derived from the
// object as applied. It also carries what the phases observed, from which
// Reconcile's deferred status write decides the summary conditions.
type scope struct {
	tc *v1alpha1.TenantCluster
	// cluster is the resolved spec, with the address the admin cluster
	// published for the API server Service fed back in.
	cluster *desired.Cluster
	// service is the API server Service as applied, and endpoint
	// status.endpoint derived from it ("" while unknown).
	service  *corev1.Service
	endpoint string
	// certificates are the tenant's Certificates as built; their Secrets
	// are read back into secrets once all are issued.
	certificates []*cmapi.Certificate
	secrets      desired.SecretData
	// config is the control plane ConfigMap as applied.
	config *corev1.ConfigMap
	// encryptionSecret is the encryption key Secret as read, and
	// encryptionKeys its content.
	encryptionSecret *corev1.Secret
	encryptionKeys   desired.EncryptionKeys
	// caTrust are the trust Secrets of the CAs ever rotated, as read
	// (and synced) this pass.
	caTrust map[desired.PKIRole]*corev1.Secret
	// etcd is the live StatefulSet, as applied.
	etcd *appsv1.StatefulSet
	// apiServer and the followers are the live Deployments, as applied.
	apiServer *appsv1.Deployment
	followers []*appsv1.Deployment
	// etcdVoting is how many etcd members vote, as the membership step of
	// this pass left them; 0 when no step read etcd.
	etcdVoting int32
	// version is planVersion's decision, and apiServerBefore the version
	// the API servers' template ran before this pass ("" when none).
	version         upgradeplan.Decision
	apiServerBefore string

	// conditions are the ones the phases observed this pass, in phase
	// order (CertificatesReady, EtcdReady, APIServerReady, AddonsReady):
	// Ready's inputs. notReady is what else holds Ready back.
	conditions []metav1.Condition
	notReady   []string
	// invalidSpec and waitingFor end the pass early, without an error.
	invalidSpec error
	waitingFor  waitReason
}

// waitReason is why a phase ended the pass before the last phase, because
// something outside the controller must happen first; its arrival (a
// watch event) brings the next pass.
type waitReason string

const (
	// waitingForCertificates: the workloads are left alone while
	// certificates are issued.
	waitingForCertificates waitReason = "Certificates"
	// waitingForEtcd: the first API server is created only once etcd is
	// ready.
	waitingForEtcd waitReason = "Etcd"
	// waitingForRestore: no etcd member starts before a restore's check
	// passed and its keys are the tenant's.
	waitingForRestore waitReason = "Restore"
)

// getLive reads an object from the cache; found is false when it does not
// exist.
func (r *Reconciler) getLive(ctx context.Context, key client.ObjectKey, obj client.Object) (found bool, err error) {
	err = r.Client.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// observe sets a condition a phase decided, and keeps it as an input of
// Ready; a later observation of the same type replaces it.
func (s *scope) observe(r *Reconciler, c metav1.Condition) {
	r.setCondition(s.tc, c)
	for i := range s.conditions {
		if s.conditions[i].Type == c.Type {
			s.conditions[i] = c
			return
		}
	}
	s.conditions = append(s.conditions, c)
}

// observed is the condition of a type observed this pass, or nil.
func (s *scope) observed(typ string) *metav1.Condition {
	for i := range s.conditions {
		if s.conditions[i].Type == typ {
			return &s.conditions[i]
		}
	}
	return nil
}

func (s *scope) isTrue(typ string) bool {
	c := s.observed(typ)
	return c != nil && c.Status == metav1.ConditionTrue
}

func (s *scope) stopped() bool { return s.invalidSpec != nil || s.waitingFor != "" }

func (s *scope) key() types.NamespacedName { return client.ObjectKeyFromObject(s.tc) }

// phase is one step of a pass. It returns a requeue wish and an error; an
// error ends the pass, and a phase that must wait ends it by setting
// scope.waitingFor (or invalidSpec).
type phase func(context.Context, *scope) (ctrl.Result, error)

// phases are the steps of a pass, in the order they must happen.
func (r *Reconciler) phases() []phase {
	return []phase{
		r.resolve,                     // the spec, with the published address; stops on an invalid spec
		r.reconcileServices,           // before the PKI: a load balancer's address is a SAN
		r.readCATrust,                 // the CA rotation records, which decide the CAs' generations
		r.reconcilePKI,                // Issuers, Certificates, their Secrets; stops while issuing
		r.syncCATrust,                 // the trust bundles, from the CA Secrets just read
		r.reconcileConfig,             // the control plane ConfigMap and the kubeconfigs
		r.reconcileRestore,            // a restore's check, whose keys become the tenant's; stops until it passed
		r.reconcileEncryption,         // the encryption key Secret and the configuration rendered from it
		r.reconcileProvidedKeys,       // a restore's keys supplied by hand, tried on the snapshot; stops until they read it
		r.reconcileEtcd,               // etcd, with its initial cluster state decided
		r.reconcileBackup,             // the etcd backup CronJob and its runs' results
		r.planVersion,                 // the version this pass rolls to: spec.version, an upgrade's next step, or held
		r.reconcileAPIServer,          // created once etcd is ready; stops until then
		r.reconcileTenant,             // RBAC and add-ons inside the tenant, once it answers
		r.reconcileEncryptionRotation, // the next step of a key rotation, once the API servers run the current keys
		r.reconcilePDBs,               // disruption budgets
		r.reconcileFollowers,          // controller-manager and scheduler, behind the API servers in an upgrade
		r.reconcileCARotation,         // the next step of a CA rotation, once the control plane runs the current one
		r.observeRollout,              // the endpoint still pending, observedVersion
	}
}

// runPhases runs the phases in order until one fails or stops the pass,
// and returns the soonest requeue any of them asked for.
func (r *Reconciler) runPhases(ctx context.Context, s *scope) (ctrl.Result, error) {
	var result ctrl.Result
	for _, p := range r.phases() {
		res, err := p(ctx, s)
		if err != nil {
			return ctrl.Result{}, err
		}
		result = soonest(result, res)
		if s.stopped() {
			break
		}
	}
	return result, nil
}

// soonest is the requeue that comes first, zero meaning none.
func soonest(a, b ctrl.Result) ctrl.Result {
	if a.RequeueAfter == 0 || (b.RequeueAfter != 0 && b.RequeueAfter < a.RequeueAfter) {
		return b
	}
	return a
}

// resolve resolves the spec twice: first to validate it and learn the
// Service's name, then with the address the admin cluster published for
// that Service.
func (r *Reconciler) resolve(ctx context.Context, s *scope) (ctrl.Result, error) {
	c, err := desired.Resolve(s.tc, r.options(""))
	if err != nil {
		// The spec is wrong, not the world: retrying cannot help, and the
		// watch on the TenantCluster brings the next pass when it is edited.
		s.invalidSpec = err
		log.FromContext(ctx).Info("invalid spec", "error", err.Error())
		return ctrl.Result{}, nil
	}
	svc := &corev1.Service{}
	if found, err := r.getLive(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.APIServerServiceName()}, svc); err != nil {
		return ctrl.Result{}, err
	} else if !found {
		svc = nil
	}
	nodeAddr := ""
	if c.ExposeType == v1alpha1.ExposeNodePort && s.tc.Spec.APIServer.Expose.ExternalIP == "" {
		nodes := &corev1.NodeList{}
		if err := r.APIReader.List(ctx, nodes); err != nil {
			return ctrl.Result{}, fmt.Errorf("listing nodes for the NodePort endpoint: %w", err)
		}
		nodeAddr = nodeAddress(nodes.Items)
	}
	if s.cluster, err = desired.Resolve(s.tc, r.options(observedAddress(svc, nodeAddr))); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// reconcileServices applies the Services first: a LoadBalancer's address
// ends up in the serving certificate, so asking for it before issuing saves
// one reissue and one rollout.
func (r *Reconciler) reconcileServices(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.cluster
	if err := r.apply(ctx, s.tc, desired.EtcdService(c), nil); err != nil {
		return ctrl.Result{}, err
	}
	s.service = &corev1.Service{}
	if err := r.apply(ctx, s.tc, desired.APIServerService(c), s.service); err != nil {
		return ctrl.Result{}, err
	}
	s.endpoint = endpointURL(c.ExternalAddress, endpointPort(s.service, c.ServicePort))
	s.tc.Status.Endpoint = s.endpoint
	return ctrl.Result{}, nil
}

// reconcilePKI applies the Issuers and Certificates and, once every
// Certificate is issued, reads their Secrets. Until then the workloads are
// left as they are: new pods would only wait for their Secret volumes, and
// would roll again as each certificate arrives. What already runs (a
// reissue after a SAN change) keeps running and is reported as it is.
func (r *Reconciler) reconcilePKI(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.cluster
	for _, is := range desired.Issuers(c) {
		if err := r.apply(ctx, s.tc, is, nil); err != nil {
			return ctrl.Result{}, err
		}
	}
	s.certificates = desired.Certificates(c)
	certs := make([]namedCertificate, 0, len(s.certificates))
	for _, want := range s.certificates {
		got := &cmapi.Certificate{}
		if err := r.apply(ctx, s.tc, want, got); err != nil {
			return ctrl.Result{}, err
		}
		certs = append(certs, namedCertificate{name: want.Name, cert: got})
	}
	certCond, ready := certificatesCondition(certs)
	s.observe(r, certCond)
	if ready {
		secrets, missing, err := r.readSecrets(ctx, s)
		if err != nil {
			return ctrl.Result{}, err
		}
		if len(missing) > 0 {
			// Issued but not yet in the cache; the Secret's arrival wakes us.
			ready = false
			s.observe(r, notReady(v1alpha1.ConditionCertificatesReady, v1alpha1.ReasonIssuing, "waiting for Secrets: "+strings.Join(missing, ", ")))
		}
		s.secrets = secrets
	}
	if ready {
		return ctrl.Result{}, nil
	}
	etcdCond, apiCond, err := r.observeWhileIssuing(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	s.observe(r, etcdCond)
	s.observe(r, apiCond)
	s.waitingFor = waitingForCertificates
	return ctrl.Result{}, nil
}

// observeWhileIssuing reports etcd and the API server from the cache while
// certificates are being issued: WaitingForCertificates when they were never
// deployed, their observed readiness otherwise.
func (r *Reconciler) observeWhileIssuing(ctx context.Context, c *desired.Cluster) (etcd, api metav1.Condition, err error) {
	waiting := "waiting for certificates"
	etcd = notReady(v1alpha1.ConditionEtcdReady, v1alpha1.ReasonWaitingForCertificates, waiting)
	api = notReady(v1alpha1.ConditionAPIServerReady, v1alpha1.ReasonWaitingForCertificates, waiting)
	sts := &appsv1.StatefulSet{}
	found, err := r.getLive(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.EtcdServiceName()}, sts)
	if err != nil {
		return etcd, api, err
	}
	if found {
		etcd, _ = etcdCondition(sts)
	}
	d := &appsv1.Deployment{}
	if found, err = r.getLive(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.APIServerServiceName()}, d); err != nil {
		return etcd, api, err
	}
	if found {
		api, _ = apiServerCondition(d)
	}
	return etcd, api, nil
}

// reconcileConfig applies the control plane ConfigMap, which the workloads'
// checksums then hash as applied, and the kubeconfigs.
func (r *Reconciler) reconcileConfig(ctx context.Context, s *scope) (ctrl.Result, error) {
	desired, err := desired.ConfigMap(s.cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	s.config = &corev1.ConfigMap{}
	if err := r.apply(ctx, s.tc, desired, s.config); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.applyKubeconfigs(ctx, s)
}

// reconcileEtcd applies the etcd state ConfigMap, with the initial cluster
// state decided from what exists (see decideEtcdState), and then the etcd
// StatefulSet, whose members read it when they start.
func (r *Reconciler) reconcileEtcd(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.cluster
	current, decided, volumes, err := r.observeEtcdState(ctx, s, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	// A membership change sets the counts the ConfigMap and the
	// StatefulSet are built with: the ConfigMap first, so that a member a
	// step added finds the initial cluster listing it when its pod starts.
	result, err := r.reconcileEtcdMembers(ctx, s, current, decided)
	if err != nil {
		return ctrl.Result{}, err
	}
	state, err := desired.EtcdStateConfigMap(c, decided)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.apply(ctx, s.tc, state, &corev1.ConfigMap{}); err != nil {
		return ctrl.Result{}, err
	}
	if c.RestoreFrom != nil && decided == desired.EtcdClusterExisting {
		// Restoring is for the bootstrap only. Once etcd exists the
		// members drop the restore (one rolling restart), so that a
		// member recreated later never reads the snapshot and the pods no
		// longer need its claim.
		if current == nil {
			r.Recorder.Eventf(s.tc, nil, corev1.EventTypeWarning, "RestoreSkipped", "Restore",
				"spec.etcd.restoreFrom is not restored: %d etcd volume claims of an earlier TenantCluster %s exist and are used instead",
				volumes, c.Name)
		}
		held := *c
		held.RestoreFrom = nil
		c = &held
	}
	desired, err := desired.EtcdStatefulSet(c, s.secrets)
	if err != nil {
		return ctrl.Result{}, err
	}
	live := &appsv1.StatefulSet{}
	if err := r.apply(ctx, s.tc, desired, live); err != nil {
		return ctrl.Result{}, err
	}
	s.etcd = live
	s.observe(r, etcdReadyDuringScaling(s, c, live))
	return result, nil
}

// observeEtcdState reads the etcd StatefulSet (current, nil when there is
// none) and decides the initial cluster state its members start with;
// volumes is how many etcd volume claims exist when there is no
// StatefulSet (0 otherwise: not read).
func (r *Reconciler) observeEtcdState(ctx context.Context, s *scope, c *desired.Cluster) (current *appsv1.StatefulSet, decided desired.EtcdClusterState, volumes int, err error) {
	sts := &appsv1.StatefulSet{}
	if found, err := r.getLive(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.EtcdServiceName()}, sts); err != nil {
		return nil, "", 0, err
	} else if found {
		current = sts
	}
	// The state ConfigMap is not in the manager's cache (no ConfigMap
	// is); it is read directly, and only when the StatefulSet does not
	// settle the question: once a member is ready the answer is
	// "existing" whatever the ConfigMap says.
	var currentState *corev1.ConfigMap
	if current == nil || current.Status.ReadyReplicas == 0 {
		cm := &corev1.ConfigMap{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.EtcdStateConfigMapName()}, cm)
		switch {
		case err == nil:
			currentState = cm
		case !apierrors.IsNotFound(err):
			return nil, "", 0, err
		}
	}
	if current == nil {
		// Only worth a (direct, uncached) read when there is no StatefulSet
		// to tell the story.
		pvcs, err := r.etcdVolumes(ctx, s.tc)
		if err != nil {
			return nil, "", 0, err
		}
		volumes = len(pvcs)
	}
	return current, decideEtcdState(current, currentState, volumes), volumes, nil
}

// etcdReadyDuringScaling is the EtcdReady condition of live, which
// counts as ready during a membership change while a quorum of the
// voting members is.
func etcdReadyDuringScaling(s *scope, c *desired.Cluster, live *appsv1.StatefulSet) metav1.Condition {
	cond, _ := etcdCondition(live)
	if cond.Status != metav1.ConditionTrue && meta.IsStatusConditionTrue(s.tc.Status.Conditions, v1alpha1.ConditionEtcdScaling) &&
		s.etcdVoting > 0 && live.Status.ReadyReplicas >= s.etcdVoting/2+1 {
		// A member a step just added is not ready for a few seconds;
		// etcd serves throughout on a quorum of its voting members (a
		// learner is none), and so does the tenant.
		cond = metav1.Condition{
			Type: v1alpha1.ConditionEtcdReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonMembersReady,
			Message: fmt.Sprintf("%d/%d etcd members ready, a quorum of %d voting (membership change in progress)",
				live.Status.ReadyReplicas, c.EtcdMembers, s.etcdVoting),
		}
	}
	return cond
}

// reconcileAPIServer applies the API servers. A first API server started
// before etcd answers exits, and the kubelet's restart back-off then
// outlasts etcd's start (Ready took 27 s instead of 10 s on the e2e
// cluster), so the control plane is first created only once etcd is ready.
// An existing one is always kept up to date.
func (r *Reconciler) reconcileAPIServer(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.cluster
	if !s.isTrue(v1alpha1.ConditionEtcdReady) {
		found, err := r.getLive(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.APIServerServiceName()}, &appsv1.Deployment{})
		if err != nil {
			return ctrl.Result{}, err
		}
		if !found {
			s.observe(r, notReady(v1alpha1.ConditionAPIServerReady, v1alpha1.ReasonWaitingForEtcd, "created once etcd is ready"))
			s.waitingFor = waitingForEtcd
			return ctrl.Result{}, nil
		}
	}
	desired, err := desired.APIServerDeployment(c, s.config, s.secrets)
	if err != nil {
		return ctrl.Result{}, err
	}
	s.apiServer = &appsv1.Deployment{}
	if err := r.apply(ctx, s.tc, desired, s.apiServer); err != nil {
		return ctrl.Result{}, err
	}
	r.recordStepStarted(s)
	cond, _ := apiServerCondition(s.apiServer)
	s.observe(r, cond)
	return ctrl.Result{}, nil
}

// reconcileTenant writes the tenant's own RBAC and add-ons once its API
// server answers: without them the admin kubeconfig can do nothing and no
// node can join, so Ready waits for them. They are applied again every
// AddonsResync, since nothing in the admin cluster notices a change inside
// the tenant.
func (r *Reconciler) reconcileTenant(ctx context.Context, s *scope) (ctrl.Result, error) {
	if !s.isTrue(v1alpha1.ConditionAPIServerReady) {
		s.observe(r, addonsWaitingForAPIServer())
		return ctrl.Result{}, nil
	}
	logger := log.FromContext(ctx)
	cond, rbacApplied := r.reconcileTenantObjects(ctx, s)
	s.observe(r, cond)
	switch {
	case !rbacApplied:
		logger.Info("tenant RBAC not applied yet", "error", cond.Message)
		return ctrl.Result{RequeueAfter: tenantRetry}, nil
	case cond.Status != metav1.ConditionTrue && cond.Reason == v1alpha1.ReasonApplyFailed:
		logger.Info("tenant add-ons not applied", "error", cond.Message)
		return ctrl.Result{RequeueAfter: tenantRetry}, nil
	}
	return ctrl.Result{RequeueAfter: r.addonsResync()}, nil
}

// reconcilePDBs applies the disruption budgets the builder wants and deletes
// the ones it no longer wants (a component scaled down to one replica),
// which would otherwise block every drain of that replica's node.
func (r *Reconciler) reconcilePDBs(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.cluster
	wanted := map[string]bool{}
	for _, pdb := range desired.PodDisruptionBudgets(c) {
		wanted[pdb.Name] = true
		if err := r.apply(ctx, s.tc, pdb, nil); err != nil {
			return ctrl.Result{}, err
		}
	}
	for _, name := range []string{c.EtcdServiceName(), c.APIServerServiceName()} {
		if wanted[name] {
			continue
		}
		pdb := &policyv1.PodDisruptionBudget{}
		found, err := r.getLive(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, pdb)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !found || !metav1.IsControlledBy(pdb, s.tc) {
			continue
		}
		if err := r.Client.Delete(ctx, pdb, client.Preconditions{UID: &pdb.UID}); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

package desired

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Replicas of the leader-elected components: one works, the other takes over
// within a lease period if its node fails.
const leaderElectedReplicas int32 = 2

var (
	deploymentMeta  = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	statefulSetMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}
	serviceMeta     = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
)

func certAndKey(role PKIRole) secretMount {
	return secretMount{role: role, keys: []string{secretCertKey, secretPrivateKeyKey}}
}

func certOnly(role PKIRole) secretMount {
	return secretMount{role: role, keys: []string{secretCertKey}}
}

// kubeconfigMounts are a client certificate used through a file-based
// kubeconfig and the cluster CA's trust, which verifies the API server.
// Not the client Secret's ca.crt, its issuer: while the cluster CA rotates
// the client certificates move to the new CA before the API server's
// serving certificate does (docs/pki.md), and the two differ.
func kubeconfigMounts(role PKIRole) []secretMount {
	return []secretMount{certAndKey(role), certOnly(RoleCA)}
}

// EtcdService builds the headless Service that gives each etcd member its
// stable name <pod>.<service>.<namespace>.svc. It publishes not-ready
// addresses: members must find each other (and pass etcd's peer
// certificate check by reverse lookup) before any of them is ready, because
// readiness needs quorum.
func EtcdService(c *Cluster) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   serviceMeta,
		ObjectMeta: metav1.ObjectMeta{Name: c.EtcdServiceName(), Namespace: c.Namespace, Labels: c.labels(ComponentEtcd)},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 c.selector(ComponentEtcd),
			Ports: []corev1.ServicePort{
				{Name: "client", Port: EtcdClientPort, TargetPort: intstr.FromString("client"), Protocol: corev1.ProtocolTCP},
				{Name: "peer", Port: EtcdPeerPort, TargetPort: intstr.FromString("peer"), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

var etcdMounts = []secretMount{certOnly(RoleEtcdCA), certAndKey(RoleEtcdServer), certAndKey(RoleEtcdPeer)}

// EtcdStatefulSet builds the etcd members; secrets feed the checksum. The
// initial cluster state and the initial cluster come from the etcd state
// ConfigMap (see EtcdFlags), read when a member's container starts, so
// that c.EtcdMembers changes the replicas and nothing else: a change of
// the pod template would restart every running member.
func EtcdStatefulSet(c *Cluster, secrets SecretData) (*appsv1.StatefulSet, error) {
	args, err := EtcdFlags(c)
	if err != nil {
		return nil, err
	}
	ctr := c.etcdContainer(args)

	pod := c.basePodSpec(ComponentEtcd)
	pod.Containers = []corev1.Container{ctr}
	pod.Volumes = c.podVolumes(etcdMounts, nil)
	if c.RestoreFrom != nil {
		if c.Images.Tools == "" {
			return nil, fmt.Errorf("spec.etcd.restoreFrom needs the etcd tools image: the manager runs without --etcd-tools-image")
		}
		restore, volumes := c.restoreInitContainer()
		restore.Env = append(slices.Clone(ctr.Env), restore.Env...)
		pod.InitContainers = []corev1.Container{restore}
		pod.Volumes = append(pod.Volumes, volumes...)
	}

	whenDeleted := appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	if c.VolumeReclaim == v1alpha1.VolumeReclaimDelete {
		whenDeleted = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	}
	var annotations map[string]string
	if c.EtcdScaling {
		annotations = map[string]string{v1alpha1.AnnotationEtcdScaling: strconv.Itoa(int(c.EtcdReplicas))}
	}
	return &appsv1.StatefulSet{
		TypeMeta: statefulSetMeta,
		ObjectMeta: metav1.ObjectMeta{Name: c.EtcdServiceName(), Namespace: c.Namespace, Labels: c.labels(ComponentEtcd),
			Annotations: annotations},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptrTo(c.EtcdMembers),
			ServiceName: c.EtcdServiceName(),
			Selector:    &metav1.LabelSelector{MatchLabels: c.selector(ComponentEtcd)},
			// Parallel, not OrderedReady: member 0 is not ready until a
			// quorum exists, so ordered creation would never start member 1.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			// A removed member's data is harmful, not useful: if the
			// volume were kept and the set scaled up again, the member
			// would start with an identity the cluster has removed.
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: whenDeleted,
				WhenScaled:  appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      c.labels(ComponentEtcd),
					Annotations: map[string]string{v1alpha1.AnnotationChecksum: c.checksum(secrets, etcdMounts, nil, nil)},
				},
				Spec: pod,
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{c.etcdDataClaim()},
		},
	}, nil
}

// etcdContainer is the etcd member's container, run with args.
func (c *Cluster) etcdContainer(args []string) corev1.Container {
	ctr := container(ComponentEtcd, c.etcdImage(), []string{"etcd"}, args)
	ctr.Env = []corev1.EnvVar{
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"},
		}},
		{Name: EtcdStateEnv, ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: c.EtcdStateConfigMapName()},
				Key:                  EtcdStateKey,
			},
		}},
		{Name: EtcdInitialClusterEnv, ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: c.EtcdStateConfigMapName()},
				Key:                  EtcdInitialClusterKey,
			},
		}},
	}
	ctr.Ports = []corev1.ContainerPort{
		{Name: "client", ContainerPort: EtcdClientPort, Protocol: corev1.ProtocolTCP},
		{Name: "peer", ContainerPort: EtcdPeerPort, Protocol: corev1.ProtocolTCP},
		{Name: "metrics", ContainerPort: EtcdMetricsPort, Protocol: corev1.ProtocolTCP},
	}
	ctr.VolumeMounts = append(c.volumeMounts(etcdMounts, false), corev1.VolumeMount{Name: volumeEtcdData, MountPath: etcdDataMount})
	// /livez and /readyz on the metrics listener (etcd >= 3.5.11): liveness
	// does not depend on quorum, so a partitioned member is not restarted
	// in a loop; readiness does. A fresh 3-member cluster needs all peers
	// up before any is ready, hence the generous startup budget.
	ctr.StartupProbe = httpProbe("/readyz", EtcdMetricsPort, corev1.URISchemeHTTP, startupPeriod, startupFailures)
	ctr.LivenessProbe = httpProbe("/livez", EtcdMetricsPort, corev1.URISchemeHTTP, 10, 6)
	ctr.ReadinessProbe = httpProbe("/readyz", EtcdMetricsPort, corev1.URISchemeHTTP, readinessPeriod, readinessFailures)
	ctr.Resources = c.resources(ComponentEtcd, "50m", "64Mi")
	return ctr
}

// etcdDataClaim is the volume claim template of a member's data.
func (c *Cluster) etcdDataClaim() corev1.PersistentVolumeClaim {
	pvc := corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: volumeEtcdData, Labels: c.labels(ComponentEtcd)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: c.EtcdStorageClass,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: c.EtcdStorageSize}},
		},
	}
	if c.EtcdStorageClass != nil && *c.EtcdStorageClass == "" {
		// Empty means the default class, which is the nil field; "" would
		// ask for no class at all.
		pvc.Spec.StorageClassName = nil
	}
	return pvc
}

var (
	apiServerMounts = []secretMount{
		certOnly(RoleCA), certOnly(RoleFrontProxyCA), certOnly(RoleEtcdCA),
		certAndKey(RoleAPIServer), certAndKey(RoleAPIServerKubeletClient),
		certAndKey(RoleAPIServerEtcdClient), certAndKey(RoleFrontProxyClient),
		{role: RoleServiceAccount, keys: []string{secretPrivateKeyKey}},
		{role: RoleEncryptionConfig, keys: []string{EncryptionConfigKey}},
	}
	konnectivityMounts = append([]secretMount{certAndKey(RoleKonnectivityServer)}, kubeconfigMounts(RoleKonnectivityClient)...)
)

// Probe timing. A component is ready only after its startup probe passed
// and then its readiness probe did, so their periods add straight to the
// time a TenantCluster takes to become Ready (and to every rollout step):
// startup is probed every second, with the same five-minute budget as
// before, and so is readiness: the kubelet runs the first readiness probe
// only at a period's tick after the startup probe passed, so a 3 s period
// cost up to 3 s for etcd and again for the API server on every creation
// (`make bench-tenant`). Nine failures, not three, before a pod counts as
// unready: the same 9 s of tolerance as three failures 3 s apart.
const (
	startupPeriod     int32 = 1
	startupFailures   int32 = 300
	readinessPeriod   int32 = 1
	readinessFailures int32 = 9
)

// APIServerShutdownDelay is how long a terminating kube-apiserver keeps
// serving after its readiness turns red (see APIServerFlags), and
// apiServerTerminationGrace how long it may take in all: the delay, then up
// to a minute of in-flight requests (the server's default request timeout)
// draining.
const (
	APIServerShutdownDelay    = 5 * time.Second
	apiServerTerminationGrace = APIServerShutdownDelay + 70*time.Second
)

// APIServerDeployment builds kube-apiserver with, when Konnectivity is on, a
// konnectivity-server container in the same pod. They share the Unix socket
// through an emptyDir, so the API server's egress to the tenant never leaves
// the pod unencrypted and each API server has its own proxy.
//
// The rollout never lowers capacity (maxUnavailable 0, maxSurge 1): a new
// pod must be ready on /readyz before an old one goes. The checksum
// annotation covers the mounted Secrets and configuration, so a renewed
// certificate or a changed admission config rolls the pods.
//
// config is the control plane ConfigMap (ConfigMap) as the caller applied
// it: the checksum hashes the configuration the pods will actually mount,
// and the ConfigMap is built once per pass rather than once per workload.
func APIServerDeployment(c *Cluster, config *corev1.ConfigMap, secrets SecretData) (*appsv1.Deployment, error) {
	args, err := APIServerFlags(c)
	if err != nil {
		return nil, err
	}
	if err := c.checkConfig(ComponentAPIServer, config); err != nil {
		return nil, err
	}
	apiConfigKeys := []string{ConfigKeyAdmission}
	if c.Konnectivity {
		apiConfigKeys = append(apiConfigKeys, ConfigKeyEgressSelector)
	}
	if c.Audit.Policy != nil {
		apiConfigKeys = append(apiConfigKeys, ConfigKeyAuditPolicy)
	}
	api := c.apiServerContainer(args)
	auditVol, _, audited := c.Audit.volume()

	mounts := apiServerMounts
	configKeys := apiConfigKeys
	pod := c.basePodSpec(ComponentAPIServer)
	pod.Containers = []corev1.Container{api}
	pod.TerminationGracePeriodSeconds = ptrTo(int64(apiServerTerminationGrace.Seconds()))
	if c.Konnectivity {
		k, uds, err := c.konnectivityServerContainer()
		if err != nil {
			return nil, err
		}
		pod.Containers[0].VolumeMounts = append(pod.Containers[0].VolumeMounts, uds)
		pod.Containers = append(pod.Containers, k)

		mounts = append(append([]secretMount{}, apiServerMounts...), konnectivityMounts...)
		configKeys = append(configKeys, ConfigKeyKonnectivityConf)
	}
	var extra []corev1.Volume
	if audited {
		extra = append(extra, auditVol)
	}
	if c.Konnectivity {
		// Memory-backed: it only ever holds the socket.
		extra = append(extra, corev1.Volume{Name: volumeKonnectivity, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory},
		}})
	}
	pod.Volumes = c.podVolumes(mounts, configKeys, extra...)
	maxUnavailable, maxSurge := intstr.FromInt32(0), intstr.FromInt32(1)
	return &appsv1.Deployment{
		TypeMeta:   deploymentMeta,
		ObjectMeta: metav1.ObjectMeta{Name: c.APIServerServiceName(), Namespace: c.Namespace, Labels: c.labels(ComponentAPIServer)},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptrTo(c.APIServerReplicas),
			RevisionHistoryLimit: ptrTo(int32(3)),
			Selector:             &metav1.LabelSelector{MatchLabels: c.selector(ComponentAPIServer)},
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &maxUnavailable, MaxSurge: &maxSurge},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      c.labels(ComponentAPIServer),
					Annotations: map[string]string{v1alpha1.AnnotationChecksum: c.checksum(secrets, mounts, config.Data, configKeys)},
				},
				Spec: pod,
			},
		},
	}, nil
}

// apiServerContainer is kube-apiserver, run with args.
func (c *Cluster) apiServerContainer(args []string) corev1.Container {
	api := container(ComponentAPIServer, c.kubeImage(ComponentAPIServer), []string{"kube-apiserver"}, args)
	api.Ports = []corev1.ContainerPort{{Name: "https", ContainerPort: APIServerPort, Protocol: corev1.ProtocolTCP}}
	api.VolumeMounts = c.volumeMounts(apiServerMounts, true)
	if _, auditMount, audited := c.Audit.volume(); audited {
		api.VolumeMounts = append(api.VolumeMounts, auditMount)
	}
	api.StartupProbe = httpProbe("/livez", APIServerPort, corev1.URISchemeHTTPS, startupPeriod, startupFailures)
	api.LivenessProbe = httpProbe("/livez", APIServerPort, corev1.URISchemeHTTPS, 10, 6)
	api.ReadinessProbe = httpProbe("/readyz", APIServerPort, corev1.URISchemeHTTPS, readinessPeriod, readinessFailures)
	api.Resources = c.resources(ComponentAPIServer, "100m", "256Mi")
	return api
}

// konnectivityServerContainer is konnectivity-server, and uds the mount of
// the socket directory it shares with kube-apiserver.
func (c *Cluster) konnectivityServerContainer() (k corev1.Container, uds corev1.VolumeMount, err error) {
	kargs, err := KonnectivityServerFlags(c)
	if err != nil {
		return corev1.Container{}, corev1.VolumeMount{}, err
	}
	uds = corev1.VolumeMount{Name: volumeKonnectivity, MountPath: konnectivityUDSDir}
	k = container(ComponentKonnectivity, c.konnectivityImage(), []string{"/proxy-server"}, kargs)
	k.Ports = []corev1.ContainerPort{
		{Name: "konnectivity", ContainerPort: KonnectivityAgentPort, Protocol: corev1.ProtocolTCP},
		{Name: "konn-health", ContainerPort: KonnectivityHealthPort, Protocol: corev1.ProtocolTCP},
	}
	k.VolumeMounts = append(c.volumeMounts(konnectivityMounts, true), uds)
	// Liveness only: konnectivity-server is not "ready" until an agent
	// connects, and agents run on nodes that cannot join before the API
	// server pod is ready. A readiness probe here would deadlock.
	k.LivenessProbe = httpProbe("/healthz", KonnectivityHealthPort, corev1.URISchemeHTTP, 10, 6)
	k.Resources = c.resources(ComponentKonnectivity, "10m", "32Mi")
	return k, uds, nil
}

// checkConfig refuses a missing ConfigMap or one of another tenant: a pod
// template hashed over the wrong configuration would not roll when its own
// changes.
func (c *Cluster) checkConfig(component string, config *corev1.ConfigMap) error {
	if config == nil {
		return fmt.Errorf("%s: the control plane ConfigMap is required", component)
	}
	if config.Name != c.ConfigMapName() || config.Namespace != c.Namespace {
		return fmt.Errorf("%s: ConfigMap %s/%s is not the control plane ConfigMap %s/%s", component,
			config.Namespace, config.Name, c.Namespace, c.ConfigMapName())
	}
	return nil
}

var (
	// The signing pair is mounted apart from the trust (RoleCASigner):
	// during a rotation of the cluster CA the controller manager trusts
	// both generations and signs with one.
	controllerManagerMounts = append([]secretMount{
		certAndKey(RoleCASigner), certOnly(RoleFrontProxyCA),
		{role: RoleServiceAccount, keys: []string{secretPrivateKeyKey}},
	}, kubeconfigMounts(RoleControllerManager)...)
	schedulerMounts = kubeconfigMounts(RoleScheduler)
)

// leaderElected describes one of the two components that share the
// leader-elected shape.
type leaderElected struct {
	component     string
	name          func(*Cluster) string
	flags         func(*Cluster) ([]string, error)
	mounts        []secretMount
	kubeconfigKey string
	port          int32
	cpu, memory   string
}

var (
	controllerManager = leaderElected{ComponentControllerManager, (*Cluster).ControllerManagerName, ControllerManagerFlags,
		controllerManagerMounts, ConfigKeyControllerManagerConf, ControllerManagerPort, "50m", "64Mi"}
	scheduler = leaderElected{ComponentScheduler, (*Cluster).SchedulerName, SchedulerFlags,
		schedulerMounts, ConfigKeySchedulerConf, SchedulerPort, "20m", "32Mi"}
)

// ControllerManagerDeployment builds kube-controller-manager. config is the
// control plane ConfigMap, as for APIServerDeployment.
func ControllerManagerDeployment(c *Cluster, config *corev1.ConfigMap, secrets SecretData) (*appsv1.Deployment, error) {
	return c.leaderElectedDeployment(controllerManager, config, secrets)
}

// SchedulerDeployment builds kube-scheduler. config is the control plane
// ConfigMap, as for APIServerDeployment.
func SchedulerDeployment(c *Cluster, config *corev1.ConfigMap, secrets SecretData) (*appsv1.Deployment, error) {
	return c.leaderElectedDeployment(scheduler, config, secrets)
}

// leaderElectedDeployment is the shape kube-controller-manager and
// kube-scheduler share: two replicas, one active by leader election, probed
// on /healthz of their secure port (readable anonymously by default).
func (c *Cluster) leaderElectedDeployment(l leaderElected, config *corev1.ConfigMap, secrets SecretData) (*appsv1.Deployment, error) {
	args, err := l.flags(c)
	if err != nil {
		return nil, err
	}
	component, name, mounts, kubeconfigKey, port := l.component, l.name(c), l.mounts, l.kubeconfigKey, l.port
	if err := c.checkConfig(component, config); err != nil {
		return nil, err
	}
	if _, ok := config.Data[kubeconfigKey]; !ok {
		return nil, fmt.Errorf("%s: kubeconfig %s missing from the control plane ConfigMap", component, kubeconfigKey)
	}
	configKeys := []string{kubeconfigKey}
	ctr := container(component, c.kubeImage(component), []string{component}, args)
	ctr.Ports = []corev1.ContainerPort{{Name: "https", ContainerPort: port, Protocol: corev1.ProtocolTCP}}
	ctr.VolumeMounts = c.volumeMounts(mounts, true)
	ctr.StartupProbe = httpProbe("/healthz", port, corev1.URISchemeHTTPS, startupPeriod, startupFailures)
	ctr.LivenessProbe = httpProbe("/healthz", port, corev1.URISchemeHTTPS, 10, 6)
	ctr.Resources = c.resources(component, l.cpu, l.memory)
	pod := c.basePodSpec(component)
	pod.Containers = []corev1.Container{ctr}
	pod.Volumes = c.podVolumes(mounts, configKeys)
	return &appsv1.Deployment{
		TypeMeta:   deploymentMeta,
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: c.labels(component)},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptrTo(leaderElectedReplicas),
			RevisionHistoryLimit: ptrTo(int32(3)),
			Selector:             &metav1.LabelSelector{MatchLabels: c.selector(component)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      c.labels(component),
					Annotations: map[string]string{v1alpha1.AnnotationChecksum: c.checksum(secrets, mounts, config.Data, configKeys)},
				},
				Spec: pod,
			},
		},
	}, nil
}

// APIServerService builds the Service that publishes kube-apiserver and,
// with Konnectivity, the agent port, as spec.apiServer.expose says:
//   - LoadBalancer: the cloud or MetalLB assigns the address; the reconciler
//     feeds it back through Options.ObservedExternalAddress.
//   - NodePort: the node ports are allocated by the admin cluster.
//   - ExternalIP: a ClusterIP Service with the fixed external IP, which the
//     admin cluster's network routes to its nodes.
//
// The in-cluster name of this Service is how the other components reach the
// API server, whatever the type.
func APIServerService(c *Cluster) *corev1.Service {
	svc := &corev1.Service{
		TypeMeta:   serviceMeta,
		ObjectMeta: metav1.ObjectMeta{Name: c.APIServerServiceName(), Namespace: c.Namespace, Labels: c.labels(ComponentAPIServer)},
		Spec: corev1.ServiceSpec{
			Selector: c.selector(ComponentAPIServer),
			Ports: []corev1.ServicePort{
				{Name: "https", Port: c.ServicePort, TargetPort: intstr.FromString("https"), Protocol: corev1.ProtocolTCP},
			},
		},
	}
	if c.ServicePort != APIServerPort && c.ExposeType != v1alpha1.ExposeNodePort {
		// kube-apiserver publishes <advertise-address>:<secure-port> as the
		// endpoint of the tenant's kubernetes Service, and has no separate
		// advertised port; serve the secure port on the external address
		// too, or pods in the tenant could not reach their API server.
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name: "https-advertised", Port: APIServerPort, TargetPort: intstr.FromString("https"), Protocol: corev1.ProtocolTCP,
		})
	}
	if c.Konnectivity {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name: "konnectivity", Port: KonnectivityAgentPort, TargetPort: intstr.FromString("konnectivity"), Protocol: corev1.ProtocolTCP,
		})
	}
	switch c.ExposeType {
	case v1alpha1.ExposeNodePort:
		svc.Spec.Type = corev1.ServiceTypeNodePort
	case v1alpha1.ExposeExternalIP:
		svc.Spec.Type = corev1.ServiceTypeClusterIP
		svc.Spec.ExternalIPs = []string{c.ExternalAddress}
	default:
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	}
	c.serviceExtras(svc)
	return svc
}

// PodDisruptionBudgets keep voluntary disruptions (node drains in the admin
// cluster) from taking down more of the control plane than it survives: one
// etcd member of three (quorum stays) and one API server at a time. A
// single etcd member or API server gets no budget: it could never be
// evicted, and a budget that blocks every drain is worse than a short
// outage the user chose by running one replica.
func PodDisruptionBudgets(c *Cluster) []*policyv1.PodDisruptionBudget {
	mk := func(name, component string) *policyv1.PodDisruptionBudget {
		one := intstr.FromInt32(1)
		return &policyv1.PodDisruptionBudget{
			TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: c.labels(component)},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: &one,
				Selector:       &metav1.LabelSelector{MatchLabels: c.selector(component)},
			},
		}
	}
	var out []*policyv1.PodDisruptionBudget
	// The members running now: during a change from 3 to 1 a budget would
	// block the drain of the last member's node once it is alone.
	if c.EtcdMembers > 1 {
		out = append(out, mk(c.EtcdServiceName(), ComponentEtcd))
	}
	if c.APIServerReplicas > 1 {
		out = append(out, mk(c.APIServerServiceName(), ComponentAPIServer))
	}
	return out
}

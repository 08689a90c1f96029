package desired

import (
	"maps"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
)

// The standard label keys kubefarm puts on what it builds, beside its own
// (v1alpha1.LabelTenantCluster and LabelPKIRole select a tenant's objects and
// a PKI role's Secrets; AnnotationChecksum rolls pods onto renewed
// certificates; AnnotationEtcdScaling marks an etcd membership change).
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelPartOf    = "app.kubernetes.io/part-of"

	managedBy = "kubefarm"
)

// Component names, used in labels and as the suffix of object names.
const (
	ComponentEtcd              = "etcd"
	ComponentAPIServer         = "kube-apiserver"
	ComponentControllerManager = "kube-controller-manager"
	ComponentScheduler         = "kube-scheduler"
	ComponentKonnectivity      = "konnectivity-server"
	componentPKI               = "pki"
	componentConfig            = "config"
)

func (c *Cluster) prefixed(suffix string) string { return c.Name + "-" + suffix }

// EtcdServiceName names the headless Service that gives each etcd member a
// stable DNS name, and the StatefulSet that owns the members.
func (c *Cluster) EtcdServiceName() string { return c.prefixed("etcd") }

// APIServerServiceName names the Service that exposes kube-apiserver (and the
// Konnectivity agent port) and the kube-apiserver Deployment.
func (c *Cluster) APIServerServiceName() string { return c.prefixed("apiserver") }

// ControllerManagerName names the kube-controller-manager Deployment.
func (c *Cluster) ControllerManagerName() string { return c.prefixed("controller-manager") }

// SchedulerName names the kube-scheduler Deployment.
func (c *Cluster) SchedulerName() string { return c.prefixed("scheduler") }

// ConfigMapName names the ConfigMap with generated configuration files and
// the in-cluster kubeconfigs of the components.
func (c *Cluster) ConfigMapName() string { return c.prefixed("control-plane") }

// SecretName is the name of the Secret (and of the cert-manager Certificate
// that fills it) for a PKI role.
func (c *Cluster) SecretName(role PKIRole) string { return c.prefixed(string(role)) }

// SelfSignedIssuerName names the Issuer that signs the three CAs and the
// service-account key.
func (c *Cluster) SelfSignedIssuerName() string { return c.prefixed("selfsigned") }

// EtcdStateConfigMapName names the ConfigMap holding etcd's initial
// cluster state (EtcdStateConfigMap).
func (c *Cluster) EtcdStateConfigMapName() string { return c.prefixed("etcd-state") }

// ControlPlaneSelector selects every workload of TenantCluster name and
// its pods (all components), in its namespace: what goes with the
// TenantCluster.
func ControlPlaneSelector(name string) map[string]string {
	return map[string]string{v1alpha1.LabelTenantCluster: name, LabelManagedBy: managedBy}
}

// labels are the labels of every object of one component.
func (c *Cluster) labels(component string) map[string]string {
	l := c.selector(component)
	l[LabelComponent] = "control-plane"
	l[LabelManagedBy] = managedBy
	l[LabelPartOf] = managedBy
	l[v1alpha1.LabelTenantCluster] = c.Name
	return l
}

// selector is the immutable subset of labels used in Deployment, StatefulSet
// and Service selectors: it must never change for an existing cluster.
func (c *Cluster) selector(component string) map[string]string {
	return map[string]string{LabelName: component, LabelInstance: c.Name}
}

func mergeLabels(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

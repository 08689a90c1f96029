package desired

import (
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Ports the control plane listens on inside its pods. They are fixed rather
// than configurable because probes, Services, certificates and the flags of
// several components must agree on them.
const (
	APIServerPort          int32 = 6443
	KonnectivityAgentPort  int32 = 8132
	KonnectivityAdminPort  int32 = 8133
	KonnectivityHealthPort int32 = 8134
	EtcdClientPort         int32 = 2379
	EtcdPeerPort           int32 = 2380
	EtcdMetricsPort        int32 = 2381
	ControllerManagerPort  int32 = 10257
	SchedulerPort          int32 = 10259
)

// Defaults mirrored from the CRD's +kubebuilder:default markers. The API
// server applies them on write, but the builders must not depend on that: a
// TenantCluster built in a test, read from an older stored version or passed
// through a client that skipped defaulting must yield the same objects.
const (
	defaultAPIServerReplicas  int32 = 2
	defaultEtcdReplicas       int32 = 3
	defaultServiceCIDR              = "10.96.0.0/12"
	defaultClusterDomain            = "cluster.local"
	defaultStorageSize              = "2Gi"
	defaultAdminClusterDomain       = "cluster.local"
)

// maxClusterNameLength keeps every derived name valid: the longest is the
// StatefulSet "<name>-etcd", whose pods carry a controller-revision-hash label
// "<name>-etcd-<10 chars>" that must fit in 63 characters, and the longest
// Service "<name>-apiserver" must be a DNS-1035 label.
const maxClusterNameLength = 40

// Images says where the control plane images come from. The Kubernetes
// components use TenantCluster.spec.version as their tag; etcd and the
// Konnectivity server are versioned separately, so the manager's
// configuration passes their tags in.
type Images struct {
	// Registry is the prefix of every image, e.g. "registry.k8s.io" or a
	// mirror such as "mirror.example.com/k8s".
	Registry string
	// EtcdTag is the tag of <Registry>/etcd, e.g. "3.6.5-0".
	EtcdTag string
	// KonnectivityTag is the tag of <Registry>/kas-network-proxy/proxy-server,
	// e.g. "v0.34.0". The agent DaemonSet in the tenant uses the same tag
	// of <Registry>/kas-network-proxy/proxy-agent.
	KonnectivityTag string
	// CoreDNSTag is the tag of <Registry>/coredns/coredns, e.g. "v1.12.1".
	CoreDNSTag string
	// Tools is the whole reference of the image with kubefarm-etcd (the
	// kubefarm-manager image), which takes etcd snapshots and restores
	// them; empty refuses spec.etcd.backup and spec.etcd.restoreFrom.
	Tools string
}

// Options are the inputs that do not come from the TenantCluster.
type Options struct {
	Images Images
	// AdminClusterDomain is the DNS domain of the admin cluster, used for the
	// fully qualified in-cluster names of the tenant's Services in
	// certificates. Empty means "cluster.local".
	AdminClusterDomain string
	// ObservedExternalAddress is the address the admin cluster reported for
	// the API server Service (a LoadBalancer ingress IP or hostname, or a
	// node address for NodePort). It is ignored when
	// spec.apiServer.expose.externalIP is set, which wins.
	ObservedExternalAddress string
}

// Cluster is a TenantCluster with defaults applied and every derived value
// computed once, so that the builders agree with each other.
type Cluster struct {
	Name      string
	Namespace string
	// Version is the Kubernetes version and the tag of its images.
	Version string

	APIServerReplicas int32
	// EtcdReplicas is spec.etcd.replicas: the member count the controller
	// converges to.
	EtcdReplicas int32
	// EtcdMembers is how many members the StatefulSet runs now and what
	// the initial cluster in the etcd state ConfigMap lists; EtcdServers
	// how many members, from member 0 up, the API servers (--etcd-servers)
	// and the backup (--endpoints) use. Resolve sets both to EtcdReplicas;
	// the controller lowers or raises them while it changes the membership
	// one member at a time (docs/etcd.md, Scaling), during which the API
	// servers use member 0 only: it is never removed, and a learner, which
	// refuses most requests, must never be an endpoint.
	EtcdMembers int32
	EtcdServers int32
	// EtcdScaling marks the StatefulSet with v1alpha1.AnnotationEtcdScaling: a
	// membership change is under way.
	EtcdScaling      bool
	EtcdStorageSize  resource.Quantity
	EtcdStorageClass *string
	VolumeReclaim    v1alpha1.VolumeReclaimPolicy
	// Backup is spec.etcd.backup resolved; nil takes no snapshots.
	Backup *Backup
	// RestoreFrom is spec.etcd.restoreFrom. The controller clears it once
	// etcd has bootstrapped, which drops the restore from the members.
	RestoreFrom *v1alpha1.EtcdRestoreSource
	// RestoreKeySecret is the Secret with the backup key's identity that
	// opens RestoreFrom's key file (resolveRestoreKey).
	RestoreKeySecret string
	// RestoreS3 is restoreFrom.s3 resolved (the default prefix is the
	// snapshot's tenant's); nil restores from restoreFrom.claimName.
	RestoreS3 *BackupS3

	ServiceCIDR netip.Prefix
	// APIServerServiceIP is the first address of ServiceCIDR: the tenant's
	// kubernetes.default Service gets it, so the serving certificate needs it.
	APIServerServiceIP netip.Addr
	// DNSServiceIP is spec.network.dnsServiceIP or the tenth address.
	DNSServiceIP netip.Addr
	// PodCIDR is invalid (zero) when spec.network.podCIDR is empty: then the
	// controller manager allocates no node CIDRs.
	PodCIDR       netip.Prefix
	ClusterDomain string

	ExposeType v1alpha1.ExposeType
	// ServicePort is the port of the API server Service (expose.port).
	ServicePort int32
	// ExternalAddress is expose.externalIP, else the observed address; empty
	// while unknown (e.g. a LoadBalancer still pending).
	ExternalAddress string
	CertSANs        []string

	Konnectivity bool
	PodSecurity  v1alpha1.PodSecurityDefaults

	// Audit is spec.apiServer.audit resolved.
	Audit Audit
	// Placement is spec.placement resolved.
	Placement Placement
	// Resources are the spec's resources by container name; a container
	// without an entry gets its default requests.
	Resources map[string]corev1.ResourceRequirements
	// Service holds spec.apiServer.expose's Service settings.
	Service ServiceExtras

	APIServerArgs         map[string]string
	ControllerManagerArgs map[string]string
	SchedulerArgs         map[string]string

	Images             Images
	AdminClusterDomain string

	// CATrust holds the rotation record of each CA that was ever rotated
	// (read by the controller from its trust Secret); a CA without one
	// has its first generation only and the pods mount its own Secret.
	CATrust map[PKIRole]CATrust
}

// AdvertiseAddress is the IP the API server advertises to the tenant (the
// endpoint of its kubernetes.default Service): the external address when it is
// an IP, since pods on tenant nodes cannot reach the admin cluster's pod IPs.
// It is invalid when no external IP is known yet.
func (c *Cluster) AdvertiseAddress() netip.Addr {
	a, err := netip.ParseAddr(c.ExternalAddress)
	if err != nil {
		return netip.Addr{}
	}
	return a
}

// ExternalEndpoint is the URL clients outside the admin cluster use, or ""
// while the external address is unknown.
func (c *Cluster) ExternalEndpoint() string {
	if c.ExternalAddress == "" {
		return ""
	}
	return "https://" + hostPort(c.ExternalAddress, c.ServicePort)
}

// InClusterEndpoint is the URL components in the admin cluster use: the API
// server Service's cluster DNS name, which resolves no matter how the Service
// is exposed.
func (c *Cluster) InClusterEndpoint() string {
	return fmt.Sprintf("https://%s.%s.svc:%d", c.APIServerServiceName(), c.Namespace, c.ServicePort)
}

func hostPort(host string, port int32) string {
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
		return fmt.Sprintf("[%s]:%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}

var versionRE = regexp.MustCompile(`^v1\.[0-9]+\.[0-9]+$`)

// Resolve validates a TenantCluster and computes everything the builders
// share. Errors name the offending field so the controller can surface them
// in a condition unchanged. The Cluster shares no memory with tc, so built
// objects do not change if the caller later mutates the TenantCluster.
func Resolve(tc *v1alpha1.TenantCluster, opts Options) (*Cluster, error) {
	spec := &tc.Spec
	c := &Cluster{
		Name:                  tc.Name,
		Namespace:             tc.Namespace,
		Version:               spec.Version,
		APIServerReplicas:     defaultAPIServerReplicas,
		EtcdReplicas:          spec.Etcd.Replicas,
		EtcdStorageClass:      cloneStringPtr(spec.Etcd.StorageClassName),
		VolumeReclaim:         spec.VolumeReclaimPolicy,
		ClusterDomain:         spec.Network.ClusterDomain,
		ExposeType:            spec.APIServer.Expose.Type,
		ServicePort:           spec.APIServer.Expose.Port,
		Konnectivity:          spec.Konnectivity.Enabled == nil || *spec.Konnectivity.Enabled,
		PodSecurity:           spec.PodSecurity,
		APIServerArgs:         maps.Clone(spec.APIServer.ExtraArgs),
		ControllerManagerArgs: maps.Clone(spec.ControllerManager.ExtraArgs),
		SchedulerArgs:         maps.Clone(spec.Scheduler.ExtraArgs),
		Images:                opts.Images,
		AdminClusterDomain:    opts.AdminClusterDomain,
	}

	// The order of the steps is the order of the errors in the aggregate.
	sp := field.NewPath("spec")
	var errs field.ErrorList
	errs = append(errs, c.resolveMeta()...)
	errs = append(errs, c.resolveReplicas(spec, sp)...)
	errs = append(errs, c.resolveEtcd(spec, sp, opts)...)
	errs = append(errs, c.resolveNetwork(spec, sp.Child("network"))...)
	errs = append(errs, c.resolveExpose(spec, sp, opts)...)
	errs = append(errs, c.resolvePodSecurity(sp.Child("podSecurity"))...)

	audit, auditErrs := resolveAudit(spec.APIServer.Audit, sp.Child("apiServer", "audit"))
	c.Audit = audit
	errs = append(errs, auditErrs...)
	errs = append(errs, resolvePlacement(c, spec, sp)...)

	if c.AdminClusterDomain == "" {
		c.AdminClusterDomain = defaultAdminClusterDomain
	}
	if c.Images.Registry == "" || c.Images.EtcdTag == "" || (c.Konnectivity && c.Images.KonnectivityTag == "") {
		// Not a user error: the manager is misconfigured.
		errs = append(errs, field.Required(field.NewPath("options", "images"), "registry, etcd tag and (with Konnectivity) konnectivity tag are required"))
	}
	if err := errs.ToAggregate(); err != nil {
		return nil, err
	}
	return c, nil
}

// resolveMeta checks the name and namespace every derived object uses.
func (c *Cluster) resolveMeta() field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if c.Namespace == "" {
		errs = append(errs, field.Required(meta.Child("namespace"), "the control plane runs in the TenantCluster's namespace"))
	}
	if len(c.Name) > maxClusterNameLength {
		errs = append(errs, field.TooLong(meta.Child("name"), c.Name, maxClusterNameLength))
	} else if msgs := validation.IsDNS1035Label(c.Name); len(msgs) > 0 {
		// Service names derived from it must be DNS-1035 labels.
		errs = append(errs, field.Invalid(meta.Child("name"), c.Name, strings.Join(msgs, "; ")))
	}
	return errs
}

// resolveReplicas checks spec.version and defaults and checks the API
// server and etcd replica counts.
func (c *Cluster) resolveReplicas(spec *v1alpha1.TenantClusterSpec, sp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !versionRE.MatchString(c.Version) {
		errs = append(errs, field.Invalid(sp.Child("version"), c.Version, "must look like v1.34.4"))
	}
	if spec.APIServer.Replicas != nil {
		c.APIServerReplicas = *spec.APIServer.Replicas
	}
	if c.APIServerReplicas < 1 {
		errs = append(errs, field.Invalid(sp.Child("apiServer", "replicas"), c.APIServerReplicas, "must be at least 1"))
	}
	if c.EtcdReplicas == 0 {
		c.EtcdReplicas = defaultEtcdReplicas
	}
	if c.EtcdReplicas != 1 && c.EtcdReplicas != 3 {
		errs = append(errs, field.NotSupported(sp.Child("etcd", "replicas"), c.EtcdReplicas, []string{"1", "3"}))
	}
	c.EtcdMembers, c.EtcdServers = c.EtcdReplicas, c.EtcdReplicas
	return errs
}

// resolveEtcd defaults and checks etcd's storage, backup and restore.
func (c *Cluster) resolveEtcd(spec *v1alpha1.TenantClusterSpec, sp *field.Path, opts Options) field.ErrorList {
	var errs field.ErrorList
	if spec.Etcd.StorageSize != nil {
		c.EtcdStorageSize = spec.Etcd.StorageSize.DeepCopy()
	} else {
		c.EtcdStorageSize = resource.MustParse(defaultStorageSize)
	}
	if c.EtcdStorageSize.Sign() <= 0 {
		errs = append(errs, field.Invalid(sp.Child("etcd", "storageSize"), c.EtcdStorageSize.String(), "must be positive"))
	}
	if c.VolumeReclaim == "" {
		c.VolumeReclaim = v1alpha1.VolumeReclaimRetain
	}
	errs = append(errs, c.resolveBackup(spec.Etcd.Backup, sp.Child("etcd", "backup"))...)
	errs = append(errs, c.resolveRestore(spec.Etcd.RestoreFrom, sp.Child("etcd", "restoreFrom"))...)
	if (c.Backup != nil || c.RestoreFrom != nil) && opts.Images.Tools == "" {
		what := sp.Child("etcd", "backup")
		if c.Backup == nil {
			what = sp.Child("etcd", "restoreFrom")
		}
		errs = append(errs, field.Forbidden(what, "this kubefarm-manager runs without --etcd-tools-image, the image with kubefarm-etcd"))
	}
	return errs
}

// resolveNetwork defaults and checks spec.network (at net).
func (c *Cluster) resolveNetwork(spec *v1alpha1.TenantClusterSpec, net *field.Path) field.ErrorList {
	var errs field.ErrorList
	serviceCIDR := spec.Network.ServiceCIDR
	if serviceCIDR == "" {
		serviceCIDR = defaultServiceCIDR
	}
	if p, err := netip.ParsePrefix(serviceCIDR); err != nil {
		errs = append(errs, field.Invalid(net.Child("serviceCIDR"), serviceCIDR, err.Error()))
	} else {
		c.ServiceCIDR = p.Masked()
		c.APIServerServiceIP = nthAddr(c.ServiceCIDR, 1)
		c.DNSServiceIP = nthAddr(c.ServiceCIDR, 10)
		if !c.APIServerServiceIP.IsValid() || !c.DNSServiceIP.IsValid() {
			errs = append(errs, field.Invalid(net.Child("serviceCIDR"), serviceCIDR, "too small: needs room for the API server and DNS Service IPs"))
		}
	}
	if spec.Network.DNSServiceIP != "" {
		a, err := netip.ParseAddr(spec.Network.DNSServiceIP)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(net.Child("dnsServiceIP"), spec.Network.DNSServiceIP, err.Error()))
		case c.ServiceCIDR.IsValid() && !c.ServiceCIDR.Contains(a):
			errs = append(errs, field.Invalid(net.Child("dnsServiceIP"), spec.Network.DNSServiceIP, "must be inside serviceCIDR"))
		default:
			c.DNSServiceIP = a
		}
	}
	if spec.Network.PodCIDR != "" {
		if p, err := netip.ParsePrefix(spec.Network.PodCIDR); err != nil {
			errs = append(errs, field.Invalid(net.Child("podCIDR"), spec.Network.PodCIDR, err.Error()))
		} else {
			c.PodCIDR = p.Masked()
		}
	}
	if c.ClusterDomain == "" {
		c.ClusterDomain = defaultClusterDomain
	}
	if msgs := validation.IsDNS1123Subdomain(c.ClusterDomain); len(msgs) > 0 {
		errs = append(errs, field.Invalid(net.Child("clusterDomain"), c.ClusterDomain, strings.Join(msgs, "; ")))
	}
	return errs
}

// resolveExpose defaults and checks spec.apiServer.expose and certSANs.
func (c *Cluster) resolveExpose(spec *v1alpha1.TenantClusterSpec, sp *field.Path, opts Options) field.ErrorList {
	var errs field.ErrorList
	expose := sp.Child("apiServer", "expose")
	if c.ExposeType == "" {
		c.ExposeType = v1alpha1.ExposeLoadBalancer
	}
	switch c.ExposeType {
	case v1alpha1.ExposeLoadBalancer, v1alpha1.ExposeNodePort, v1alpha1.ExposeExternalIP:
	default:
		errs = append(errs, field.NotSupported(expose.Child("type"), c.ExposeType,
			[]v1alpha1.ExposeType{v1alpha1.ExposeLoadBalancer, v1alpha1.ExposeNodePort, v1alpha1.ExposeExternalIP}))
	}
	if c.ServicePort == 0 {
		c.ServicePort = APIServerPort
	}
	if c.ServicePort < 1 || c.ServicePort > 65535 {
		errs = append(errs, field.Invalid(expose.Child("port"), c.ServicePort, "must be 1-65535"))
	}
	if c.Konnectivity && c.ServicePort == KonnectivityAgentPort {
		errs = append(errs, field.Invalid(expose.Child("port"), c.ServicePort, "is the Konnectivity agent port on the same Service"))
	}
	if ip := spec.APIServer.Expose.ExternalIP; ip != "" {
		if _, err := netip.ParseAddr(ip); err != nil {
			errs = append(errs, field.Invalid(expose.Child("externalIP"), ip, err.Error()))
		}
		c.ExternalAddress = ip
	} else {
		if c.ExposeType == v1alpha1.ExposeExternalIP {
			errs = append(errs, field.Required(expose.Child("externalIP"), "required when type is ExternalIP"))
		}
		c.ExternalAddress = opts.ObservedExternalAddress
	}
	// Sorted and de-duplicated, so the certificate spec does not change when
	// the user reorders the list.
	c.CertSANs = slices.Clone(spec.APIServer.CertSANs)
	slices.Sort(c.CertSANs)
	c.CertSANs = slices.Compact(c.CertSANs)
	// Validated in the user's order so the error index points at the entry.
	for i, san := range spec.APIServer.CertSANs {
		if _, err := netip.ParseAddr(san); err == nil {
			continue
		}
		if msgs := validation.IsWildcardDNS1123Subdomain(san); len(msgs) > 0 && len(validation.IsDNS1123Subdomain(san)) > 0 {
			errs = append(errs, field.Invalid(sp.Child("apiServer", "certSANs").Index(i), san, "must be an IP address or a DNS name"))
		}
	}
	return errs
}

// resolvePodSecurity defaults and checks spec.podSecurity (at ps).
func (c *Cluster) resolvePodSecurity(ps *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.PodSecurity.Enforce == "" {
		c.PodSecurity.Enforce = "baseline"
	}
	if c.PodSecurity.Audit == "" {
		c.PodSecurity.Audit = "restricted"
	}
	if c.PodSecurity.Warn == "" {
		c.PodSecurity.Warn = "restricted"
	}
	for _, l := range []struct {
		name  string
		level v1alpha1.PodSecurityLevel
	}{{"enforce", c.PodSecurity.Enforce}, {"audit", c.PodSecurity.Audit}, {"warn", c.PodSecurity.Warn}} {
		switch l.level {
		case "privileged", "baseline", "restricted":
		default:
			errs = append(errs, field.NotSupported(ps.Child(l.name), l.level, []string{"privileged", "baseline", "restricted"}))
		}
	}
	return errs
}

// nthAddr returns the n-th address of p (0 is the network address), or an
// invalid Addr when p is too small.
func nthAddr(p netip.Prefix, n int) netip.Addr {
	a := p.Addr()
	for range n {
		a = a.Next()
		if !a.IsValid() || !p.Contains(a) {
			return netip.Addr{}
		}
	}
	return a
}

func cloneStringPtr(p *string) *string {
	if p == nil {
		return nil
	}
	return ptrTo(*p)
}

// objectName refuses value at fp unless it can name a Kubernetes object
// (a DNS-1123 subdomain), with one error per broken rule.
func objectName(fp *field.Path, value string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(value) {
		errs = append(errs, field.Invalid(fp, value, msg))
	}
	return errs
}

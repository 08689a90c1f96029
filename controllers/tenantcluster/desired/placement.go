package desired

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Placement and resources of the control plane pods, and the extras of the
// API server Service.

// Placement is spec.placement resolved.
type Placement struct {
	NodeSelector      map[string]string
	Tolerations       []corev1.Toleration
	PriorityClassName string
	Spread            v1alpha1.SpreadPolicy
}

// ServiceExtras are spec.apiServer.expose's settings of the Service beyond
// its type and port.
type ServiceExtras struct {
	NodePort, KonnectivityNodePort int32
	LoadBalancerClass              *string
	Annotations                    map[string]string
}

// resolvePlacement checks spec.placement, the components' resources and
// the Service extras, and copies them into c.
func resolvePlacement(c *Cluster, spec *v1alpha1.TenantClusterSpec, sp *field.Path) field.ErrorList {
	var errs field.ErrorList
	pp := sp.Child("placement")
	pl := spec.Placement
	c.Placement = Placement{
		NodeSelector:      maps.Clone(pl.NodeSelector),
		PriorityClassName: pl.PriorityClassName,
		Spread:            pl.Spread,
	}
	for i := range pl.Tolerations {
		c.Placement.Tolerations = append(c.Placement.Tolerations, *pl.Tolerations[i].DeepCopy())
	}
	if c.Placement.Spread == "" {
		c.Placement.Spread = v1alpha1.SpreadPreferred
	}
	if c.Placement.Spread != v1alpha1.SpreadPreferred && c.Placement.Spread != v1alpha1.SpreadRequired {
		errs = append(errs, field.NotSupported(pp.Child("spread"), c.Placement.Spread,
			[]v1alpha1.SpreadPolicy{v1alpha1.SpreadPreferred, v1alpha1.SpreadRequired}))
	}
	errs = append(errs, metav1validation.ValidateLabels(pl.NodeSelector, pp.Child("nodeSelector"))...)
	if n := pl.PriorityClassName; n != "" {
		errs = append(errs, objectName(pp.Child("priorityClassName"), n)...)
	}

	c.Resources = map[string]corev1.ResourceRequirements{}
	for _, r := range []struct {
		container string
		spec      *corev1.ResourceRequirements
		path      *field.Path
	}{
		{ComponentAPIServer, spec.APIServer.Resources, sp.Child("apiServer", "resources")},
		{ComponentKonnectivity, spec.Konnectivity.Resources, sp.Child("konnectivity", "resources")},
		{ComponentControllerManager, spec.ControllerManager.Resources, sp.Child("controllerManager", "resources")},
		{ComponentScheduler, spec.Scheduler.Resources, sp.Child("scheduler", "resources")},
		{ComponentEtcd, spec.Etcd.Resources, sp.Child("etcd", "resources")},
	} {
		if r.spec == nil {
			continue
		}
		errs = append(errs, validateResources(r.spec, r.path)...)
		c.Resources[r.container] = *r.spec.DeepCopy()
	}

	ep := sp.Child("apiServer", "expose")
	ex := spec.APIServer.Expose
	c.Service = ServiceExtras{NodePort: ex.NodePort, KonnectivityNodePort: ex.KonnectivityNodePort,
		LoadBalancerClass: cloneStringPtr(ex.LoadBalancerClass), Annotations: maps.Clone(ex.Annotations)}
	if c.ExposeType != v1alpha1.ExposeNodePort {
		if ex.NodePort != 0 {
			errs = append(errs, field.Forbidden(ep.Child("nodePort"), "only with type NodePort"))
		}
		if ex.KonnectivityNodePort != 0 {
			errs = append(errs, field.Forbidden(ep.Child("konnectivityNodePort"), "only with type NodePort"))
		}
	}
	if ex.KonnectivityNodePort != 0 && !c.Konnectivity {
		errs = append(errs, field.Forbidden(ep.Child("konnectivityNodePort"), "only with Konnectivity enabled"))
	}
	if ex.NodePort != 0 && ex.NodePort == ex.KonnectivityNodePort {
		errs = append(errs, field.Duplicate(ep.Child("konnectivityNodePort"), ex.KonnectivityNodePort))
	}
	if cls := ex.LoadBalancerClass; cls != nil {
		if c.ExposeType != v1alpha1.ExposeLoadBalancer {
			errs = append(errs, field.Forbidden(ep.Child("loadBalancerClass"), "only with type LoadBalancer"))
		}
		for _, msg := range validation.IsQualifiedName(*cls) {
			errs = append(errs, field.Invalid(ep.Child("loadBalancerClass"), *cls, msg))
		}
	}
	errs = append(errs, apivalidation.ValidateAnnotations(ex.Annotations, ep.Child("annotations"))...)
	return errs
}

// validateResources refuses what the admin cluster would refuse only when
// the workload is applied, with a less helpful message: a request above its
// limit, and resource claims, which control plane pods have no use for.
func validateResources(r *corev1.ResourceRequirements, fp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(r.Claims) > 0 {
		errs = append(errs, field.Forbidden(fp.Child("claims"), "control plane pods take no resource claims"))
	}
	for _, name := range slices.Sorted(maps.Keys(r.Requests)) {
		req := r.Requests[name]
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			errs = append(errs, field.Invalid(fp.Child("requests").Key(string(name)), req.String(),
				"must not be above its limit "+lim.String()))
		}
	}
	return errs
}

// resources are the container's resources: the spec's, else the default
// requests.
func (c *Cluster) resources(container, cpu, memory string) corev1.ResourceRequirements {
	if r, ok := c.Resources[container]; ok {
		return *r.DeepCopy()
	}
	return requests(cpu, memory)
}

// placePod applies spec.placement to a control plane pod of component:
// node selector, tolerations, priority class, anti-affinity between its
// replicas by hostname (preferred or required) and a best-effort spread
// across zones.
func (c *Cluster) placePod(pod *corev1.PodSpec, component string) {
	pod.NodeSelector = maps.Clone(c.Placement.NodeSelector)
	for i := range c.Placement.Tolerations {
		pod.Tolerations = append(pod.Tolerations, *c.Placement.Tolerations[i].DeepCopy())
	}
	pod.PriorityClassName = c.Placement.PriorityClassName
	sel := &metav1.LabelSelector{MatchLabels: c.selector(component)}
	term := corev1.PodAffinityTerm{LabelSelector: sel, TopologyKey: corev1.LabelHostname}
	anti := &corev1.PodAntiAffinity{}
	if c.Placement.Spread == v1alpha1.SpreadRequired {
		anti.RequiredDuringSchedulingIgnoredDuringExecution = []corev1.PodAffinityTerm{term}
	} else {
		anti.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: term}}
	}
	pod.Affinity = &corev1.Affinity{PodAntiAffinity: anti}
	pod.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew:           1,
		TopologyKey:       corev1.LabelTopologyZone,
		WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector:     &metav1.LabelSelector{MatchLabels: c.selector(component)},
	}}
}

// serviceExtras applies the Service settings of spec.apiServer.expose.
func (c *Cluster) serviceExtras(svc *corev1.Service) {
	if len(c.Service.Annotations) > 0 {
		svc.Annotations = maps.Clone(c.Service.Annotations)
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		svc.Spec.LoadBalancerClass = cloneStringPtr(c.Service.LoadBalancerClass)
	}
	if svc.Spec.Type != corev1.ServiceTypeNodePort {
		return
	}
	for i := range svc.Spec.Ports {
		switch p := &svc.Spec.Ports[i]; {
		case p.Name == "https":
			p.NodePort = c.Service.NodePort
		case strings.HasPrefix(p.Name, "konnectivity"):
			p.NodePort = c.Service.KonnectivityNodePort
		}
	}
}

package tenantcluster

import (
	"fmt"
	"slices"
	"strings"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/build"
)

// namedCertificate is a Certificate the reconciler applied, with what it read
// back (nil when it could not be read).
type namedCertificate struct {
	name string
	cert *cmapi.Certificate
}

// certificateReady is true only when cert-manager has issued the current
// spec: a Ready condition left over from before a spec change (new SANs
// after the load balancer got its address) must not count, or the control
// plane would start with a certificate that lacks the new names.
func certificateReady(cert *cmapi.Certificate) bool {
	if cert == nil {
		return false
	}
	for _, c := range cert.Status.Conditions {
		if c.Type == cmapi.CertificateConditionReady {
			return c.Status == cmmeta.ConditionTrue && c.ObservedGeneration >= cert.Generation
		}
	}
	return false
}

// certificatesCondition is CertificatesReady: True when every Certificate is
// issued for its current spec; otherwise its message names the ones still
// pending, in the builders' order (CAs first), so the first name is usually
// the one holding the others up.
func certificatesCondition(certs []namedCertificate) (metav1.Condition, bool) {
	var pending []string
	for _, c := range certs {
		if !certificateReady(c.cert) {
			pending = append(pending, c.name)
		}
	}
	if len(pending) == 0 {
		return metav1.Condition{
			Type: v1alpha1.ConditionCertificatesReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonIssued,
			Message: fmt.Sprintf("all %d certificates are issued", len(certs)),
		}, true
	}
	return metav1.Condition{
		Type: v1alpha1.ConditionCertificatesReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonIssuing,
		Message: fmt.Sprintf("%d of %d certificates not ready: %s", len(pending), len(certs), strings.Join(pending, ", ")),
	}, false
}

// etcdCondition is EtcdReady from the StatefulSet's ready replicas. A member
// is ready only when it has quorum (its readiness probe is /readyz), so
// "all replicas ready" means a healthy, fully replicated cluster. A status
// the StatefulSet controller has not yet written for the current generation
// counts as not ready: it describes an older spec.
func etcdCondition(sts *appsv1.StatefulSet) (metav1.Condition, bool) {
	want := int32(1)
	if sts != nil && sts.Spec.Replicas != nil {
		want = *sts.Spec.Replicas
	}
	switch {
	case sts == nil:
		return notReady(v1alpha1.ConditionEtcdReady, v1alpha1.ReasonMembersNotReady, "the etcd StatefulSet does not exist yet"), false
	case sts.Status.ObservedGeneration < sts.Generation:
		return notReady(v1alpha1.ConditionEtcdReady, v1alpha1.ReasonMembersNotReady,
			fmt.Sprintf("%d/%d etcd members ready; no pods running yet for generation %d of the StatefulSet", sts.Status.ReadyReplicas, want, sts.Generation)), false
	case sts.Status.ReadyReplicas < want:
		return notReady(v1alpha1.ConditionEtcdReady, v1alpha1.ReasonMembersNotReady,
			fmt.Sprintf("%d/%d etcd members ready", sts.Status.ReadyReplicas, want)), false
	}
	return metav1.Condition{
		Type: v1alpha1.ConditionEtcdReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonMembersReady,
		Message: fmt.Sprintf("%d/%d etcd members ready", sts.Status.ReadyReplicas, want),
	}, true
}

// deploymentAvailable reports whether every desired replica of the current
// generation is available, with a message saying how far it is.
func deploymentAvailable(d *appsv1.Deployment, what string) (bool, string) {
	if d == nil {
		return false, what + " Deployment does not exist yet"
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	if d.Status.ObservedGeneration < d.Generation {
		return false, fmt.Sprintf("%s: %d/%d replicas available; no pods running yet for generation %d of the Deployment",
			what, d.Status.AvailableReplicas, want, d.Generation)
	}
	msg := fmt.Sprintf("%s: %d/%d replicas available", what, d.Status.AvailableReplicas, want)
	return d.Status.AvailableReplicas >= want, msg
}

// rolledOut is true when a Deployment runs only pods of its current
// template: every replica updated and available and no old pod left. Only
// then do all its pods run the version of the current spec.
func rolledOut(d *appsv1.Deployment) bool {
	if d == nil || d.Status.ObservedGeneration < d.Generation {
		return false
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	return d.Status.UpdatedReplicas == want && d.Status.AvailableReplicas == want && d.Status.Replicas == want
}

// apiServerCondition is APIServerReady from the kube-apiserver Deployment.
func apiServerCondition(d *appsv1.Deployment) (metav1.Condition, bool) {
	ok, msg := deploymentAvailable(d, "kube-apiserver")
	if !ok {
		return notReady(v1alpha1.ConditionAPIServerReady, v1alpha1.ReasonNotAvailable, msg), false
	}
	return metav1.Condition{Type: v1alpha1.ConditionAPIServerReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAvailable, Message: msg}, true
}

// readyCondition summarises the others. It lists every reason the control
// plane is not ready rather than only the first, so one look at the
// condition tells the whole story.
func readyCondition(conds []metav1.Condition, extra []string) metav1.Condition {
	var why []string
	reason := ""
	for _, c := range conds {
		if c.Status != metav1.ConditionTrue {
			why = append(why, c.Type+": "+c.Message)
			if reason == "" {
				reason = c.Type + "False"
			}
		}
	}
	why = append(why, extra...)
	if len(why) == 0 {
		return metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonControlPlaneReady,
			Message: "the control plane is running"}
	}
	if reason == "" {
		reason = v1alpha1.ReasonNotAvailable
	}
	return notReady(v1alpha1.ConditionReady, reason, strings.Join(why, "; "))
}

func notReady(typ, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: reason, Message: msg}
}

// decideEtcdState says whether etcd members start with
// --initial-cluster-state=new or existing. "new" is only right for the very
// first bootstrap; afterwards a member that starts with an empty data
// directory must join, never bootstrap a second cluster. Observable facts:
//   - a StatefulSet that already says "existing" keeps it (switching back
//     would roll every member for nothing);
//   - a StatefulSet with a ready member has bootstrapped: readiness needs
//     quorum, so a cluster exists. Switching rolls the members once, one at
//     a time, and each keeps its data;
//   - no StatefulSet but volumes of earlier members (a TenantCluster
//     recreated after deletion with volumeReclaimPolicy Retain): the data
//     is a cluster that already exists;
//   - otherwise nothing was ever bootstrapped.
func decideEtcdState(sts *appsv1.StatefulSet, existingVolumes int) build.EtcdClusterState {
	if sts == nil {
		if existingVolumes > 0 {
			return build.EtcdClusterExisting
		}
		return build.EtcdClusterNew
	}
	if etcdStateOf(sts) == build.EtcdClusterExisting || sts.Status.ReadyReplicas > 0 {
		return build.EtcdClusterExisting
	}
	return build.EtcdClusterNew
}

// etcdStateOf reads --initial-cluster-state back from a StatefulSet.
func etcdStateOf(sts *appsv1.StatefulSet) build.EtcdClusterState {
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name != build.ComponentEtcd {
			continue
		}
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--initial-cluster-state="); ok {
				return build.EtcdClusterState(v)
			}
		}
	}
	return ""
}

// observedAddress is the address the admin cluster published for the API
// server Service, fed back into the builders (certificate SANs, advertise
// address): the first load balancer ingress, or for NodePort the node
// address chosen by nodeAddress. Empty while unknown.
func observedAddress(svc *corev1.Service, nodeAddr string) string {
	if svc == nil {
		return ""
	}
	switch svc.Spec.Type {
	case corev1.ServiceTypeLoadBalancer:
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				return in.IP
			}
			if in.Hostname != "" {
				return in.Hostname
			}
		}
	case corev1.ServiceTypeNodePort:
		return nodeAddr
	}
	return ""
}

// endpointPort is the port clients use on the external address: the node
// port for NodePort (the Service port exists only inside the admin
// cluster), else the Service port. Zero while the node port is unallocated.
func endpointPort(svc *corev1.Service, servicePort int32) int32 {
	if svc == nil {
		return 0
	}
	if svc.Spec.Type != corev1.ServiceTypeNodePort {
		return servicePort
	}
	for _, p := range svc.Spec.Ports {
		if p.Port == servicePort {
			return p.NodePort
		}
	}
	return 0
}

// endpointURL is status.endpoint: https://address:port, or "" while either
// is unknown.
func endpointURL(address string, port int32) string {
	if address == "" || port == 0 {
		return ""
	}
	if strings.Contains(address, ":") { // IPv6 literal
		return fmt.Sprintf("https://[%s]:%d", address, port)
	}
	return fmt.Sprintf("https://%s:%d", address, port)
}

// nodeAddress picks the address NodePort clients use: among Ready nodes,
// sorted by name so the choice is stable across reconciles (a change would
// reissue the serving certificate and roll the API servers), the first
// ExternalIP, else the first InternalIP.
func nodeAddress(nodes []corev1.Node) string {
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	pick := func(t corev1.NodeAddressType) string {
		for _, n := range sorted {
			if !nodeReady(&n) {
				continue
			}
			for _, a := range n.Status.Addresses {
				if a.Type == t && a.Address != "" {
					return a.Address
				}
			}
		}
		return ""
	}
	if a := pick(corev1.NodeExternalIP); a != "" {
		return a
	}
	return pick(corev1.NodeInternalIP)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// followerVersion is the Kubernetes version kube-controller-manager and
// kube-scheduler run. They must never be newer than any API server (the
// version skew policy), so during an upgrade they keep the version the
// cluster last ran everywhere (status.observedVersion) until every API
// server pod runs the desired version; then they follow.
func followerVersion(desired, observed string, api *appsv1.Deployment) string {
	if observed == "" || observed == desired {
		return desired
	}
	if rolledOut(api) && runsVersion(api, desired) {
		return desired
	}
	return observed
}

// runsVersion says whether the Deployment's template runs kube-apiserver
// images of the given version tag.
func runsVersion(d *appsv1.Deployment, version string) bool {
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == build.ComponentAPIServer {
			return strings.HasSuffix(c.Image, ":"+version)
		}
	}
	return false
}

package tenantcluster

import (
	"fmt"
	"strings"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
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
		if c.Name == desired.ComponentAPIServer {
			return strings.HasSuffix(c.Image, ":"+version)
		}
	}
	return false
}

// addonsWaitingForAPIServer is AddonsReady while the tenant API server is
// not available: decided by reconcileTenant when it runs, and by the
// deferred status write when the pass stopped before it.
func addonsWaitingForAPIServer() metav1.Condition {
	return notReady(v1alpha1.ConditionAddonsReady, v1alpha1.ReasonWaitingForAPIServer, "waiting for the tenant API server")
}

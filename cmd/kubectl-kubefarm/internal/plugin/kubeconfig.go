package plugin

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// AdminKubeconfigKey is the key of the kubeconfig in the Secret that
// status.adminKubeconfigSecret names. It repeats
// controllers/tenantcluster.AdminKubeconfigKey rather than importing it,
// which would link the controller and cert-manager into the plugin; a test
// keeps the two equal.
const AdminKubeconfigKey = "kubeconfig"

// AdminKubeconfigSecret is the name of tc's admin kubeconfig Secret, or an
// error that says why there is none yet. The controller writes
// status.adminKubeconfigSecret only once the Secret holds a kubeconfig
// clients can use (issued certificates and a known external endpoint), so
// the status field, not the conventional name, is what says it exists.
func AdminKubeconfigSecret(tc *v1alpha1.TenantCluster) (string, error) {
	if name := tc.Status.AdminKubeconfigSecret; name != "" {
		return name, nil
	}
	return "", fmt.Errorf("TenantCluster %s/%s has no admin kubeconfig yet (status.adminKubeconfigSecret is empty): %s",
		tc.Namespace, tc.Name, notYetWhy(tc))
}

// notYetWhy names what holds the admin kubeconfig back, in the order the
// controller needs it: the admin certificate, then the endpoint clients
// reach the API server at.
func notYetWhy(tc *v1alpha1.TenantCluster) string {
	conds := tc.Status.Conditions
	if len(conds) == 0 {
		return "it has no conditions: kubefarm-manager has not reconciled it (is the manager running?)"
	}
	if c := meta.FindStatusCondition(conds, v1alpha1.ConditionCertificatesReady); c == nil || c.Status != metav1.ConditionTrue {
		return "its " + describeCondition(v1alpha1.ConditionCertificatesReady, c)
	}
	if tc.Status.Endpoint == "" {
		why := "its external endpoint (status.endpoint) is not known yet"
		if spec := tc.Spec.APIServer.Expose.Type; spec == v1alpha1.ExposeLoadBalancer || spec == "" {
			why += ", which for a LoadBalancer waits for the Service's address"
		}
		return why + "; " + describeCondition(v1alpha1.ConditionReady, meta.FindStatusCondition(conds, v1alpha1.ConditionReady))
	}
	return "the controller has not written it yet; " +
		describeCondition(v1alpha1.ConditionReady, meta.FindStatusCondition(conds, v1alpha1.ConditionReady))
}

// describeCondition is "<type> condition is <status> (<reason>): <message>".
func describeCondition(typ string, c *metav1.Condition) string {
	if c == nil {
		return typ + " condition is not set yet"
	}
	s := fmt.Sprintf("%s condition is %s (%s)", typ, c.Status, c.Reason)
	if c.Message != "" {
		s += ": " + c.Message
	}
	return s
}

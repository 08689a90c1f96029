package desired

import (
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Probes and lifecycle hooks are run by the kubelet, from the node's network
// namespace. httpGet.host and tcpSocket.host let a pod choose the address,
// which turns every node into a proxy a tenant user can point anywhere the
// node can reach: the node's own services on localhost, the boot network,
// the admin cluster's control plane (server-side request forgery). Without
// host the kubelet dials the pod's own IP, which is all a probe needs.
// gRPC probes and exec have no address; sleep hooks have none either.

// containerLists are the Pod's container lists the policy checks. Ephemeral
// containers may not have probes or lifecycle hooks at all (API validation
// forbids them), so checking them is defence in depth that costs nothing.
var containerLists = []string{"containers", "initContainers", "ephemeralContainers"}

var handlerPaths = []string{"livenessProbe", "readinessProbe", "startupProbe", "lifecycle.postStart", "lifecycle.preStop"}

// celNoHost is a CEL expression, true when handler h (e.g. "c.livenessProbe")
// is absent or sets no host. Every field access is guarded by has(): absent
// fields are the common case and an unguarded access is a runtime error,
// which under failurePolicy Fail would reject the pod. An empty host counts
// as unset, as it does for the kubelet.
func celNoHost(h string) string {
	var parts []string
	for _, a := range []string{"httpGet", "tcpSocket"} {
		x := h + "." + a
		parts = append(parts, fmt.Sprintf("(!has(%[1]s) || !has(%[1]s.host) || %[1]s.host == '')", x))
	}
	// Lifecycle handlers are nested one level deeper; guard each level.
	guard := []string{}
	segs := strings.Split(h, ".")
	for i := 2; i <= len(segs); i++ {
		guard = append(guard, "has("+strings.Join(segs[:i], ".")+")")
	}
	return fmt.Sprintf("(!(%s) || (%s))", strings.Join(guard, " && "), strings.Join(parts, " && "))
}

// celContainerOK is true when container c sets no host in any handler.
func celContainerOK() string {
	var parts []string
	for _, h := range handlerPaths {
		parts = append(parts, celNoHost("c."+h))
	}
	return strings.Join(parts, " && ")
}

// probeHostValidations is one validation per container list, so the message
// names the list, and the messageExpression the offending containers.
// all() and filter() are linear in the number of containers and each
// container's check is a fixed number of field tests, which keeps the cost
// of an expression far below the per-expression limit.
func probeHostValidations() []admissionv1.Validation {
	ok := celContainerOK()
	out := make([]admissionv1.Validation, 0, len(containerLists))
	for _, l := range containerLists {
		list := "object.spec." + l
		msg := fmt.Sprintf("spec.%s[*]: httpGet.host and tcpSocket.host of livenessProbe, readinessProbe, startupProbe "+
			"and lifecycle.postStart/preStop are not allowed: they make the kubelet connect to an arbitrary address", l)
		out = append(out, admissionv1.Validation{
			Expression: fmt.Sprintf("!has(%[1]s) || %[1]s.all(c, %[2]s)", list, ok),
			Message:    msg,
			MessageExpression: fmt.Sprintf("'spec.%[1]s[*] (' + %[2]s.filter(c, !(%[3]s)).map(c, c.name).join(', ') + "+
				"'): httpGet.host and tcpSocket.host of probes and lifecycle hooks are not allowed: "+
				"they make the kubelet connect to an arbitrary address'", l, list, ok),
			Reason: ptrTo(metav1.StatusReasonInvalid),
		})
	}
	return out
}

// probeHostPolicy builds the ValidatingAdmissionPolicy that rejects pods
// whose probes or lifecycle hooks set a host, and its binding (a policy does
// nothing unbound), which denies rather than warns or audits.
//
// It matches CREATE of pods and UPDATE of pods/ephemeralcontainers, the only
// writes that can introduce a handler: probes and lifecycle hooks of
// existing containers are immutable. Matching every UPDATE of pods would
// add nothing and would block metadata changes of pods created before the
// policy existed (a controller removing its finalizer would be refused, and
// the pod would never go away). Pod templates (Deployments, Jobs, ...) are
// not checked: the pods they create are, and the controller reports the
// refusal in its events. failurePolicy Fail: a policy that cannot be
// evaluated must not let pods through.
func probeHostPolicy() (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	fail := admissionv1.Fail
	rule := func(op admissionv1.OperationType, resource string) admissionv1.NamedRuleWithOperations {
		return admissionv1.NamedRuleWithOperations{RuleWithOperations: admissionv1.RuleWithOperations{
			Operations: []admissionv1.OperationType{op},
			Rule: admissionv1.Rule{
				APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{resource},
			},
		}}
	}
	return &admissionv1.ValidatingAdmissionPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
			ObjectMeta: addonMeta("", ProbeHostPolicyName, nil),
			Spec: admissionv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: &fail,
				MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{
					rule(admissionv1.Create, "pods"),
					rule(admissionv1.Update, "pods/ephemeralcontainers"),
				}},
				Validations: probeHostValidations(),
			},
		}, &admissionv1.ValidatingAdmissionPolicyBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
			ObjectMeta: addonMeta("", ProbeHostPolicyName, nil),
			Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        ProbeHostPolicyName,
				ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			},
		}
}

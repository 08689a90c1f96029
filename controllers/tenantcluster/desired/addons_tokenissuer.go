package desired

import (
	"encoding/base64"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

// TokenIssuerPolicyName names the ValidatingAdmissionPolicy (and its
// binding) that narrows the token issuer's "create Secrets in kube-system"
// down to kubefarm bootstrap tokens.
const TokenIssuerPolicyName = "kubefarm-token-issuer"

// The token issuer's RBAC (TokenIssuerRBAC) is create on Secrets of
// kube-system, which RBAC cannot narrow further. A Secret is more than a
// bootstrap token, though: a kubernetes.io/service-account-token Secret
// annotated with a controller's ServiceAccount is filled with that
// account's token by kube-controller-manager, and several of those accounts
// can make themselves cluster-admin; a bootstrap token with another extra
// group could carry whatever a tenant admin bound to that group; one with
// usage-bootstrap-signing could sign cluster-info. The policy lets the
// issuer create exactly what bootstraptoken.Secret builds, and nothing else.

// tokenIssuerVariables are computed once per request. The request's
// subResource and namespace are absent, not empty, when there is none, so
// they are read behind has(). isTokenCreate is the
// one kind of request the issuer may make; every validation of the object
// is guarded by it, so that any other request is refused by the first
// validation alone, with its message, rather than by a runtime error of an
// expression that reads an object a DELETE does not have.
func tokenIssuerVariables() []admissionv1.Variable {
	return []admissionv1.Variable{{
		Name: "isTokenCreate",
		Expression: fmt.Sprintf("request.operation == 'CREATE' && request.resource.group == '' && "+
			"request.resource.resource == 'secrets' && (!has(request.subResource) || request.subResource == '') && "+
			"has(request.namespace) && request.namespace == '%s'", bootstraptoken.Namespace),
	}}
}

// tokenIssuerValidations are the rules of a token the issuer may create.
//
// Secret data reaches CEL as the API's JSON has it, base64 text (tested
// against a real API server: the schema's "format: byte" gives no bytes
// value here, and CEL in Kubernetes has no base64 decoder), so a value is
// compared with its base64 encoding, computed here. The API server
// decodes whatever base64 the client sent and encodes it again the
// standard way before admission, so the comparison is exact; stringData is
// merged into data before admission too, so it cannot slip anything past.
func tokenIssuerValidations() []admissionv1.Validation {
	const who = "kubefarm:token-issuer may only create kubefarm bootstrap tokens: "
	guarded := func(expr string) string { return "!variables.isTokenCreate || (" + expr + ")" }
	data := func(key string) string { return fmt.Sprintf("has(object.data) && '%[1]s' in object.data", key) }
	b64 := func(v string) string { return base64.StdEncoding.EncodeToString([]byte(v)) }
	return []admissionv1.Validation{
		{
			Expression: "variables.isTokenCreate",
			Message:    who + "the only request allowed is the creation of a Secret in " + bootstraptoken.Namespace,
			MessageExpression: fmt.Sprintf("'%s' + request.operation + ' of ' + request.resource.resource + "+
				"(has(request.subResource) && request.subResource != '' ? '/' + request.subResource : '') + "+
				"(has(request.namespace) && request.namespace != '' ? ' in namespace ' + request.namespace : '') + ' is not allowed'", who),
			Reason: ptrTo(metav1.StatusReasonForbidden),
		},
		{
			Expression: guarded(fmt.Sprintf("has(object.type) && object.type == '%s'", corev1.SecretTypeBootstrapToken)),
			Message:    who + "the Secret's type must be " + string(corev1.SecretTypeBootstrapToken),
			Reason:     ptrTo(metav1.StatusReasonForbidden),
		},
		{
			// The authenticator finds a token's Secret by this name, and
			// accepts it only if its token-id is the name's suffix: a
			// Secret whose token-id differs is no token at all, so the
			// name is all there is to check.
			Expression: guarded(fmt.Sprintf("object.metadata.name.matches('^%s[a-z0-9]{6}$')", bootstraptoken.SecretPrefix)),
			Message:    who + "the Secret must be named " + bootstraptoken.SecretPrefix + "<token-id>, [a-z0-9]{6}",
			Reason:     ptrTo(metav1.StatusReasonForbidden),
		},
		{
			Expression: guarded(fmt.Sprintf("%s && object.data['%s'] == '%s'",
				data(bootstraptoken.KeyExtraGroups), bootstraptoken.KeyExtraGroups, b64(bootstraptoken.DefaultGroup))),
			Message: who + bootstraptoken.KeyExtraGroups + " must be exactly " + bootstraptoken.DefaultGroup,
			Reason:  ptrTo(metav1.StatusReasonForbidden),
		},
		{
			Expression: guarded(fmt.Sprintf("!(%s) || object.data['%s'] != '%s'",
				data(bootstraptoken.KeyUsageSign), bootstraptoken.KeyUsageSign, b64("true"))),
			Message: who + "the token may not sign cluster-info (" + bootstraptoken.KeyUsageSign + ")",
			Reason:  ptrTo(metav1.StatusReasonForbidden),
		},
		{
			Expression: guarded(fmt.Sprintf("has(object.metadata.labels) && '%[1]s' in object.metadata.labels && "+
				"object.metadata.labels['%[1]s'] != ''", v1alpha1.LabelMachine)),
			Message: who + "the Secret must name its Machine in label " + v1alpha1.LabelMachine,
			Reason:  ptrTo(metav1.StatusReasonForbidden),
		},
	}
}

// TokenIssuerPolicy builds the policy and its binding, applied in every
// tenant (there is no switch: without it the token issuer is cluster-admin
// two steps away). It matches every
// request of every resource, and by a match condition only the token
// issuer's: other users' requests are not evaluated at all. Reads are not
// admitted, so RBAC alone keeps the issuer from them. failurePolicy Fail: a
// policy that cannot be evaluated must not let a Secret through.
func TokenIssuerPolicy() (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	fail := admissionv1.Fail
	return &admissionv1.ValidatingAdmissionPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
			ObjectMeta: addonMeta("", TokenIssuerPolicyName, nil),
			Spec: admissionv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: &fail,
				MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionv1.RuleWithOperations{
						Operations: []admissionv1.OperationType{admissionv1.OperationAll},
						Rule: admissionv1.Rule{
							APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"},
						},
					},
				}}},
				MatchConditions: []admissionv1.MatchCondition{{
					Name:       "token-issuer",
					Expression: fmt.Sprintf("request.userInfo.username == '%s'", UserTokenIssuer),
				}},
				Variables:   tokenIssuerVariables(),
				Validations: tokenIssuerValidations(),
			},
		}, &admissionv1.ValidatingAdmissionPolicyBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
			ObjectMeta: addonMeta("", TokenIssuerPolicyName, nil),
			Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        TokenIssuerPolicyName,
				ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			},
		}
}

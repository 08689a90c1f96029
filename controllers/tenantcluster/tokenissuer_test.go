package tenantcluster_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

// TestTokenIssuerPolicy applies the token issuer's Role, binding and
// admission policy, as the add-ons do, to the real API server (standing in
// for a tenant) and acts as kubefarm:token-issuer by impersonation: it may
// create a kubefarm bootstrap token and nothing else, not even another kind
// of Secret in kube-system, which its Role alone would allow.
func TestTokenIssuerPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	role, binding := desired.TokenIssuerRBAC()
	policy, policyBinding := desired.TokenIssuerPolicy()
	for _, o := range []client.Object{role, binding, policy, policyBinding} {
		// kube-system appears shortly after the API server starts; the
		// add-ons may already be there from another test's tenant.
		poll(ctx, t, "creating "+desired.ObjectName(o), time.Minute, func(ctx context.Context) (bool, string, error) {
			err := env.Client.Create(ctx, o.DeepCopyObject().(client.Object))
			if apierrors.IsNotFound(err) {
				return false, err.Error(), nil
			}
			return err == nil || apierrors.IsAlreadyExists(err), "", client.IgnoreAlreadyExists(err)
		})
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: desired.UserTokenIssuer}
	issuer, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	// token is a Secret as kubefarm-pxe builds it, for machine m1.
	token := func(edit func(*corev1.Secret)) *corev1.Secret {
		tok, err := bootstraptoken.Generate(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		s := bootstraptoken.Secret(tok, bootstraptoken.Options{Machine: "m1", TTL: time.Hour})
		if edit != nil {
			edit(s)
		}
		return s
	}
	serviceAccountToken := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubefarm-escalate",
			Annotations: map[string]string{corev1.ServiceAccountNameKey: "clusterrole-aggregation-controller"}},
		Type: corev1.SecretTypeServiceAccountToken,
	}
	const policyDenied = "ValidatingAdmissionPolicy '" + desired.TokenIssuerPolicyName + "'"
	// The policy is in force once the API server's policy informer has it:
	// until then the dry run of a service-account token Secret passes RBAC.
	poll(ctx, t, "the policy refuses a service-account token Secret", time.Minute, func(ctx context.Context) (bool, string, error) {
		err := issuer.Create(ctx, serviceAccountToken.DeepCopy(), client.DryRunAll)
		if err == nil {
			return false, "dry run accepted", nil
		}
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), policyDenied), err.Error(), nil
	})

	t.Run("a kubefarm bootstrap token is created", func(t *testing.T) {
		tok, err := bootstraptoken.Issue(ctx, issuer, bootstraptoken.Options{Machine: "m1", TTL: time.Hour})
		if err != nil {
			t.Fatalf("Issue as the token issuer: %v", err)
		}
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: bootstraptoken.SecretName(tok.ID)}, s); err != nil {
			t.Fatal(err)
		}
		// Nor may the issuer read, list or delete it afterwards.
		rbacDenied(t, "get", issuer.Get(ctx, client.ObjectKeyFromObject(s), &corev1.Secret{}))
		rbacDenied(t, "delete", issuer.Delete(ctx, s))
		rbacDenied(t, "delete", bootstraptoken.Revoke(ctx, issuer, tok.ID))
	})

	for _, tc := range []struct {
		name   string
		secret *corev1.Secret
		msg    string
	}{
		{"a service-account token Secret", serviceAccountToken, "the Secret's type must be " + string(corev1.SecretTypeBootstrapToken)},
		{"an Opaque Secret named like a token", token(func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque }), "type must be"},
		{"a token Secret named otherwise", token(func(s *corev1.Secret) { s.Name = "kubefarm-token" }), "must be named bootstrap-token-<token-id>"},
		{"a token name that is no token id", token(func(s *corev1.Secret) { s.Name = bootstraptoken.SecretName("abc-1234") }), "must be named"},
		{"a token with another extra group", token(func(s *corev1.Secret) {
			s.Data[bootstraptoken.KeyExtraGroups] = []byte(bootstraptoken.DefaultGroup + ",system:bootstrappers:admins")
		}), "auth-extra-groups must be exactly " + bootstraptoken.DefaultGroup},
		{"another extra group through stringData", token(func(s *corev1.Secret) {
			delete(s.Data, bootstraptoken.KeyExtraGroups)
			s.StringData = map[string]string{bootstraptoken.KeyExtraGroups: "system:bootstrappers:admins"}
		}), "auth-extra-groups must be exactly"},
		{"a token without extra groups", token(func(s *corev1.Secret) { delete(s.Data, bootstraptoken.KeyExtraGroups) }), "auth-extra-groups must be exactly"},
		{"a token that may sign cluster-info", token(func(s *corev1.Secret) { s.Data[bootstraptoken.KeyUsageSign] = []byte("true") }),
			"may not sign cluster-info"},
		{"a token without the machine label", token(func(s *corev1.Secret) { s.Labels = nil }), "must name its Machine in label " + v1alpha1.LabelMachine},
		{"a token with an empty machine label", token(func(s *corev1.Secret) { s.Labels[v1alpha1.LabelMachine] = "" }), "must name its Machine"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			err := issuer.Create(ctx, tc.secret.DeepCopy())
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), policyDenied) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("create: %v; want the policy's refusal saying %q", err, tc.msg)
			}
		})
	}

	t.Run("RBAC: no reads, nothing elsewhere", func(t *testing.T) {
		rbacDenied(t, "list", issuer.List(ctx, &corev1.SecretList{}, client.InNamespace("kube-system")))
		rbacDenied(t, "get", issuer.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "anything"}, &corev1.Secret{}))
		elsewhere := token(nil)
		elsewhere.Namespace = "default"
		rbacDenied(t, "create", issuer.Create(ctx, elsewhere))
	})

	t.Run("the policy holds where RBAC is widened", func(t *testing.T) {
		// A tenant admin grants the issuer more; the policy still allows
		// only the token.
		wider := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "test:token-issuer-wider"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"*"}}}}
		widerBinding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "test:token-issuer-wider"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: wider.Name},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: desired.UserTokenIssuer}}}
		for _, o := range []client.Object{wider, widerBinding} {
			if err := env.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubefarm-test-issuer"}}
		poll(ctx, t, "a ConfigMap refused by the policy once RBAC allows it", time.Minute, func(ctx context.Context) (bool, string, error) {
			err := issuer.Create(ctx, cm.DeepCopy())
			if err == nil {
				return false, "", fmt.Errorf("the issuer created a ConfigMap")
			}
			return apierrors.IsForbidden(err) && strings.Contains(err.Error(), policyDenied) &&
				strings.Contains(err.Error(), "CREATE of configmaps in namespace kube-system is not allowed"), err.Error(), nil
		})
		s := token(nil)
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		err := issuer.Delete(ctx, s)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "DELETE of secrets in namespace kube-system is not allowed") {
			t.Errorf("delete with RBAC allowing it: %v; want the policy's refusal", err)
		}
	})

	t.Run("other users are not affected", func(t *testing.T) {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", GenerateName: "kubefarm-test-"}, Type: corev1.SecretTypeOpaque}
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatalf("an admin's Opaque Secret in kube-system: %v", err)
		}
	})
}

// rbacDenied checks that err is RBAC's refusal of verb, not the policy's.
func rbacDenied(t *testing.T, verb string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `cannot `+verb+` resource "secrets"`) {
		t.Errorf("%s as the token issuer: %v; want RBAC's 403", verb, err)
	}
}

package jointoken_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
	"github.com/kubefarm/kubefarm/pxe/jointoken"
)

// TestIssueAgainstAPIServer runs the whole chain on a real kube-apiserver
// (started with --enable-bootstrap-token-auth), which plays both clusters:
// as the admin cluster it holds the credential Secret, read by an identity
// with only kubefarm-pxe's namespaced Role through the restricted cache; as
// the tenant it holds the token issuer's Role, built by the same builder the
// TenantCluster controller applies, bound to a client certificate user
// kubefarm:token-issuer. The issued token must then authenticate as a
// kubefarm bootstrap token.
func TestIssueAgainstAPIServer(t *testing.T) {
	env := testenv.StartT(t, testenv.Options{APIServerFlags: map[string]string{"enable-bootstrap-token-auth": "true"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eventually := func(what string, cond func(context.Context) (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, cond); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// Tenant side: the token issuer's Role, binding and admission
	// policy. kube-system is created by the API server shortly after it
	// starts.
	role, binding := desired.TokenIssuerRBAC()
	policy, policyBinding := desired.TokenIssuerPolicy()
	for _, o := range []client.Object{role, binding, policy, policyBinding} {
		eventually("creating "+o.GetName(), func(ctx context.Context) (bool, error) {
			err := env.Client.Create(ctx, o)
			return err == nil, client.IgnoreNotFound(err)
		})
	}
	dir := t.TempDir()
	path, err := env.WriteKubeconfig(envtest.User{Name: bootstraptoken.IssuerUser}, dir)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	// Admin side: kubefarm-pxe's namespace with the credential, a Secret
	// the cache must not see, and kubefarm-pxe's Role.
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pxeNS}}); err != nil {
		t.Fatal(err)
	}
	cred := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: pxeNS, Name: bootstraptoken.CredentialSecretName("farm", "alpha"),
			Labels: bootstraptoken.CredentialLabels("farm", "alpha")},
		Data: map[string][]byte{bootstraptoken.KeyKubeconfig: kubeconfig},
	}
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: pxeNS, Name: "unrelated"}}
	pxeRole := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: pxeNS, Name: "kubefarm-pxe"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}}},
	}
	pxeBinding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pxeNS, Name: "kubefarm-pxe"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kubefarm-pxe"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "kubefarm-pxe"}},
	}
	for _, o := range []client.Object{cred, other, pxeRole, pxeBinding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	pxeUser, err := env.AddUser(envtest.User{Name: "kubefarm-pxe"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(pxeUser.Config(), jointoken.CacheOptions(pxeNS, cache.Options{Scheme: clientgoscheme.Scheme}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetInformer(ctx, &corev1.Secret{}); err != nil {
		t.Fatal(err)
	}
	stop := testenv.RunManager(c)
	defer stop()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync (does kubefarm-pxe's Role suffice?)")
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(other), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the cache holds a Secret without the credential label (err %v)", err)
	}

	// The policy is in force (the API server's policy informer has it)
	// once it refuses the issuer a Secret that is not a token: the token
	// below is then issued under it.
	asIssuer, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	issuerClient, err := client.New(asIssuer, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eventually("the token issuer policy in force", func(ctx context.Context) (bool, error) {
		err := issuerClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "not-a-token"}}, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), desired.TokenIssuerPolicyName), nil
	})

	is, err := jointoken.New(jointoken.Config{Reader: c, Namespace: pxeNS, TTL: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	value, err := is.Issue(ctx, machine("farm", "m1", "alpha"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := bootstraptoken.Parse(value)
	if err != nil {
		t.Fatal(err)
	}

	// The token authenticates, once the authenticator's informer has it.
	whoami := func(ctx context.Context) (*authenticationv1.SelfSubjectReview, error) {
		cfg := rest.AnonymousClientConfig(env.Config)
		cfg.BearerToken = value
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		return cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	}
	var review *authenticationv1.SelfSubjectReview
	eventually("the join token never authenticated", func(ctx context.Context) (bool, error) {
		review, err = whoami(ctx)
		if apierrors.IsUnauthorized(err) {
			return false, nil
		}
		return err == nil, err
	})
	user := review.Status.UserInfo
	if want := "system:bootstrap:" + tok.ID; user.Username != want {
		t.Errorf("authenticated as %q, want %q", user.Username, want)
	}
	if !slices.Contains(user.Groups, desired.GroupBootstrappers) {
		t.Errorf("groups %v lack %s", user.Groups, desired.GroupBootstrappers)
	}

	s := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: bootstraptoken.SecretName(tok.ID)}, s); err != nil {
		t.Fatal(err)
	}
	if s.Labels[v1alpha1.LabelMachine] != "m1" {
		t.Errorf("labels %v, want the machine's", s.Labels)
	}
	if d := string(s.Data[bootstraptoken.KeyDescription]); d != "kubefarm join token for Machine farm/m1" {
		t.Errorf("description %q", d)
	}
	exp, err := time.Parse(time.RFC3339, string(s.Data[bootstraptoken.KeyExpiration]))
	if err != nil || exp.Before(before.Add(30*time.Minute-time.Second)) || exp.After(time.Now().Add(30*time.Minute)) {
		t.Errorf("expiration %s (%v), want 30m after issuing", s.Data[bootstraptoken.KeyExpiration], err)
	}

	// The token issuer can only issue: neither revoke nor prune (which
	// lists), nor read Secrets anywhere.
	tenant := issuerClient
	if _, err := bootstraptoken.Prune(ctx, tenant, time.Now()); !apierrors.IsForbidden(err) {
		t.Errorf("Prune as the token issuer: %v, want 403", err)
	}
	if err := bootstraptoken.Revoke(ctx, tenant, tok.ID); !apierrors.IsForbidden(err) {
		t.Errorf("Revoke as the token issuer: %v, want 403", err)
	}
	for _, key := range []client.ObjectKey{client.ObjectKeyFromObject(s), {Namespace: pxeNS, Name: "unrelated"}} {
		if err := tenant.Get(ctx, key, &corev1.Secret{}); !apierrors.IsForbidden(err) {
			t.Errorf("the token issuer read Secret %s (err %v)", key, err)
		}
	}

	// No credential for a tenant: an error that says so.
	if _, err := is.Issue(ctx, machine("farm", "m2", "beta")); err == nil {
		t.Error("Issue for a tenant without a credential succeeded")
	}
}

package jointoken_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
	"github.com/kubefarm/kubefarm/pxe/jointoken"
)

const pxeNS = "kubefarm-system"

func kubeconfig(t *testing.T, server string) []byte {
	t.Helper()
	b, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"c": {Server: server}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"u": {Token: "not-a-real-credential"}},
		Contexts:       map[string]*clientcmdapi.Context{"c": {Cluster: "c", AuthInfo: "u"}},
		CurrentContext: "c",
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func credential(t *testing.T, ns, cluster, server string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pxeNS, Name: bootstraptoken.CredentialSecretName(ns, cluster),
			Labels: bootstraptoken.CredentialLabels(ns, cluster),
		},
		Data: map[string][]byte{bootstraptoken.KeyKubeconfig: kubeconfig(t, server)},
	}
}

func machine(ns, name, cluster string) *kubefarmv1.Machine {
	return &kubefarmv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kubefarmv1.MachineSpec{Cluster: cluster}}
}

// fakeTenants hands out one fake tenant per server URL and records every
// client built.
type fakeTenants struct {
	tenants map[string]client.Client
	built   []string
}

func (f *fakeTenants) newClient(cfg *rest.Config) (client.Client, error) {
	f.built = append(f.built, cfg.Host)
	if cfg.Timeout != jointoken.TenantTimeout {
		return nil, errors.New("tenant client without a timeout")
	}
	c, ok := f.tenants[cfg.Host]
	if !ok {
		c = fake.NewClientBuilder().Build()
		f.tenants[cfg.Host] = c
	}
	return c, nil
}

func TestIssue(t *testing.T) {
	ctx := context.Background()
	admin := fake.NewClientBuilder().WithObjects(
		credential(t, "farm", "alpha", "https://alpha.example"),
		credential(t, "farm", "beta", "https://beta.example"),
	).Build()
	tenants := &fakeTenants{tenants: map[string]client.Client{}}
	is, err := jointoken.New(jointoken.Config{Reader: admin, Namespace: pxeNS, TTL: 20 * time.Minute, NewClient: tenants.newClient})
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
		t.Fatalf("Issue returned no token: %v", err)
	}
	// The token is in the machine's tenant, with its label, description
	// and TTL.
	s := &corev1.Secret{}
	if err := tenants.tenants["https://alpha.example"].Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "bootstrap-token-" + tok.ID}, s); err != nil {
		t.Fatalf("token Secret in the tenant: %v", err)
	}
	if s.Labels[kubefarmv1.LabelMachine] != "m1" {
		t.Errorf("labels %v", s.Labels)
	}
	if d := string(s.Data["description"]); d != "kubefarm join token for Machine farm/m1" {
		t.Errorf("description %q", d)
	}
	exp, err := time.Parse(time.RFC3339, string(s.Data["expiration"]))
	if err != nil || exp.Before(before.Add(20*time.Minute-time.Second)) || exp.After(time.Now().Add(20*time.Minute)) {
		t.Errorf("expiration %s (%v), want 20m from now", s.Data["expiration"], err)
	}

	// One client per tenant, reused.
	if _, err := is.Issue(ctx, machine("farm", "m2", "alpha")); err != nil {
		t.Fatal(err)
	}
	if _, err := is.Issue(ctx, machine("farm", "m3", "beta")); err != nil {
		t.Fatal(err)
	}
	if want := []string{"https://alpha.example", "https://beta.example"}; strings.Join(tenants.built, " ") != strings.Join(want, " ") {
		t.Errorf("clients built for %v, want %v", tenants.built, want)
	}

	// The credential changes (a renewed certificate, a new endpoint): the
	// next Issue builds a new client from it.
	cred := &corev1.Secret{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: pxeNS, Name: bootstraptoken.CredentialSecretName("farm", "alpha")}, cred); err != nil {
		t.Fatal(err)
	}
	cred.Data[bootstraptoken.KeyKubeconfig] = kubeconfig(t, "https://alpha-renewed.example")
	if err := admin.Update(ctx, cred); err != nil {
		t.Fatal(err)
	}
	if _, err := is.Issue(ctx, machine("farm", "m4", "alpha")); err != nil {
		t.Fatal(err)
	}
	if n := len(tenants.built); n != 3 || tenants.built[2] != "https://alpha-renewed.example" {
		t.Errorf("after the credential changed, clients built for %v", tenants.built)
	}
}

func TestIssueErrors(t *testing.T) {
	ctx := context.Background()
	mislabelled := credential(t, "farm", "gamma", "https://gamma.example")
	mislabelled.Labels = bootstraptoken.CredentialLabels("other", "gamma")
	noKey := credential(t, "farm", "delta", "https://delta.example")
	noKey.Data = nil
	garbled := credential(t, "farm", "eps", "https://eps.example")
	garbled.Data[bootstraptoken.KeyKubeconfig] = []byte("{{{ not yaml")
	admin := fake.NewClientBuilder().WithObjects(mislabelled, noKey, garbled).Build()
	tenants := &fakeTenants{tenants: map[string]client.Client{}}
	is, err := jointoken.New(jointoken.Config{Reader: admin, Namespace: pxeNS, NewClient: tenants.newClient})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		m       *kubefarmv1.Machine
		want    []string
		noCreds bool
	}{
		{"no cluster", machine("farm", "m1", ""), []string{"spec.cluster"}, false},
		{"no credential", machine("farm", "m1", "alpha"),
			[]string{"TenantCluster farm/alpha", "Secret " + pxeNS + "/" + bootstraptoken.CredentialSecretName("farm", "alpha") + " not found"}, true},
		{"labelled for another tenant", machine("farm", "m1", "gamma"), []string{"labelled for TenantCluster other/gamma"}, false},
		{"no kubeconfig", machine("farm", "m1", "delta"), []string{`no "kubeconfig" key`, "TenantCluster farm/delta"}, false},
		{"garbled kubeconfig", machine("farm", "m1", "eps"), []string{"does not parse"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := is.Issue(ctx, tc.m)
			if err == nil || tok != "" {
				t.Fatalf("Issue = %q, %v; want an error", tok, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if errors.Is(err, jointoken.ErrNoCredential) != tc.noCreds {
				t.Errorf("errors.Is(ErrNoCredential) = %v, want %v", !tc.noCreds, tc.noCreds)
			}
		})
	}
	if len(tenants.built) != 0 {
		t.Errorf("clients built for %v from unusable credentials", tenants.built)
	}

	// A tenant whose API server refuses the token is an error naming the
	// machine and tenant, not a token.
	refusing := fake.NewClientBuilder().WithInterceptorFuncs(interceptorCreateFails()).Build()
	admin = fake.NewClientBuilder().WithObjects(credential(t, "farm", "alpha", "https://alpha.example")).Build()
	is, err = jointoken.New(jointoken.Config{Reader: admin, Namespace: pxeNS,
		NewClient: func(*rest.Config) (client.Client, error) { return refusing, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := is.Issue(ctx, machine("farm", "m1", "alpha")); err == nil || tok != "" ||
		!strings.Contains(err.Error(), "machine farm/m1 in TenantCluster farm/alpha") {
		t.Errorf("Issue against a refusing tenant = %q, %v", tok, err)
	}
}

func TestNewValidates(t *testing.T) {
	reader := fake.NewClientBuilder().Build()
	for _, cfg := range []jointoken.Config{
		{Namespace: pxeNS},
		{Reader: reader},
		{Reader: reader, Namespace: pxeNS, TTL: 25 * time.Hour},
		{Reader: reader, Namespace: pxeNS, TTL: -time.Minute},
	} {
		if _, err := jointoken.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// interceptorCreateFails makes a fake tenant refuse every create, as a
// tenant whose Role is missing would.
func interceptorCreateFails() interceptor.Funcs {
	return interceptor.Funcs{Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", errors.New("RBAC: not allowed"))
	}}
}

func TestFacts(t *testing.T) {
	ctx := context.Background()
	withFacts := credential(t, "farm", "alpha", "https://alpha.internal")
	withFacts.Data[bootstraptoken.KeyNodeFacts] = []byte(`{"apiServer":"https://203.0.113.7:6443","caCert":"Q0E=","clusterDNS":["10.96.0.10"],"clusterDomain":"cluster.local"}`)
	noFacts := credential(t, "farm", "beta", "https://beta.internal")
	badFacts := credential(t, "farm", "gamma", "https://gamma.internal")
	badFacts.Data[bootstraptoken.KeyNodeFacts] = []byte(`{"apiServer":""}`)
	stolen := credential(t, "farm", "delta", "https://delta.internal")
	stolen.Labels = bootstraptoken.CredentialLabels("farm", "alpha") // another tenant's label
	stolen.Data[bootstraptoken.KeyNodeFacts] = withFacts.Data[bootstraptoken.KeyNodeFacts]
	admin := fake.NewClientBuilder().WithObjects(withFacts, noFacts, badFacts, stolen).Build()
	is, err := jointoken.New(jointoken.Config{Reader: admin, Namespace: pxeNS, TTL: 20 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f, err := is.Facts(ctx, machine("farm", "m1", "alpha"))
	if err != nil || f.APIServer != "https://203.0.113.7:6443" || string(f.CACert) != "CA" || f.ClusterDomain != "cluster.local" {
		t.Errorf("alpha: %+v, %v", f, err)
	}
	for _, tc := range []struct{ cluster, want string }{
		{"beta", "no \"node-facts.json\" yet"},
		{"gamma", "name no API server or CA"},
		{"delta", "is labelled for TenantCluster farm/alpha"},
		{"omega", "not found"},
		{"", "names no TenantCluster"},
	} {
		if _, err := is.Facts(ctx, machine("farm", "m1", tc.cluster)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.cluster, err, tc.want)
		}
	}
}

package tenantcluster

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestTenantClients(t *testing.T) {
	dials := 0
	fail := false
	clients := NewTenantClients(func(*rest.Config) (client.Client, error) {
		if fail {
			return nil, errors.New("refused")
		}
		dials++
		return fake.NewClientBuilder().Build(), nil
	})
	cfg := func(host, cert string) *rest.Config {
		return &rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca"), CertData: []byte(cert), KeyData: []byte("key")}}
	}
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	b := types.NamespacedName{Namespace: "ns", Name: "b"}
	get := func(key types.NamespacedName, c *rest.Config) client.Client {
		t.Helper()
		got, err := clients.Get(key, c)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	first := get(a, cfg("https://a", "cert-1"))
	if again := get(a, cfg("https://a", "cert-1")); again != first || dials != 1 {
		t.Errorf("same credential: dials = %d, same client %v; want one dial and the kept client", dials, again == first)
	}
	if other := get(b, cfg("https://b", "cert-1")); other == first || dials != 2 {
		t.Errorf("another TenantCluster shares a client (dials %d)", dials)
	}
	renewed := get(a, cfg("https://a", "cert-2"))
	if renewed == first || dials != 3 {
		t.Errorf("renewed certificate: dials = %d, new client %v; want a new one", dials, renewed != first)
	}
	if again := get(a, cfg("https://a", "cert-2")); again != renewed || dials != 3 {
		t.Error("the client rebuilt for the renewed certificate is not kept")
	}

	clients.Forget(a)
	if clients.Len() != 1 {
		t.Errorf("Len after Forget = %d, want 1", clients.Len())
	}
	fail = true
	if _, err := clients.Get(a, cfg("https://a", "cert-2")); err == nil {
		t.Fatal("a forgotten TenantCluster's client was still kept")
	}
	if clients.Len() != 1 {
		t.Error("a failed dial was kept")
	}
	fail = false
	if get(a, cfg("https://a", "cert-2")); dials != 4 {
		t.Errorf("dials = %d after a failed one, want the next pass to dial again", dials)
	}

	var none *TenantClients
	none.Forget(a)
	if none.Len() != 0 {
		t.Error("a nil TenantClients keeps clients")
	}
}

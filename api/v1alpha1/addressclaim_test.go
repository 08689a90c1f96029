package v1alpha1_test

import (
	"context"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func claim(kind kubefarmv1.AddressKind, addr, machine string) *kubefarmv1.AddressClaim {
	return &kubefarmv1.AddressClaim{
		ObjectMeta: metav1.ObjectMeta{Name: kubefarmv1.AddressClaimName(kind, addr)},
		Spec: kubefarmv1.AddressClaimSpec{Kind: kind, Address: addr,
			Holder: kubefarmv1.AddressHolder{Namespace: "farm", Pool: "workers", Machine: machine}},
	}
}

// TestAddressClaimRules: a claim's name is the function of its address the
// code uses (AddressClaimName), so no second object can claim an address
// under another name, and its spec cannot move to another holder.
func TestAddressClaimRules(t *testing.T) {
	ctx := context.Background()
	renamed := claim(kubefarmv1.AddressMAC, "02:aa:00:00:00:02", "m1")
	renamed.Name = "mac-02-aa-00-00-00-03"
	ipAsMAC := claim(kubefarmv1.AddressMAC, "10.0.0.1", "m1")
	ipAsMAC.Name = "mac-10-0-0-1"
	zeros := claim(kubefarmv1.AddressIPv4, "10.0.0.01", "m1")
	upper := claim(kubefarmv1.AddressMAC, "02:AA:00:00:00:04", "m1")
	upper.Name = "mac-02-aa-00-00-00-04"
	for _, tt := range []struct {
		name  string
		claim *kubefarmv1.AddressClaim
		want  []string
	}{
		{"name of another address", renamed, []string{"metadata.name must be mac-"}},
		{"an IP as a MAC", ipAsMAC, []string{"spec.address", "six lowercase hex bytes"}},
		{"leading zeros", zeros, []string{"spec.address", "without leading zeros"}},
		{"uppercase MAC", upper, []string{"spec.address", "six lowercase hex bytes"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			expectRejected(t, env.Client.Create(ctx, tt.claim), tt.want...)
		})
	}

	ok := claim(kubefarmv1.AddressIPv4, "10.99.0.1", "m1")
	if err := env.Client.Create(ctx, ok); err != nil {
		t.Fatalf("a valid claim was rejected: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, ok) })
	ok.Spec.Holder.Machine = "m2"
	expectRejected(t, env.Client.Update(ctx, ok), "spec is immutable")
}

// TestAddressClaimCreateIsAtomic: of many writers creating one address's
// claim at the same moment, each for a machine of its own, exactly one
// succeeds and every other is told AlreadyExists. The NodePool controller
// and the Machine webhook rest on this.
func TestAddressClaimCreateIsAtomic(t *testing.T) {
	ctx := context.Background()
	const writers = 8
	start := make(chan struct{})
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := claim(kubefarmv1.AddressMAC, "02:aa:00:00:00:01", "m"+string(rune('a'+i)))
			<-start
			errs[i] = env.Client.Create(ctx, c)
		}()
	}
	close(start)
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("writers %d and %d both created the claim", won, i)
		case err == nil:
			won = i
		case !apierrors.IsAlreadyExists(err):
			t.Errorf("writer %d: %v, want AlreadyExists", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no writer created the claim")
	}
	got := &kubefarmv1.AddressClaim{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "mac-02-aa-00-00-00-01"}, got); err != nil {
		t.Fatal(err)
	}
	if want := "m" + string(rune('a'+won)); got.Spec.Holder.Machine != want {
		t.Errorf("the claim names %s, but writer %d (%s) was told it won", got.Spec.Holder.Machine, won, want)
	}
}

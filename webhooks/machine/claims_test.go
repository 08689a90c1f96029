package machine_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// claimFor claims addr for holder, as an administrator making a Machine by
// hand does, and removes the claim when the test ends.
func claimFor(t *testing.T, holder kubefarmv1.AddressHolder, kind kubefarmv1.AddressKind, addr string) {
	t.Helper()
	c := &kubefarmv1.AddressClaim{
		ObjectMeta: metav1.ObjectMeta{Name: kubefarmv1.AddressClaimName(kind, addr)},
		Spec:       kubefarmv1.AddressClaimSpec{Kind: kind, Address: addr, Holder: holder},
	}
	if err := env.Client.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), c) })
}

func mustMention(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("admitted; want a refusal mentioning %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal does not mention %q:\n%v", w, err)
		}
	}
}

func TestMachineNeedsItsClaims(t *testing.T) {
	ctx := context.Background()
	ns, other := newNamespace(t), newNamespace(t)
	m := machine(ns, "hand-m1", "hand", "10.60.0.1", "02:60:00:00:00:01", "02:60:00:00:00:02")
	holder := kubefarmv1.HolderOf(m)

	t.Run("unclaimed", func(t *testing.T) {
		mustMention(t, env.Client.Create(ctx, m.DeepCopy()), "admission webhook", "machine-addresses.kubefarm.io",
			`Machine.kubefarm.io "hand-m1" is invalid`,
			`spec.macs[0]: Invalid value: "02:60:00:00:00:01": not claimed: create AddressClaim mac-02-60-00-00-00-01 for Machine `+ns+"/hand-m1 of NodePool hand first",
			"spec.macs[1]", `spec.ip: Invalid value: "10.60.0.1": not claimed: create AddressClaim ip-10-60-0-1`)
	})

	// Another machine, in another namespace, holds the second MAC; the
	// first MAC and the IP are claimed for this one.
	claimFor(t, holder, kubefarmv1.AddressMAC, "02:60:00:00:00:01")
	claimFor(t, holder, kubefarmv1.AddressIPv4, "10.60.0.1")
	claimFor(t, kubefarmv1.AddressHolder{Namespace: other, Pool: "theirs", Machine: "theirs-x"}, kubefarmv1.AddressMAC, "02:60:00:00:00:02")
	t.Run("claimed by another machine", func(t *testing.T) {
		err := env.Client.Create(ctx, m.DeepCopy())
		mustMention(t, err, `spec.macs[1]: Invalid value: "02:60:00:00:00:02": claimed by Machine `+other+"/theirs-x of NodePool theirs (AddressClaim mac-02-60-00-00-00-02)")
		if err != nil && (strings.Contains(err.Error(), "spec.macs[0]") || strings.Contains(err.Error(), "spec.ip")) {
			t.Errorf("addresses claimed for the machine are blamed too:\n%v", err)
		}
	})
	t.Run("a Machine of the same name in another pool is another holder", func(t *testing.T) {
		moved := machine(ns, "hand-m1", "elsewhere", "10.60.0.1", "02:60:00:00:00:01")
		mustMention(t, env.Client.Create(ctx, moved), "spec.macs[0]", "claimed by Machine "+ns+"/hand-m1 of NodePool hand",
			"spec.ip")
	})

	t.Run("every address claimed for it", func(t *testing.T) {
		ok := machine(ns, "hand-m1", "hand", "10.60.0.1", "02:60:00:00:00:01")
		if err := env.Client.Create(ctx, ok); err != nil {
			t.Fatalf("a Machine whose addresses are claimed for it was refused: %v", err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, ok) })

		// Moving it onto an address it does not hold is refused too.
		ok.Spec.IP = "10.60.0.2"
		mustMention(t, env.Client.Update(ctx, ok.DeepCopy()), `spec.ip: Invalid value: "10.60.0.2": not claimed`)
		// And onto the other machine's MAC.
		ok.Spec.IP = "10.60.0.1"
		ok.Spec.MACs = []string{"02:60:00:00:00:01", "02:60:00:00:00:02"}
		mustMention(t, env.Client.Update(ctx, ok.DeepCopy()), "spec.macs[1]", "claimed by Machine "+other+"/theirs-x")
	})
}

// TestFailsClosed stops the webhook server: with failurePolicy Fail no
// Machine is created unchecked, while an update that leaves the addresses
// alone does not call the webhook (matchConditions) and still passes. It
// runs last (Go runs tests in file order).
func TestFailsClosed(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	m := machine(ns, "m1", "p", "10.61.0.1", "02:61:00:00:00:01")
	holder := kubefarmv1.HolderOf(m)
	claimFor(t, holder, kubefarmv1.AddressMAC, "02:61:00:00:00:01")
	claimFor(t, holder, kubefarmv1.AddressIPv4, "10.61.0.1")
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}

	stopManager()
	stopManager = nil
	unchecked := machine(ns, "m2", "p", "10.61.0.2", "02:61:00:00:00:02")
	testenv.WaitWebhookDown(t, "Machine", func(ctx context.Context) error {
		return env.Client.Create(ctx, unchecked.DeepCopy(), client.DryRunAll)
	})
	mustMention(t, env.Client.Create(ctx, unchecked), "failed calling webhook", "machine-addresses.kubefarm.io")

	m.Labels = map[string]string{"example.com/touched": "yes"}
	if err := env.Client.Update(ctx, m); err != nil {
		t.Errorf("an update that leaves the addresses alone needed the webhook: %v", err)
	}
}

package nodepool_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// rejectedEventually creates obj as a dry run until the webhook rejects it:
// the webhook reads an informer cache, which sees a pool created a moment ago
// only after its watch event arrives. It returns the rejection.
func rejectedEventually(t *testing.T, obj client.Object) error {
	t.Helper()
	var rejection error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			rejection = env.Client.Create(ctx, obj.DeepCopyObject().(client.Object), client.DryRunAll)
			return rejection != nil, nil
		})
	if err != nil {
		t.Fatalf("%s was never rejected", obj.GetName())
	}
	return rejection
}

func mustMention(t *testing.T, err error, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("rejection does not mention %q:\n%v", w, err)
		}
	}
}

func TestAddressUsedByAnotherPool(t *testing.T) {
	ctx := context.Background()
	nsA, nsB := newNamespace(t), newNamespace(t)
	first := pool(nsA, "first", machine("a1", "02:40:00:00:00:01", "10.40.0.1"), machine("a2", "02:40:00:00:00:02", "10.40.0.2"))
	if err := env.Client.Create(ctx, first); err != nil {
		t.Fatal(err)
	}

	t.Run("MAC", func(t *testing.T) {
		bad := pool(nsB, "mac-clash", machine("b1", "02:40:00:00:00:09", "10.40.1.1"), machine("b2", "02:40:00:00:00:02", "10.40.1.2"))
		err := rejectedEventually(t, bad)
		mustMention(t, err, `NodePool.kubefarm.io "mac-clash" is invalid`, "spec.machines[1].macs[0]",
			`Invalid value: "02:40:00:00:00:02": already used by machine "a2" of NodePool `+nsA+"/first", "admission webhook")
	})
	t.Run("IP", func(t *testing.T) {
		bad := pool(nsB, "ip-clash", machine("b1", "02:40:00:00:01:01", "10.40.0.1"))
		err := rejectedEventually(t, bad)
		mustMention(t, err, "spec.machines[0].ip", `Invalid value: "10.40.0.1": already used by machine "a1" of NodePool `+nsA+"/first")
	})
	t.Run("distinct addresses are accepted", func(t *testing.T) {
		good := pool(nsB, "distinct", machine("b1", "02:40:00:00:01:01", "10.40.1.1"))
		if err := env.Client.Create(ctx, good); err != nil {
			t.Fatalf("a pool with its own addresses was rejected: %v", err)
		}
		// Updating it onto a taken address is rejected too.
		good.Spec.Machines[0].MACs = []string{"02:40:00:00:00:01"}
		mustMention(t, env.Client.Update(ctx, good), "spec.machines[0].macs[0]", `machine "a1" of NodePool `+nsA+"/first")
	})
	t.Run("the owner may keep its own addresses", func(t *testing.T) {
		// An update of the first pool itself is not a clash with itself.
		first.Spec.BootImage = "img2"
		if err := env.Client.Update(ctx, first); err != nil {
			t.Fatalf("updating a pool was rejected because of its own addresses: %v", err)
		}
	})
	t.Run("a deleted pool frees its addresses", func(t *testing.T) {
		if err := env.Client.Delete(ctx, first); err != nil {
			t.Fatal(err)
		}
		reuse := pool(nsB, "reuse", machine("b1", "02:40:00:00:00:02", "10.40.0.2"))
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			return env.Client.Create(ctx, reuse.DeepCopy(), client.DryRunAll) == nil, nil
		})
		if err != nil {
			t.Fatal("addresses of a deleted pool were never released")
		}
	})
}

// TestDuplicateAddressInsidePool is the pool-internal MAC and IP check,
// which the CRD leaves to the webhook (see MaxMachinesPerPool for why): the
// error names the field and the machine that has the address first.
func TestDuplicateAddressInsidePool(t *testing.T) {
	ns := newNamespace(t)
	bad := pool(ns, "twins", machine("t1", "02:41:00:00:00:01", "10.40.2.1"), machine("t2", "02:41:00:00:00:01", "10.40.2.2"))
	err := env.Client.Create(context.Background(), bad)
	if err == nil {
		t.Fatal("two machines with one MAC were accepted")
	}
	mustMention(t, err, "spec.machines[1].macs[0]", `Invalid value: "02:41:00:00:00:01": already used by machine "t1" of this pool`)

	bad = pool(ns, "ip-twins", machine("t1", "02:41:00:00:01:01", "10.40.2.1"), machine("t2", "02:41:00:00:01:02", "10.40.2.9"),
		machine("t3", "02:41:00:00:01:03", "10.40.2.1"))
	err = env.Client.Create(context.Background(), bad)
	if err == nil {
		t.Fatal("two machines with one IP were accepted")
	}
	mustMention(t, err, "spec.machines[2].ip", `Invalid value: "10.40.2.1": already used by machine "t1" of this pool`)
	if strings.Contains(err.Error(), "spec.machines[0].ip") {
		t.Errorf("the first machine with the IP is blamed too:\n%v", err)
	}
}

// TestRejectionListIsBounded: a pool that clashes everywhere gets a bounded
// error, not one line per machine. Errors of other fields are listed beside
// the conflicts and do not count towards the bound.
func TestRejectionListIsBounded(t *testing.T) {
	ns := newNamespace(t)
	p := pool(ns, "many")
	for i := 0; i < 60; i++ {
		p.Spec.Machines = append(p.Spec.Machines, machine(
			fmt.Sprintf("m%d", i), "02:42:00:00:00:01", fmt.Sprintf("10.40.3.%d", i+1)))
	}
	p.Spec.Machines[0].MACs = []string{"02:42:00:00:00:00"}
	p.Spec.Rollout.MaintenanceWindows = []kubefarmv1.MaintenanceWindow{{Start: "02:00", Duration: metav1.Duration{Duration: time.Hour}, TimeZone: "Mars/Olympus"}}
	err := env.Client.Create(context.Background(), p)
	if err == nil {
		t.Fatal("accepted")
	}
	if n := strings.Count(err.Error(), "already used by"); n != 20 {
		t.Errorf("rejection lists %d conflicts, want the bound of 20:\n%v", n, err)
	}
	mustMention(t, err, "the rest are not listed", "spec.rollout.maintenanceWindows[0].timeZone")
}

// TestDynamicRangeThroughAdmission: the order of a pool's dynamic range is
// checked by this webhook (the table test is TestValidateDynamicRange), that
// both ends lie in the subnet by the CRD.
func TestDynamicRangeThroughAdmission(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	p := pool(ns, "reversed")
	p.Spec.Network.DynamicRange = &kubefarmv1.DynamicRange{Start: "10.40.9.200", End: "10.40.9.100"}
	err := env.Client.Create(ctx, p)
	if err == nil {
		t.Fatal("a reversed range was accepted")
	}
	mustMention(t, err, "admission webhook", "spec.network.dynamicRange.end", "must not be below")

	p = pool(ns, "outside")
	p.Spec.Network.DynamicRange = &kubefarmv1.DynamicRange{Start: "10.40.9.100", End: "10.41.0.1"}
	err = env.Client.Create(ctx, p)
	if err == nil {
		t.Fatal("a range leaving the subnet was accepted")
	}
	mustMention(t, err, "spec.network.dynamicRange", "inside spec.network.subnet 10.40.0.0/16")

	p = pool(ns, "good")
	p.Spec.Network.DynamicRange = &kubefarmv1.DynamicRange{Start: "10.40.9.100", End: "10.40.9.199"}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatalf("a valid range was rejected: %v", err)
	}
}

// TestMaintenanceWindowsThroughAdmission: a window's time zone and the bounds
// of its duration are checked by this webhook (the table tests are in
// internal/window), its days and start by the CRD.
func TestMaintenanceWindowsThroughAdmission(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	mw := func(start string, d time.Duration, tz string) kubefarmv1.MaintenanceWindow {
		return kubefarmv1.MaintenanceWindow{Start: start, Duration: metav1.Duration{Duration: d}, TimeZone: tz}
	}
	good := mw("02:00", 4*time.Hour, "Europe/Berlin")
	for _, tt := range []struct {
		name    string
		windows []kubefarmv1.MaintenanceWindow
		want    []string
	}{
		{"unknown-zone", []kubefarmv1.MaintenanceWindow{good, mw("02:00", time.Hour, "Mars/Olympus")},
			[]string{"spec.rollout.maintenanceWindows[1].timeZone", `Invalid value: "Mars/Olympus"`, "unknown time zone"}},
		{"zero-duration", []kubefarmv1.MaintenanceWindow{mw("02:00", 0, "UTC")},
			[]string{"spec.rollout.maintenanceWindows[0].duration", "must be positive"}},
		{"longer-than-a-week", []kubefarmv1.MaintenanceWindow{good, good, mw("02:00", 8*24*time.Hour, "")},
			[]string{"spec.rollout.maintenanceWindows[2].duration", "at most 168h"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := pool(ns, tt.name)
			p.Spec.Rollout.MaintenanceWindows = tt.windows
			err := env.Client.Create(ctx, p)
			if err == nil {
				t.Fatal("accepted")
			}
			mustMention(t, err, append([]string{"admission webhook", `NodePool.kubefarm.io "` + tt.name + `" is invalid`}, tt.want...)...)
		})
	}

	p := pool(ns, "windows")
	p.Spec.Rollout.MaintenanceWindows = []kubefarmv1.MaintenanceWindow{good, mw("22:00", 7*24*time.Hour, "")}
	p.Spec.Rollout.MaintenanceWindows[1].Days = []string{"Sat", "Sun"}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatalf("valid windows were rejected: %v", err)
	}
	if tz := p.Spec.Rollout.MaintenanceWindows[1].TimeZone; tz != "UTC" {
		t.Errorf("an empty timeZone was stored as %q, want the CRD's default UTC", tz)
	}
	// Updating it onto an unknown zone is rejected too.
	p.Spec.Rollout.MaintenanceWindows[0].TimeZone = "Europe/Berlln"
	mustMention(t, env.Client.Update(ctx, p), "admission webhook", "spec.rollout.maintenanceWindows[0].timeZone", `"Europe/Berlln"`)
}

// TestFailsClosed stops the webhook server: with failurePolicy Fail no
// NodePool gets in unchecked. It runs last (Go runs tests in file order and
// this file's tests after those above).
func TestFailsClosed(t *testing.T) {
	stopManager()
	stopManager = nil
	p := pool(newNamespace(t), "unchecked", machine("u1", "02:43:00:00:00:01", "10.40.4.1"))
	testenv.WaitWebhookDown(t, "NodePool", func(ctx context.Context) error {
		return env.Client.Create(ctx, p.DeepCopy(), client.DryRunAll)
	})
	err := env.Client.Create(context.Background(), p)
	if err == nil {
		t.Fatal("a NodePool was admitted while the webhook was down")
	}
	mustMention(t, err, "failed calling webhook", "nodepool-addresses.kubefarm.io")
}

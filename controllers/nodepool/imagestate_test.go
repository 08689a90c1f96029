package nodepool_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/nodepool"
	"github.com/kubefarm/kubefarm/controllers/rollout"
)

// TestServedImageHasOneWriter: a new Machine's first served image is
// pinned by the rollout controller, under its field manager, as every
// later move is; the NodePool controller writes no Machine status. The
// manager runs as it ships, with no reachable tenant: the pin must not
// wait for one.
func TestServedImageHasOneWriter(t *testing.T) {
	ctx := context.Background()
	img := bootImage(t, "np-image-e", "e")
	pool := example(t, 55)
	pool.Spec.BootImage = img.Name
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	got := servedMachines(t, pool, 3)
	for name, m := range got {
		if want := (v1alpha1.ImageRef{Name: img.Name, Digest: img.Spec.Rootfs.Digest}); *m.Status.ServedImage != want {
			t.Errorf("%s: served %+v, want %+v", name, *m.Status.ServedImage, want)
		}
		owners := map[string]bool{}
		for _, f := range m.ManagedFields {
			if f.FieldsV1 != nil && strings.Contains(f.FieldsV1.GetRawString(), `"f:servedImage"`) {
				owners[f.Manager] = true
			}
		}
		if !owners[rollout.FieldOwner] || owners[nodepool.FieldOwner] || len(owners) != 1 {
			t.Errorf("%s: status.servedImage is managed by %v, want %s alone", name, owners, rollout.FieldOwner)
		}
	}
}

// TestUpdatedMachinesRule: updatedMachines counts machinestate.UpToDate:
// served the pool's image and booted it, and no reboot asked for in that
// boot.
func TestUpdatedMachinesRule(t *testing.T) {
	ctx := context.Background()
	img := bootImage(t, "np-image-f", "f")
	pool := example(t, 56)
	pool.Spec.BootImage = img.Name
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	servedMachines(t, pool, 3)
	for _, name := range []string{"workers-m1", "workers-m2", "workers-m3"} {
		setMachineStatus(t, pool.Namespace, name, func(m *v1alpha1.Machine) {
			m.Status.LastBoot = &v1alpha1.BootRecord{BootID: "b-" + name, ImageDigest: img.Spec.Rootfs.Digest, Time: metav1.Now()}
		})
	}
	updated := func(n int32) func(ctx context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			got := &v1alpha1.NodePool{}
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(pool), got)
			return err == nil && got.Status.Machines == 3 && got.Status.UpdatedMachines == n, err
		}
	}
	eventually(t, "three machines up to date", updated(3))

	// A reboot asked for in the boot a machine runs: the rollout will
	// reboot it, so it is not up to date.
	setMachineStatus(t, pool.Namespace, "workers-m2", func(m *v1alpha1.Machine) {
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionRebootRequired, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonRebootRequiredFile, Message: v1alpha1.BootMessage("b-workers-m2", "/run/reboot-required")})
	})
	eventually(t, "two machines up to date once one asks for a reboot", updated(2))
}

// servedMachines waits until pool has n Machines, each with a served image,
// and returns them by name.
func servedMachines(t *testing.T, pool *v1alpha1.NodePool, n int) map[string]v1alpha1.Machine {
	t.Helper()
	var got map[string]v1alpha1.Machine
	eventually(t, "every Machine of the pool served an image", func(ctx context.Context) (bool, error) {
		var err error
		got, err = machines(ctx, pool)
		if err != nil || len(got) != n {
			return false, err
		}
		for _, m := range got {
			if m.Status.ServedImage == nil {
				return false, nil
			}
		}
		return true, nil
	})
	return got
}

package nodepool_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/nodepool"
	"github.com/kubefarm/kubefarm/controllers/nodepool/desired"
	"github.com/kubefarm/kubefarm/internal/manager"
	"github.com/kubefarm/kubefarm/internal/testing/examples"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

var env *testenv.Env

// TestMain runs a real API server and cert-manager, and kubefarm-manager
// in-process as it ships (internal/manager, webhooks included), so the
// NodePool controller runs with its real wiring, cache index and webhook
// admission of the pools.
func TestMain(m *testing.M) {
	testenv.MainWithManager(m, testenv.Options{CertManager: true}, manager.Options{}, &env)
}

// example is examples/nodepool.yaml in a namespace of its own, with an
// `all` tag added, on subnet+ so that tests do not share addresses (the
// webhook refuses a MAC or IP used by another pool).
func example(t *testing.T, subnet int) *v1alpha1.NodePool {
	t.Helper()
	pool, err := examples.NodePool()
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "nodepool-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	pool.Namespace = ns.Name
	pool.Spec.Network = v1alpha1.BootNetwork{Subnet: fmt.Sprintf("10.%d.0.0/16", subnet)}
	for i := range pool.Spec.Machines {
		pool.Spec.Machines[i].IP = fmt.Sprintf("10.%d.0.%d", subnet, 11+i)
		for j := range pool.Spec.Machines[i].MACs {
			pool.Spec.Machines[i].MACs[j] = fmt.Sprintf("02:%02x:00:00:%02x:%02x", subnet, i, j)
		}
	}
	pool.Spec.Tags["all"] = v1alpha1.TagSpec{Labels: map[string]string{"example.com/farm": "yes"}}
	return pool
}

func bootImage(t *testing.T, name, digestByte string) *v1alpha1.BootImage {
	t.Helper()
	d := func(b string) string { return "sha256:" + strings.Repeat(b, 64) }
	img := &v1alpha1.BootImage{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.BootImageSpec{
			Repository: "registry.example.com/kubefarm/node",
			Kernel:     v1alpha1.Artifact{Digest: d("1")}, Initrd: v1alpha1.Artifact{Digest: d("2")},
			Rootfs: v1alpha1.Artifact{Digest: d(digestByte)}, KubeletVersion: "v1.34.4",
		},
	}
	if err := env.Client.Create(context.Background(), img); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), img) })
	return img
}

func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func machines(ctx context.Context, pool *v1alpha1.NodePool) (map[string]v1alpha1.Machine, error) {
	list := &v1alpha1.MachineList{}
	if err := env.Client.List(ctx, list, client.InNamespace(pool.Namespace)); err != nil {
		return nil, err
	}
	out := map[string]v1alpha1.Machine{}
	for _, m := range list.Items {
		out[m.Name] = m
	}
	return out, nil
}

func poolCondition(ctx context.Context, pool *v1alpha1.NodePool, typ string) (*v1alpha1.NodePool, *metav1.Condition, error) {
	got := &v1alpha1.NodePool{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pool), got); err != nil {
		return nil, nil, err
	}
	c := meta.FindStatusCondition(got.Status.Conditions, typ)
	if c != nil && c.ObservedGeneration != got.Generation {
		return got, nil, nil
	}
	return got, c, nil
}

func TestMachinesFollowThePool(t *testing.T) {
	ctx := context.Background()
	img := bootImage(t, "np-image-a", "a")
	pool := example(t, 51)
	pool.Spec.BootImage = img.Name
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}

	got := servedMachines(t, pool, 3)
	m2 := got["workers-m2"]
	if m2.Spec.Hostname != "m2" || m2.Spec.IP != "10.51.0.12" || m2.Spec.Pool != "workers" || m2.Spec.Cluster != "cluster1" ||
		m2.Spec.DesiredImage != img.Name || !slices.Equal(m2.Spec.MACs, []string{"02:33:00:00:01:00", "02:33:00:00:01:01"}) {
		t.Errorf("workers-m2 spec = %+v", m2.Spec)
	}
	if !slices.Equal(m2.Spec.Tags, []string{"all", "gpu"}) {
		t.Errorf("workers-m2 tags = %v, want the pool's all tag first, then its own", m2.Spec.Tags)
	}
	if want := (v1alpha1.ImageRef{Name: img.Name, Digest: img.Spec.Rootfs.Digest}); *m2.Status.ServedImage != want {
		t.Errorf("served image = %+v, want %+v", *m2.Status.ServedImage, want)
	}
	if ref := metav1.GetControllerOf(&m2); ref == nil || string(ref.UID) != poolUID(t, pool) || ref.Kind != "NodePool" {
		t.Errorf("workers-m2 controller reference = %+v, want the pool", ref)
	}
	if !slices.ContainsFunc(m2.ManagedFields, func(f metav1.ManagedFieldsEntry) bool { return f.Manager == nodepool.FieldOwner }) {
		t.Errorf("workers-m2 has no fields managed by %s: %+v", nodepool.FieldOwner, m2.ManagedFields)
	}
	if m2.Labels["kubefarm.io/pool"] != "workers" || m2.Labels["kubefarm.io/tenant-cluster"] != "cluster1" {
		t.Errorf("workers-m2 labels = %v", m2.Labels)
	}

	eventually(t, "status counts three machines, none of them Ready", func(ctx context.Context) (bool, error) {
		got, c, err := poolCondition(ctx, pool, v1alpha1.ConditionMachinesReady)
		if err != nil || c == nil {
			return false, err
		}
		return got.Status.Machines == 3 && got.Status.ReadyMachines == 0 &&
			c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonMachinesNotReady &&
			strings.Contains(c.Message, "workers-m1, workers-m2, workers-m3"), nil
	})

	// An unchanged pool writes nothing: touching the pool's metadata
	// brings a pass, and no Machine may change.
	before := resourceVersions(t, pool)
	patchPool(t, pool, func(p *v1alpha1.NodePool) { p.Annotations = map[string]string{"touched": "1"} })
	eventually(t, "the pass after the annotation", func(ctx context.Context) (bool, error) {
		_, c, err := poolCondition(ctx, pool, v1alpha1.ConditionReady)
		return c != nil, err
	})
	// The annotation does not change the generation, so observedGeneration
	// cannot tell the pass happened: a BootImage event on a second image
	// the pool does not use gives no signal either. Give the pass a
	// witness: a machine's spec edited by hand is put back, and until then
	// no other Machine may have been written.
	// (Not its addresses: the Machine webhook refuses an address not
	// claimed for the Machine, as the end of this test shows.)
	patchMachine(t, pool.Namespace, "workers-m1", func(m *v1alpha1.Machine) { m.Spec.Hostname = "hand-edit" })
	eventually(t, "a hand edit of a Machine's spec is put back", func(ctx context.Context) (bool, error) {
		got, err := machines(ctx, pool)
		return err == nil && got["workers-m1"].Spec.Hostname == "m1", err
	})
	after := resourceVersions(t, pool)
	for _, name := range []string{"workers-m2", "workers-m3"} {
		if before[name] != after[name] {
			t.Errorf("Machine %s was written although its entry did not change (resourceVersion %s -> %s)", name, before[name], after[name])
		}
	}

	// A new image changes the desired image, never the served one: only
	// the rollout moves that.
	img2 := bootImage(t, "np-image-b", "b")
	patchPool(t, pool, func(p *v1alpha1.NodePool) {
		p.Spec.BootImage = img2.Name
		p.Spec.Machines = p.Spec.Machines[:2] // m3 leaves the pool
		p.Spec.Machines[0].IP = "10.51.0.21"
	})
	eventually(t, "m3 deleted, m1 moved, every desired image the new one", func(ctx context.Context) (bool, error) {
		got, err := machines(ctx, pool)
		if err != nil {
			return false, err
		}
		if _, ok := got["workers-m3"]; ok || len(got) != 2 || got["workers-m1"].Spec.IP != "10.51.0.21" {
			return false, nil
		}
		for _, m := range got {
			if m.Spec.DesiredImage != img2.Name {
				return false, nil
			}
		}
		return true, nil
	})
	got, err := machines(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range got {
		if m.Status.ServedImage.Name != img.Name {
			t.Errorf("%s is served %s after the pool's image changed; only a rollout may move it", name, m.Status.ServedImage.Name)
		}
	}

	// Nodes Ready and the old image booted: the pool is Ready, and no
	// machine counts as updated until it runs the pool's image.
	for name := range got {
		setMachineStatus(t, pool.Namespace, name, func(m *v1alpha1.Machine) {
			meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionNodeReady, Status: metav1.ConditionTrue, Reason: "KubeletReady", Message: "test"})
			m.Status.LastBoot = &v1alpha1.BootRecord{BootID: "b-" + name, ImageDigest: img.Spec.Rootfs.Digest, Time: metav1.Now()}
		})
	}
	eventually(t, "the pool is Ready with two Ready machines, none updated", func(ctx context.Context) (bool, error) {
		got, c, err := poolCondition(ctx, pool, v1alpha1.ConditionReady)
		if err != nil || c == nil {
			return false, err
		}
		return c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonPoolReady &&
			got.Status.Machines == 2 && got.Status.ReadyMachines == 2 && got.Status.UpdatedMachines == 0, nil
	})

	// A hand edit of an address is refused by the Machine webhook: the
	// address is not claimed for the Machine (docs/addresses.md).
	m1 := &v1alpha1.Machine{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: "workers-m1"}, m1); err != nil {
		t.Fatal(err)
	}
	m1.Spec.IP = "10.51.0.99"
	if err := env.Client.Update(ctx, m1); err == nil || !strings.Contains(err.Error(), "spec.ip") || !strings.Contains(err.Error(), "not claimed") {
		t.Errorf("a hand edit of a Machine's IP onto an unclaimed address: %v, want a refusal naming spec.ip", err)
	}
}

func TestMissingBootImage(t *testing.T) {
	ctx := context.Background()
	pool := example(t, 52)
	pool.Spec.BootImage = "np-image-later"
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Ready=False BootImageNotFound, Machines written without a served image", func(ctx context.Context) (bool, error) {
		_, c, err := poolCondition(ctx, pool, v1alpha1.ConditionReady)
		if err != nil || c == nil || c.Reason != v1alpha1.ReasonBootImageNotFound {
			return false, err
		}
		got, err := machines(ctx, pool)
		return err == nil && len(got) == 3 && got["workers-m1"].Status.ServedImage == nil, err
	})
	img := bootImage(t, "np-image-later", "c")
	eventually(t, "the BootImage's arrival gives every Machine its served image", func(ctx context.Context) (bool, error) {
		got, err := machines(ctx, pool)
		if err != nil || len(got) != 3 {
			return false, err
		}
		for _, m := range got {
			if m.Status.ServedImage == nil || m.Status.ServedImage.Digest != img.Spec.Rootfs.Digest {
				return false, nil
			}
		}
		return true, nil
	})
}

func TestForeignMachineIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	img := bootImage(t, "np-image-d", "d")
	pool := example(t, 53)
	pool.Spec.BootImage = img.Name
	// A Machine of the name the pool's m1 needs, written by someone else,
	// who claimed its addresses first as the Machine webhook requires.
	foreign := &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: pool.Namespace, Name: "workers-m1"},
		Spec: v1alpha1.MachineSpec{Pool: "other", Cluster: "cluster1", Hostname: "x", MACs: []string{"02:53:ff:00:00:01"},
			IP: "10.53.9.9", DesiredImage: "mine"},
	}
	for _, c := range desired.Claims(foreign) {
		c.Labels = nil // made by hand, not by the controller
		if err := env.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Ready=False MachineConflict naming workers-m1", func(ctx context.Context) (bool, error) {
		_, c, err := poolCondition(ctx, pool, v1alpha1.ConditionReady)
		return c != nil && c.Reason == v1alpha1.ReasonMachineConflict && strings.Contains(c.Message, "workers-m1"), err
	})
	got, err := machines(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if m := got["workers-m1"]; m.Spec.Pool != "other" || m.Spec.IP != "10.53.9.9" || metav1.GetControllerOf(&m) != nil {
		t.Errorf("the foreign Machine was taken over: %+v", m)
	}
	if _, ok := got["workers-m2"]; !ok {
		t.Error("the other entries were not applied")
	}
}

func TestInvalidPoolWritesNothing(t *testing.T) {
	ctx := context.Background()
	pool := example(t, 54)
	// The API admits object names up to 253 characters, but a pool's name
	// is a label value on its Machines, which allows 63.
	pool.Name = strings.Repeat("p", 70)
	pool.Spec.BootImage = "whatever"
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Ready=False InvalidSpec naming the pool", func(ctx context.Context) (bool, error) {
		_, c, err := poolCondition(ctx, pool, v1alpha1.ConditionReady)
		return c != nil && c.Reason == v1alpha1.ReasonInvalidSpec && strings.Contains(c.Message, pool.Name), err
	})
	got, err := machines(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("an invalid pool wrote %d Machines", len(got))
	}
	var events corev1.EventList
	eventually(t, "a Warning event for the invalid spec", func(ctx context.Context) (bool, error) {
		if err := env.Client.List(ctx, &events, client.InNamespace(pool.Namespace)); err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "Ready"+v1alpha1.ReasonInvalidSpec {
				return true, nil
			}
		}
		return false, nil
	})
}

func poolUID(t *testing.T, pool *v1alpha1.NodePool) string {
	t.Helper()
	got := &v1alpha1.NodePool{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pool), got); err != nil {
		t.Fatal(err)
	}
	return string(got.UID)
}

func resourceVersions(t *testing.T, pool *v1alpha1.NodePool) map[string]string {
	t.Helper()
	got, err := machines(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for name, m := range got {
		out[name] = m.ResourceVersion
	}
	return out
}

func patchPool(t *testing.T, pool *v1alpha1.NodePool, edit func(*v1alpha1.NodePool)) {
	t.Helper()
	update(t, client.ObjectKeyFromObject(pool), &v1alpha1.NodePool{}, false, edit)
}

func patchMachine(t *testing.T, ns, name string, edit func(*v1alpha1.Machine)) {
	t.Helper()
	update(t, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.Machine{}, false, edit)
}

// setMachineStatus plays the part of the controllers that report a
// machine's node and boot (not written yet), through the status
// subresource as they will.
func setMachineStatus(t *testing.T, ns, name string, edit func(*v1alpha1.Machine)) {
	t.Helper()
	update(t, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.Machine{}, true, edit)
}

// update reads key into obj, edits it and writes it back (its status
// subresource when status), again on a conflict with another writer.
func update[T client.Object](t *testing.T, key client.ObjectKey, obj T, status bool, edit func(T)) {
	t.Helper()
	retryOnConflict(t, func(ctx context.Context) error {
		if err := env.Client.Get(ctx, key, obj); err != nil {
			return err
		}
		edit(obj)
		if status {
			return env.Client.Status().Update(ctx, obj)
		}
		return env.Client.Update(ctx, obj)
	})
}

func retryOnConflict(t *testing.T, f func(context.Context) error) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		err := f(ctx)
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
}

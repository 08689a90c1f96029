package cli_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/cmd/kubectl-kubefarm/internal/cli"
	"github.com/kubefarm/kubefarm/cmd/kubectl-kubefarm/internal/plugin"
)

func discoveredMachine(t *testing.T, mac, ip string) *v1alpha1.DiscoveredMachine {
	t.Helper()
	dm := &v1alpha1.DiscoveredMachine{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DiscoveredMachineName(mac)},
		Spec:       v1alpha1.DiscoveredMachineSpec{MAC: mac, IP: ip, LastSeen: metav1.NewTime(now)},
	}
	create(t, dm)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), dm) })
	return dm
}

func TestEnrollEditsAPlainPool(t *testing.T) {
	namespace(t, "enroll-plain")
	p := examplePool(t, "enroll-plain")
	create(t, p)
	dm := discoveredMachine(t, "52:54:00:e0:00:01", "10.28.72.14")

	r := kubefarm(t, "-n", "enroll-plain", "enroll", dm.Name, "--pool", p.Name, "--name", "node7")
	r.ok(t)
	if !strings.Contains(r.out, "enrolled "+dm.Name+" as machine node7 (MAC 52:54:00:e0:00:01, IP 10.28.72.14)") {
		t.Errorf("output %q", r.out)
	}
	got := get(t, &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}})
	if n := len(got.Spec.Machines); n != len(p.Spec.Machines)+1 {
		t.Fatalf("%d machines after enroll, want %d", n, len(p.Spec.Machines)+1)
	}
	last := got.Spec.Machines[len(got.Spec.Machines)-1]
	if last.Name != "node7" || !slices.Equal(last.MACs, []string{"52:54:00:e0:00:01"}) || last.IP != "10.28.72.14" {
		t.Errorf("new entry %+v", last)
	}
	for i, e := range p.Spec.Machines {
		if got.Spec.Machines[i].Name != e.Name {
			t.Errorf("entry %d is %s, want %s kept in place", i, got.Spec.Machines[i].Name, e.Name)
		}
	}
	if !slices.ContainsFunc(got.ManagedFields, func(f metav1.ManagedFieldsEntry) bool {
		return f.Manager == plugin.FieldManager && f.Operation == metav1.ManagedFieldsOperationUpdate
	}) {
		t.Errorf("no fields recorded under %s: %+v", plugin.FieldManager, got.ManagedFields)
	}

	// Again, or another machine under the same name or address: refused,
	// naming what is taken, and the pool is not written.
	rv := got.ResourceVersion
	other := discoveredMachine(t, "52:54:00:e0:00:02", "10.28.72.15")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{dm.Name, "--name", "node8"}, "MAC 52:54:00:e0:00:01 is already machine node7's"},
		{[]string{other.Name, "--name", "node7"}, "already has a machine named node7"},
		{[]string{"52:54:00:E0:00:02", "--name", "node8", "--ip", "10.28.72.14"}, "IP 10.28.72.14 is already machine node7's"},
		{[]string{"52-54-00-e0-00-99", "--name", "node9"}, "DiscoveredMachine 52-54-00-e0-00-99 not found"},
	} {
		r := kubefarm(t, append([]string{"-n", "enroll-plain", "enroll", "--pool", p.Name}, tc.args...)...)
		if r.code != cli.ExitError || !strings.Contains(r.errOut, tc.want) {
			t.Errorf("enroll %v: exit %d, stderr %q; want 1 and %q", tc.args, r.code, r.errOut, tc.want)
		}
	}
	if again := get(t, &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}); again.ResourceVersion != rv {
		t.Error("a refused enroll wrote the pool")
	}
}

// The patch is valid only against the pool it was decided on: an edit in
// between (here: another entry added) makes it fail, as cli's retry
// expects, instead of being overwritten or passed over.
func TestEnrollPatchCannotLoseAnEdit(t *testing.T) {
	ctx := context.Background()
	namespace(t, "enroll-race")
	p := examplePool(t, "enroll-race")
	create(t, p)
	stale := get(t, p.DeepCopy())
	edited := stale.DeepCopy()
	edited.Spec.Machines = append(edited.Spec.Machines, v1alpha1.MachineEntry{Name: "m4", MACs: []string{"02:00:0a:1c:00:0e"}, IP: "10.28.0.14"})
	if err := env.Client.Update(ctx, edited); err != nil {
		t.Fatal(err)
	}
	entry := v1alpha1.MachineEntry{Name: "node7", MACs: []string{"52:54:00:e0:00:07"}, IP: "10.28.72.17"}
	err := env.Client.Patch(ctx, stale, client.RawPatch(types.JSONPatchType, plugin.EnrollPatch(stale, entry)))
	if err == nil || !cli.ChangedSinceRead(err) {
		t.Fatalf("patch against a stale pool: %v; want a refusal ChangedSinceRead recognises", err)
	}
	got := get(t, p.DeepCopy())
	if names := entryNames(got); !slices.Contains(names, "m4") || slices.Contains(names, "node7") {
		t.Errorf("entries %v", names)
	}
}

func entryNames(p *v1alpha1.NodePool) []string {
	var out []string
	for _, e := range p.Spec.Machines {
		out = append(out, e.Name)
	}
	return out
}

func TestEnrollPrintsValuesForAHelmPool(t *testing.T) {
	namespace(t, "enroll-helm")
	p := examplePool(t, "enroll-helm")
	p.Name = "farm1-pool0"
	p.Spec.Cluster = "farm1"
	p.Labels = map[string]string{"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/instance": "farm1"}
	p.Annotations = map[string]string{"meta.helm.sh/release-name": "farm1", "meta.helm.sh/release-namespace": "enroll-helm"}
	create(t, p)
	rv := get(t, p.DeepCopy()).ResourceVersion
	dm := discoveredMachine(t, "52:54:00:e0:00:03", "10.28.72.16")

	r := kubefarm(t, "-n", "enroll-helm", "enroll", dm.Name, "--pool", p.Name, "--name", "node7")
	if r.code != cli.ExitEditSource || !strings.Contains(r.errOut, "managed by Helm release farm1 in namespace enroll-helm") ||
		!strings.Contains(r.errOut, "nothing was changed") {
		t.Fatalf("exit %d, stderr %q; want %d naming the release", r.code, r.errOut, cli.ExitEditSource)
	}
	if !strings.Contains(r.out, "name: pool0") {
		t.Errorf("the snippet does not name the values' pool entry:\n%s", r.out)
	}
	var nodes []map[string]string
	if err := yaml.Unmarshal([]byte(r.out), &nodes); err != nil {
		t.Fatalf("%v:\n%s", err, r.out)
	}
	if len(nodes) != 1 || nodes[0]["name"] != "node7" || nodes[0]["mac"] != "52:54:00:e0:00:03" || nodes[0]["ip"] != "10.28.72.16" {
		t.Errorf("values lines %v:\n%s", nodes, r.out)
	}
	if got := get(t, p.DeepCopy()); got.ResourceVersion != rv {
		t.Error("the Helm release's pool was written")
	}
}

package cli_test

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
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

func bmcSecret(t *testing.T, ns, name string, labelled bool) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		StringData: map[string]string{"username": "kubefarm", "password": "not-a-secret"}}
	if labelled {
		s.Labels = map[string]string{v1alpha1.LabelBMCCredentials: "true"}
	}
	create(t, s)
}

func lastEntry(t *testing.T, p *v1alpha1.NodePool) v1alpha1.MachineEntry {
	t.Helper()
	got := get(t, &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}})
	return got.Spec.Machines[len(got.Spec.Machines)-1]
}

// --power-*: the entry carries spec.power as given (or the BMC address the
// machine reported); a credentials Secret that is missing or unlabelled is
// a warning on stderr and the entry is made all the same.
func TestEnrollWithPower(t *testing.T) {
	const ns = "enroll-power"
	namespace(t, ns)
	p := examplePool(t, ns)
	create(t, p)
	bmcSecret(t, ns, "bmc", true)
	bmcSecret(t, ns, "bmc-unlabelled", false)
	enroll := func(args ...string) result {
		t.Helper()
		return kubefarm(t, append([]string{"-n", ns, "enroll", "--pool", p.Name}, args...)...)
	}

	dm := discoveredMachine(t, "52:54:00:e0:00:11", "10.28.72.21")
	r := enroll(dm.Name, "--name", "node11", "--power-driver", "ipmi", "--power-address", "127.0.0.1:623", "--power-credentials", "bmc")
	r.ok(t)
	if r.errOut != "" || !strings.Contains(r.out, "enrolled "+dm.Name+" as machine node11 (MAC 52:54:00:e0:00:11, IP 10.28.72.21, power ipmi 127.0.0.1:623 with Secret bmc)") {
		t.Errorf("stdout %q, stderr %q", r.out, r.errOut)
	}
	want := &v1alpha1.PowerSpec{Driver: v1alpha1.PowerIPMI, Address: "127.0.0.1:623", CredentialsSecret: "bmc"}
	if e := lastEntry(t, p); e.Name != "node11" || !reflect.DeepEqual(e.Power, want) {
		t.Errorf("entry %s power %+v, want node11 with %+v", e.Name, e.Power, want)
	}

	// The BMC address the machine reported, and a Secret that does not
	// exist: enrolled, with a warning naming the Secret and the label.
	dm = discoveredMachine(t, "52:54:00:e0:00:12", "10.28.72.22")
	dm.Spec.Hardware.BMCAddress = "10.20.0.22"
	if err := env.Client.Update(context.Background(), dm); err != nil {
		t.Fatal(err)
	}
	r = enroll(dm.Name, "--name", "node12", "--power-driver", "ipmi", "--power-credentials", "bmc-missing")
	r.ok(t)
	if !strings.Contains(r.errOut, "Warning: Secret enroll-power/bmc-missing (--power-credentials) does not exist") ||
		!strings.Contains(r.errOut, "kubefarm.io/bmc-credentials=true") {
		t.Errorf("stderr %q: want a warning that the Secret is missing", r.errOut)
	}
	want = &v1alpha1.PowerSpec{Driver: v1alpha1.PowerIPMI, Address: "10.20.0.22", CredentialsSecret: "bmc-missing"}
	if e := lastEntry(t, p); e.Name != "node12" || !reflect.DeepEqual(e.Power, want) {
		t.Errorf("entry %s power %+v, want node12 with %+v", e.Name, e.Power, want)
	}

	dm = discoveredMachine(t, "52:54:00:e0:00:13", "10.28.72.23")
	r = enroll(dm.Name, "--name", "node13", "--power-driver", "redfish", "--power-address", "https://10.20.0.23", "--power-credentials", "bmc-unlabelled")
	r.ok(t)
	if !strings.Contains(r.errOut, "Warning: Secret enroll-power/bmc-unlabelled (--power-credentials) lacks the label kubefarm.io/bmc-credentials=true") {
		t.Errorf("stderr %q: want a warning that the Secret lacks the label", r.errOut)
	}

	// Refused before anything is written, naming the flag.
	rv := get(t, p.DeepCopy()).ResourceVersion
	other := discoveredMachine(t, "52:54:00:e0:00:14", "10.28.72.24")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--power-driver", "qmp", "--power-address", "tcp://127.0.0.1:4444"}, "--power-driver qmp drives the test farm's QEMU machines"},
		{[]string{"--power-address", "127.0.0.1:623"}, "--power-address needs --power-driver"},
		{[]string{"--power-driver", "ipmi", "--power-credentials", "bmc"}, "--power-address is required"},
		{[]string{"--power-driver", "ipmi", "--power-address", "127.0.0.1:623"}, "--power-credentials is required"},
		{[]string{"--power-driver", "redfish", "--power-credentials", "bmc"}, "--power-address is required with --power-driver redfish"},
		{[]string{"--power-driver", "ipmi", "--power-address", "127.0.0.1", "--power-credentials", "bmc", "--power-ca", "ca"}, "--power-ca is for --power-driver redfish"},
	} {
		r := enroll(append([]string{other.Name, "--name", "node14"}, tc.args...)...)
		if r.code != cli.ExitError || !strings.Contains(r.errOut, tc.want) {
			t.Errorf("enroll %v: exit %d, stderr %q; want 1 and %q", tc.args, r.code, r.errOut, tc.want)
		}
	}
	if got := get(t, p.DeepCopy()); got.ResourceVersion != rv {
		t.Error("a refused enroll wrote the pool")
	}
}

// A pool Helm owns: the values lines carry the power in the chart's node
// shape, stdout stays YAML, and the Secret's warning goes to stderr.
func TestEnrollWithPowerPrintsValuesForAHelmPool(t *testing.T) {
	const ns = "enroll-power-helm"
	namespace(t, ns)
	p := examplePool(t, ns)
	p.Name, p.Spec.Cluster = "farm1-pool0", "farm1"
	p.Labels = map[string]string{"app.kubernetes.io/managed-by": "Helm"}
	p.Annotations = map[string]string{"meta.helm.sh/release-name": "farm1", "meta.helm.sh/release-namespace": ns}
	create(t, p)
	dm := discoveredMachine(t, "52:54:00:e0:00:15", "10.28.72.25")

	r := kubefarm(t, "-n", ns, "enroll", dm.Name, "--pool", p.Name, "--name", "node15",
		"--power-driver", "redfish", "--power-address", "https://10.20.0.25/redfish/v1/Systems/1", "--power-credentials", "bmc", "--power-ca", "bmc-ca")
	if r.code != cli.ExitEditSource {
		t.Fatalf("exit %d, stderr %q; want %d", r.code, r.errOut, cli.ExitEditSource)
	}
	for _, w := range []string{"Warning: Secret enroll-power-helm/bmc (--power-credentials) does not exist", "Warning: Secret enroll-power-helm/bmc-ca (--power-ca) does not exist"} {
		if !strings.Contains(r.errOut, w) {
			t.Errorf("stderr %q does not say %q", r.errOut, w)
		}
	}
	var nodes []struct {
		Name  string              `json:"name"`
		Power *v1alpha1.PowerSpec `json:"power"`
	}
	if err := yaml.Unmarshal([]byte(r.out), &nodes); err != nil {
		t.Fatalf("%v:\n%s", err, r.out)
	}
	want := &v1alpha1.PowerSpec{Driver: v1alpha1.PowerRedfish, Address: "https://10.20.0.25/redfish/v1/Systems/1", CredentialsSecret: "bmc", CASecret: "bmc-ca"}
	if len(nodes) != 1 || nodes[0].Name != "node15" || !reflect.DeepEqual(nodes[0].Power, want) {
		t.Errorf("values lines %+v, want node15 with %+v:\n%s", nodes, want, r.out)
	}
}

// An operator who may enroll but not read Secrets: told that the Secret
// could not be checked, and the machine is enrolled.
func TestEnrollWithPowerWithoutSecretAccess(t *testing.T) {
	ctx := context.Background()
	const ns = "enroll-power-rbac"
	namespace(t, ns)
	p := examplePool(t, ns)
	create(t, p)
	bmcSecret(t, ns, "bmc", true)
	dm := discoveredMachine(t, "52:54:00:e0:00:16", "10.28.72.26")
	const user = "enroller"
	for _, obj := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "enroll-power-rbac"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"discoveredmachines"}, Verbs: []string{"get"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "enroll-power-rbac"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "enroll-power-rbac"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "enroll"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"nodepools"}, Verbs: []string{"get", "patch"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "enroll"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "enroll"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}},
	} {
		create(t, obj)
		t.Cleanup(func() { _ = env.Client.Delete(ctx, obj) })
	}
	kubeconfig, err := env.WriteKubeconfig(envtest.User{Name: user}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	code := cli.Main(ctx, []string{"--kubeconfig", kubeconfig, "-n", ns, "enroll", dm.Name, "--pool", p.Name, "--name", "node16",
		"--power-driver", "ipmi", "--power-address", "127.0.0.1:623", "--power-credentials", "bmc"}, streams, func() time.Time { return now })
	if code != cli.ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	if w := "Warning: could not check Secret enroll-power-rbac/bmc (--power-credentials): you may not read Secrets in namespace enroll-power-rbac"; !strings.Contains(errOut.String(), w) {
		t.Errorf("stderr %q does not say %q", errOut.String(), w)
	}
	want := &v1alpha1.PowerSpec{Driver: v1alpha1.PowerIPMI, Address: "127.0.0.1:623", CredentialsSecret: "bmc"}
	if e := lastEntry(t, p); e.Name != "node16" || !reflect.DeepEqual(e.Power, want) {
		t.Errorf("entry %s power %+v, want node16 with %+v", e.Name, e.Power, want)
	}
}

package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/cmd/kubectl-kubefarm/internal/cli"
	"github.com/kubefarm/kubefarm/cmd/kubectl-kubefarm/internal/plugin"
	"github.com/kubefarm/kubefarm/internal/ssa"
	"github.com/kubefarm/kubefarm/internal/testing/examples"
	"github.com/kubefarm/kubefarm/internal/testing/netnstest"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// The commands run in-process through cli.Main, with the flags an operator
// types (--kubeconfig, -n, -o ...), against a real API server with
// kubefarm's CRDs (envtest). No controller runs: the tests write the
// statuses the controllers would, as the controllers' field managers.

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, &env) }

// now is the plugin's clock in these tests; the times written into
// statuses are relative to it, so ages print the same on every run.
var now = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

var (
	kubeconfigOnce sync.Once
	kubeconfigPath string
	kubeconfigErr  error
)

type result struct {
	code        int
	out, errOut string
}

// kubefarm runs `kubectl kubefarm args...` as an operator with a kubeconfig
// file of its own, as the binary would be run.
func kubefarm(t *testing.T, args ...string) result {
	t.Helper()
	kubeconfigOnce.Do(func() {
		kubeconfigPath, kubeconfigErr = env.WriteKubeconfig(envtest.User{Name: "operator", Groups: []string{"system:masters"}}, env.Dir)
	})
	if kubeconfigErr != nil {
		t.Fatal(kubeconfigErr)
	}
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	code := cli.Main(context.Background(), append([]string{"--kubeconfig", kubeconfigPath}, args...), streams, func() time.Time { return now })
	return result{code: code, out: out.String(), errOut: errOut.String()}
}

func (r result) ok(t *testing.T) {
	t.Helper()
	if r.code != cli.ExitOK {
		t.Fatalf("exit status %d, want 0; stderr: %s", r.code, r.errOut)
	}
}

func (r result) fails(t *testing.T, code int, stderr string) {
	t.Helper()
	if r.code != code || r.errOut != stderr {
		t.Fatalf("exit status %d, stderr %q\nwant %d, %q", r.code, r.errOut, code, stderr)
	}
}

func namespace(t *testing.T, name string) {
	t.Helper()
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// setStatus writes obj's status as the controller that owns it would.
func setStatus(t *testing.T, manager string, obj client.Object) {
	t.Helper()
	if err := ssa.ApplyStatus(context.Background(), env.Client, manager, obj); err != nil {
		t.Fatal(err)
	}
}

func get[T client.Object](t *testing.T, obj T) T {
	t.Helper()
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func cond(typ string, status metav1.ConditionStatus, reason, msg string, gen int64) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen, LastTransitionTime: ago(10 * time.Minute)}
}

func tenantCluster(ns, name string) *v1alpha1.TenantCluster {
	return &v1alpha1.TenantCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.TenantClusterSpec{Version: "v1.34.4"},
	}
}

func TestKubeconfig(t *testing.T) {
	ctx := context.Background()
	namespace(t, "kc")
	tc := tenantCluster("kc", "c1")
	create(t, tc)
	tc.Status.Conditions = []metav1.Condition{
		cond(v1alpha1.ConditionReady, metav1.ConditionFalse, "CertificatesReadyFalse", "CertificatesReady is False", 1),
		cond(v1alpha1.ConditionCertificatesReady, metav1.ConditionFalse, v1alpha1.ReasonIssuing, "waiting for Secret c1-admin", 1),
	}
	setStatus(t, "kubefarm-tenantcluster", tc)

	kubefarm(t, "kubeconfig", "c1", "-n", "kc").fails(t, cli.ExitError,
		"error: TenantCluster kc/c1 has no admin kubeconfig yet (status.adminKubeconfigSecret is empty): its CertificatesReady condition is False (Issuing): waiting for Secret c1-admin\n")
	kubefarm(t, "kubeconfig", "nope", "-n", "kc").fails(t, cli.ExitError, "error: TenantCluster kc/nope not found\n")

	tc.Status.Conditions = []metav1.Condition{
		cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonControlPlaneReady, "", 1),
		cond(v1alpha1.ConditionCertificatesReady, metav1.ConditionTrue, v1alpha1.ReasonIssued, "", 1),
	}
	tc.Status.Endpoint = "https://192.0.2.10:6443"
	tc.Status.AdminKubeconfigSecret = "c1-admin-kubeconfig"
	setStatus(t, "kubefarm-tenantcluster", tc)
	kubefarm(t, "kubeconfig", "c1", "-n", "kc").fails(t, cli.ExitError,
		"error: TenantCluster kc/c1 names Secret c1-admin-kubeconfig in status.adminKubeconfigSecret, but it does not exist\n")

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kc", Name: "c1-admin-kubeconfig"},
		Data:       map[string][]byte{"other": []byte("x")},
	}
	create(t, secret)
	kubefarm(t, "kubeconfig", "c1", "-n", "kc").fails(t, cli.ExitError,
		"error: the admin kubeconfig Secret kc/c1-admin-kubeconfig (status.adminKubeconfigSecret of TenantCluster kc/c1) has no data key \"kubeconfig\"\n")

	first := "apiVersion: v1\nkind: Config\nclusters:\n- name: c1\n  cluster:\n    server: https://192.0.2.10:6443\n"
	secret.Data = map[string][]byte{plugin.AdminKubeconfigKey: []byte(first)}
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}

	// To stdout, byte for byte.
	r := kubefarm(t, "kubeconfig", "c1", "-n", "kc")
	r.ok(t)
	if r.out != first {
		t.Errorf("stdout = %q, want the Secret's kubeconfig %q", r.out, first)
	}

	// To a new file of mode 0600.
	path := filepath.Join(t.TempDir(), "c1.kubeconfig")
	r = kubefarm(t, "kubeconfig", "c1", "-n", "kc", "-o", path)
	r.ok(t)
	if r.out != "" {
		t.Errorf("stdout = %q with -o, want nothing", r.out)
	}
	assertFile(t, path, first)

	// Never over an existing file without --force.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	second := first + "# renewed\n"
	secret.Data[plugin.AdminKubeconfigKey] = []byte(second)
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	kubefarm(t, "kubeconfig", "c1", "-n", "kc", "-o", path).fails(t, cli.ExitError, "error: "+path+" exists; pass --force to replace it\n")
	if data, _ := os.ReadFile(path); string(data) != first {
		t.Errorf("the refused write changed the file to %q", data)
	}

	// --force replaces it, and the result is 0600 whatever the old mode.
	kubefarm(t, "kubeconfig", "c1", "-n", "kc", "-o", path, "--force").ok(t)
	assertFile(t, path, second)
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("the folder holds %d entries after --force, want only the kubeconfig (no temporary file left)", len(entries))
	}
}

func assertFile(t *testing.T, path, want string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
	}
	if data, _ := os.ReadFile(path); string(data) != want {
		t.Errorf("%s = %q, want %q", path, data, want)
	}
}

var (
	img1 = v1alpha1.ImageRef{Name: "node-1", Digest: "sha256:" + strings.Repeat("1", 64)}
	img2 = v1alpha1.ImageRef{Name: "node-2", Digest: "sha256:" + strings.Repeat("2", 64)}
)

// examplePool is examples/nodepool.yaml in namespace ns, on image node-2.
func examplePool(t *testing.T, ns string) *v1alpha1.NodePool {
	t.Helper()
	p, err := examples.NodePool()
	if err != nil {
		t.Fatal(err)
	}
	p.Namespace, p.Spec.BootImage = ns, img2.Name
	return p
}

// machine creates the Machine of the pool's entry i with the given rollout
// record and history.
func machine(t *testing.T, p *v1alpha1.NodePool, i int, ro *v1alpha1.MachineRollout, history ...v1alpha1.RolloutHistoryEntry) {
	t.Helper()
	e := p.Spec.Machines[i]
	m := &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name + "-" + e.Name, Labels: map[string]string{"kubefarm.io/pool": p.Name}},
		Spec: v1alpha1.MachineSpec{Pool: p.Name, Cluster: p.Spec.Cluster, Hostname: e.Name, MACs: e.MACs, IP: e.IP,
			DesiredImage: p.Spec.BootImage},
	}
	create(t, m)
	m.Status = v1alpha1.MachineStatus{ServedImage: &img1, Rollout: ro, History: history}
	setStatus(t, "kubefarm-rollout", m)
}

// poolStatus is a pool's status as the NodePool and rollout controllers
// would write it, with rollout conditions for its current generation.
func poolStatus(p *v1alpha1.NodePool, halted bool) v1alpha1.NodePoolStatus {
	g := p.Generation
	st := v1alpha1.NodePoolStatus{
		ObservedGeneration: g, Machines: 3, ReadyMachines: 2, UpdatedMachines: 1, UpdatingMachines: 1, UnavailableMachines: 1,
		RolloutImage: &img2,
		Conditions: []metav1.Condition{
			cond(v1alpha1.ConditionProgressing, metav1.ConditionTrue, "MachinesUpdating", "1 updating, 1 waiting, 1 of 3 unavailable (budget 1)", g),
			cond(v1alpha1.ConditionPaused, metav1.ConditionFalse, "NotPaused", "new machine updates may start", g),
			cond(v1alpha1.ConditionHalted, metav1.ConditionFalse, "WithinFailureBudget", "0 failed updates, failure budget 1", g),
			cond(v1alpha1.ConditionComplete, metav1.ConditionFalse, "MachinesPending", "1 of 3 machines run the pool's image", g),
		},
	}
	if halted {
		st.FailedUpdates = 2
		st.UpdatingMachines = 0
		msg := "2 failed updates exceed the failure budget 1; annotate the pool with kubefarm.io/rollout-retry=<anything new> to retry them"
		st.Conditions[0] = cond(v1alpha1.ConditionProgressing, metav1.ConditionFalse, "RolloutHalted", msg, g)
		st.Conditions[2] = cond(v1alpha1.ConditionHalted, metav1.ConditionTrue, "FailureBudgetExceeded", msg, g)
	}
	return st
}

func TestStatus(t *testing.T) {
	namespace(t, "st")
	tc := tenantCluster("st", "cluster1")
	create(t, tc)
	tc.Status = v1alpha1.TenantClusterStatus{ObservedVersion: "v1.33.4", Endpoint: "https://192.0.2.10:6443", Conditions: []metav1.Condition{
		cond(v1alpha1.ConditionReady, metav1.ConditionFalse, "APIServerReadyFalse", "1 of 2 API servers run v1.34.4", 1)}}
	setStatus(t, "kubefarm-tenantcluster", tc)
	create(t, tenantCluster("st", "another"))

	p := examplePool(t, "st")
	create(t, p)
	p.Status = poolStatus(p, false)
	setStatus(t, "kubefarm-rollout", p)
	machine(t, p, 0, &v1alpha1.MachineRollout{Phase: v1alpha1.RolloutDraining, Reason: v1alpha1.RolloutForImage, TargetImage: img2,
		PhaseStartTime: ago(2 * time.Minute), Message: "evicting 1 pod; refused: default/web-1 (PodDisruptionBudget web)"})
	machine(t, p, 1, nil)
	machine(t, p, 2, nil)

	r := kubefarm(t, "status", "-n", "st")
	r.ok(t)
	want := `TENANT CLUSTERS
NAME       VERSION                     READY     REASON                ENDPOINT
another    v1.34.4                     Unknown   -                     -
cluster1   v1.34.4 (running v1.33.4)   False     APIServerReadyFalse   https://192.0.2.10:6443

NODE POOLS
NAME      CLUSTER    IMAGE    READY   UPDATED   MACHINES   ROLLOUT
workers   cluster1   node-2   2       1         3          Progressing

MACHINES IN A ROLLOUT
POOL      MACHINE      PHASE      SINCE   TARGET   MESSAGE
workers   workers-m1   Draining   2m      node-2   evicting 1 pod; refused: default/web-1 (PodDisruptionBudget web)
`
	if r.out != want {
		t.Errorf("status -n st =\n%s\nwant\n%s", r.out, want)
	}

	// -A adds the namespace column; other tests' namespaces may show too.
	r = kubefarm(t, "status", "-A")
	r.ok(t)
	for _, line := range []string{
		"NAMESPACE   NAME",
		"st          cluster1   v1.34.4 (running v1.33.4)",
		"st          workers    cluster1   node-2",
		"st          workers   workers-m1   Draining",
	} {
		if !containsLinePrefix(r.out, line) {
			t.Errorf("status -A has no line starting %q:\n%s", line, r.out)
		}
	}

	namespace(t, "st-empty")
	r = kubefarm(t, "status", "-n", "st-empty")
	r.ok(t)
	if want := "No TenantClusters, NodePools or Machines found in namespace st-empty.\n"; r.out != want {
		t.Errorf("status of an empty namespace = %q, want %q", r.out, want)
	}
}

// containsLinePrefix tells whether a line of out starts with prefix, once
// tabwriter's padding is squeezed (columns widen with other namespaces).
func containsLinePrefix(out, prefix string) bool {
	squeeze := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for l := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(squeeze(l), squeeze(prefix)) {
			return true
		}
	}
	return false
}

// TestRolloutPauseResume checks that pause and resume write
// spec.rollout.paused and nothing else, and do not fight a GitOps tool
// that owns the rest of the spec by server-side apply: the "ArgoCD"
// manager's fields stay its own, and its next apply keeps the pause.
func TestRolloutPauseResume(t *testing.T) {
	ctx := context.Background()
	namespace(t, "ro")
	const gitops = "argocd-controller"
	manifest := examplePool(t, "ro")
	if err := ssa.Apply(ctx, env.Client, gitops, manifest, nil); err != nil {
		t.Fatal(err)
	}
	before := get(t, &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: "ro", Name: "workers"}})
	if before.Spec.Rollout.Paused {
		t.Fatal("the example pool starts paused")
	}

	r := kubefarm(t, "rollout", "pause", "workers", "-n", "ro")
	r.ok(t)
	if want := "nodepool ro/workers paused: no new machine update starts; updates in flight finish\n"; r.out != want {
		t.Errorf("rollout pause printed %q, want %q", r.out, want)
	}
	paused := get(t, before.DeepCopy())
	assertOnlyPausedChanged(t, before, paused, true)

	// The GitOps tool syncs its manifest again, which does not mention
	// paused: no conflict, and the pause stays.
	if err := ssa.Apply(ctx, env.Client, gitops, manifest, nil); err != nil {
		t.Fatalf("the GitOps apply after the pause: %v", err)
	}
	resynced := get(t, before.DeepCopy())
	assertOnlyPausedChanged(t, before, resynced, true)

	r = kubefarm(t, "rollout", "pause", "workers", "-n", "ro")
	r.ok(t)
	if want := "nodepool ro/workers already paused (spec.rollout.paused is true)\n"; r.out != want {
		t.Errorf("a second rollout pause printed %q, want %q", r.out, want)
	}
	if again := get(t, before.DeepCopy()); again.ResourceVersion != resynced.ResourceVersion {
		t.Error("a pause of a paused pool wrote it")
	}

	r = kubefarm(t, "rollout", "resume", "workers", "-n", "ro")
	r.ok(t)
	if want := "nodepool ro/workers resumed: new machine updates start again within the budget and windows\n"; r.out != want {
		t.Errorf("rollout resume printed %q, want %q", r.out, want)
	}
	assertOnlyPausedChanged(t, before, get(t, before.DeepCopy()), false)

	kubefarm(t, "rollout", "pause", "nope", "-n", "ro").fails(t, cli.ExitError, "error: NodePool ro/nope not found\n")
}

// assertOnlyPausedChanged compares after with before: the spec is the same
// but for spec.rollout.paused, labels and annotations are the same, every
// other manager's managed fields are unchanged, and kubectl-kubefarm
// manages spec.rollout.paused alone.
func assertOnlyPausedChanged(t *testing.T, before, after *v1alpha1.NodePool, paused bool) {
	t.Helper()
	if after.Spec.Rollout.Paused != paused {
		t.Errorf("spec.rollout.paused = %t, want %t", after.Spec.Rollout.Paused, paused)
	}
	wantSpec := before.Spec.DeepCopy()
	wantSpec.Rollout.Paused = paused
	if !equality.Semantic.DeepEqual(*wantSpec, after.Spec) {
		a, _ := json.Marshal(after.Spec)
		w, _ := json.Marshal(wantSpec)
		t.Errorf("the spec changed beyond spec.rollout.paused:\n got %s\nwant %s", a, w)
	}
	if !equality.Semantic.DeepEqual(before.Labels, after.Labels) || !equality.Semantic.DeepEqual(before.Annotations, after.Annotations) {
		t.Errorf("labels or annotations changed: %v %v -> %v %v", before.Labels, before.Annotations, after.Labels, after.Annotations)
	}
	managers := func(p *v1alpha1.NodePool) map[string]string {
		m := map[string]string{}
		for _, f := range p.ManagedFields {
			if f.Subresource == "" {
				m[f.Manager+"/"+string(f.Operation)] = f.FieldsV1.GetRawString()
			}
		}
		return m
	}
	b, a := managers(before), managers(after)
	for k, v := range b {
		if a[k] != v {
			t.Errorf("managed fields of %s changed:\n got %s\nwant %s", k, a[k], v)
		}
	}
	own := plugin.FieldManager + "/" + string(metav1.ManagedFieldsOperationUpdate)
	if want := `{"f:spec":{"f:rollout":{"f:paused":{}}}}`; a[own] != want {
		t.Errorf("%s manages %s, want %s", own, a[own], want)
	}
	if len(a) != len(b)+1 {
		t.Errorf("managers %v, want those before (%v) and %s", keys(a), keys(b), own)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestRolloutStatusAndRetry(t *testing.T) {
	namespace(t, "rs")
	p := examplePool(t, "rs")
	create(t, p)
	p.Status = poolStatus(p, true)
	setStatus(t, "kubefarm-rollout", p)
	failed := "in phase Rebooting: no new boot within 15m0s"
	machine(t, p, 0, &v1alpha1.MachineRollout{Phase: v1alpha1.RolloutFailed, Reason: v1alpha1.RolloutForImage, TargetImage: img2,
		PhaseStartTime: ago(20 * time.Minute), Message: failed},
		v1alpha1.RolloutHistoryEntry{Image: img2, Result: v1alpha1.RolloutFailed, Reason: v1alpha1.RolloutForImage, FinishTime: ago(20 * time.Minute), Message: failed},
		v1alpha1.RolloutHistoryEntry{Image: img1, Result: v1alpha1.RolloutDone, Reason: v1alpha1.RolloutForImage, FinishTime: ago(72 * time.Hour)})
	machine(t, p, 1, &v1alpha1.MachineRollout{Phase: v1alpha1.RolloutFailed, Reason: v1alpha1.RolloutForImage, TargetImage: img2,
		PhaseStartTime: ago(5 * time.Minute), Message: failed},
		v1alpha1.RolloutHistoryEntry{Image: img2, Result: v1alpha1.RolloutFailed, Reason: v1alpha1.RolloutForImage, FinishTime: ago(5 * time.Minute), Message: failed})
	machine(t, p, 2, nil,
		v1alpha1.RolloutHistoryEntry{Image: img2, Result: v1alpha1.RolloutDone, Reason: v1alpha1.RolloutForImage, FinishTime: ago(time.Hour)})

	r := kubefarm(t, "rollout", "status", "workers", "-n", "rs", "--history", "3")
	halted := "2 failed updates exceed the failure budget 1; annotate the pool with kubefarm.io/rollout-retry=<anything new> to retry them"
	r.fails(t, cli.ExitHalted, "error: the rollout of NodePool rs/workers is halted: "+halted+" (kubectl kubefarm rollout retry workers -n rs retries)\n")
	want := `NodePool rs/workers (cluster cluster1): Halted
Image:          node-2
Rollout image:  node-2@sha256:2222222222222222222222222222222222222222222222222222222222222222
Paused:         false (spec.rollout.paused)
Machines:       3 total, 2 ready, 1 updated, 0 updating, 1 unavailable
Failed updates: 2 (failure budget 1)
Gates:          kubefarm.io/reboot-hold on a Machine or its Node

Conditions:
  TYPE          STATUS   REASON                  SINCE   MESSAGE
  Progressing   False    RolloutHalted           10m     ` + halted + `
  Paused        False    NotPaused               10m     new machine updates may start
  Halted        True     FailureBudgetExceeded   10m     ` + halted + `
  Complete      False    MachinesPending         10m     1 of 3 machines run the pool's image

Machines in the rollout:
  MACHINE      PHASE    REASON         SINCE   TARGET   MESSAGE
  workers-m1   Failed   ImageChanged   20m     node-2   ` + failed + `
  workers-m2   Failed   ImageChanged   5m      node-2   ` + failed + `

Recent updates:
  MACHINE      RESULT   REASON         IMAGE    AGE   MESSAGE
  workers-m2   Failed   ImageChanged   node-2   5m    ` + failed + `
  workers-m1   Failed   ImageChanged   node-2   20m   ` + failed + `
  workers-m3   Done     ImageChanged   node-2   60m   -
`
	if r.out != want {
		t.Errorf("rollout status =\n%s\nwant\n%s", r.out, want)
	}

	// retry sets the annotation to the plugin's clock and nothing else.
	before := get(t, p.DeepCopy())
	r = kubefarm(t, "rollout", "retry", "workers", "-n", "rs")
	r.ok(t)
	value := now.Format(time.RFC3339)
	if want := "nodepool rs/workers: kubefarm.io/rollout-retry=" + value + "; the rollout controller retries its 2 failed updates\n"; r.out != want {
		t.Errorf("rollout retry printed %q, want %q", r.out, want)
	}
	after := get(t, p.DeepCopy())
	if got := after.Annotations[v1alpha1.AnnotationRolloutRetry]; got != value {
		t.Errorf("annotation %s = %q, want %q", v1alpha1.AnnotationRolloutRetry, got, value)
	}
	if after.Generation != before.Generation || !equality.Semantic.DeepEqual(before.Spec, after.Spec) {
		t.Error("rollout retry changed the spec")
	}
	// A second retry in the same second still differs.
	kubefarm(t, "rollout", "retry", "workers", "-n", "rs").ok(t)
	if got, want := get(t, p.DeepCopy()).Annotations[v1alpha1.AnnotationRolloutRetry], "2026-11-24T12:00:00.000000000Z"; got != want {
		t.Errorf("the second retry set %q, want %q", got, want)
	}

	// Once the controller has retried, status exits 0.
	after.Status = poolStatus(after, false)
	setStatus(t, "kubefarm-rollout", after)
	r = kubefarm(t, "rollout", "status", "workers", "-n", "rs", "--history", "0", "--watch=false")
	r.ok(t)
	if !strings.HasPrefix(r.out, "NodePool rs/workers (cluster cluster1): Progressing\n") || strings.Contains(r.out, "Recent updates") {
		t.Errorf("rollout status after the retry =\n%s", r.out)
	}

	kubefarm(t, "rollout", "status", "nope", "-n", "rs").fails(t, cli.ExitError, "error: NodePool rs/nope not found\n")
}

// kubefarmBackground starts `kubectl kubefarm args...` as kubefarm does and
// returns its stdout as it is written and its result once it exits.
func kubefarmBackground(t *testing.T, args ...string) (*netnstest.LockedBuffer, <-chan result) {
	t.Helper()
	kubefarm(t, "--help").ok(t) // writes the kubeconfig once
	out, errOut := &netnstest.LockedBuffer{}, &netnstest.LockedBuffer{}
	done := make(chan result, 1)
	go func() {
		streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut}
		code := cli.Main(context.Background(), append([]string{"--kubeconfig", kubeconfigPath}, args...), streams, func() time.Time { return now })
		done <- result{code: code, out: out.String(), errOut: errOut.String()}
	}()
	return out, done
}

// waitForOutput waits until out contains want, failing if the command
// exits first or a minute passes.
func waitForOutput(t *testing.T, out *netnstest.LockedBuffer, done <-chan result, want string) {
	t.Helper()
	deadline := time.After(time.Minute)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(out.String(), want) {
		select {
		case r := <-done:
			t.Fatalf("the command exited (status %d, stderr %q) before printing %q; stdout:\n%s", r.code, r.errOut, want, r.out)
		case <-deadline:
			t.Fatalf("no %q in a minute; stdout:\n%s", want, out.String())
		case <-tick.C:
		}
	}
}

func waitForExit(t *testing.T, done <-chan result) result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(time.Minute):
		t.Fatal("the command still runs after a minute")
		return result{}
	}
}

// completeStatus is the status the controllers write once every machine
// runs the pool's image.
func completeStatus(p *v1alpha1.NodePool) v1alpha1.NodePoolStatus {
	st := poolStatus(p, false)
	st.ReadyMachines, st.UpdatedMachines, st.UpdatingMachines, st.UnavailableMachines = 3, 3, 0, 0
	g := p.Generation
	st.Conditions[0] = cond(v1alpha1.ConditionProgressing, metav1.ConditionFalse, "RolloutComplete", "no machine waits for an update", g)
	st.Conditions[3] = cond(v1alpha1.ConditionComplete, metav1.ConditionTrue, "AllMachinesUpdated", "all 3 machines run the pool's image", g)
	return st
}

// TestRolloutStatusWatches: rollout status prints the pool, waits while the
// rollout runs, prints it again when it changes, and exits 0 once it is
// complete, 2 once it is halted, 1 at --timeout.
func TestRolloutStatusWatches(t *testing.T) {
	start := func(ns string) *v1alpha1.NodePool {
		namespace(t, ns)
		p := examplePool(t, ns)
		create(t, p)
		p.Status = poolStatus(p, false)
		setStatus(t, "kubefarm-rollout", p)
		return p
	}
	progressing := func(ns string) string { return "NodePool " + ns + "/workers (cluster cluster1): Progressing\n" }

	t.Run("complete", func(t *testing.T) {
		p := start("rw-complete")
		out, done := kubefarmBackground(t, "rollout", "status", "workers", "-n", p.Namespace, "--history", "0", "--timeout", "2m")
		waitForOutput(t, out, done, progressing(p.Namespace))
		first := out.String()

		p = get(t, p)
		p.Status = completeStatus(p)
		setStatus(t, "kubefarm-rollout", p)
		r := waitForExit(t, done)
		r.ok(t)
		// Each report as --watch=false prints it, a blank line between.
		once := kubefarm(t, "rollout", "status", "workers", "-n", p.Namespace, "--history", "0", "--watch=false")
		once.ok(t)
		if !strings.HasPrefix(once.out, "NodePool rw-complete/workers (cluster cluster1): Complete\n") {
			t.Fatalf("the complete pool's report:\n%s", once.out)
		}
		if r.out != first+"\n"+once.out {
			t.Errorf("rollout status printed\n%s\nwant\n%s\n%s", r.out, first, once.out)
		}
	})

	t.Run("halted", func(t *testing.T) {
		p := start("rw-halted")
		out, done := kubefarmBackground(t, "rollout", "status", "workers", "-n", p.Namespace, "--history", "0")
		waitForOutput(t, out, done, progressing(p.Namespace))

		p = get(t, p)
		p.Status = poolStatus(p, true)
		setStatus(t, "kubefarm-rollout", p)
		r := waitForExit(t, done)
		halted := "2 failed updates exceed the failure budget 1; annotate the pool with kubefarm.io/rollout-retry=<anything new> to retry them"
		r.fails(t, cli.ExitHalted, "error: the rollout of NodePool rw-halted/workers is halted: "+halted+" (kubectl kubefarm rollout retry workers -n rw-halted retries)\n")
		if !strings.Contains(r.out, "\nNodePool rw-halted/workers (cluster cluster1): Halted\n") {
			t.Errorf("rollout status printed\n%s\nwithout the halted report", r.out)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		p := start("rw-timeout")
		r := kubefarm(t, "rollout", "status", "workers", "-n", p.Namespace, "--history", "0", "--timeout", "1s")
		r.fails(t, cli.ExitError, "error: timed out after 1s waiting for the rollout of NodePool rw-timeout/workers to complete; it is Progressing\n")
		if strings.Count(r.out, "NodePool rw-timeout/workers") != 1 || !strings.HasPrefix(r.out, progressing(p.Namespace)) {
			t.Errorf("rollout status printed\n%s", r.out)
		}
	})

	t.Run("without --watch", func(t *testing.T) {
		p := start("rw-once")
		r := kubefarm(t, "rollout", "status", "workers", "-n", p.Namespace, "--history", "0", "--watch=false")
		r.ok(t)
		if strings.Count(r.out, "NodePool rw-once/workers") != 1 || !strings.HasPrefix(r.out, progressing(p.Namespace)) {
			t.Errorf("rollout status printed\n%s", r.out)
		}
	})
}

func TestHelpSaysKubectlKubefarm(t *testing.T) {
	r := kubefarm(t, "rollout", "--help")
	r.ok(t)
	for _, s := range []string{"kubectl kubefarm rollout [command]", "pause", "resume", "retry", "status"} {
		if !strings.Contains(r.out, s) {
			t.Errorf("rollout --help lacks %q:\n%s", s, r.out)
		}
	}
}

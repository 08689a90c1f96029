package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

const namespace = "kubefarm-system"

// TestBinary builds and runs the real kubefarm-manager binary against a real
// API server, as the identity the chart gives it: the generated ClusterRole
// plus a namespaced Role for leader election. It checks the wiring an
// operator relies on: leader election, probes, metrics, structured logs,
// webhook TLS from cert-manager, and a clean shutdown that releases the lease.
func TestBinary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env := testenv.StartT(t, testenv.Options{CertManager: true})
	binary := testenv.BuildBinary(t, "kubefarm-manager")

	certDir, caPEM, err := env.IssueServingCertificate(ctx, namespace)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := leastPrivilegeKubeconfig(ctx, t, env)

	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = testenv.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	metrics, probes := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	cmd := exec.Command(binary,
		"--kubeconfig", kubeconfig,
		"--metrics-bind-address", metrics,
		"--health-probe-bind-address", probes,
		"--webhook-host", "127.0.0.1", fmt.Sprintf("--webhook-port=%d", ports[2]), "--webhook-cert-dir", certDir,
		"--leader-elect", "--leader-election-namespace", namespace,
	)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	logLines := make(chan string, 1000)
	go func() {
		scanner := bufio.NewScanner(stderr)
		for scanner.Scan() {
			select {
			case logLines <- scanner.Text():
			default: // the test reads only the first lines; never block the manager
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(body)
	}
	poll := func(what string, cond func(context.Context) (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, cond); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	poll("/readyz never answered 200", func(context.Context) (bool, error) {
		code, _ := get("http://" + probes + "/readyz")
		return code == http.StatusOK, nil
	})
	if code, body := get("http://" + probes + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %s", code, body)
	}

	lease := &coordinationv1.Lease{}
	poll("the leader election Lease was never held", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "kubefarm-manager.kubefarm.io"}, lease)
		return err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", nil
	})

	poll("/metrics never reported leader status", func(context.Context) (bool, error) {
		code, body := get("http://" + metrics + "/metrics")
		return code == http.StatusOK && strings.Contains(body, "leader_election_master_status"), nil
	})

	// The webhook, with the certificate cert-manager issued and the RBAC the
	// chart grants, rejects a MAC that another pool already uses.
	if err := env.InstallWebhooks(ctx, ports[2], caPEM); err != nil {
		t.Fatal(err)
	}
	first := nodePool("first", "02:50:00:00:00:01", "10.50.0.1")
	if err := env.Client.Create(ctx, first); err != nil {
		t.Fatalf("creating the first pool: %v", err)
	}
	var rejection error
	poll("the webhook never rejected a reused MAC", func(ctx context.Context) (bool, error) {
		rejection = env.Client.Create(ctx, nodePool("second", "02:50:00:00:00:01", "10.50.0.2"), client.DryRunAll)
		return rejection != nil, nil
	})
	if want := `already used by machine "m" of NodePool default/first`; !strings.Contains(rejection.Error(), want) {
		t.Errorf("rejection does not say %q: %v", want, rejection)
	}

	// Logs are structured: every line is a JSON object with a message.
	select {
	case line := <-logLines:
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil || entry["msg"] == nil {
			t.Errorf("log line is not structured JSON with a msg: %q", line)
		}
	case <-ctx.Done():
		t.Fatal("the manager logged nothing")
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("manager exited with %v after SIGTERM", err)
		}
	case <-ctx.Done():
		t.Fatal("manager did not stop after SIGTERM")
	}
	// Releasing the lease on shutdown lets another replica lead at once.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(lease), lease); err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
		t.Errorf("lease still held by %q after shutdown", *lease.Spec.HolderIdentity)
	}
}

func nodePool(name, mac, ip string) *kubefarmv1.NodePool {
	return &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: "c", BootImage: "img", Network: kubefarmv1.BootNetwork{Subnet: "10.50.0.0/16"},
			Machines: []kubefarmv1.MachineEntry{{Name: "m", MACs: []string{mac}, IP: ip}},
		},
	}
}

// leastPrivilegeKubeconfig writes a kubeconfig for a user that has only the
// generated ClusterRole and a leader-election Role, as the chart grants.
func leastPrivilegeKubeconfig(ctx context.Context, t *testing.T, env *testenv.Env) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	role := &rbacv1.ClusterRole{}
	if err := utilyaml.NewYAMLOrJSONDecoder(f, 4096).Decode(role); err != nil {
		t.Fatal(err)
	}
	const user = "kubefarm-manager-test"
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user, APIGroup: rbacv1.GroupName}}
	objs := []client.Object{
		role,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   subject,
		},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "leader-election", Namespace: namespace},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
				{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "leader-election", Namespace: namespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "leader-election"},
			Subjects:   subject,
		},
	}
	for _, obj := range objs {
		if err := env.Client.Create(ctx, obj); client.IgnoreAlreadyExists(err) != nil {
			t.Fatalf("creating %T: %v", obj, err)
		}
	}
	path, err := env.WriteKubeconfig(envtest.User{Name: user}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return path
}

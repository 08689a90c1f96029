package tenantcluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/testing/etcdtest"
)

// testEtcds maps a member's client URL, as the controller dials it, to the
// local etcd process standing in for it.
var testEtcds = struct {
	sync.Mutex
	local map[string]string
}{local: map[string]string{}}

// dialTestEtcd is the manager's DialEtcd in these tests: the endpoint's
// local stand-in, with the TLS configuration the controller built from
// the tenant's own certificates.
func dialTestEtcd(ctx context.Context, endpoint string, tlsConfig *tls.Config) (*clientv3.Client, error) {
	testEtcds.Lock()
	local, ok := testEtcds.local[endpoint]
	testEtcds.Unlock()
	if !ok {
		return nil, fmt.Errorf("no test etcd stands in for %s", endpoint)
	}
	return clientv3.New(clientv3.Config{Endpoints: []string{local}, TLS: tlsConfig, DialTimeout: 5 * time.Second, Context: ctx, Logger: zap.NewNop()})
}

// startTenantEtcd runs one real etcd member as member 0 of the tenant,
// with the certificates cert-manager issued for it, advertising the peer
// URL the StatefulSet's member 0 has (nobody dials it: a single member
// has no peer). It returns a client of it.
func startTenantEtcd(ctx context.Context, t *testing.T, ns, name string) *clientv3.Client {
	t.Helper()
	bin := etcdtest.Binary(t)
	dir := t.TempDir()
	files := map[string]string{}
	for _, s := range []struct{ secret, key, file string }{
		{name + "-etcd-server", "tls.crt", "server.crt"}, {name + "-etcd-server", "tls.key", "server.key"},
		{name + "-etcd-ca", "tls.crt", "ca.crt"},
		{name + "-apiserver-etcd-client", "tls.crt", "client.crt"}, {name + "-apiserver-etcd-client", "tls.key", "client.key"},
	} {
		sec := &corev1.Secret{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.secret}, sec); err != nil {
			t.Fatal(err)
		}
		files[s.file] = filepath.Join(dir, s.file)
		if err := os.WriteFile(files[s.file], sec.Data[s.key], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	clientURL, listenPeer := fmt.Sprintf("https://127.0.0.1:%d", etcdtest.FreePort(t)), fmt.Sprintf("https://127.0.0.1:%d", etcdtest.FreePort(t))
	member := name + "-etcd-0"
	peerURL := fmt.Sprintf("https://%s.%s-etcd.%s.svc.cluster.local:2380", member, name, ns)
	logPath := filepath.Join(dir, "etcd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--name", member, "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", listenPeer, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", member+"="+peerURL, "--initial-cluster-state", "new", "--initial-cluster-token", ns+"-"+name,
		"--cert-file", files["server.crt"], "--key-file", files["server.key"], "--trusted-ca-file", files["ca.crt"], "--client-cert-auth",
		"--peer-cert-file", files["server.crt"], "--peer-key-file", files["server.key"], "--peer-trusted-ca-file", files["ca.crt"], "--peer-client-cert-auth",
		"--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	// Registered under the URL the controller dials for member 0.
	testEtcds.Lock()
	testEtcds.local[fmt.Sprintf("https://%s.%s-etcd.%s.svc.cluster.local:2379", member, name, ns)] = clientURL
	testEtcds.Unlock()

	pair, err := tls.LoadX509KeyPair(files["client.crt"], files["client.key"])
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(files["ca.crt"])
	tlsConfig := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	tlsConfig.RootCAs = x509.NewCertPool()
	if !tlsConfig.RootCAs.AppendCertsFromPEM(caPEM) {
		t.Fatal("no etcd CA certificate")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{clientURL}, TLS: tlsConfig, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	poll(ctx, t, "the tenant's etcd answers", time.Minute, func(ctx context.Context) (bool, string, error) {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(logPath)
			return false, "", fmt.Errorf("etcd exited: %v\n%s", err, log)
		default:
		}
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := cli.Get(c, "probe")
		return err == nil, fmt.Sprint(err), nil
	})
	return cli
}

// TestEtcdScaleController changes spec.etcd.replicas of a tenant whose
// member 0 is a real etcd process (the other members' pods never run in
// envtest), the test playing the StatefulSet and Deployment controllers by
// writing their status:
//   - 3 -> 1 with etcd at one member already: the API servers first move
//     to member 0 only and nothing else happens until they are rolled out;
//     while etcd cannot be reached the step fails and is retried; then the
//     StatefulSet goes to one replica and EtcdScaling False;
//   - 1 -> 3: member 1 is added as a learner, the initial cluster lists
//     both members, the StatefulSet gets 2 replicas with an unchanged pod
//     template, and the controller waits for the learner (which never
//     starts here);
//   - back to 1 in the middle: the learner is removed, the StatefulSet
//     back to one replica.
func TestEtcdScaleController(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := newNamespace(t)
	tc := exampleTenantCluster(t, ns)
	tc.Name = "sc"
	tc.Spec.APIServer.Expose = v1alpha1.APIServerExpose{Type: v1alpha1.ExposeExternalIP, ExternalIP: "203.0.113.11", Port: 6443}
	tc.Spec.Etcd.Replicas = 3
	tc.Spec.VolumeReclaimPolicy = v1alpha1.VolumeReclaimDelete
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tc)
	// Its API servers become (simulated) available, but the stand-in
	// tenant behind every test's API server must not get this tenant's
	// add-ons: the tenant does not answer.
	setTenantDown(tenantHost("sc", ns), true)
	deleteOnCleanup(t, key)
	member := func(i int, port int) string {
		return fmt.Sprintf("https://sc-etcd-%d.sc-etcd.%s.svc.cluster.local:%d", i, ns, port)
	}

	// rollOut plays the StatefulSet and Deployment controllers: every
	// replica of the current generation ready. apiServer false holds the
	// API server Deployment's rollout back.
	rollOut := func(ctx context.Context, apiServer bool) error {
		s := &appsv1.StatefulSet{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sc-etcd"}, s); err != nil {
			return client.IgnoreNotFound(err)
		}
		if n := *s.Spec.Replicas; s.Status.ObservedGeneration != s.Generation || s.Status.ReadyReplicas != n {
			s.Status = appsv1.StatefulSetStatus{ObservedGeneration: s.Generation, Replicas: n, ReadyReplicas: n,
				CurrentReplicas: n, UpdatedReplicas: n, AvailableReplicas: n}
			if err := env.Client.Status().Update(ctx, s); err != nil {
				return ignoreConflict(err)
			}
		}
		for _, d := range []string{"-apiserver", "-controller-manager", "-scheduler"} {
			if d == "-apiserver" && !apiServer {
				continue
			}
			dep := &appsv1.Deployment{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sc" + d}, dep); err != nil {
				return client.IgnoreNotFound(err)
			}
			if dep.Status.ObservedGeneration == dep.Generation {
				continue
			}
			n := *dep.Spec.Replicas
			dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: n, UpdatedReplicas: n,
				ReadyReplicas: n, AvailableReplicas: n}
			if err := env.Client.Status().Update(ctx, dep); err != nil {
				return ignoreConflict(err)
			}
		}
		return nil
	}
	etcdServers := func(ctx context.Context) (string, error) {
		dep := &appsv1.Deployment{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sc-apiserver"}, dep); err != nil {
			return "", err
		}
		for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
			if v, ok := strings.CutPrefix(a, "--etcd-servers="); ok {
				return v, nil
			}
		}
		return "", nil
	}
	sts := func(ctx context.Context) *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sc-etcd"}, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	initialCluster := func(ctx context.Context) string {
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sc-etcd-state"}, cm); err != nil {
			t.Fatal(err)
		}
		return cm.Data[desired.EtcdInitialClusterKey]
	}
	setReplicas := func(n int32) {
		t.Helper()
		got := mustTC(ctx, t, key)
		patch := client.MergeFrom(got.DeepCopy())
		got.Spec.Etcd.Replicas = n
		if err := env.Client.Patch(ctx, got, patch); err != nil {
			t.Fatal(err)
		}
	}
	scaling := func(ctx context.Context, status metav1.ConditionStatus, reason string) (bool, string, error) {
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		return hasCondition(got, v1alpha1.ConditionEtcdScaling, status, reason), conditionsString(got), nil
	}

	poll(ctx, t, "the control plane created, 3 etcd members listed", 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := rollOut(ctx, true); err != nil {
			return false, "", err
		}
		servers, err := etcdServers(ctx)
		return err == nil && strings.Count(servers, ",") == 2, servers, client.IgnoreNotFound(err)
	})
	template := sts(ctx).Spec.Template

	// 3 -> 1. etcd has one member already (the stand-in): the change is
	// only the API servers' and the StatefulSet's.
	setReplicas(1)
	poll(ctx, t, "API servers moved to member 0, the change waiting for their rollout", time.Minute, func(ctx context.Context) (bool, string, error) {
		servers, err := etcdServers(ctx)
		if err != nil || servers != member(0, 2379) {
			return false, servers, err
		}
		return scaling(ctx, metav1.ConditionTrue, v1alpha1.ReasonWaitingForAPIServers)
	})
	if n := *sts(ctx).Spec.Replicas; n != 3 {
		t.Errorf("the StatefulSet went to %d replicas before the API servers rolled out", n)
	}
	// etcd cannot be reached (its stand-in is not started yet): the step
	// fails, says where, and is retried.
	poll(ctx, t, "the step failed while etcd is unreachable", time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := rollOut(ctx, true); err != nil {
			return false, "", err
		}
		ok, msg, err := scaling(ctx, metav1.ConditionTrue, v1alpha1.ReasonStepFailed)
		return ok && strings.Contains(msg, "dialing etcd member 0"), msg, err
	})
	waitTenantEvent(ctx, t, ns, mustTC(ctx, t, key).UID, "EtcdScaleStepFailed", corev1.EventTypeWarning)
	cli := startTenantEtcd(ctx, t, ns, "sc")
	poll(ctx, t, "3 -> 1 done", time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := rollOut(ctx, true); err != nil {
			return false, "", err
		}
		return scaling(ctx, metav1.ConditionFalse, v1alpha1.ReasonMembersMatch)
	})
	if s := sts(ctx); *s.Spec.Replicas != 1 || !equality.Semantic.DeepEqual(s.Spec.Template, template) {
		t.Errorf("StatefulSet: %d replicas, template changed: %v", *s.Spec.Replicas, !equality.Semantic.DeepEqual(s.Spec.Template, template))
	}
	if got := initialCluster(ctx); got != "sc-etcd-0="+member(0, 2380) {
		t.Errorf("initial cluster %q", got)
	}

	// 1 -> 3: member 1 joins as a learner; its pod never runs here.
	setReplicas(3)
	poll(ctx, t, "member 1 added as a learner, the StatefulSet at 2", time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := rollOut(ctx, true); err != nil {
			return false, "", err
		}
		ok, msg, err := scaling(ctx, metav1.ConditionTrue, "WaitingForLearner")
		return ok && *sts(ctx).Spec.Replicas == 2, msg, err
	})
	waitTenantEvent(ctx, t, ns, mustTC(ctx, t, key).UID, "MemberAdded", corev1.EventTypeNormal)
	members, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Members) != 2 || !slices.ContainsFunc(members.Members, func(m *etcdserverpb.Member) bool {
		return m.IsLearner && slices.Contains(m.PeerURLs, member(1, 2380))
	}) {
		t.Errorf("etcd members %v, want member 0 and member 1 as a learner", members.Members)
	}
	if got, want := initialCluster(ctx), "sc-etcd-0="+member(0, 2380)+",sc-etcd-1="+member(1, 2380); got != want {
		t.Errorf("initial cluster %q, want %q", got, want)
	}
	if s := sts(ctx); !equality.Semantic.DeepEqual(s.Spec.Template, template) {
		t.Error("the etcd pod template changed during the change: the running members would restart")
	}
	if got := sts(ctx).Annotations[v1alpha1.AnnotationEtcdScaling]; got != "3" {
		t.Errorf("StatefulSet mark %s=%q during the change towards 3 members, want \"3\"", v1alpha1.AnnotationEtcdScaling, got)
	}
	if servers, _ := etcdServers(ctx); servers != member(0, 2379) {
		t.Errorf("API servers on %q during the change, want member 0 only", servers)
	}

	// The learner's pod is not ready (it never runs here): etcd still
	// serves on member 0, its only voting member, and says so.
	poll(ctx, t, "EtcdReady on a quorum of the voting members", time.Minute, func(ctx context.Context) (bool, string, error) {
		s := sts(ctx)
		if s.Status.ReadyReplicas != 1 {
			s.Status.ReadyReplicas, s.Status.AvailableReplicas = 1, 1
			if err := env.Client.Status().Update(ctx, s); err != nil {
				return false, "", ignoreConflict(err)
			}
		}
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionEtcdReady)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "a quorum of 1 voting"), conditionsString(got), nil
	})

	// Back to 1 before the learner caught up: it is removed.
	setReplicas(1)
	poll(ctx, t, "the learner removed, 1 member", time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := rollOut(ctx, true); err != nil {
			return false, "", err
		}
		ok, msg, err := scaling(ctx, metav1.ConditionFalse, v1alpha1.ReasonMembersMatch)
		return ok && *sts(ctx).Spec.Replicas == 1, msg, err
	})
	waitTenantEvent(ctx, t, ns, mustTC(ctx, t, key).UID, "MemberRemoved", corev1.EventTypeNormal)
	members, err = cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Members) != 1 {
		t.Errorf("etcd members %v, want member 0 alone", members.Members)
	}
	if a, ok := sts(ctx).Annotations[v1alpha1.AnnotationEtcdScaling]; ok {
		t.Errorf("the StatefulSet is still marked %s=%s after the change", v1alpha1.AnnotationEtcdScaling, a)
	}
}

package tenantcluster_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
	"github.com/kubefarm/kubefarm/internal/manager"
	"github.com/kubefarm/kubefarm/internal/testing/examples"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

var (
	env *testenv.Env
	mgr ctrl.Manager
)

// TestMain runs a real API server and the real cert-manager controllers, and
// kubefarm-manager in-process, built by the same manager.New the binary
// uses (webhooks included, serving a certificate cert-manager issued), so
// the TenantCluster controller runs with the wiring that ships.
func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration environment:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	// The controller's log goes to the test output, shown when a test fails.
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	var err error
	env, err = testenv.Start(testenv.Options{CertManager: true,
		APIServerFlags: map[string]string{"service-cluster-ip-range": tenantServiceCIDR}})
	if env != nil {
		defer func() {
			if err := env.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "stopping the integration environment:", err)
			}
		}()
	}
	if err != nil {
		return 1, err
	}
	var stop func()
	mgr, stop, err = env.StartManager(context.Background(), manager.Options{AddonsResync: testAddonsResync, PXENamespace: pxeNamespace,
		DialTenant: dialFakeTenant, DialEtcd: dialTestEtcd, EtcdToolsImage: testToolsImage}, false)
	if err != nil {
		return 1, err
	}
	defer stop()
	return m.Run(), nil
}

// pxeNamespace is where the manager under test writes the token issuer
// credentials: the namespace the serving certificate was issued in, which
// exists.
const pxeNamespace = "kubefarm-system"

// testToolsImage stands for the kubefarm-manager image the chart passes as
// --etcd-tools-image; no pod runs in envtest.
const testToolsImage = "ghcr.io/kubefarm/kubefarm-manager:test"

// tokenIssuerCredential reads the token issuer credential of ns/name from
// the PXE namespace.
func tokenIssuerCredential(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	return s, env.Client.Get(ctx, types.NamespacedName{Namespace: pxeNamespace, Name: bootstraptoken.CredentialSecretName(ns, name)}, s)
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// exampleTenantCluster is examples/tenantcluster.yaml, in namespace ns.
func exampleTenantCluster(t *testing.T, ns string) *v1alpha1.TenantCluster {
	tc, err := examples.TenantCluster()
	if err != nil {
		t.Fatal(err)
	}
	tc.Namespace = ns
	return tc
}

// poll waits for cond, failing the test with the last observation.
func poll(ctx context.Context, t *testing.T, what string, timeout time.Duration, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	last := ""
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := env.CertManagerRunning(); err != nil {
			return false, err
		}
		ok, msg, err := cond(ctx)
		last = msg
		return ok, err
	})
	if err != nil {
		t.Fatalf("%s: %v; last seen: %s (cert-manager log: %s)", what, err, last, env.CertManagerLog())
	}
}

func getTC(ctx context.Context, key types.NamespacedName) (*v1alpha1.TenantCluster, error) {
	tc := &v1alpha1.TenantCluster{}
	return tc, env.Client.Get(ctx, key, tc)
}

func conditionsString(tc *v1alpha1.TenantCluster) string {
	var parts []string
	for _, c := range tc.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("endpoint=%q gen=%d observed=%d %s", tc.Status.Endpoint, tc.Generation, tc.Status.ObservedGeneration, strings.Join(parts, " "))
}

func hasCondition(tc *v1alpha1.TenantCluster, typ string, status metav1.ConditionStatus, reason string) bool {
	c := meta.FindStatusCondition(tc.Status.Conditions, typ)
	return c != nil && c.Status == status && (reason == "" || c.Reason == reason) && c.ObservedGeneration == tc.Generation
}

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("no PEM block in %q", data)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTenantClusterLifecycle drives the example TenantCluster through the
// real cert-manager and the in-process controller: PKI issued, kubeconfigs
// written, workloads applied with owner references, readiness reported from
// (simulated) pods, deterministic re-reconciles, and deletion with
// volumeReclaimPolicy Delete.
func TestTenantClusterLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	var etcdTemplate *corev1.PodTemplateSpec
	ns := newNamespace(t)
	tc := exampleTenantCluster(t, ns)
	tc.Spec.VolumeReclaimPolicy = v1alpha1.VolumeReclaimDelete
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tc)
	name := tc.Name
	const lbIP = "192.0.2.10"

	// The admin cluster's load balancer (MetalLB, a cloud) is not part of
	// envtest: play its part by publishing an ingress address on the API
	// server Service once the controller has created it.
	apiSvcKey := types.NamespacedName{Namespace: ns, Name: name + "-apiserver"}
	poll(ctx, t, "API server Service", time.Minute, func(ctx context.Context) (bool, string, error) {
		svc := &corev1.Service{}
		if err := env.Client.Get(ctx, apiSvcKey, svc); err != nil {
			return false, err.Error(), client.IgnoreNotFound(err)
		}
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			return false, "", fmt.Errorf("Service type %s, want LoadBalancer", svc.Spec.Type)
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: lbIP}}
		return true, "", env.Client.Status().Update(ctx, svc)
	})

	// Every Certificate issued by the real cert-manager, for the spec that
	// includes the load balancer's address.
	var got *v1alpha1.TenantCluster
	poll(ctx, t, "CertificatesReady with the endpoint", 4*time.Minute, func(ctx context.Context) (bool, string, error) {
		var err error
		if got, err = getTC(ctx, key); err != nil {
			return false, "", err
		}
		return hasCondition(got, v1alpha1.ConditionCertificatesReady, metav1.ConditionTrue, v1alpha1.ReasonIssued) &&
			got.Status.Endpoint == "https://"+lbIP+":6443" && got.Status.AdminKubeconfigSecret != "", conditionsString(got), nil
	})
	if !slices.Contains(got.Finalizers, v1alpha1.FinalizerTenantCluster) {
		t.Errorf("finalizers = %v, want %s", got.Finalizers, v1alpha1.FinalizerTenantCluster)
	}
	certs := &cmapi.CertificateList{}
	if err := env.Client.List(ctx, certs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(certs.Items) != 17 {
		t.Errorf("%d Certificates, want 17", len(certs.Items))
	}

	secret := func(n string) *corev1.Secret {
		t.Helper()
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: n}, s); err != nil {
			t.Fatalf("Secret %s: %v", n, err)
		}
		return s
	}
	caCert := parseCert(t, secret(name + "-ca").Data["tls.crt"])
	roots := x509.NewCertPool()
	roots.AddCert(caCert)

	t.Run("admin kubeconfig", func(t *testing.T) {
		if got.Status.AdminKubeconfigSecret != name+"-admin-kubeconfig" {
			t.Errorf("status.adminKubeconfigSecret = %q", got.Status.AdminKubeconfigSecret)
		}
		s := secret(tenantcluster.AdminKubeconfigSecretName(name))
		cfg, err := clientcmd.Load(s.Data[tenantcluster.AdminKubeconfigKey])
		if err != nil {
			t.Fatalf("parsing the admin kubeconfig: %v", err)
		}
		kctx := cfg.Contexts[cfg.CurrentContext]
		if kctx == nil {
			t.Fatalf("current context %q missing", cfg.CurrentContext)
		}
		cluster, user := cfg.Clusters[kctx.Cluster], cfg.AuthInfos[kctx.AuthInfo]
		if cluster.Server != "https://"+lbIP+":6443" {
			t.Errorf("server = %s, want the external endpoint", cluster.Server)
		}
		if ca := parseCert(t, cluster.CertificateAuthorityData); !ca.Equal(caCert) {
			t.Errorf("kubeconfig trusts %q, not the cluster CA", ca.Subject)
		}
		leaf := parseCert(t, user.ClientCertificateData)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("admin client certificate does not chain to the cluster CA: %v", err)
		}
		if leaf.Subject.CommonName != desired.UserAdmin || !slices.Equal(leaf.Subject.Organization, []string{desired.GroupClusterAdmins}) {
			t.Errorf("admin identity = CN %q O %v", leaf.Subject.CommonName, leaf.Subject.Organization)
		}
		if len(user.ClientKeyData) == 0 {
			t.Error("no client key")
		}
		internal, err := clientcmd.Load(secret(tenantcluster.InternalAdminKubeconfigSecretName(name)).Data[tenantcluster.AdminKubeconfigKey])
		if err != nil {
			t.Fatal(err)
		}
		if s := internal.Clusters[internal.Contexts[internal.CurrentContext].Cluster].Server; s != fmt.Sprintf("https://%s-apiserver.%s.svc:6443", name, ns) {
			t.Errorf("in-cluster kubeconfig server = %s", s)
		}
	})

	// kubefarm-pxe's credential: in its own namespace, labelled for its
	// cache, the token issuer's identity and nothing more, at the
	// in-cluster endpoint.
	t.Run("token issuer credential", func(t *testing.T) {
		s, err := tokenIssuerCredential(ctx, ns, name)
		if err != nil {
			t.Fatalf("token issuer credential in %s: %v", pxeNamespace, err)
		}
		for k, v := range map[string]string{
			"kubefarm.io/credential": "token-issuer", "kubefarm.io/tenant-cluster": name, "kubefarm.io/tenant-namespace": ns,
		} {
			if s.Labels[k] != v {
				t.Errorf("label %s = %q, want %q", k, s.Labels[k], v)
			}
		}
		if len(s.OwnerReferences) != 0 {
			t.Errorf("owner references %v across namespaces", s.OwnerReferences)
		}
		cfg, err := clientcmd.Load(s.Data[bootstraptoken.KeyKubeconfig])
		if err != nil {
			t.Fatalf("parsing the token issuer kubeconfig: %v", err)
		}
		kctx := cfg.Contexts[cfg.CurrentContext]
		if kctx == nil {
			t.Fatalf("current context %q missing", cfg.CurrentContext)
		}
		cluster, user := cfg.Clusters[kctx.Cluster], cfg.AuthInfos[kctx.AuthInfo]
		if cluster.Server != fmt.Sprintf("https://%s-apiserver.%s.svc:6443", name, ns) {
			t.Errorf("server = %s, want the in-cluster endpoint", cluster.Server)
		}
		if ca := parseCert(t, cluster.CertificateAuthorityData); !ca.Equal(caCert) {
			t.Errorf("kubeconfig trusts %q, not the cluster CA", ca.Subject)
		}
		leaf := parseCert(t, user.ClientCertificateData)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("token issuer certificate does not chain to the cluster CA: %v", err)
		}
		if leaf.Subject.CommonName != "kubefarm:token-issuer" || len(leaf.Subject.Organization) != 0 {
			t.Errorf("token issuer identity = CN %q O %v, want kubefarm:token-issuer and no group", leaf.Subject.CommonName, leaf.Subject.Organization)
		}
		if len(user.ClientKeyData) == 0 {
			t.Error("no client key")
		}
		// Beside it, what a joining node needs of the tenant: the
		// external endpoint (nodes boot outside the admin cluster), the
		// cluster CA, DNS and pod network.
		var facts bootstraptoken.NodeFacts
		if err := json.Unmarshal(s.Data[bootstraptoken.KeyNodeFacts], &facts); err != nil {
			t.Fatalf("node facts: %v", err)
		}
		if facts.APIServer != "https://"+lbIP+":6443" || !parseCert(t, facts.CACert).Equal(caCert) ||
			len(facts.ClusterDNS) != 1 || facts.ClusterDNS[0] != "10.96.0.10" || facts.ClusterDomain != "cluster.local" {
			t.Errorf("node facts %+v: want the external endpoint, the cluster CA, 10.96.0.10 and cluster.local", facts)
		}
	})

	t.Run("API server serving certificate", func(t *testing.T) {
		leaf := parseCert(t, secret(name + "-apiserver").Data["tls.crt"])
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate does not chain to the cluster CA: %v", err)
		}
		svc := name + "-apiserver"
		for _, host := range []string{
			"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
			svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local",
			"cluster1.example.com", // spec.apiServer.certSANs
			"10.96.0.1",            // the tenant's kubernetes Service IP
			lbIP,                   // the external address
		} {
			if err := leaf.VerifyHostname(host); err != nil {
				t.Errorf("serving certificate: %v", err)
			}
		}
	})

	// envtest runs no kubelet, no StatefulSet or Deployment controller: no
	// pod ever runs, and the conditions must say so.
	t.Run("not ready without pods", func(t *testing.T) {
		got, err := getTC(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionEtcdReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonMembersNotReady || !strings.Contains(c.Message, "no pods running yet") {
			t.Errorf("EtcdReady = %+v, want False/MembersNotReady saying no pods run", c)
		}
		sts := &appsv1.StatefulSet{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-etcd"}, sts); err != nil {
			t.Fatal(err)
		}
		if state := etcdState(ctx, t, ns, name); state != "new" {
			t.Errorf("a first install must bootstrap a new etcd cluster: state %q", state)
		}
		etcdTemplate = sts.Spec.Template.DeepCopy()
		// The API server is created only once etcd answers: started
		// earlier it would crash-loop into a long restart back-off.
		if !hasCondition(got, v1alpha1.ConditionAPIServerReady, metav1.ConditionFalse, v1alpha1.ReasonWaitingForEtcd) {
			t.Errorf("APIServerReady: %s", conditionsString(got))
		}
		err = env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-apiserver"}, &appsv1.Deployment{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("the API server Deployment exists before etcd is ready (err %v)", err)
		}
		if !hasCondition(got, v1alpha1.ConditionReady, metav1.ConditionFalse, "") {
			t.Errorf("Ready is not False: %s", conditionsString(got))
		}
		if !hasCondition(got, v1alpha1.ConditionAddonsReady, metav1.ConditionFalse, v1alpha1.ReasonWaitingForAPIServer) {
			t.Errorf("AddonsReady: %s", conditionsString(got))
		}
		if got.Status.ObservedVersion != "" {
			t.Errorf("observedVersion = %q before any pod ran", got.Status.ObservedVersion)
		}
		events := &eventsv1.EventList{}
		if err := env.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool {
			return e.Regarding.UID == got.UID && e.Reason == v1alpha1.ConditionCertificatesReady+v1alpha1.ReasonIssued && e.Type == corev1.EventTypeNormal
		}) {
			t.Errorf("no Normal event for the issued certificates among %d events", len(events.Items))
		}
	})

	// etcd's members become (simulated) ready: the rest of the control
	// plane is created.
	poll(ctx, t, "API server created once etcd is ready", time.Minute, func(ctx context.Context) (bool, string, error) {
		s := &appsv1.StatefulSet{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-etcd"}, s); err != nil {
			return false, "", err
		}
		if s.Status.ReadyReplicas == 0 || s.Status.ObservedGeneration != s.Generation {
			n := *s.Spec.Replicas
			s.Status = appsv1.StatefulSetStatus{ObservedGeneration: s.Generation, Replicas: n, ReadyReplicas: n,
				CurrentReplicas: n, UpdatedReplicas: n, AvailableReplicas: n}
			if err := env.Client.Status().Update(ctx, s); err != nil {
				return false, "status update: " + err.Error(), ignoreConflict(err)
			}
		}
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		return hasCondition(got, v1alpha1.ConditionAPIServerReady, metav1.ConditionFalse, v1alpha1.ReasonNotAvailable), conditionsString(got), nil
	})

	// Workloads and their owner references.
	owned := map[string]client.Object{
		"StatefulSet " + name + "-etcd":                 &appsv1.StatefulSet{},
		"Deployment " + name + "-apiserver":             &appsv1.Deployment{},
		"Deployment " + name + "-controller-manager":    &appsv1.Deployment{},
		"Deployment " + name + "-scheduler":             &appsv1.Deployment{},
		"Service " + name + "-apiserver":                &corev1.Service{},
		"Service " + name + "-etcd":                     &corev1.Service{},
		"ConfigMap " + name + "-control-plane":          &corev1.ConfigMap{},
		"PodDisruptionBudget " + name + "-etcd":         &policyv1.PodDisruptionBudget{},
		"PodDisruptionBudget " + name + "-apiserver":    &policyv1.PodDisruptionBudget{},
		"Secret " + name + "-admin-kubeconfig":          &corev1.Secret{},
		"Secret " + name + "-admin-kubeconfig-internal": &corev1.Secret{},
		"Secret " + name + "-encryption-config":         &corev1.Secret{},
		"Certificate " + name + "-apiserver":            &cmapi.Certificate{},
		"Issuer " + name + "-ca":                        &cmapi.Issuer{},
	}
	readOwned := func(t *testing.T) map[string]string {
		t.Helper()
		rvs := map[string]string{}
		for k, obj := range owned {
			n := strings.Fields(k)[1]
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: n}, obj); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			rvs[k] = obj.GetResourceVersion()
		}
		return rvs
	}
	t.Run("owned objects", func(t *testing.T) {
		readOwned(t)
		for k, obj := range owned {
			ref := metav1.GetControllerOf(obj)
			if ref == nil || ref.UID != got.UID || ref.Kind != "TenantCluster" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
				t.Errorf("%s: controller reference %+v, want the TenantCluster %s", k, ref, got.UID)
			}
		}
		sts := owned["StatefulSet "+name+"-etcd"].(*appsv1.StatefulSet)
		if img := sts.Spec.Template.Spec.Containers[0].Image; img != "registry.k8s.io/etcd:3.6.4-0" {
			t.Errorf("etcd image %s", img)
		}
		api := owned["Deployment "+name+"-apiserver"].(*appsv1.Deployment)
		if api.Spec.Template.Annotations[v1alpha1.AnnotationChecksum] == "" {
			t.Error("API server pod template has no checksum annotation")
		}
		for _, c := range api.Spec.Template.Spec.Containers {
			if c.Name == desired.ComponentAPIServer && c.Image != "registry.k8s.io/kube-apiserver:v1.34.4" {
				t.Errorf("kube-apiserver image %s", c.Image)
			}
		}
	})

	// The StatefulSet controller would create the members' claims; create
	// them as it does, from the claim template, so deletion has volumes to
	// reclaim.
	sts := owned["StatefulSet "+name+"-etcd"].(*appsv1.StatefulSet)
	tmpl := sts.Spec.VolumeClaimTemplates[0]
	var pvcNames []string
	for i := range *sts.Spec.Replicas {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-%s-%d", tmpl.Name, sts.Name, i), Namespace: ns,
				Labels: tmpl.Labels,
			},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: tmpl.Spec.AccessModes,
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
			},
		}
		if err := env.Client.Create(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		pvcNames = append(pvcNames, pvc.Name)
	}

	// Simulate the kubelet and the workload controllers, which envtest
	// lacks: report every pod of the current generation ready. It runs on
	// each poll because the controller's own changes (etcd switching to
	// "existing" once bootstrapped) start a new generation, as they would in
	// a real cluster.
	markReady := func(ctx context.Context) error {
		s := &appsv1.StatefulSet{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-etcd"}, s); err != nil {
			return err
		}
		if s.Status.ObservedGeneration != s.Generation {
			n := *s.Spec.Replicas
			s.Status = appsv1.StatefulSetStatus{ObservedGeneration: s.Generation, Replicas: n, ReadyReplicas: n,
				CurrentReplicas: n, UpdatedReplicas: n, AvailableReplicas: n}
			if err := env.Client.Status().Update(ctx, s); err != nil {
				return client.IgnoreNotFound(ignoreConflict(err))
			}
		}
		return markControlPlaneAvailable(ctx, ns, name, false)
	}
	// The tenant's API server does not answer yet: its RBAC cannot be
	// written, so the admin kubeconfig would not work, and Ready waits.
	setTenantDown(tenantHost(name, ns), true)
	poll(ctx, t, "Ready withheld while the tenant's RBAC cannot be written", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := markReady(ctx); err != nil {
			return false, "", err
		}
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		return hasCondition(got, v1alpha1.ConditionAPIServerReady, metav1.ConditionTrue, "") &&
			hasCondition(got, v1alpha1.ConditionAddonsReady, metav1.ConditionFalse, v1alpha1.ReasonApplyFailed) &&
			ready != nil && ready.Status == metav1.ConditionFalse && strings.Contains(ready.Message, "connection refused (simulated)"), conditionsString(got), nil
	})
	setTenantDown(tenantHost(name, ns), false)
	poll(ctx, t, "Ready once the pods are (simulated) ready", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := markReady(ctx); err != nil {
			return false, "", err
		}
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		return hasCondition(got, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonControlPlaneReady) &&
			hasCondition(got, v1alpha1.ConditionEtcdReady, metav1.ConditionTrue, "") &&
			hasCondition(got, v1alpha1.ConditionAPIServerReady, metav1.ConditionTrue, "") &&
			hasCondition(got, v1alpha1.ConditionAddonsReady, metav1.ConditionTrue, v1alpha1.ReasonApplied) &&
			got.Status.ObservedVersion == tc.Spec.Version && got.Status.ObservedGeneration == got.Generation, conditionsString(got), nil
	})
	checkTenantRBAC(ctx, t, name, ns)
	t.Run("add-ons applied in the tenant", func(t *testing.T) { checkTenantAddons(ctx, t, "https://"+lbIP+":6443") })
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(sts), sts); err != nil {
		t.Fatal(err)
	}
	if state := etcdState(ctx, t, ns, name); state != "existing" {
		t.Errorf("after a member was ready, etcd must join as existing: state %q", state)
	}
	// ...without restarting the members: the pod template is the one the
	// first members started with.
	if !equality.Semantic.DeepEqual(etcdTemplate, &sts.Spec.Template) {
		t.Errorf("the etcd pod template changed with the initial cluster state:\n%+v\n%+v", etcdTemplate.Spec.Containers[0], sts.Spec.Template.Spec.Containers[0])
	}

	t.Run("re-reconcile changes nothing", func(t *testing.T) {
		before := readOwned(t)
		// A second reconciler on the same manager, called directly, so the
		// passes are known to have run (and finished) before comparing.
		r := &tenantcluster.Reconciler{
			Client: env.Client, APIReader: env.Client, Scheme: env.Scheme,
			Recorder:      mgr.GetEventRecorder("tenantcluster-test"),
			Images:        tenantcluster.DefaultImages("", testToolsImage),
			TenantClients: tenantcluster.NewTenantClients(dialFakeTenant),
		}
		addonsBefore := addonVersions(ctx, t)
		host := tenantHost(key.Name, key.Namespace)
		dialsBefore := tenantDials(host)
		for range 2 {
			// A Ready cluster comes back only to apply its add-ons again.
			// The manager under test reconciles it too: a pass that read
			// the TenantCluster just before the manager's status write
			// does not write its own (a Conflict, requeued after 1s) and
			// is run again.
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
			for retry := 0; err == nil && res.RequeueAfter == time.Second && retry < 5; retry++ {
				res, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
			}
			if err != nil || res.RequeueAfter != tenantcluster.DefaultAddonsResync {
				t.Fatalf("Reconcile = %+v, %v; want a requeue after %s", res, err, tenantcluster.DefaultAddonsResync)
			}
		}
		// The second pass reuses the client of the first: one dial, by
		// this Reconciler's TenantClients (the manager's keeps its own).
		if n := tenantDials(host) - dialsBefore; n != 1 {
			t.Errorf("%d dials of the tenant over two passes, want 1 (a client kept per TenantCluster)", n)
		}
		after := readOwned(t)
		for k, rv := range before {
			if after[k] != rv {
				t.Errorf("%s changed: resourceVersion %s -> %s", k, rv, after[k])
			}
		}
		addonsAfter := addonVersions(ctx, t)
		for k, rv := range addonsBefore {
			if addonsAfter[k] != rv {
				t.Errorf("tenant add-on %s changed: resourceVersion %s -> %s", k, rv, addonsAfter[k])
			}
		}
	})

	// A new certificate rolls exactly the pods that mount it: a new SAN
	// reissues the serving certificate, which only kube-apiserver mounts.
	t.Run("reissued certificate rolls the API server only", func(t *testing.T) {
		checksums := func() map[string]string {
			out := map[string]string{}
			for _, d := range []string{"-apiserver", "-controller-manager", "-scheduler"} {
				dep := &appsv1.Deployment{}
				if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + d}, dep); err != nil {
					t.Fatal(err)
				}
				out[d] = dep.Spec.Template.Annotations[v1alpha1.AnnotationChecksum]
			}
			s := &appsv1.StatefulSet{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-etcd"}, s); err != nil {
				t.Fatal(err)
			}
			out["-etcd"] = s.Spec.Template.Annotations[v1alpha1.AnnotationChecksum]
			return out
		}
		before := checksums()
		cur, err := getTC(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Spec.APIServer.CertSANs = append(cur.Spec.APIServer.CertSANs, "api.cluster1.example.org")
		if err := env.Client.Patch(ctx, cur, patch); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "serving certificate reissued and API server rolled", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
			s := &corev1.Secret{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-apiserver"}, s); err != nil {
				return false, "", err
			}
			block, _ := pem.Decode(s.Data["tls.crt"])
			if block == nil {
				return false, "no certificate yet", nil
			}
			leaf, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return false, "", err
			}
			if leaf.VerifyHostname("api.cluster1.example.org") != nil {
				return false, fmt.Sprintf("SANs %v", leaf.DNSNames), nil
			}
			if err := markReady(ctx); err != nil {
				return false, "", err
			}
			got, err := getTC(ctx, key)
			if err != nil {
				return false, "", err
			}
			after := checksums()
			return after["-apiserver"] != before["-apiserver"] &&
				hasCondition(got, v1alpha1.ConditionReady, metav1.ConditionTrue, ""), conditionsString(got), nil
		})
		after := checksums()
		for _, k := range []string{"-controller-manager", "-scheduler", "-etcd"} {
			if after[k] != before[k] {
				t.Errorf("%s rolled (checksum %s -> %s) for a certificate it does not mount", k, before[k], after[k])
			}
		}
	})

	t.Run("an add-on switched off is deleted", func(t *testing.T) { checkAddonSwitchOff(ctx, t, key) })
	t.Run("encryption at rest", func(t *testing.T) { checkEncryptionSetup(ctx, t, key) })
	t.Run("encryption key rotation", func(t *testing.T) { checkEncryptionRotation(ctx, t, key, markReady) })
	t.Run("front-proxy CA rotation", func(t *testing.T) {
		checkCARotation(ctx, t, key, desired.RoleFrontProxyCA, desired.RoleFrontProxyClient, markReady)
	})
	t.Run("etcd CA rotation", func(t *testing.T) {
		checkCARotation(ctx, t, key, desired.RoleEtcdCA, desired.RoleEtcdPeer, markReady)
	})
	t.Run("cluster CA rotation", func(t *testing.T) {
		checkClusterCARotation(ctx, t, key, markReady)
		// Generation 1's Issuer is gone; the deletion below reads the
		// Issuer that signs now.
		delete(owned, "Issuer "+name+"-ca")
		owned["Issuer "+name+"-ca-2"] = &cmapi.Issuer{}
	})

	t.Run("deletion", func(t *testing.T) {
		// Pods as the ReplicaSet and StatefulSet controllers (absent from
		// envtest) would have made them, from the live templates, bound to
		// a node so that their deletion waits for a kubelet and shows its
		// grace period; and one of another tenant in the same namespace.
		readOwned(t)
		sts := owned["StatefulSet "+name+"-etcd"].(*appsv1.StatefulSet)
		api := owned["Deployment "+name+"-apiserver"].(*appsv1.Deployment)
		fakePod := func(podName string, labels map[string]string) *corev1.Pod {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: podName, Labels: labels},
				Spec: corev1.PodSpec{NodeName: "admin-1", Containers: []corev1.Container{{Name: "c", Image: "c"}}}}
			if err := env.Client.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
			return p
		}
		otherLabels := maps.Clone(api.Spec.Template.Labels)
		otherLabels[v1alpha1.LabelTenantCluster], otherLabels[desired.LabelInstance] = "other", "other"
		pods := []*corev1.Pod{fakePod(name+"-etcd-0", sts.Spec.Template.Labels), fakePod(name+"-apiserver-x", api.Spec.Template.Labels)}
		other := fakePod("other-apiserver-x", otherLabels)

		if err := env.Client.Delete(ctx, got); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "TenantCluster gone", time.Minute, func(ctx context.Context) (bool, string, error) {
			_, err := getTC(ctx, key)
			if apierrors.IsNotFound(err) {
				return true, "", nil
			}
			return false, fmt.Sprint(err), client.IgnoreNotFound(err)
		})
		// The control plane was stopped before the finalizer went: the
		// workloads are deleted orphaning their pods (the garbage
		// collector, absent from envtest, would otherwise delete the pods
		// with their own grace, and then removes the orphan finalizer),
		// and the pods are terminating with the short grace periods, not
		// their own (75 s for an API server).
		for _, obj := range []client.Object{sts, api} {
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil || obj.GetDeletionTimestamp().IsZero() || !slices.Contains(obj.GetFinalizers(), metav1.FinalizerOrphanDependents) {
				t.Errorf("%T %s after the deletion: err %v, deletion %v, finalizers %v; want deleted orphaning its pods",
					obj, obj.GetName(), err, obj.GetDeletionTimestamp(), obj.GetFinalizers())
			}
		}
		for i, want := range []int64{3, 1} {
			p := pods[i]
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				t.Fatal(err)
			}
			if p.DeletionTimestamp.IsZero() || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != want {
				t.Errorf("pod %s: deletion %v, grace %v; want deleted with a grace of %d s", p.Name, p.DeletionTimestamp, p.DeletionGracePeriodSeconds, want)
			}
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(other), other); err != nil || !other.DeletionTimestamp.IsZero() {
			t.Errorf("another tenant's pod was deleted (err %v, deletion %v)", err, other.DeletionTimestamp)
		}
		// The PVC protection finalizer (added by the API server's
		// admission) holds a deleted claim until its controller, absent
		// from envtest, sees no pod uses it; deletion requested is the
		// observable fact.
		for _, n := range pvcNames {
			pvc := &corev1.PersistentVolumeClaim{}
			err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: n}, pvc)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if pvc.DeletionTimestamp.IsZero() {
				t.Errorf("PVC %s was not deleted (volumeReclaimPolicy Delete)", n)
			}
		}
		// cert-manager's Secrets have no owner; the finalizer deletes them.
		secrets := &corev1.SecretList{}
		if err := env.Client.List(ctx, secrets, client.InNamespace(ns), client.HasLabels{v1alpha1.LabelPKIRole}); err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets.Items {
			if s.DeletionTimestamp.IsZero() {
				t.Errorf("certificate Secret %s left behind (volumeReclaimPolicy Delete)", s.Name)
			}
		}
		if _, err := tokenIssuerCredential(ctx, ns, name); !apierrors.IsNotFound(err) {
			t.Errorf("token issuer credential left behind in %s (err %v)", pxeNamespace, err)
		}
		// Not owned either: the finalizer deletes it with the data it decrypts.
		if _, _, err := encryptionKeys(ctx, key); !apierrors.IsNotFound(err) {
			t.Errorf("encryption key Secret left behind (volumeReclaimPolicy Delete; err %v)", err)
		}
	})
}

// etcdState is the initial cluster state in TenantCluster name's etcd
// state ConfigMap.
func etcdState(ctx context.Context, t *testing.T, ns, name string) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-etcd-state"}, cm); err != nil {
		t.Fatalf("the etcd state ConfigMap: %v", err)
	}
	return cm.Data[desired.EtcdStateKey]
}

// markControlPlaneAvailable plays the Deployment controller for a tenant's
// kube-apiserver, kube-controller-manager and kube-scheduler: every replica
// of the current generation available. holdAPIServer leaves a new
// generation of the API servers unrolled (an upgrade caught half way).
func markControlPlaneAvailable(ctx context.Context, ns, name string, holdAPIServer bool) error {
	for _, d := range []string{"-apiserver", "-controller-manager", "-scheduler"} {
		dep := &appsv1.Deployment{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + d}, dep); err != nil {
			return client.IgnoreNotFound(err)
		}
		if dep.Status.ObservedGeneration == dep.Generation || (d == "-apiserver" && holdAPIServer && dep.Status.ObservedGeneration > 0) {
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

// deleteOnCleanup deletes the TenantCluster when the test ends and waits
// until it is gone (its finalizer done), so the next test starts clean.
func deleteOnCleanup(t *testing.T, key types.NamespacedName) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := env.Client.Delete(ctx, mustTC(ctx, t, key)); err != nil {
			t.Error(err)
			return
		}
		poll(ctx, t, "the tenant deleted", time.Minute, func(ctx context.Context) (bool, string, error) {
			_, err := getTC(ctx, key)
			return apierrors.IsNotFound(err), fmt.Sprint(err), client.IgnoreNotFound(err)
		})
	})
}

func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// TestInvalidSpec: a spec the CRD admits but the builders reject (a name too
// long for the derived object names) is reported as Ready=False/InvalidSpec
// with the field error, with a Warning event, and nothing is created.
func TestInvalidSpec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespace(t)
	tc := exampleTenantCluster(t, ns)
	tc.Name = "a-tenant-cluster-name-that-is-far-too-long-to-derive-names"
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tc)
	var got *v1alpha1.TenantCluster
	poll(ctx, t, "InvalidSpec", time.Minute, func(ctx context.Context) (bool, string, error) {
		var err error
		if got, err = getTC(ctx, key); err != nil {
			return false, "", err
		}
		return hasCondition(got, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec), conditionsString(got), nil
	})
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
	if !strings.Contains(c.Message, "metadata.name") {
		t.Errorf("message %q does not name the field", c.Message)
	}
	// Called directly: an invalid spec is not an error to retry.
	r := &tenantcluster.Reconciler{Client: env.Client, APIReader: env.Client, Scheme: env.Scheme,
		Recorder: mgr.GetEventRecorder("tenantcluster-test"), Images: tenantcluster.DefaultImages("", testToolsImage),
		TenantClients: tenantcluster.NewTenantClients(dialFakeTenant)}
	if res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil || !res.IsZero() {
		t.Errorf("Reconcile = %+v, %v; want no error and no requeue", res, err)
	}
	certs := &cmapi.CertificateList{}
	if err := env.Client.List(ctx, certs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(certs.Items) != 0 {
		t.Errorf("%d Certificates created for an invalid spec", len(certs.Items))
	}
	poll(ctx, t, "Warning event", time.Minute, func(ctx context.Context) (bool, string, error) {
		events := &eventsv1.EventList{}
		if err := env.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		return slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool {
			return e.Regarding.UID == got.UID && e.Type == corev1.EventTypeWarning && strings.Contains(e.Reason, v1alpha1.ReasonInvalidSpec)
		}), fmt.Sprintf("%d events", len(events.Items)), nil
	})
	// Deletion still works for a spec that never resolved. A token issuer
	// credential (left, say, by an earlier valid spec) goes too, although
	// volumeReclaimPolicy is Retain: it grants access to a tenant that is
	// going away.
	stale := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: pxeNamespace, Name: bootstraptoken.CredentialSecretName(ns, tc.Name),
		Labels: bootstraptoken.CredentialLabels(ns, tc.Name)}}
	if err := env.Client.Create(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "invalid TenantCluster gone", time.Minute, func(ctx context.Context) (bool, string, error) {
		_, err := getTC(ctx, key)
		return apierrors.IsNotFound(err), fmt.Sprint(err), client.IgnoreNotFound(err)
	})
	if _, err := tokenIssuerCredential(ctx, ns, tc.Name); !apierrors.IsNotFound(err) {
		t.Errorf("token issuer credential left behind with volumeReclaimPolicy Retain (err %v)", err)
	}
}

// leastPrivilegeClient is a client with only the generated ClusterRole
// (config/rbac/role.yaml, which the operator chart ships), so a missing
// +kubebuilder:rbac marker fails the test instead of the first real install.
func leastPrivilegeClient(ctx context.Context, t *testing.T) client.Client {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(b, role); err != nil {
		t.Fatal(err)
	}
	const user = "tenantcluster-controller-test"
	role.Name = user
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user, APIGroup: rbacv1.GroupName}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, obj); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
	}
	authn, err := env.AddUser(envtest.User{Name: user})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(authn.Config(), client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLeastPrivilege runs whole reconciles, creation to deletion, as an
// identity that has only the generated RBAC. The TenantCluster is exposed on
// a fixed external IP, the path that needs no load balancer.
func TestLeastPrivilege(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := leastPrivilegeClient(ctx, t)
	r := &tenantcluster.Reconciler{Client: c, APIReader: c, Scheme: env.Scheme,
		Recorder: mgr.GetEventRecorder("tenantcluster-test"), Images: tenantcluster.DefaultImages("mirror.example.com/k8s", testToolsImage),
		PXENamespace: pxeNamespace, TenantClients: tenantcluster.NewTenantClients(dialFakeTenant)}
	ns := newNamespace(t)
	tc := exampleTenantCluster(t, ns)
	tc.Name = "cluster2"
	tc.Spec.APIServer.Expose = v1alpha1.APIServerExpose{Type: v1alpha1.ExposeExternalIP, ExternalIP: "203.0.113.7", Port: 443}
	tc.Spec.Etcd.Replicas = 1
	tc.Spec.VolumeReclaimPolicy = v1alpha1.VolumeReclaimDelete
	// Backups too: their claim, CronJob and runs need RBAC of their own.
	tc.Spec.Etcd.Backup = &v1alpha1.EtcdBackup{}
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tc)
	poll(ctx, t, "reconciled with the generated RBAC", 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			return false, "", err
		}
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		// The manager under test reconciles this TenantCluster too, with
		// the default registry; what this reconciler applied is seen
		// right after its own pass, until the other's next one.
		sts := &appsv1.StatefulSet{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "cluster2-etcd"}, sts); client.IgnoreNotFound(err) != nil {
			return false, "", err
		}
		img := ""
		if len(sts.Spec.Template.Spec.Containers) > 0 {
			img = sts.Spec.Template.Spec.Containers[0].Image
		}
		done := hasCondition(got, v1alpha1.ConditionCertificatesReady, metav1.ConditionTrue, "") &&
			got.Status.AdminKubeconfigSecret != "" && img == "mirror.example.com/k8s/etcd:3.6.4-0"
		return done, fmt.Sprintf("etcd image %q; %s", img, conditionsString(got)), nil
	})
	got, err := getTC(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Endpoint != "https://203.0.113.7:443" {
		t.Errorf("endpoint = %q", got.Status.Endpoint)
	}
	if _, err := tokenIssuerCredential(ctx, ns, tc.Name); err != nil {
		t.Errorf("token issuer credential not written with the generated RBAC: %v", err)
	}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "cluster2-etcd-backup"}, &batchv1.CronJob{}); err != nil {
		t.Errorf("backup CronJob not applied with the generated RBAC: %v", err)
	}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "cluster2-etcd-backup"}, &corev1.PersistentVolumeClaim{}); err != nil {
		t.Errorf("backup claim not applied with the generated RBAC: %v", err)
	}
	sts := &appsv1.StatefulSet{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "cluster2-etcd"}, sts); err != nil {
		t.Fatal(err)
	}
	// One etcd member gets no disruption budget: it could never be evicted.
	pdb := &policyv1.PodDisruptionBudget{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "cluster2-etcd"}, pdb); !apierrors.IsNotFound(err) {
		t.Errorf("single etcd member has a PodDisruptionBudget (err %v)", err)
	}
	// Scaling the API server down to one removes its budget, which would
	// otherwise block every drain of that node.
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.APIServer.Replicas = ptrTo(int32(1))
	if err := env.Client.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "API server budget removed", time.Minute, func(ctx context.Context) (bool, string, error) {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			return false, "", err
		}
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "cluster2-apiserver"}, pdb)
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return !pdb.DeletionTimestamp.IsZero(), "still there", nil
	})

	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data-cluster2-etcd-0", Namespace: ns, Labels: sts.Spec.VolumeClaimTemplates[0].Labels},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
		},
	}
	if err := env.Client.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "deleted with the generated RBAC", time.Minute, func(ctx context.Context) (bool, string, error) {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			return false, "", err
		}
		_, err := getTC(ctx, key)
		return apierrors.IsNotFound(err), fmt.Sprint(err), client.IgnoreNotFound(err)
	})
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pvc), pvc); err == nil && pvc.DeletionTimestamp.IsZero() {
		t.Error("etcd volume not deleted")
	}
	if _, err := tokenIssuerCredential(ctx, ns, tc.Name); !apierrors.IsNotFound(err) {
		t.Errorf("token issuer credential left behind (err %v)", err)
	}
}

func ptrTo[T any](v T) *T { return &v }

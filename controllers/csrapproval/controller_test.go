package csrapproval_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/csrapproval"
	"github.com/kubefarm/kubefarm/controllers/nodepool"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
	"github.com/kubefarm/kubefarm/internal/testing/examples"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// The tenant stand-in: this test has one real API server (envtest), and it
// plays both the admin cluster and the tenant. The TenantCluster is a real
// object, but no TenantCluster controller runs; the test writes the
// internal admin kubeconfig Secret the TenantCluster controller would
// write, holding a kubeconfig for the envtest API server as a system:masters
// user instead of the tenant's in-cluster address and admin. The approval
// controller reads that Secret exactly as it reads a real one, so it watches
// and approves the CSRs of "the tenant" in envtest. Only one tenant is
// watched at a time: two tenants on one stand-in server would both see every
// CSR.
//
// The nodes are envtest users system:node:<name> in system:nodes, which
// create real kubelet-serving CSRs; the NodePool controller makes the
// Machines from a NodePool as in production.

type fixture struct {
	env     *testenv.Env
	watches *csrapproval.TenantWatches
	tc      *kubefarmv1.TenantCluster
	key     types.NamespacedName
	subnet  int
}

// TestApprovalPerTenant runs the controller in a manager of its own (no
// webhooks, no cert-manager, no TenantCluster controller: see the stand-in
// above) and drives one tenant through its life: approvals, denials,
// another signer left alone, a credential change restarting the watch, the
// credential's deletion stopping it, and the TenantCluster's deletion.
func TestApprovalPerTenant(t *testing.T) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	f := start(t)
	ctx := context.Background()

	pool := f.pool(t, "workers", "m1", "m2", "dup")
	f.pool(t, "others", "dup")
	f.eventually(t, "the NodePool controller creates the Machines", func(ctx context.Context) (bool, error) {
		n := 0
		for _, name := range []string{"workers-m1", "workers-m2", "workers-dup", "others-dup"} {
			err := f.env.Client.Get(ctx, types.NamespacedName{Namespace: f.tc.Namespace, Name: name}, &kubefarmv1.Machine{})
			if err == nil {
				n++
			} else if !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		return n == 4, nil
	})
	m1IP := net.ParseIP(fmt.Sprintf("10.%d.0.11", f.subnet))
	domain := pool.Spec.Network.Domain

	f.writeCredential(t, "tenant-admin-1")
	first := f.waitRunning(t, "")

	// (d) first, so that (a)'s approval is the barrier: the watch has
	// seen past (d) by then, and left it alone.
	other := f.createCSR(t, "m1", "example.com/other", []string{"m1"}, nil)

	t.Run("own names and address are approved", func(t *testing.T) {
		csr := f.createCSR(t, "m1", certificatesv1.KubeletServingSignerName, []string{"m1", "m1." + domain}, []net.IP{m1IP})
		c := f.waitDecided(t, csr)
		if c.Type != certificatesv1.CertificateApproved || c.Reason != kubefarmv1.ReasonCSRApproved {
			t.Fatalf("condition %s/%s (%s), want Approved/%s", c.Type, c.Reason, c.Message, kubefarmv1.ReasonCSRApproved)
		}
		f.waitEvent(t, "Machine", "workers-m1", corev1.EventTypeNormal, kubefarmv1.ReasonCSRApproved, csr)
	})
	t.Run("another signer is left alone", func(t *testing.T) {
		got := &certificatesv1.CertificateSigningRequest{}
		if err := f.env.Client.Get(ctx, client.ObjectKey{Name: other}, got); err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Conditions) != 0 {
			t.Fatalf("CSR for another signer has conditions %+v", got.Status.Conditions)
		}
	})
	t.Run("a foreign address is denied", func(t *testing.T) {
		csr := f.createCSR(t, "m1", certificatesv1.KubeletServingSignerName, []string{"m1"}, []net.IP{net.ParseIP("192.0.2.99")})
		c := f.waitDecided(t, csr)
		if c.Type != certificatesv1.CertificateDenied || c.Reason != kubefarmv1.ReasonCSRForeignSAN {
			t.Fatalf("condition %s/%s (%s), want Denied/%s", c.Type, c.Reason, c.Message, kubefarmv1.ReasonCSRForeignSAN)
		}
		f.waitEvent(t, "Machine", "workers-m1", corev1.EventTypeWarning, kubefarmv1.ReasonCSRForeignSAN, csr)
	})
	t.Run("a node that is no Machine is denied", func(t *testing.T) {
		csr := f.createCSR(t, "ghost", certificatesv1.KubeletServingSignerName, []string{"ghost"}, nil)
		c := f.waitDecided(t, csr)
		if c.Type != certificatesv1.CertificateDenied || c.Reason != kubefarmv1.ReasonCSRUnknownNode {
			t.Fatalf("condition %s/%s (%s), want Denied/%s", c.Type, c.Reason, c.Message, kubefarmv1.ReasonCSRUnknownNode)
		}
		f.waitEvent(t, "TenantCluster", f.tc.Name, corev1.EventTypeWarning, kubefarmv1.ReasonCSRUnknownNode, csr)
	})
	t.Run("a hostname two Machines share is denied", func(t *testing.T) {
		csr := f.createCSR(t, "dup", certificatesv1.KubeletServingSignerName, []string{"dup"}, nil)
		c := f.waitDecided(t, csr)
		if c.Type != certificatesv1.CertificateDenied || c.Reason != kubefarmv1.ReasonCSRUnknownNode {
			t.Fatalf("condition %s/%s (%s), want Denied/%s", c.Type, c.Reason, c.Message, kubefarmv1.ReasonCSRUnknownNode)
		}
	})

	t.Run("joins", func(t *testing.T) { f.checkJoins(t) })

	t.Run("a new credential restarts the watch", func(t *testing.T) {
		f.writeCredential(t, "tenant-admin-2")
		f.waitRunning(t, first)
		csr := f.createCSR(t, "m2", certificatesv1.KubeletServingSignerName, []string{"m2"}, nil)
		if c := f.waitDecided(t, csr); c.Type != certificatesv1.CertificateApproved {
			t.Fatalf("condition %s/%s (%s), want Approved", c.Type, c.Reason, c.Message)
		}
	})

	t.Run("no credential, no watch", func(t *testing.T) {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.tc.Namespace,
			Name: tenantcluster.InternalAdminKubeconfigSecretName(f.tc.Name)}}
		if err := f.env.Client.Delete(ctx, secret); err != nil {
			t.Fatal(err)
		}
		f.waitStopped(t)
		// Running() drops a tenant only after its watch's goroutines
		// have returned (TenantWatches.stop), so nothing can decide
		// this one now.
		pending := f.createCSR(t, "m1", certificatesv1.KubeletServingSignerName, []string{"m1"}, []net.IP{m1IP})
		got := &certificatesv1.CertificateSigningRequest{}
		if err := f.env.Client.Get(ctx, client.ObjectKey{Name: pending}, got); err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Conditions) != 0 {
			t.Fatalf("CSR decided with no watch running: %+v", got.Status.Conditions)
		}
		// A join approved while the manager was away from the tenant (as
		// if it stopped between approving and deleting the token): the
		// token is still there, and must go once the watch is back.
		token := f.createToken(t, "workers-m1", nil)
		join := f.createJoinCSR(t, tokenID(token), []string{bootstraptoken.DefaultGroup}, nil, nil)
		f.approve(t, join, kubefarmv1.ReasonCSRJoinApproved)
		// The credential back: the new watch lists what it missed.
		f.writeCredential(t, "tenant-admin-3")
		f.waitRunning(t, "")
		if c := f.waitDecided(t, pending); c.Type != certificatesv1.CertificateApproved {
			t.Fatalf("condition %s/%s (%s), want Approved", c.Type, c.Reason, c.Message)
		}
		f.waitTokenGone(t, token)
	})

	t.Run("a deleted TenantCluster is no longer watched", func(t *testing.T) {
		if err := f.env.Client.Delete(ctx, f.tc); err != nil {
			t.Fatal(err)
		}
		f.waitStopped(t)
	})
}

// start runs the integration environment and a manager with the NodePool
// controller and the approval controller, and creates the TenantCluster.
func start(t *testing.T) *fixture {
	t.Helper()
	env := testenv.StartT(t, testenv.Options{})
	mgr := env.BareManagerT(t)
	if err := (&nodepool.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("nodepool-controller")}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	tenants, err := tenantcluster.NewTenantCache(mgr.GetClient())
	if err != nil {
		t.Fatal(err)
	}
	r := &csrapproval.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("csrapproval-controller"), Tenants: tenants}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(testenv.RunManager(mgr))

	ctx := context.Background()
	// What the Node authorizer and the kubelet's default RBAC grant in a
	// real tenant: nodes may create and read their CSRs.
	if err := env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test:nodes-create-csrs"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-bootstrapper"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}},
	}); err != nil {
		t.Fatal(err)
	}
	// ...and kubefarm's bootstrappers may create their first CSR (the
	// kubefarm:kubelet-bootstrap add-on); so may every bootstrapper, as
	// if the tenant admin had bound kubeadm's default, so that a token
	// that is not kubefarm's can ask, and be denied.
	if err := env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test:bootstrappers-create-csrs"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-bootstrapper"},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: bootstraptoken.DefaultGroup},
			{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:bootstrappers"},
		},
	}); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	tc := exampleTenantCluster(t, ns.Name)
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	return &fixture{env: env, watches: r.Watches, tc: tc, key: client.ObjectKeyFromObject(tc), subnet: 40}
}

// exampleTenantCluster is examples/tenantcluster.yaml, in namespace ns.
func exampleTenantCluster(t *testing.T, ns string) *kubefarmv1.TenantCluster {
	tc, err := examples.TenantCluster()
	if err != nil {
		t.Fatal(err)
	}
	tc.Namespace = ns
	return tc
}

// pool creates a NodePool of the tenant with one machine per hostname, and
// its BootImage. Pools of one fixture share the subnet and number their
// addresses on.
func (f *fixture) pool(t *testing.T, name string, hostnames ...string) *kubefarmv1.NodePool {
	t.Helper()
	ctx := context.Background()
	img, err := examples.BootImage()
	if err != nil {
		t.Fatal(err)
	}
	img.Name = "image-" + name
	if err := f.env.Client.Create(ctx, img); err != nil {
		t.Fatal(err)
	}
	pool := &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.tc.Namespace, Name: name},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: f.tc.Name, BootImage: img.Name,
			Network: kubefarmv1.BootNetwork{Subnet: fmt.Sprintf("10.%d.0.0/16", f.subnet), Domain: "farm.example.com"},
		},
	}
	offset := 0
	list := &kubefarmv1.NodePoolList{}
	if err := f.env.Client.List(ctx, list, client.InNamespace(f.tc.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		offset += len(p.Spec.Machines)
	}
	for i, h := range hostnames {
		n := offset + i
		pool.Spec.Machines = append(pool.Spec.Machines, kubefarmv1.MachineEntry{
			Name: h, IP: fmt.Sprintf("10.%d.0.%d", f.subnet, 11+n), MACs: []string{fmt.Sprintf("02:00:00:%02x:00:%02x", f.subnet, n)},
		})
	}
	if err := f.env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// writeCredential writes the tenant's internal admin kubeconfig Secret as
// the TenantCluster controller would, for a new system:masters user of the
// stand-in API server (a new user: a new credential).
func (f *fixture) writeCredential(t *testing.T, user string) {
	t.Helper()
	u, err := f.env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: f.tc.Namespace, Name: tenantcluster.InternalAdminKubeconfigSecretName(f.tc.Name)}
	switch err := f.env.Client.Get(ctx, key, secret); {
	case apierrors.IsNotFound(err):
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Data: map[string][]byte{tenantcluster.AdminKubeconfigKey: kubeconfig}}
		err = f.env.Client.Create(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
	case err != nil:
		t.Fatal(err)
	default:
		secret.Data = map[string][]byte{tenantcluster.AdminKubeconfigKey: kubeconfig}
		if err := f.env.Client.Update(ctx, secret); err != nil {
			t.Fatal(err)
		}
	}
}

// waitRunning waits until the tenant's watch runs with another credential
// than previous (any, when previous is ""), and returns its fingerprint.
func (f *fixture) waitRunning(t *testing.T, previous string) string {
	t.Helper()
	var running string
	f.eventually(t, "the tenant's watch runs with a new credential", func(context.Context) (bool, error) {
		fp, ok := f.watches.Running()[f.key]
		running = fp
		return ok && fp != previous, nil
	})
	return running
}

func (f *fixture) waitStopped(t *testing.T) {
	t.Helper()
	f.eventually(t, "the tenant's watch stops", func(context.Context) (bool, error) {
		_, ok := f.watches.Running()[f.key]
		return !ok, nil
	})
}

// createCSR creates a CSR as node system:node:<node> with a fresh P-256
// key, as the kubelet does, and returns its name.
func (f *fixture) createCSR(t *testing.T, node, signer string, dnsNames []string, ips []net.IP) string {
	t.Helper()
	u, err := f.env.AddUser(envtest.User{Name: "system:node:" + node, Groups: []string{"system:nodes"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(u.Config(), client.Options{Scheme: f.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		DNSNames: dnsNames, IPAddresses: ips,
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "csr-" + node + "-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: signer,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}
	if err := c.Create(context.Background(), csr); err != nil {
		t.Fatal(err)
	}
	return csr.Name
}

// waitDecided waits for the CSR's Approved or Denied condition.
func (f *fixture) waitDecided(t *testing.T, name string) certificatesv1.CertificateSigningRequestCondition {
	t.Helper()
	var got certificatesv1.CertificateSigningRequestCondition
	f.eventually(t, "CSR "+name+" is decided", func(ctx context.Context) (bool, error) {
		csr := &certificatesv1.CertificateSigningRequest{}
		if err := f.env.Client.Get(ctx, client.ObjectKey{Name: name}, csr); err != nil {
			return false, err
		}
		for _, c := range csr.Status.Conditions {
			if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied {
				got = c
				return true, nil
			}
		}
		return false, nil
	})
	return got
}

// waitEvent waits for the Event about CSR csr on the admin cluster object
// kind/name.
func (f *fixture) waitEvent(t *testing.T, kind, name, typ, reason, csr string) {
	t.Helper()
	f.eventually(t, fmt.Sprintf("a %s event %s on %s %s", typ, reason, kind, name), func(ctx context.Context) (bool, error) {
		list := &eventsv1.EventList{}
		if err := f.env.Client.List(ctx, list, client.InNamespace(f.tc.Namespace)); err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Type == typ && e.Reason == reason &&
				strings.Contains(e.Note, csr) {
				if strings.Contains(e.Note, "CERTIFICATE REQUEST") {
					t.Errorf("event carries the request's PEM: %s", e.Note)
				}
				return true, nil
			}
		}
		return false, nil
	})
}

func (f *fixture) eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

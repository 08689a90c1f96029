package tenantcluster_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// The integration environment has no tenant API servers: dialFakeTenant
// plays them with envtest's own API server, records the identity and
// address the reconciler used and how often it dialled each, and can make
// a tenant unreachable. The manager under test and the Reconcilers the
// tests call directly get it through their TenantClients.
var fakeTenants = struct {
	sync.Mutex
	configs map[string]*rest.Config // by Host
	dials   map[string]int          // successful dials, by Host
	down    map[string]bool         // Hosts that do not answer
}{configs: map[string]*rest.Config{}, dials: map[string]int{}, down: map[string]bool{}}

func dialFakeTenant(cfg *rest.Config) (client.Client, error) {
	fakeTenants.Lock()
	defer fakeTenants.Unlock()
	fakeTenants.configs[cfg.Host] = rest.CopyConfig(cfg)
	if fakeTenants.down[cfg.Host] {
		return nil, errors.New("dial tcp: connection refused (simulated)")
	}
	fakeTenants.dials[cfg.Host]++
	return client.New(env.Config, client.Options{Scheme: env.Scheme})
}

func tenantDials(host string) int {
	fakeTenants.Lock()
	defer fakeTenants.Unlock()
	return fakeTenants.dials[host]
}

func tenantHost(name, ns string) string {
	return "https://" + name + "-apiserver." + ns + ".svc:6443"
}

func setTenantDown(host string, down bool) {
	fakeTenants.Lock()
	defer fakeTenants.Unlock()
	fakeTenants.down[host] = down
}

// checkTenantRBAC asserts that the reconciler reached the tenant at its
// in-cluster Service name as the super-admin, and wrote the bindings that
// make the admin kubeconfig (and the API server's kubelet and Konnectivity
// clients) work.
func checkTenantRBAC(ctx context.Context, t *testing.T, name, ns string) {
	t.Helper()
	host := tenantHost(name, ns)
	fakeTenants.Lock()
	cfg := fakeTenants.configs[host]
	fakeTenants.Unlock()
	if cfg == nil {
		t.Fatalf("the reconciler never connected to the tenant at %s", host)
	}
	cert := parseCert(t, cfg.CertData)
	if cert.Subject.CommonName != desired.UserSuperAdmin || strings.Join(cert.Subject.Organization, ",") != desired.GroupMasters {
		t.Errorf("tenant client identity %s %v, want %s in %s", cert.Subject.CommonName, cert.Subject.Organization, desired.UserSuperAdmin, desired.GroupMasters)
	}
	if len(cfg.CAData) == 0 || len(cfg.KeyData) == 0 {
		t.Error("tenant client without CA or key")
	}
	for _, want := range []struct{ name, role, kind, subject string }{
		{"kubefarm:cluster-admins", "cluster-admin", rbacv1.GroupKind, desired.GroupClusterAdmins},
		{"kubefarm:apiserver-kubelet-client", "system:kubelet-api-admin", rbacv1.UserKind, desired.UserKubeletClient},
		{"kubefarm:konnectivity-server", "system:auth-delegator", rbacv1.UserKind, desired.UserKonnectivityServer},
	} {
		crb := &rbacv1.ClusterRoleBinding{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: want.name}, crb); err != nil {
			t.Errorf("ClusterRoleBinding %s in the tenant: %v", want.name, err)
			continue
		}
		if crb.RoleRef.Name != want.role || len(crb.Subjects) != 1 || crb.Subjects[0].Kind != want.kind || crb.Subjects[0].Name != want.subject {
			t.Errorf("ClusterRoleBinding %s: roleRef %s, subjects %+v", want.name, crb.RoleRef.Name, crb.Subjects)
		}
	}
}

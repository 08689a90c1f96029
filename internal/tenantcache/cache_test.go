package tenantcache_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/tenantcache"
	"github.com/kubefarm/kubefarm/internal/testing/examples"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, &env) }

const secretSuffix = "-test-credential"

func secretName(cluster string) string { return cluster + secretSuffix }

// seen records the keys a Watch handled, per tenant.
type seen struct {
	mu   sync.Mutex
	keys map[string]int
}

func (s *seen) handle(_ context.Context, t *tenantcache.Tenant, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[t.Key().String()+"|"+key]++
	return nil
}

func (s *seen) has(tenant types.NamespacedName, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[tenant.String()+"|"+key] > 0
}

func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestCache runs the cache in a manager against the envtest API server as
// the tenant (one connection through its own credential), and a second
// tenant whose credential points at a port nobody listens on.
func TestCache(t *testing.T) {
	ctx := context.Background()
	mgr := env.BareManagerT(t)
	c, err := tenantcache.New(mgr.GetClient(), tenantcache.Options{
		KubeconfigSecret: secretName, KubeconfigKey: "kubeconfig", HealthInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := c.SetupWithManager(mgr); err != nil {
		t.Fatal("a second SetupWithManager (every consumer calls it):", err)
	}
	nodesA, nodesB, csrs := &seen{keys: map[string]int{}}, &seen{keys: map[string]int{}}, &seen{keys: map[string]int{}}
	var synced sync.Map
	wa, err := c.AddWatch(tenantcache.Watch{Name: "a", What: "a node", Sources: []tenantcache.Source{tenantcache.Nodes},
		Synced: func(_ context.Context, t *tenantcache.Tenant, enqueue func(string)) error {
			synced.Store(t.Key(), true)
			enqueue("from-synced")
			return nil
		},
		Handle: nodesA.handle})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddWatch(tenantcache.Watch{Name: "b", What: "a node", Sources: []tenantcache.Source{tenantcache.Nodes}, Handle: nodesB.handle}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddWatch(tenantcache.Watch{Name: "csr", What: "a CSR",
		Sources: []tenantcache.Source{tenantcache.CSRs(certificatesv1.KubeletServingSignerName)}, Handle: csrs.handle}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(testenv.RunManager(mgr))

	ns := env.NewNamespace(t, "tenantcache-")
	tc := tenantCluster(t, ns, "up")
	key := client.ObjectKeyFromObject(tc)

	t.Run("no credential: an error naming the TenantCluster", func(t *testing.T) {
		_, err := c.Get(ctx, key)
		if err == nil || !strings.Contains(err.Error(), key.String()) {
			t.Fatalf("Get = %v, want an error naming %s", err, key)
		}
	})

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenantcache-"}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, node) })

	writeCredential(t, ns, "up", env.Config.Host, "tenantcache-admin-1")
	var first string
	t.Run("the credential connects, and both Watches see the Nodes of one informer", func(t *testing.T) {
		eventually(t, "the tenant connects", func(context.Context) (bool, error) {
			first = c.Running()[key]
			return first != "", nil
		})
		if wa.Running()[key] != first {
			t.Fatal("a Watch's Running disagrees with the cache's")
		}
		eventually(t, "both Watches handle the Node", func(context.Context) (bool, error) {
			return nodesA.has(key, node.Name) && nodesB.has(key, node.Name) && nodesA.has(key, "from-synced"), nil
		})
		if nodesB.has(key, "from-synced") {
			t.Fatal("one Watch's Synced enqueued into another's queue")
		}
		wa.Enqueue(key, "by-hand")
		eventually(t, "Enqueue reaches the worker", func(context.Context) (bool, error) { return nodesA.has(key, "by-hand"), nil })

		tenant, err := c.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		nodes, err := tenant.NodeList(ctx, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, n := range nodes {
			found = found || n.Name == node.Name
		}
		if !found {
			t.Fatalf("NodeList lacks %s", node.Name)
		}
		// Nodes (shared by the two Watches and NodeList) and CSRs.
		if n := tenantcache.Informers(tenant); n != 2 {
			t.Fatalf("%d informers run in the tenant, want 2 (Nodes shared, CSRs)", n)
		}
	})

	t.Run("a new credential restarts the connection", func(t *testing.T) {
		writeCredential(t, ns, "up", env.Config.Host, "tenantcache-admin-2")
		eventually(t, "the tenant reconnects", func(context.Context) (bool, error) {
			fp := c.Running()[key]
			return fp != "" && fp != first, nil
		})
		n2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenantcache-"}}
		if err := env.Client.Create(ctx, n2); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, n2) })
		eventually(t, "the new connection's Watches work", func(context.Context) (bool, error) {
			return nodesA.has(key, n2.Name), nil
		})
	})

	t.Run("an API server that does not answer: unhealthy, named", func(t *testing.T) {
		down := tenantCluster(t, ns, "down")
		downKey := client.ObjectKeyFromObject(down)
		writeCredential(t, ns, "down", "https://"+closedAddress(t), "tenantcache-admin-1")
		eventually(t, "the unreachable tenant is reported unhealthy", func(ctx context.Context) (bool, error) {
			_, err := c.Get(ctx, downKey)
			return err != nil && strings.Contains(err.Error(), "TenantCluster "+downKey.String()) &&
				strings.Contains(err.Error(), "health check"), nil
		})
		if _, err := c.Get(ctx, key); err != nil {
			t.Fatalf("the answering tenant: %v", err)
		}
	})

	t.Run("an API server that stops answering: unhealthy, then healthy again", func(t *testing.T) {
		server, err := url.Parse(env.Config.Host)
		if err != nil {
			t.Fatal(err)
		}
		p := startProxy(t, server.Host)
		flaky := tenantCluster(t, ns, "flaky")
		flakyKey := client.ObjectKeyFromObject(flaky)
		writeCredential(t, ns, "flaky", "https://"+p.addr, "tenantcache-admin-1")
		eventually(t, "the tenant connects through the proxy", func(ctx context.Context) (bool, error) {
			tenant, err := c.Get(ctx, flakyKey)
			if err != nil {
				return false, nil
			}
			_, err = tenant.NodeList(ctx, time.Second)
			return err == nil, nil
		})
		p.stop()
		eventually(t, "the tenant is reported unhealthy once its watches fail", func(ctx context.Context) (bool, error) {
			_, err := c.Get(ctx, flakyKey)
			return err != nil && strings.Contains(err.Error(), "TenantCluster "+flakyKey.String()), nil
		})
		p.start(t)
		eventually(t, "the tenant is healthy again", func(ctx context.Context) (bool, error) {
			_, err := c.Get(ctx, flakyKey)
			return err == nil, nil
		})
	})

	t.Run("a deleted TenantCluster is disconnected", func(t *testing.T) {
		if err := env.Client.Delete(ctx, tc); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the tenant disconnects", func(context.Context) (bool, error) {
			_, ok := c.Running()[key]
			return !ok, nil
		})
	})
}

func tenantCluster(t *testing.T, ns, name string) *kubefarmv1.TenantCluster {
	t.Helper()
	tc, err := examples.TenantCluster()
	if err != nil {
		t.Fatal(err)
	}
	tc.Namespace, tc.Name = ns, name
	if err := env.Client.Create(context.Background(), tc); err != nil {
		t.Fatal(err)
	}
	return tc
}

// writeCredential writes the credential Secret of TenantCluster cluster: a
// kubeconfig of user (system:masters on the envtest API server) at server.
func writeCredential(t *testing.T, ns, cluster, server, user string) {
	t.Helper()
	u, err := env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}})
	if err != nil {
		t.Fatal(err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = server
	}
	if data, err = clientcmd.Write(*kc); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName(cluster)},
		Data: map[string][]byte{"kubeconfig": data}}
	if err := env.Client.Create(ctx, secret); apierrors.IsAlreadyExists(err) {
		err = env.Client.Update(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
}

// closedAddress is a loopback address nobody listens on.
func closedAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(addr)
}

// proxy forwards TCP from addr to target until stopped, and can start again
// on the same address: an API server that stops answering and comes back.
type proxy struct {
	addr, target string
	mu           sync.Mutex
	l            net.Listener
	conns        []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	p := &proxy{addr: "127.0.0.1:0", target: target}
	p.start(t)
	p.addr = p.l.Addr().String()
	t.Cleanup(p.stop)
	return p
}

func (p *proxy) start(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
}

// stop closes the listener and every connection through it.
func (p *proxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		p.l.Close()
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

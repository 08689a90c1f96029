// Command idlecalls measures the API requests kubefarm-manager makes per
// minute while idle, to the admin cluster and to the tenants: the manager
// as the binary builds it (internal/manager.New) against a real
// kube-apiserver and etcd (internal/testing/testenv), with -tenants
// TenantClusters and -pools NodePools of -machines Machines each, one pool
// per tenant.
//
// The tenants' API server is the envtest API server itself (labelled so in
// the output): each TenantCluster's internal admin kubeconfig Secret holds
// a system:masters client certificate of it, and the pools' Machines have
// Nodes there, Ready. cert-manager does not run, so the TenantCluster
// controller waits for PKI and never writes those Secrets itself. Requests
// are counted from the API server's apiserver_request_total, over -window
// after -settle; the API server's own requests are measured for -window
// before the manager starts and subtracted. Requests on Nodes,
// CertificateSigningRequests, pods/eviction and non-resource paths
// (/readyz) are the tenants' side: the manager touches none of them in the
// admin cluster.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/manager"
	"github.com/kubefarm/kubefarm/internal/testing/examples"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// Result is what -out writes.
type Result struct {
	Benchmark     string  `json:"benchmark"`
	Tenants       int     `json:"tenants"`
	Machines      int     `json:"machines"`
	WindowSeconds float64 `json:"windowSeconds"`
	// PerMinute are the manager's requests per minute by side
	// ("admin", "tenant") and "verb resource[/subresource]", the API
	// server's own subtracted.
	PerMinute map[string]map[string]float64 `json:"perMinute"`
	Admin     float64                       `json:"adminPerMinute"`
	Tenant    float64                       `json:"tenantPerMinute"`
	// Watches are the manager's open watches at the end of the window,
	// by side and resource (apiserver_longrunning_requests, the API
	// server's own subtracted): what idling costs besides requests.
	Watches map[string]map[string]float64 `json:"watches"`
	Note    string                        `json:"note"`
	// Touched is the window after every Machine was annotated once (the
	// bench's own PATCHes included on the admin side): each change runs
	// a rollout pass of its pool.
	Touched *Result `json:"touched,omitempty"`
}

func main() {
	tenants := flag.Int("tenants", 20, "TenantClusters")
	pools := flag.Int("pools", 5, "NodePools, one per tenant (at most -tenants)")
	machines := flag.Int("machines", 20, "Machines per NodePool")
	settle := flag.Duration("settle", 90*time.Second, "wait after the objects exist before counting")
	window := flag.Duration("window", time.Minute, "how long requests are counted")
	out := flag.String("out", "", "write the result as JSON here too")
	flag.Parse()
	// Errors only: the manager's info lines would bury the figures.
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	if err := run(*tenants, min(*pools, *tenants), *machines, *settle, *window, *out); err != nil {
		fmt.Fprintln(os.Stderr, "idlecalls:", err)
		os.Exit(1)
	}
}

func run(tenants, pools, machines int, settle, window time.Duration, out string) error {
	ctx := context.Background()
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return err
	}

	fmt.Fprintf(os.Stderr, "measuring the API server alone for %s\n", window)
	base, baseWatches, err := countDuring(ctx, cs, window, nil)
	if err != nil {
		return err
	}

	certDir, err := selfSignedServing()
	if err != nil {
		return err
	}
	defer os.RemoveAll(certDir)
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	mgr, err := manager.New(env.Config, manager.Options{MetricsAddr: "0", ProbeAddr: "0",
		WebhookHost: "127.0.0.1", WebhookPort: port, WebhookCertDir: certDir})
	if err != nil {
		return err
	}
	stop := testenv.RunManager(mgr)
	defer stop()

	if err := farm(ctx, env, tenants, pools, machines); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "objects made; settling for %s\n", settle)
	time.Sleep(settle)
	fmt.Fprintf(os.Stderr, "counting for %s\n", window)
	busy, busyWatches, err := countDuring(ctx, cs, window, nil)
	if err != nil {
		return err
	}

	res := result(tenants, pools*machines, window, base, busy, baseWatches, busyWatches)
	fmt.Fprintf(os.Stderr, "annotating every Machine once, counting for %s\n", window)
	touched, touchedWatches, err := countDuring(ctx, cs, window, func() error { return touch(ctx, env.Client) })
	if err != nil {
		return err
	}
	res.Touched = result(tenants, pools*machines, window, base, touched, baseWatches, touchedWatches)
	res.Touched.Benchmark = "idlecalls-touched"
	report(os.Stdout, *res)
	report(os.Stdout, *res.Touched)
	if out != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	}
	return nil
}

// touch annotates every Machine of the bench once.
func touch(ctx context.Context, c client.Client) error {
	list := &kubefarmv1.MachineList{}
	if err := c.List(ctx, list, client.InNamespace("idlecalls")); err != nil {
		return err
	}
	for i := range list.Items {
		m := &list.Items[i]
		patch := client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"idlecalls/touched":"`+time.Now().Format(time.RFC3339Nano)+`"}}}`))
		if err := c.Patch(ctx, m, patch); err != nil {
			return err
		}
	}
	return nil
}

// result is the manager's share of busy and busyWatches (the API
// server's own, base and baseWatches, subtracted), per minute of window.
func result(tenants, machines int, window time.Duration, base, busy, baseWatches, busyWatches map[string]float64) *Result {
	res := Result{Benchmark: "idlecalls", Tenants: tenants, Machines: machines, WindowSeconds: window.Seconds(),
		PerMinute: map[string]map[string]float64{"admin": {}, "tenant": {}},
		Watches:   map[string]map[string]float64{"admin": {}, "tenant": {}},
		Note:      "the tenants' API server is the envtest API server itself; the API server's own requests are subtracted"}
	perMinute := time.Minute.Seconds() / window.Seconds()
	for k, n := range busy {
		d := (n - base[k]) * perMinute
		if d <= 0 {
			continue
		}
		side := "admin"
		if tenantSide(k) {
			side = "tenant"
		}
		res.PerMinute[side][k] = d
		if side == "admin" {
			res.Admin += d
		} else {
			res.Tenant += d
		}
	}
	for k, n := range busyWatches {
		if d := n - baseWatches[k]; d > 0 {
			side := "admin"
			if tenantSide("WATCH " + k) {
				side = "tenant"
			}
			res.Watches[side][k] = d
		}
	}
	return &res
}

// tenantSide says whether requests of key ("VERB resource[/sub]") are the
// manager's in a tenant.
func tenantSide(key string) bool {
	_, res, _ := strings.Cut(key, " ")
	res, _, _ = strings.Cut(res, "/")
	switch res {
	case "nodes", "certificatesigningrequests", "-":
		return true
	}
	return strings.HasSuffix(key, "pods/eviction")
}

func report(w *os.File, r Result) {
	fmt.Fprintf(w, "idlecalls tenants=%d machines=%d (tenant API server: the envtest API server)\n", r.Tenants, r.Machines)
	for _, side := range []string{"admin", "tenant"} {
		keys := make([]string, 0, len(r.PerMinute[side]))
		for k := range r.PerMinute[side] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %-6s %-50s %8.1f/min\n", side, k, r.PerMinute[side][k])
		}
	}
	watches := map[string]float64{}
	for _, side := range []string{"admin", "tenant"} {
		for k, n := range r.Watches[side] {
			fmt.Fprintf(w, "  %-6s open WATCH %-39s %8.0f\n", side, k, n)
			watches[side] += n
		}
	}
	fmt.Fprintf(w, "idlecalls admin=%.1f/min tenant=%.1f/min total=%.1f/min; open watches admin=%.0f tenant=%.0f\n",
		r.Admin, r.Tenant, r.Admin+r.Tenant, watches["admin"], watches["tenant"])
}

// countDuring is the increase of apiserver_request_total over d, by
// "VERB resource[/subresource]" ("-" for non-resource paths), and the
// watches open at its end, by resource; act, if set, runs at its start.
func countDuring(ctx context.Context, cs kubernetes.Interface, d time.Duration, act func() error) (calls, watches map[string]float64, _ error) {
	before, _, err := scrape(ctx, cs)
	if err != nil {
		return nil, nil, err
	}
	start := time.Now()
	if act != nil {
		if err := act(); err != nil {
			return nil, nil, err
		}
	}
	time.Sleep(d - time.Since(start))
	after, watches, err := scrape(ctx, cs)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range before {
		after[k] -= v
	}
	// The two scrapes themselves.
	after["GET -"]--
	return after, watches, nil
}

func scrape(ctx context.Context, cs kubernetes.Interface) (calls, watches map[string]float64, _ error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	watches = map[string]float64{}
	for _, m := range families["apiserver_longrunning_requests"].GetMetric() {
		if l := labels(m); l["verb"] == "WATCH" {
			watches[l["resource"]] += m.GetGauge().GetValue()
		}
	}
	out := map[string]float64{}
	f := families["apiserver_request_total"]
	if f == nil {
		return nil, nil, fmt.Errorf("the API server exports no apiserver_request_total")
	}
	for _, m := range f.GetMetric() {
		l := labels(m)
		res := l["resource"]
		if res == "" {
			res = "-"
		}
		if l["subresource"] != "" {
			res += "/" + l["subresource"]
		}
		out[l["verb"]+" "+res] += m.GetCounter().GetValue()
	}
	return out, watches, nil
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, p := range m.GetLabel() {
		out[p.GetName()] = p.GetValue()
	}
	return out
}

// farm makes the tenants (TenantClusters and their credential Secrets),
// the pools and, once the NodePool controller has made the Machines, their
// Nodes, Ready, in the envtest API server.
func farm(ctx context.Context, env *testenv.Env, tenants, pools, machines int) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "idlecalls"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		return err
	}
	u, err := env.AddUser(envtest.User{Name: "idlecalls-tenant-admin", Groups: []string{"system:masters"}})
	if err != nil {
		return err
	}
	kubeconfig, err := u.KubeConfig()
	if err != nil {
		return err
	}
	for i := range tenants {
		tc, err := examples.TenantCluster()
		if err != nil {
			return err
		}
		tc.Namespace, tc.Name = ns.Name, fmt.Sprintf("t%02d", i)
		if err := env.Client.Create(ctx, tc); err != nil {
			return err
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name,
			Name:   tenantcluster.InternalAdminKubeconfigSecretName(tc.Name),
			Labels: map[string]string{desired.LabelManagedBy: "kubefarm", kubefarmv1.LabelTenantCluster: tc.Name}},
			Data: map[string][]byte{tenantcluster.AdminKubeconfigKey: kubeconfig}}
		if err := env.Client.Create(ctx, secret); err != nil {
			return err
		}
	}
	var hostnames []string
	for p := range pools {
		pool, err := examples.NodePool()
		if err != nil {
			return err
		}
		pool.Namespace, pool.Name, pool.Spec.Cluster = ns.Name, fmt.Sprintf("p%d", p), fmt.Sprintf("t%02d", p)
		pool.Spec.Network.Subnet = fmt.Sprintf("10.%d.0.0/16", 30+p)
		pool.Spec.Network.Gateway = fmt.Sprintf("10.%d.0.1", 30+p)
		pool.Spec.Network.DNS = []string{pool.Spec.Network.Gateway}
		pool.Spec.Machines = nil
		for m := range machines {
			name := fmt.Sprintf("p%d-m%02d", p, m)
			pool.Spec.Machines = append(pool.Spec.Machines, kubefarmv1.MachineEntry{Name: name,
				MACs: []string{fmt.Sprintf("02:00:0a:%02x:00:%02x", p, m)}, IP: fmt.Sprintf("10.%d.0.%d", 30+p, 11+m)})
			hostnames = append(hostnames, name)
		}
		if err := env.Client.Create(ctx, pool); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list := &kubefarmv1.MachineList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ns.Name)); err != nil {
			return err
		}
		if len(list.Items) == pools*machines {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the NodePool controller made %d of %d Machines in 2 minutes", len(list.Items), pools*machines)
		}
		time.Sleep(time.Second)
	}
	for _, h := range hostnames {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h}}
		if err := env.Client.Create(ctx, n); err != nil {
			return err
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "KubeletReady"}}
		if err := env.Client.Status().Update(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// selfSignedServing writes a self-signed serving certificate for 127.0.0.1
// (the webhook server's; nothing calls it here) and returns its directory.
func selfSignedServing() (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "idlecalls"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "idlecalls-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
}

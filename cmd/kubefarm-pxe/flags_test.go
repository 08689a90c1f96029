package main

import (
	"context"
	"flag"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func newFlagSet(t *testing.T, o *options) *flag.FlagSet {
	t.Helper()
	fs := flag.NewFlagSet("kubefarm-pxe", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs)
	return fs
}

// TestFlagDefaults pins every flag's name and default: the chart, the e2e
// scenario and operators' manifests rely on them.
func TestFlagDefaults(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "kubefarm-system")
	t.Setenv("NODE_NAME", "node-1")
	var o options
	fs := newFlagSet(t, &o)
	want := map[string]string{
		"interface":                   "",
		"dhcp-listen":                 "",
		"server-ip":                   "",
		"http-addr":                   ":8080",
		"http-port":                   "0",
		"tftp-addr":                   ":69",
		"ipxe-dir":                    "/usr/lib/ipxe",
		"uefi-binary":                 "ipxe.efi",
		"cache-dir":                   "/var/cache/kubefarm-pxe",
		"proxy-dhcp":                  "false",
		"answer-router-solicitations": "true",
		"workers":                     "0",
		"queue":                       "1024",
		"tftp-timeout":                "2s",
		"tftp-retries":                "5",
		"tftp-max-transfers":          "64",
		"tftp-max-windowsize":         "16",
		"tftp-spin-wait":              "50µs",
		"max-artifact-size":           "4294967296",
		"artifact-wait":               "2m0s",
		"insecure-registry":           "false",
		"fetch-denied-cidrs":          "",
		"fetch-allowed-cidrs":         "",
		"verify-images":               "true",
		"namespace":                   "",
		"boot-window":                 "10m0s",
		"pod-namespace":               "kubefarm-system",
		"join-token-ttl":              "15m0s",
		"dynamic-ranges":              "true",
		"dynamic-workers":             "4",
		"event-interval":              "1m0s",
		"event-qps":                   "5",
		"event-burst":                 "50",
		"node-name":                   "node-1",
		"shutdown-timeout":            "30s",
		"metrics-addr":                "127.0.0.1:9090",
		"http-read-header-timeout":    "10s",
		"http-read-timeout":           "30s",
		"http-write-timeout":          "1m0s",
		"http-idle-timeout":           "2m0s",
		"http-max-header-bytes":       "8192",
		"http-max-conns-per-ip":       "16",
	}
	seen := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		seen[f.Name] = true
		d, ok := want[f.Name]
		if !ok {
			t.Errorf("unexpected flag --%s", f.Name)
			return
		}
		if f.DefValue != d {
			t.Errorf("--%s defaults to %q, want %q", f.Name, f.DefValue, d)
		}
		if f.Usage == "" {
			t.Errorf("--%s has no help text", f.Name)
		}
	})
	for n := range want {
		if !seen[n] {
			t.Errorf("flag --%s is missing", n)
		}
	}
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if o.podNamespace != "kubefarm-system" || o.nodeName != "node-1" || o.httpAddr != ":8080" || o.bootWindow != 10*time.Minute || !o.dynamicRanges || !o.verifyImages {
		t.Errorf("defaults not set on the struct: %+v", o)
	}
}

func TestFlagParse(t *testing.T) {
	var o options
	fs := newFlagSet(t, &o)
	err := fs.Parse([]string{
		"--dhcp-listen", "eth1", "--server-ip", "10.28.0.2", "--http-port", "80", "--proxy-dhcp",
		"--tftp-timeout", "500ms", "--uefi-binary", "snponly.efi", "--dynamic-ranges=false", "--event-interval", "0",
		"--verify-images=false",
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.iface != "eth1" {
		t.Errorf("--dhcp-listen is not an alias of --interface: %q", o.iface)
	}
	if o.serverIP != "10.28.0.2" || o.httpPort != 80 || !o.proxyDHCP || o.tftpTimeout != 500*time.Millisecond ||
		o.uefiBinary != "snponly.efi" || o.dynamicRanges || o.eventInterval != 0 || o.verifyImages {
		t.Errorf("parsed %+v", o)
	}
	if err := newFlagSet(t, &options{}).Parse([]string{"--no-such-flag"}); err == nil {
		t.Error("an unknown flag was accepted")
	}
}

func TestBootServer(t *testing.T) {
	for _, tc := range []struct {
		name             string
		serverIP, addr   string
		port             int
		wantPort         int
		wantBase, errHas string
	}{
		{"port of --http-addr", "10.28.0.2", ":8080", 0, 8080, "http://10.28.0.2:8080", ""},
		{"--http-port wins", "10.28.0.2", ":8080", 9090, 9090, "http://10.28.0.2:9090", ""},
		{"port 80 is left out", "10.28.0.2", "0.0.0.0:80", 0, 80, "http://10.28.0.2", ""},
		{"--http-port 80 is left out", "10.28.0.2", ":8080", 80, 80, "http://10.28.0.2", ""},
		{"no server IP", "", ":8080", 0, 0, "", `--server-ip "" is not an IPv4 address`},
		{"IPv6 server IP", "fe80::1", ":8080", 0, 0, "", `--server-ip "fe80::1" is not an IPv4 address`},
		{"http-addr without a port", "10.28.0.2", "8080", 0, 0, "", "--http-addr: "},
		{"http-addr port 0", "10.28.0.2", ":0", 0, 0, "", `--http-addr ":0" needs an explicit port`},
		{"http-addr named port", "10.28.0.2", ":http", 0, 0, "", `--http-addr ":http" needs an explicit port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options{serverIP: tc.serverIP, httpAddr: tc.addr, httpPort: tc.port}
			b, err := o.bootServer()
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("got %+v, %v; want an error containing %q", b, err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !b.ip.Equal(net.ParseIP(tc.serverIP)) || len(b.ip) != 4 || b.httpPort != tc.wantPort || b.base.String() != tc.wantBase {
				t.Fatalf("got ip %v port %d base %q; want %s, %d, %q", b.ip, b.httpPort, b.base, tc.serverIP, tc.wantPort, tc.wantBase)
			}
		})
	}
}

func TestComponentConfigs(t *testing.T) {
	o := options{ipxeDir: "/srv/ipxe", tftpTimeout: time.Second, tftpRetries: 3, tftpTransfers: 7, tftpWindow: 4, tftpSpin: 20 * time.Microsecond, cacheDir: "/c", maxArtifact: 42}
	if c := o.tftpConfig(); c.Dir != "/srv/ipxe" || c.Timeout != time.Second || c.Retries != 3 || c.MaxTransfers != 7 || c.MaxWindowSize != 4 || c.SpinWait != 20*time.Microsecond || c.Files != nil {
		t.Errorf("tftp config %+v", c)
	}
	o.tftpSpin = 0
	if c := o.tftpConfig(); c.SpinWait >= 0 {
		t.Errorf("--tftp-spin-wait=0: SpinWait %s, want negative (never poll)", c.SpinWait)
	}
	if c, err := o.storeConfig(context.Background(), "https://10.96.0.1:443"); err != nil || c.Dir != "/c" || c.MaxSize != 42 || len(c.NameOptions) != 0 || len(c.RemoteOptions) != 1 || c.Guard == nil {
		t.Errorf("store config %+v, %v", c, err)
	}
	o.insecureReg = true
	if c, _ := o.storeConfig(context.Background(), "https://10.96.0.1:443"); len(c.NameOptions) != 1 {
		t.Errorf("--insecure-registry: name options %v", c.NameOptions)
	}

	scheme := k8sruntime.NewScheme()
	if c := o.cacheOptions(scheme); c.Scheme != scheme || c.DefaultNamespaces != nil || c.ByObject != nil {
		t.Errorf("cache options without namespaces: %+v", c)
	}
	o.namespace, o.podNamespace = "tenants", "kubefarm-system"
	c := o.cacheOptions(scheme)
	if _, ok := c.DefaultNamespaces["tenants"]; !ok || len(c.DefaultNamespaces) != 1 {
		t.Errorf("--namespace: default namespaces %v", c.DefaultNamespaces)
	}
	if len(c.ByObject) == 0 {
		t.Error("--pod-namespace: no per-object cache options for the credentials")
	}
}

// TestStoreGuard: the store's guard refuses the built-in classes,
// --fetch-denied-cidrs but --fetch-allowed-cidrs, and the rest.Config's
// API server whatever is allowed; a bad prefix is refused at start with
// its flag named. Decisions only: nothing is dialed.
func TestStoreGuard(t *testing.T) {
	var o options
	if err := newFlagSet(t, &o).Parse([]string{
		"--fetch-denied-cidrs", "10.96.0.0/12, 10.244.0.0/16",
		"--fetch-allowed-cidrs", "10.96.0.0/16,127.0.0.1",
	}); err != nil {
		t.Fatal(err)
	}
	c, err := o.storeConfig(context.Background(), "https://10.96.0.1:443")
	if err != nil {
		t.Fatal(err)
	}
	for addr, allowed := range map[string]bool{
		"10.96.0.1":       false, // the API server, although 10.96.0.0/16 is allowed
		"10.96.0.10":      true,  // allowed over the deny list
		"10.97.0.1":       false, // --fetch-denied-cidrs
		"10.244.1.5":      false,
		"127.0.0.1":       true, // allowed over the built-in loopback
		"127.0.0.2":       false,
		"169.254.169.254": false,
		"192.0.2.10":      true,
	} {
		if err := c.Guard.Check(netip.MustParseAddr(addr)); (err == nil) != allowed {
			t.Errorf("%s: %v, want allowed %t", addr, err, allowed)
		}
	}
	for _, tc := range []struct{ flag, value string }{
		{"fetch-denied-cidrs", "10.96.0.0/33"},
		{"fetch-allowed-cidrs", "registry.example.com"},
	} {
		var o options
		if err := newFlagSet(t, &o).Parse([]string{"--" + tc.flag, tc.value}); err != nil {
			t.Fatal(err)
		}
		if _, err := o.storeConfig(context.Background(), "https://10.96.0.1:443"); err == nil || !strings.Contains(err.Error(), "--"+tc.flag) {
			t.Errorf("--%s=%s: %v, want an error naming the flag", tc.flag, tc.value, err)
		}
	}
	if _, err := o.storeConfig(context.Background(), "https://:443"); err == nil || !strings.Contains(err.Error(), "API server") {
		t.Errorf("an API server host without a name: %v", err)
	}
}

// TestEventBudgetMustBePositive: a zero or negative --event-qps or
// --event-burst is refused at start with the flags named (0 would
// otherwise mean "never write an Event" without saying so); events off
// (--event-interval 0) needs no budget.
func TestEventBudgetMustBePositive(t *testing.T) {
	for _, o := range []options{
		{eventInterval: time.Minute, eventQPS: 0, eventBurst: 50},
		{eventInterval: time.Minute, eventQPS: 5, eventBurst: -1},
	} {
		_, err := machineEvents(nil, nil, o, prometheus.NewRegistry(), logr.Discard())
		if err == nil || !strings.Contains(err.Error(), "--event-qps") || !strings.Contains(err.Error(), "--event-burst") {
			t.Errorf("qps %g burst %d: err %v, want both flags named", o.eventQPS, o.eventBurst, err)
		}
	}
	sink, err := machineEvents(nil, nil, options{eventInterval: 0, eventQPS: 0}, prometheus.NewRegistry(), logr.Discard())
	if err != nil || sink != nil {
		t.Errorf("events off: sink %v, err %v; want none and no error", sink, err)
	}
}

// TestCacheTrimsWhatIsNeverRead: the cache's transform (the one
// cacheOptions installs) keeps no managed fields of any object; NodePools
// (never written back) also lose their annotations, labels, owner
// references and finalizers, and their spec.machines, while what
// kubefarm-pxe reads stays (resourceVersion for the informer, the spec
// fields leases and scripts use). Machines are not in the cache at all
// (pxe/inventory). Other kinds keep annotations and labels: a DHCPLease is
// updated from what was read, and the join token issuer matches Secrets'
// labels.
func TestCacheTrimsWhatIsNeverRead(t *testing.T) {
	var o options
	trim := o.cacheOptions(k8sruntime.NewScheme()).DefaultTransform
	if trim == nil {
		t.Fatal("no transform: the cache keeps whole objects")
	}
	meta := func() metav1.ObjectMeta {
		yes := true
		return metav1.ObjectMeta{Namespace: "t1", Name: "x", UID: "u1", ResourceVersion: "7",
			Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "NodePool", Name: "p", UID: "u0", Controller: &yes}},
			Finalizers:      []string{"kubefarm.io/x"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "argocd-controller"}}}
	}
	p := &kubefarmv1.NodePool{ObjectMeta: meta(), Spec: kubefarmv1.NodePoolSpec{Cluster: "c", BootImage: "i",
		Network:  kubefarmv1.BootNetwork{Subnet: "10.0.0.0/24"},
		Labels:   map[string]string{"node": "label"},
		Machines: []kubefarmv1.MachineEntry{{Name: "m1", MACs: []string{"02:00:00:00:00:01"}, IP: "10.0.0.1"}}}}
	for _, tc := range []struct {
		obj     metav1.Object
		trimmed bool // annotations, labels, owners and finalizers go
	}{
		{p, true},
		{&kubefarmv1.DHCPLease{ObjectMeta: meta()}, false},
		{&kubefarmv1.BootImage{ObjectMeta: meta()}, false},
		{&corev1.Secret{ObjectMeta: meta()}, false},
	} {
		out, err := trim(tc.obj)
		if err != nil {
			t.Fatal(err)
		}
		got := out.(metav1.Object)
		if len(got.GetManagedFields()) != 0 {
			t.Errorf("%T keeps its managed fields", tc.obj)
		}
		if (len(got.GetAnnotations()) > 0) != !tc.trimmed {
			t.Errorf("%T annotations %v, trimmed=%v", tc.obj, got.GetAnnotations(), tc.trimmed)
		}
		if tc.trimmed && (got.GetLabels() != nil || got.GetOwnerReferences() != nil || got.GetFinalizers() != nil) {
			t.Errorf("%T: metadata not trimmed: labels %v, owners %v, finalizers %v", tc.obj, got.GetLabels(), got.GetOwnerReferences(), got.GetFinalizers())
		}
		if !tc.trimmed && got.GetLabels()["a"] != "b" {
			t.Errorf("%T: labels must stay: %v", tc.obj, got.GetLabels())
		}
		if got.GetUID() != "u1" || got.GetResourceVersion() != "7" || got.GetNamespace() != "t1" || got.GetName() != "x" {
			t.Errorf("%T: trimmed what is read: uid %q resourceVersion %q %s/%s", tc.obj, got.GetUID(), got.GetResourceVersion(), got.GetNamespace(), got.GetName())
		}
	}
	if p.Spec.Machines != nil {
		t.Errorf("NodePool spec.machines kept: %v", p.Spec.Machines)
	}
	if p.Spec.Labels["node"] != "label" || p.Spec.Network.Subnet != "10.0.0.0/24" {
		t.Errorf("trimmed a spec field kubefarm-pxe reads: pool %+v", p.Spec)
	}
}

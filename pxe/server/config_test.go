package server

import (
	"context"
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

// Moved from cmd/kubefarm-pxe with the functions they test; where they
// parsed flags they set the options the flags map onto.

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
			o := Options{ServerIP: tc.serverIP, HTTPAddr: tc.addr, HTTPPort: tc.port}
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
	o := Options{IPXEDir: "/srv/ipxe", TFTPTimeout: time.Second, TFTPRetries: 3, TFTPMaxTransfers: 7, TFTPMaxWindowSize: 4, TFTPSpinWait: 20 * time.Microsecond, CacheDir: "/c", MaxArtifactSize: 42}
	if c := o.tftpConfig(); c.Dir != "/srv/ipxe" || c.Timeout != time.Second || c.Retries != 3 || c.MaxTransfers != 7 || c.MaxWindowSize != 4 || c.SpinWait != 20*time.Microsecond || c.Files != nil {
		t.Errorf("tftp config %+v", c)
	}
	o.TFTPSpinWait = 0
	if c := o.tftpConfig(); c.SpinWait >= 0 {
		t.Errorf("--tftp-spin-wait=0: SpinWait %s, want negative (never poll)", c.SpinWait)
	}
	if c, err := o.storeConfig(context.Background(), "https://10.96.0.1:443"); err != nil || c.Dir != "/c" || c.MaxSize != 42 || len(c.NameOptions) != 0 || len(c.RemoteOptions) != 1 || c.Guard == nil {
		t.Errorf("store config %+v, %v", c, err)
	}
	o.InsecureRegistry = true
	if c, _ := o.storeConfig(context.Background(), "https://10.96.0.1:443"); len(c.NameOptions) != 1 {
		t.Errorf("--insecure-registry: name options %v", c.NameOptions)
	}

	scheme := k8sruntime.NewScheme()
	if c := o.cacheOptions(scheme); c.Scheme != scheme || c.DefaultNamespaces != nil || c.ByObject != nil {
		t.Errorf("cache options without namespaces: %+v", c)
	}
	o.Namespace, o.PodNamespace = "tenants", "kubefarm-system"
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
	o := DefaultOptions()
	o.FetchDeniedCIDRs = "10.96.0.0/12, 10.244.0.0/16"
	o.FetchAllowedCIDRs = "10.96.0.0/16,127.0.0.1"
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
	for _, tc := range []struct {
		flag, value string
		option      func(*Options) *string
	}{
		{"fetch-denied-cidrs", "10.96.0.0/33", func(o *Options) *string { return &o.FetchDeniedCIDRs }},
		{"fetch-allowed-cidrs", "registry.example.com", func(o *Options) *string { return &o.FetchAllowedCIDRs }},
	} {
		o := DefaultOptions()
		*tc.option(&o) = tc.value
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
	for _, o := range []Options{
		{EventInterval: time.Minute, EventQPS: 0, EventBurst: 50},
		{EventInterval: time.Minute, EventQPS: 5, EventBurst: -1},
	} {
		_, err := machineEvents(nil, nil, o, prometheus.NewRegistry(), logr.Discard())
		if err == nil || !strings.Contains(err.Error(), "--event-qps") || !strings.Contains(err.Error(), "--event-burst") {
			t.Errorf("qps %g burst %d: err %v, want both flags named", o.EventQPS, o.EventBurst, err)
		}
	}
	sink, err := machineEvents(nil, nil, Options{EventInterval: 0, EventQPS: 0}, prometheus.NewRegistry(), logr.Discard())
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
	var o Options
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

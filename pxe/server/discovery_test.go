package server

// Discovery against a real API server, through the server New builds from
// Options (the wiring that ships): the boot script of a MAC no Machine
// claims, and POST /discovery's refusals, writes, cap and rates. Leases
// are DHCPLease objects the test writes as the DHCP side would; requests
// come from the leased addresses (127.77.0.0/16 and 127.78.0.0/16, which
// the kernel routes to loopback whole).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
)

// fromIP is an HTTP client whose connections come from src.
func fromIP(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

type reply struct {
	code   int
	body   string
	header http.Header
}

func do(t *testing.T, c *http.Client, method, url string, body []byte) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, string(b), resp.Header}
}

func report(t *testing.T, mac, serial string) []byte {
	t.Helper()
	b, err := json.Marshal(bootproto.DiscoveryReport{MAC: mac, Hardware: kubefarmv1.HardwareFacts{
		MemoryBytes: 3 << 30, CPU: kubefarmv1.CPUFacts{Count: 2, Model: "QEMU Virtual CPU"},
		System: kubefarmv1.SystemFacts{Vendor: "QEMU", Serial: "sys-" + mac},
		Disks:  []kubefarmv1.DiskFacts{{Name: "vda", SizeBytes: 8 << 30, Serial: serial, Rotational: true}},
		NICs:   []kubefarmv1.NICFacts{{MAC: mac, Name: "eth0", Driver: "virtio_net", Link: true}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// metric is the value of a counter line of a Prometheus text page, -1
// when absent.
func metric(t *testing.T, url, line string) float64 {
	t.Helper()
	r := do(t, http.DefaultClient, http.MethodGet, url, nil)
	for _, l := range strings.Split(r.body, "\n") {
		if rest, ok := strings.CutPrefix(l, line+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return -1
}

// artifactOrigin serves three small files and returns their image.
func artifactOrigin(t *testing.T) kubefarmv1.BootImageSpec {
	files := map[string][]byte{}
	art := func(name string, srv *httptest.Server) kubefarmv1.Artifact {
		b := []byte("kubefarm test " + name)
		sum := sha256.Sum256(b)
		files["/"+name] = b
		return kubefarmv1.Artifact{Digest: "sha256:" + hex.EncodeToString(sum[:]), URL: srv.URL + "/" + name}
	}
	// Not on 127.0.0.1: artifact fetches never connect to the API
	// server's addresses.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return kubefarmv1.BootImageSpec{KubeletVersion: "v1.34.4", Kernel: art("vmlinuz", srv), Initrd: art("initrd", srv), Rootfs: art("rootfs", srv)}
}

// startDiscovery starts a replica with discovery on and waits for it to be
// ready; it returns the boot service's and the metrics' base URLs.
func startDiscovery(t *testing.T, env *testenv.Env, edit func(*Options)) (string, string) {
	o := DefaultOptions()
	o.Config = env.Config
	o.ServerIP = "127.0.0.1"
	o.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	o.MetricsAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	o.TFTPAddr = ""
	o.CacheDir = t.TempDir()
	o.VerifyImages = false
	o.FetchAllowedCIDRs = "127.0.0.2"
	o.EventInterval = 0
	o.Discovery = true
	o.Log = testr.New(t)
	edit(&o)
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	metrics := "http://" + o.MetricsAddr
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	if err := wait.PollUntilContextCancel(wctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return status(t, metrics+"/healthz") == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("/healthz never 200: %v", err)
	}
	return "http://" + o.HTTPAddr, metrics
}

func TestDiscoveryAPI(t *testing.T) {
	env := testenv.StartT(t, testenv.Options{})
	c := env.Client
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "discovery-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	img := &kubefarmv1.BootImage{ObjectMeta: metav1.ObjectMeta{Name: "discovery-node"}, Spec: artifactOrigin(t)}
	if err := c.Create(ctx, img); err != nil {
		t.Fatal(err)
	}
	catchAll := func(name, subnet, start, end string, policy kubefarmv1.UnknownMachinePolicy) {
		p := &kubefarmv1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
			Spec: kubefarmv1.NodePoolSpec{Cluster: "c1", BootImage: img.Name, KernelArgs: []string{"console=ttyS0"},
				Network: kubefarmv1.BootNetwork{Subnet: subnet, DynamicRange: &kubefarmv1.DynamicRange{Start: start, End: end, UnknownMachines: policy}}}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	catchAll("hold", "127.77.0.0/16", "127.77.0.10", "127.77.0.250", kubefarmv1.UnknownHold)
	catchAll("join", "127.78.0.0/16", "127.78.0.10", "127.78.0.250", kubefarmv1.UnknownJoin)
	lease := func(pool, mac, ip string) {
		l := &kubefarmv1.DHCPLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: pool + "-" + strings.ReplaceAll(ip, ".", "-")},
			Spec: kubefarmv1.DHCPLeaseSpec{Pool: pool, MAC: mac, IP: ip, ExpireTime: metav1.NewTime(time.Now().Add(time.Hour))}}
		if err := c.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	macs := map[int]string{}
	ips := map[int]string{}
	for i := 1; i <= 6; i++ {
		macs[i], ips[i] = fmt.Sprintf("02:77:00:00:00:%02x", i), fmt.Sprintf("127.77.0.%d", 10+i)
		lease("hold", macs[i], ips[i])
	}
	const joinMAC, joinIP = "02:78:00:00:00:01", "127.78.0.11"
	lease("join", joinMAC, joinIP)
	// An expired lease is nobody's.
	const oldMAC, oldIP = "02:77:00:00:00:99", "127.77.0.99"
	l := &kubefarmv1.DHCPLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "hold-old"},
		Spec: kubefarmv1.DHCPLeaseSpec{Pool: "hold", MAC: oldMAC, IP: oldIP, ExpireTime: metav1.NewTime(time.Now().Add(-time.Minute))}}
	if err := c.Create(ctx, l); err != nil {
		t.Fatal(err)
	}

	// Replica A: a cap of 3, a rate that does not bind.
	baseA, metricsA := startDiscovery(t, env, func(o *Options) { o.DiscoveryMaxMachines, o.DiscoveryRate, o.DiscoveryBurst = 3, 1000, 1000 })
	any := fromIP("127.0.0.1")

	// The caches have the leases once the Join pool's MAC gets its script.
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return do(t, any, http.MethodGet, baseA+"/boot/"+joinMAC+".ipxe", nil).code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("the Join pool's MAC never got a script: %v", err)
	}

	t.Run("boot scripts", func(t *testing.T) {
		r := do(t, any, http.MethodGet, baseA+"/boot/"+joinMAC+".ipxe", nil)
		if !strings.Contains(r.body, "chain --replace --autofree "+baseA+"/boot/"+joinMAC+".ipxe?wait=1\n") || !strings.Contains(r.body, "\ndhcp\n") {
			t.Errorf("Join pool's script:\n%s", r.body)
		}
		if r := do(t, any, http.MethodGet, baseA+"/boot/"+joinMAC+".ipxe?wait=60", nil); r.code != http.StatusNotFound {
			t.Errorf("Join pool's script after its rounds: %d, want 404", r.code)
		}
		r = do(t, any, http.MethodGet, baseA+"/boot/"+strings.ToUpper(macs[1])+".ipxe", nil)
		if r.code != http.StatusOK || !strings.Contains(r.body, " kubefarm.mode=discover\n") || !strings.Contains(r.body, img.Spec.Rootfs.Digest) ||
			strings.Contains(r.body, "bootsecret") || strings.Contains(r.body, "/secret/") {
			t.Errorf("Hold pool's script: %d\n%s", r.code, r.body)
		}
		for _, mac := range []string{"02:77:00:00:00:77", oldMAC} {
			if r := do(t, any, http.MethodGet, baseA+"/boot/"+mac+".ipxe", nil); r.code != http.StatusNotFound {
				t.Errorf("%s (no current lease): %d, want 404", mac, r.code)
			}
		}
	})

	url := baseA + bootproto.DiscoveryPath
	list := func() []kubefarmv1.DiscoveredMachine {
		var l kubefarmv1.DiscoveredMachineList
		if err := c.List(ctx, &l); err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	get := func(mac string) (*kubefarmv1.DiscoveredMachine, bool) {
		var dm kubefarmv1.DiscoveredMachine
		err := c.Get(ctx, client.ObjectKey{Name: kubefarmv1.DiscoveredMachineName(mac)}, &dm)
		return &dm, err == nil
	}
	wantAnswer := func(t *testing.T, r reply, code int, enrolled bool) {
		t.Helper()
		var a bootproto.DiscoveryAnswer
		if r.code != code || json.Unmarshal([]byte(r.body), &a) != nil || a.Enrolled != enrolled || a.ReportAfterSeconds != 60 {
			t.Fatalf("answer %d %q, want %d with enrolled=%v, reportAfterSeconds 60", r.code, r.body, code, enrolled)
		}
	}

	t.Run("only from the leased address", func(t *testing.T) {
		for _, tc := range []struct{ name, src, mac string }{
			{"another MAC's address", ips[2], macs[1]},
			{"an address with no lease", "127.77.0.200", macs[1]},
			{"an expired lease's address", oldIP, oldMAC},
			{"a Join pool's machine", joinIP, joinMAC},
		} {
			if r := do(t, fromIP(tc.src), http.MethodPost, url, report(t, tc.mac, "x")); r.code != http.StatusForbidden {
				t.Errorf("%s: %d %q, want 403", tc.name, r.code, r.body)
			}
		}
		if r := do(t, fromIP(ips[3]), http.MethodPost, url, []byte(`{"mac":"`+macs[3]+`","hardware":{"gpu":1}}`)); r.code != http.StatusBadRequest ||
			!strings.Contains(r.body, "unknown field") {
			t.Errorf("unknown field: %d %q, want 400 naming it", r.code, r.body)
		}
		if r := do(t, fromIP(ips[3]), http.MethodGet, url, nil); r.code != http.StatusMethodNotAllowed {
			t.Errorf("GET: %d, want 405", r.code)
		}
		if n := len(list()); n != 0 {
			t.Errorf("%d DiscoveredMachines after refusals, want 0", n)
		}
	})

	t.Run("records, rewrites only on change", func(t *testing.T) {
		m1 := fromIP(ips[1])
		wantAnswer(t, do(t, m1, http.MethodPost, url, report(t, strings.ToUpper(macs[1]), "serial-a")), http.StatusOK, false)
		dm, ok := get(macs[1])
		if !ok || dm.Spec.MAC != macs[1] || dm.Spec.IP != ips[1] || dm.Spec.Pool != ns.Name+"/hold" || dm.Spec.Hardware.MemoryMiB != 3072 ||
			len(dm.Spec.Hardware.Disks) != 1 || dm.Spec.Hardware.Disks[0].Serial != "serial-a" || dm.Spec.LastSeen.IsZero() {
			t.Fatalf("DiscoveredMachine %v: %+v", ok, dm.Spec)
		}
		rv := dm.ResourceVersion
		// The same facts again: no write. The replica compares with its
		// cache, so wait until the cache has the object (the cap's gauge
		// counts it either way; the write decision needs the object).
		if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
			return metric(t, metricsA+"/metrics", "kubefarm_pxe_discovery_machines") == 1, nil
		}); err != nil {
			t.Fatal(err)
		}
		wantAnswer(t, do(t, m1, http.MethodPost, url, report(t, macs[1], "serial-a")), http.StatusOK, false)
		if dm, _ := get(macs[1]); dm.ResourceVersion != rv {
			t.Errorf("an unchanged report rewrote the object (resourceVersion %s -> %s)", rv, dm.ResourceVersion)
		}
		wantAnswer(t, do(t, m1, http.MethodPost, url, report(t, macs[1], "serial-b")), http.StatusOK, false)
		if dm, _ := get(macs[1]); dm.Spec.Hardware.Disks[0].Serial != "serial-b" {
			t.Errorf("a changed disk serial was not recorded: %+v", dm.Spec.Hardware.Disks)
		}
		// A fourth report within the per-source burst (3 per 5 s).
		r := do(t, m1, http.MethodPost, url, report(t, macs[1], "serial-c"))
		wantAnswer(t, r, http.StatusTooManyRequests, false)
		if r.header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
		if dm, _ := get(macs[1]); dm.Spec.Hardware.Disks[0].Serial != "serial-b" {
			t.Error("a report over the per-source rate was recorded")
		}
		if v := metric(t, metricsA+"/metrics", `kubefarm_pxe_discovery_reports_total{result="refused_source_rate"}`); v != 1 {
			t.Errorf("refused_source_rate %v, want 1", v)
		}
	})

	t.Run("cap", func(t *testing.T) {
		for _, i := range []int{2, 3} {
			wantAnswer(t, do(t, fromIP(ips[i]), http.MethodPost, url, report(t, macs[i], "s")), http.StatusOK, false)
		}
		wantAnswer(t, do(t, fromIP(ips[4]), http.MethodPost, url, report(t, macs[4], "s")), http.StatusTooManyRequests, false)
		if n := len(list()); n != 3 {
			t.Errorf("%d DiscoveredMachines, want the cap, 3", n)
		}
		if _, ok := get(macs[4]); ok {
			t.Error("the report over the cap was recorded")
		}
		if v := metric(t, metricsA+"/metrics", `kubefarm_pxe_discovery_reports_total{result="refused_cap"}`); v != 1 {
			t.Errorf("refused_cap %v, want 1", v)
		}
	})

	t.Run("enrolled", func(t *testing.T) {
		before, _ := get(macs[2])
		m := &kubefarmv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "hold-m2"},
			Spec: kubefarmv1.MachineSpec{Pool: "hold", Cluster: "c1", Hostname: "m2", MACs: []string{macs[2]}, IP: ips[2], DesiredImage: img.Name}}
		if err := c.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		// The replica knows the Machine once its script is the Machine's.
		if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
			return strings.Contains(do(t, any, http.MethodGet, baseA+"/boot/"+macs[2]+".ipxe", nil).body, "initrd=bootsecret"), nil
		}); err != nil {
			t.Fatalf("the Machine's script never came: %v", err)
		}
		if r := do(t, any, http.MethodGet, baseA+"/boot/"+macs[2]+".ipxe", nil); strings.Contains(r.body, "kubefarm.mode=discover") {
			t.Errorf("an enrolled MAC still boots discovery:\n%s", r.body)
		}
		// Only the Machine's own address learns it is enrolled.
		if r := do(t, fromIP(ips[3]), http.MethodPost, url, report(t, macs[2], "changed")); r.code != http.StatusForbidden {
			t.Errorf("enrolled MAC's report from another address: %d %q, want 403", r.code, r.body)
		}
		wantAnswer(t, do(t, fromIP(ips[2]), http.MethodPost, url, report(t, macs[2], "changed")), http.StatusOK, true)
		if after, _ := get(macs[2]); after.ResourceVersion != before.ResourceVersion {
			t.Error("an enrolled MAC's report wrote its DiscoveredMachine")
		}
	})

	t.Run("rate of new objects", func(t *testing.T) {
		// Replica B: a cap that does not bind, one new object and then
		// (practically) none.
		baseB, metricsB := startDiscovery(t, env, func(o *Options) { o.DiscoveryMaxMachines, o.DiscoveryRate, o.DiscoveryBurst = 100, 0.0001, 1 })
		urlB := baseB + bootproto.DiscoveryPath
		if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
			return do(t, any, http.MethodGet, baseB+"/boot/"+joinMAC+".ipxe", nil).code == http.StatusOK, nil
		}); err != nil {
			t.Fatal(err)
		}
		wantAnswer(t, do(t, fromIP(ips[5]), http.MethodPost, urlB, report(t, macs[5], "s")), http.StatusOK, false)
		r := do(t, fromIP(ips[6]), http.MethodPost, urlB, report(t, macs[6], "s"))
		wantAnswer(t, r, http.StatusTooManyRequests, false)
		if _, ok := get(macs[6]); ok {
			t.Error("a new object over the rate was created")
		}
		if v := metric(t, metricsB+"/metrics", `kubefarm_pxe_discovery_reports_total{result="refused_rate"}`); v != 1 {
			t.Errorf("refused_rate %v, want 1", v)
		}
	})
}

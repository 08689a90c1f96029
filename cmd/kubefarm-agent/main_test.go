package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefarm/kubefarm/agent/render"
	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/images/node/cni"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// guard stands for nft -f -: it keeps the scripts it is given.
type guard struct {
	mu      sync.Mutex
	scripts []string
}

func (g *guard) load(_ context.Context, rules string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.scripts = append(g.scripts, rules)
	return nil
}

const (
	mac    = "02:00:00:00:00:01"
	bootID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	image  = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	token  = "abcdef.0123456789abcdef"
	ca     = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	// secret is the boot's secret nodeRoot leaves where the initrd does;
	// fakePXE refuses every request without it.
	secret = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
)

// fakePXE stands for kubefarm-pxe: /config/<mac> once (then 403, as a
// consumed boot window), after a 503 as while the tenant credential is
// missing; /report records what it is sent; /heartbeat passes each valid
// heartbeat to beats and answers reboot, or beatCode when it is set.
type fakePXE struct {
	mu               sync.Mutex
	configs          int
	reports          []bootproto.BootReport
	rebootAfterLogin *metav1.Duration
	network          *nodeconfig.Network
	beats            chan bootproto.Heartbeat
	reboot           bool
	beatCode         int
}

func (f *fakePXE) set(fn func(*fakePXE)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakePXE) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := bootsecret.FromRequest(r); !ok || s != secret {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/config/"+mac:
		f.configs++
		switch f.configs {
		case 1:
			http.Error(w, "join credentials not available", http.StatusServiceUnavailable)
		case 2:
			_ = json.NewEncoder(w).Encode(nodeconfig.NodeConfig{
				Machine: "t1/m1", Cluster: "c1", Hostname: "node-1", ImageDigest: image,
				Labels:           map[string]string{"rack": "r1", "node-role.kubernetes.io/worker": ""},
				Taints:           nil,
				JoinToken:        token,
				RebootAfterLogin: f.rebootAfterLogin,
				Network:          f.network,
				TenantFacts: nodeconfig.TenantFacts{APIServer: "https://10.0.0.5:6443", CACert: []byte(ca),
					ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local", PodCIDR: "10.244.0.0/16"},
			})
		default:
			http.Error(w, "forbidden", http.StatusForbidden)
		}
	case r.Method == http.MethodPost && r.URL.Path == "/report":
		var rep bootproto.BootReport
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rep); err != nil {
			http.Error(w, "bad report", 400)
			return
		}
		if _, err := rep.Validate(); err != nil {
			http.Error(w, "bad report: "+err.Error(), 400)
			return
		}
		f.reports = append(f.reports, rep)
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPost && r.URL.Path == "/heartbeat":
		var hb bootproto.Heartbeat
		if err := json.NewDecoder(r.Body).Decode(&hb); err != nil {
			http.Error(w, "bad heartbeat", 400)
			return
		}
		if _, err := hb.Validate(); err != nil {
			http.Error(w, "bad heartbeat: "+err.Error(), 400)
			return
		}
		f.beats <- hb
		if f.beatCode != 0 {
			http.Error(w, "forbidden", f.beatCode)
			return
		}
		_ = json.NewEncoder(w).Encode(bootproto.HeartbeatReply{Reboot: f.reboot})
	default:
		http.NotFound(w, r)
	}
}

// fakeKubeletStarter stands for `systemctl start kubelet.service
// flanneld.service`: it records the call and, as flanneld would once it has
// its lease, writes /run/flannel/subnet.env (unless told not to).
type fakeKubeletStarter struct {
	root         string
	noFlannel    bool
	calls        [][]string
	configAtCall bool
}

func (f *fakeKubeletStarter) start(_ context.Context, units ...string) error {
	f.calls = append(f.calls, units)
	_, err := os.Stat(filepath.Join(f.root, render.KubeletConfig))
	f.configAtCall = err == nil
	if f.noFlannel {
		return nil
	}
	p := filepath.Join(f.root, "run/flannel/subnet.env")
	_ = os.MkdirAll(filepath.Dir(p), 0o755)
	return os.WriteFile(p, []byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\n"), 0o644)
}

func hexsum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// nodeRoot is a temporary node root with the image's CNI chain and its
// record, and the kernel's and initrd's files beside it.
func nodeRoot(t *testing.T, server string) Options {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	write := func(p string, data string, mode os.FileMode) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	conflist, err := os.ReadFile("../../images/node/rootfs/" + cni.ConflistPath)
	if err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(root, cni.ConflistPath), string(conflist), 0o644)
	rec := cni.Record{ConflistSHA256: hexsum(conflist), Plugins: map[string]string{}}
	for _, p := range cni.SetupPlugins {
		write(filepath.Join(root, cni.BinDir, p), "#!/bin/true "+p, 0o755)
		rec.Plugins[p] = hexsum([]byte("#!/bin/true " + p))
	}
	b, _ := json.Marshal(map[string]any{"cni": rec})
	write(filepath.Join(root, "usr/share/kubefarm/cni.json"), string(b), 0o644)

	o := defaultOptions()
	o.Root = root
	o.Cmdline = filepath.Join(dir, "cmdline")
	o.BootIDFile = filepath.Join(dir, "boot_id")
	o.BootIfaceFile = filepath.Join(dir, "bootif")
	o.SysClassNet = filepath.Join(dir, "sys/class/net")
	o.NetworkTimeout = 2 * time.Second
	write(o.Cmdline, "console=ttyS0 initrd=initrd kubefarm.image="+image+" kubefarm.rootfs="+server+"/artifacts/"+image+" kubefarm.server="+server+"\n", 0o444)
	write(o.BootIDFile, bootID+"\n", 0o444)
	write(o.BootIfaceFile, "enp1s0\n", 0o644)
	o.BootSecretFile = filepath.Join(dir, "boot-secret")
	write(o.BootSecretFile, secret+"\n", 0o600)
	write(filepath.Join(o.SysClassNet, "enp1s0/address"), strings.ToUpper(mac)+"\n", 0o444)
	return o
}

func TestRun(t *testing.T) {
	pxe := &fakePXE{}
	srv := httptest.NewServer(pxe)
	defer srv.Close()
	o := nodeRoot(t, srv.URL)
	starter := &fakeKubeletStarter{root: o.Root}
	var hostname string
	deps := Deps{Guard: (&guard{}).load, StartUnits: starter.start, SetHostname: func(n string) error { hostname = n; return nil }, Poll: 10 * time.Millisecond}
	ctx := context.Background()

	if _, err := run(ctx, o, deps, testr.New(t)); err != nil {
		t.Fatal(err)
	}
	if pxe.configs != 2 {
		t.Errorf("%d /config requests, want 2 (a 503, then the configuration)", pxe.configs)
	}
	if len(starter.calls) != 1 || strings.Join(starter.calls[0], " ") != "kubelet.service flanneld.service" || !starter.configAtCall {
		t.Errorf("fake kubelet starter calls %v (configuration written before: %v)", starter.calls, starter.configAtCall)
	}
	if hostname != "node-1" {
		t.Errorf("host name %q", hostname)
	}
	fi, err := os.Stat(filepath.Join(o.Root, render.BootstrapKubeconfig))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("bootstrap kubeconfig: %v, %v", fi, err)
	}
	env, _ := os.ReadFile(filepath.Join(o.Root, render.KubeletEnv))
	if !strings.Contains(string(env), "--node-labels=rack=r1") || strings.Contains(string(env), "node-role") {
		t.Errorf("kubelet env %q", env)
	}
	if len(pxe.reports) != 1 {
		t.Fatalf("reports %+v, want one", pxe.reports)
	}
	rep := pxe.reports[0]
	if rep.MAC != mac || rep.BootID != bootID || rep.ImageDigest != image || rep.Network == nil || !rep.Network.Verified {
		t.Errorf("report %+v (network %+v)", rep, rep.Network)
	}

	// A restarted agent (same boot) does not ask for the configuration
	// again: the window is used. It starts kubelet and reports again.
	if _, err := run(ctx, o, deps, testr.New(t)); err != nil {
		t.Fatal(err)
	}
	if pxe.configs != 2 || len(pxe.reports) != 2 {
		t.Errorf("restart: %d /config requests, %d reports", pxe.configs, len(pxe.reports))
	}

	// A mesh conflist sorting first: reported, not verified.
	if err := os.WriteFile(filepath.Join(o.Root, "etc/cni/net.d/00-mesh.conflist"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(ctx, o, deps, testr.New(t)); err != nil {
		t.Fatal(err)
	}
	if n := pxe.reports[2].Network; n == nil || n.Verified || !strings.Contains(n.Reason, "00-mesh.conflist") {
		t.Errorf("report with a foreign conflist: %+v", n)
	}
}

// TestRunHostNetwork: a configuration with a hostNetwork has its networkd
// files written and its links brought up before the kubelet starts, again
// by a restarted agent; links that do not come up are the boot's network
// verdict (the node stays tainted) and are said on the console.
func TestRunHostNetwork(t *testing.T) {
	pxe := &fakePXE{configs: 1, network: &nodeconfig.Network{HostNetwork: kubefarmv1.HostNetwork{
		Bonds: []kubefarmv1.Bond{{Name: "bond0", Members: []string{"boot", "eth1"}}},
		VLANs: []kubefarmv1.VLAN{{Name: "data", Link: "bond0", ID: 29}}, NodeLink: "data"},
		Addresses: map[string][]string{"data": {"10.29.0.7/16"}}}}
	srv := httptest.NewServer(pxe)
	defer srv.Close()
	o := nodeRoot(t, srv.URL)
	starter := &fakeKubeletStarter{root: o.Root}
	var applied [][]string
	var applyErr error
	var console []string
	deps := Deps{Guard: (&guard{}).load, SetHostname: func(string) error { return nil }, Poll: 10 * time.Millisecond,
		StartUnits: func(ctx context.Context, units ...string) error {
			if len(applied) == 0 {
				t.Error("the kubelet started before the host network was applied")
			}
			return starter.start(ctx, units...)
		},
		ApplyNetwork: func(_ context.Context, links []string, _ time.Duration) error {
			if _, err := os.Stat(filepath.Join(o.Root, render.NetworkdDir, "01-kubefarm-bond0.netdev")); err != nil {
				t.Errorf("applied before the files were written: %v", err)
			}
			applied = append(applied, links)
			return applyErr
		},
		Console: func(line string) { console = append(console, line) }}
	if _, err := run(context.Background(), o, deps, testr.New(t)); err != nil {
		t.Fatal(err)
	}
	if len(applied) != 1 || strings.Join(applied[0], " ") != "bond0 data" {
		t.Errorf("applied %v, want [bond0 data] once", applied)
	}
	if env, _ := os.ReadFile(filepath.Join(o.Root, render.FlannelEnv)); !strings.Contains(string(env), "FLANNELD_IFACE=data\n") {
		t.Errorf("flanneld env %q, want the node link", env)
	}
	if len(pxe.reports) != 1 || !pxe.reports[0].Network.Verified {
		t.Fatalf("reports %+v", pxe.reports)
	}

	// A restarted agent of the same boot waits for the links again; this
	// time they do not come up.
	applyErr = errors.New("timeout occurred while waiting for network connectivity")
	if _, err := run(context.Background(), o, deps, testr.New(t)); err != nil {
		t.Fatal(err)
	}
	if len(applied) != 2 {
		t.Errorf("applied %v, want twice", applied)
	}
	n := pxe.reports[1].Network
	if n == nil || n.Verified || !strings.Contains(n.Reason, "host network: links bond0, data did not come up: timeout") {
		t.Errorf("report of a network that did not come up: %+v", n)
	}
	if len(console) != 1 || !strings.Contains(console[0], "links bond0, data did not come up") {
		t.Errorf("console %q", console)
	}
}

// TestRunNoFlannel: flanneld never writes its lease: the agent reports the
// network unverified after the bounded wait, and the token is nowhere but
// in the bootstrap kubeconfig.
func TestRunNoFlannel(t *testing.T) {
	pxe := &fakePXE{configs: 1} // no 503 first
	srv := httptest.NewServer(pxe)
	defer srv.Close()
	o := nodeRoot(t, srv.URL)
	o.NetworkTimeout = 100 * time.Millisecond
	starter := &fakeKubeletStarter{root: o.Root, noFlannel: true}
	deps := Deps{Guard: (&guard{}).load, StartUnits: starter.start, SetHostname: func(string) error { return nil }, Poll: 10 * time.Millisecond}
	if _, err := run(context.Background(), o, deps, testr.New(t)); err != nil {
		t.Fatal(err)
	}
	if len(pxe.reports) != 1 || pxe.reports[0].Network.Verified || !strings.Contains(pxe.reports[0].Network.Reason, "run/flannel/subnet.env") {
		t.Errorf("reports %+v", pxe.reports)
	}
	_ = filepath.WalkDir(o.Root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, render.BootstrapKubeconfig) {
			return nil
		}
		if b, _ := os.ReadFile(p); strings.Contains(string(b), "0123456789abcdef") {
			t.Errorf("%s holds the join token", p)
		}
		return nil
	})
}

// TestRunRefused: a 403 (the window is gone) fails the run at once, with
// nothing written and no unit started.
func TestRunRefused(t *testing.T) {
	pxe := &fakePXE{configs: 2}
	srv := httptest.NewServer(pxe)
	defer srv.Close()
	o := nodeRoot(t, srv.URL)
	starter := &fakeKubeletStarter{root: o.Root}
	deps := Deps{Guard: (&guard{}).load, StartUnits: starter.start, SetHostname: func(string) error { return nil }}
	_, err := run(context.Background(), o, deps, testr.New(t))
	if err == nil || !strings.Contains(err.Error(), "HTTP 403") {
		t.Fatalf("err %v, want the 403", err)
	}
	if len(starter.calls) != 0 || len(pxe.reports) != 0 {
		t.Errorf("started %v, reported %v", starter.calls, pxe.reports)
	}
}

// TestRunGuardsAndSecret: the pod guard is loaded first, for the server of
// the kernel command line, before any request and before kubelet; a boot
// secret that is missing, readable by others or malformed, or a guard that
// does not load, stops the agent before it asks kubefarm-pxe anything.
func TestRunGuardsAndSecret(t *testing.T) {
	pxe := &fakePXE{}
	srv := httptest.NewServer(pxe)
	defer srv.Close()
	o := nodeRoot(t, srv.URL)
	starter := &fakeKubeletStarter{root: o.Root}
	g := &guard{}
	var configsAtGuard []int
	deps := Deps{StartUnits: starter.start, SetHostname: func(string) error { return nil }, Poll: 10 * time.Millisecond,
		Guard: func(ctx context.Context, rules string) error {
			configsAtGuard = append(configsAtGuard, pxe.configs)
			return g.load(ctx, rules)
		}}
	if _, err := run(context.Background(), o, deps, testr.New(t)); err != nil {
		t.Fatal(err)
	}
	u := strings.TrimPrefix(srv.URL, "http://")
	host, port, _ := strings.Cut(u, ":")
	if len(g.scripts) != 1 || !strings.Contains(g.scripts[0], "ip daddr "+host+" tcp dport "+port+" counter drop") || configsAtGuard[0] != 0 {
		t.Errorf("guard scripts %q loaded after %v /config requests, want one for %s before any", g.scripts, configsAtGuard, u)
	}

	for name, tc := range map[string]struct {
		mode  os.FileMode
		data  string
		guard error
		want  string
	}{
		"missing":          {want: "this boot's secret"},
		"readable by all":  {mode: 0o644, data: secret, want: "others may read it"},
		"malformed":        {mode: 0o600, data: "nope", want: "hex digits"},
		"guard not loaded": {mode: 0o600, data: secret, guard: errors.New("nft: no such table family"), want: "guarding kubefarm-pxe"},
	} {
		o := nodeRoot(t, srv.URL)
		if tc.mode != 0 {
			if err := os.WriteFile(o.BootSecretFile, []byte(tc.data), tc.mode); err != nil {
				t.Fatal(err)
			}
			_ = os.Chmod(o.BootSecretFile, tc.mode)
		} else {
			_ = os.Remove(o.BootSecretFile)
		}
		d := deps
		d.Guard = func(context.Context, string) error { return tc.guard }
		before := pxe.configs
		_, err := run(context.Background(), o, d, testr.New(t))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error quotes the secret", name)
		}
		if pxe.configs != before {
			t.Errorf("%s: asked kubefarm-pxe for its configuration", name)
		}
	}
}

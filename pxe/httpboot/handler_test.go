package httpboot

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
)

// fakeMachines is an in-memory Machines for handler tests; the cache-backed
// implementation is exercised against a real API server in cmd/kubefarm-pxe.
type fakeMachines struct {
	machines map[string]*kubefarmv1.Machine
	images   map[string]*kubefarmv1.BootImage
	pools    map[string]*kubefarmv1.NodePool
}

func (f *fakeMachines) ByMAC(mac string) (*kubefarmv1.Machine, bool) {
	m, ok := f.machines[mac]
	return m, ok
}

func (f *fakeMachines) ByIP(ip string) (*kubefarmv1.Machine, bool) {
	var found *kubefarmv1.Machine
	for _, m := range f.machines {
		if m.Spec.IP == ip {
			if found != nil && found != m {
				return nil, false
			}
			found = m
		}
	}
	return found, found != nil
}

func (f *fakeMachines) BootImage(name string) (*kubefarmv1.BootImage, bool) {
	b, ok := f.images[name]
	return b, ok
}

func (f *fakeMachines) Pool(ns, name string) (*kubefarmv1.NodePool, bool) {
	p, ok := f.pools[ns+"/"+name]
	return p, ok
}

type handlerFixture struct {
	h        *Handler
	metrics  *Metrics
	store    *Store
	kernel   []byte
	initrd   []byte
	rootfs   []byte
	img      *kubefarmv1.BootImage
	ipxeDir  string
	blobSrv  *blobServer
	machines *fakeMachines
}

// bootSecret walks mac's boot up to its secret as the booting machine
// does: this replica answers its iPXE's DHCP request (Arm), then iPXE
// fetches /secret/<mac> from the machine's address from. The handler needs
// Windows and a Recorder.
func (f *handlerFixture) bootSecret(t testing.TB, mac, from string) bootsecret.Secret {
	t.Helper()
	f.h.cfg.Windows.Arm(mac)
	r := httptest.NewRequest("GET", "http://10.0.0.2:8080/secret/"+mac, nil)
	r.RemoteAddr = from
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	if w.Code != 200 || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("GET /secret/%s: %d %v %s", mac, w.Code, w.Header(), w.Body.String())
	}
	return secretOf(t, w.Body.Bytes())
}

// secretOf reads the secret out of /secret's archive.
func secretOf(t testing.TB, archive []byte) bootsecret.Secret {
	t.Helper()
	s, err := bootsecret.FromArchive(archive)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustSecret(t testing.TB) bootsecret.Secret {
	t.Helper()
	s, err := bootsecret.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newHandlerFixture(t testing.TB, log logr.Logger) *handlerFixture {
	f := &handlerFixture{
		kernel: randomBytes(t, 300_000),
		initrd: randomBytes(t, 200_000),
		rootfs: randomBytes(t, 1_000_000),
	}
	f.blobSrv = newBlobServer(t, map[string][]byte{"/k": f.kernel, "/i": f.initrd, "/r": f.rootfs})
	f.img = image("img1", sha(f.kernel), sha(f.initrd), sha(f.rootfs))
	f.img.Spec.Kernel.URL = f.blobSrv.URL + "/k"
	f.img.Spec.Initrd.URL = f.blobSrv.URL + "/i"
	f.img.Spec.Rootfs.URL = f.blobSrv.URL + "/r"
	broken := image("broken", sha([]byte("k")), sha([]byte("i")), sha([]byte("r")))
	broken.Spec.Kernel.URL = f.blobSrv.URL + "/nope"

	p := pool()
	f.machines = &fakeMachines{
		machines: map[string]*kubefarmv1.Machine{
			"02:00:00:00:00:01": machine("img1", &kubefarmv1.ImageRef{Name: "img1", Digest: sha(f.rootfs)}, "debug"),
			"02:00:00:00:00:02": machine("img1", nil),
			"02:00:00:00:00:03": machine("missing-image", nil),
			"02:00:00:00:00:04": machine("broken", nil),
			"02:00:00:00:00:05": func() *kubefarmv1.Machine { m := machine("img1", nil); m.Spec.Pool = "gone"; return m }(),
		},
		images: map[string]*kubefarmv1.BootImage{"img1": f.img, "broken": broken},
		pools:  map[string]*kubefarmv1.NodePool{"t1/workers": p},
	}
	dir := t.TempDir()
	var err error
	f.store, err = NewStore(StoreConfig{Dir: filepath.Join(dir, "cache"), Guard: loopbackSources()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.store.Close() })
	f.ipxeDir = filepath.Join(dir, "ipxe")
	if err := os.MkdirAll(f.ipxeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.ipxeDir, "ipxe.efi"), []byte("EFI binary"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.ipxeDir, "ipxe.pxe"), []byte("not allow-listed"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A file beside the cache that no path may reach.
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	f.metrics, err = NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	f.h, err = NewHandler(Config{BaseURL: base, IPXEDir: f.ipxeDir, EnsureTimeout: 30 * time.Second}, f.machines, f.store, f.metrics, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *handlerFixture) do(method, target string, hdr map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "http://10.0.0.2:8080/", nil)
	r.URL = &url.URL{Path: target}
	r.RequestURI = target
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

func TestHandler(t *testing.T) {
	f := newHandlerFixture(t, testr.New(t))
	k, i, r := sha(f.kernel), sha(f.initrd), sha(f.rootfs)
	script := "#!ipxe\n" + amd64Check +
		"kernel " + base + "/artifacts/" + k + " console=ttyS0,115200n8 quiet debug loglevel=7" +
		" initrd=initrd initrd=bootsecret kubefarm.image=" + r + " kubefarm.rootfs=" + base + "/artifacts/" + r + " kubefarm.server=" + base + " BOOTIF=01-${netX/mac:hexhyp}\n" +
		"initrd --name initrd " + base + "/artifacts/" + i + "\ninitrd --name bootsecret " + base + "/secret/${netX/mac}\nboot\n" + refusal(f.img.Name, "amd64")
	script2 := strings.Replace(script, " debug loglevel=7", "", 1)

	for _, tc := range []struct {
		name, method, path string
		hdr                map[string]string
		code               int
		body               []byte
		headers            map[string]string
	}{
		{name: "script", path: "/boot/02:00:00:00:00:01.ipxe", code: 200, body: []byte(script),
			headers: map[string]string{"Cache-Control": "no-store"}},
		{name: "script, upper-case dashes", path: "/boot/02-00-00-00-00-01.ipxe", code: 200, body: []byte(script)},
		{name: "script, first boot", path: "/boot/02:00:00:00:00:02.ipxe", code: 200, body: []byte(script2)},
		{name: "HEAD script", method: "HEAD", path: "/boot/02:00:00:00:00:01.ipxe", code: 200},
		{name: "unknown MAC", path: "/boot/02:00:00:00:00:99.ipxe", code: 404},
		{name: "bad MAC", path: "/boot/zz:00:00:00:00:01.ipxe", code: 400},
		{name: "bad MAC, short", path: "/boot/02:00.ipxe", code: 400},
		{name: "bad MAC, traversal", path: "/boot/../../etc/passwd.ipxe", code: 400},
		{name: "image missing", path: "/boot/02:00:00:00:00:03.ipxe", code: 503},
		{name: "artifact download fails", path: "/boot/02:00:00:00:00:04.ipxe", code: 503},
		{name: "pool missing", path: "/boot/02:00:00:00:00:05.ipxe", code: 503},
		{name: "kernel", path: "/artifacts/" + k, code: 200, body: f.kernel,
			headers: map[string]string{"ETag": `"` + k + `"`, "Cache-Control": "public, max-age=31536000, immutable", "Content-Type": "application/octet-stream"}},
		{name: "range", path: "/artifacts/" + r, hdr: map[string]string{"Range": "bytes=100-199"}, code: 206, body: f.rootfs[100:200],
			headers: map[string]string{"Content-Range": "bytes 100-199/1000000", "Content-Length": "100"}},
		{name: "suffix range", path: "/artifacts/" + r, hdr: map[string]string{"Range": "bytes=-10"}, code: 206, body: f.rootfs[len(f.rootfs)-10:],
			headers: map[string]string{"Content-Range": "bytes 999990-999999/1000000"}},
		{name: "unsatisfiable range", path: "/artifacts/" + r, hdr: map[string]string{"Range": "bytes=2000000-"}, code: 416},
		{name: "if-none-match", path: "/artifacts/" + k, hdr: map[string]string{"If-None-Match": `"` + k + `"`}, code: 304},
		{name: "if-none-match other", path: "/artifacts/" + k, hdr: map[string]string{"If-None-Match": `"sha256:00"`}, code: 200, body: f.kernel},
		{name: "unknown digest", path: "/artifacts/" + sha([]byte("nothing")), code: 404},
		{name: "upper-case digest", path: "/artifacts/" + strings.ToUpper(k), code: 404},
		{name: "digest traversal", path: "/artifacts/../secret", code: 404},
		{name: "digest traversal 2", path: "/artifacts/sha256:../../secret", code: 404},
		{name: "digest dir", path: "/artifacts/", code: 404},
		{name: "ipxe binary", path: "/ipxe/ipxe.efi", code: 200, body: []byte("EFI binary")},
		{name: "ipxe not allow-listed", path: "/ipxe/ipxe.pxe", code: 404},
		{name: "ipxe traversal", path: "/ipxe/../secret", code: 404},
		{name: "ipxe allow-listed, absent", path: "/ipxe/snponly.efi", code: 404},
		// Probes' paths, never answered on the boot network (Probes).
		{name: "healthz", path: "/healthz", code: 404},
		{name: "metrics", path: "/metrics", code: 404},
		{name: "root", path: "/", code: 404},
		{name: "POST", method: "POST", path: "/boot/02:00:00:00:00:01.ipxe", code: 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.method
			if m == "" {
				m = "GET"
			}
			w := f.do(m, tc.path, tc.hdr)
			if w.Code != tc.code {
				t.Fatalf("%s %s: code %d, want %d; body %q", m, tc.path, w.Code, tc.code, truncateBody(w.Body.Bytes()))
			}
			if tc.body != nil && !bytes.Equal(w.Body.Bytes(), tc.body) {
				t.Errorf("body %q, want %q", truncateBody(w.Body.Bytes()), truncateBody(tc.body))
			}
			if m == "HEAD" && w.Body.Len() != 0 {
				t.Errorf("HEAD returned a body")
			}
			for k, v := range tc.headers {
				if got := w.Header().Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
	// The scripts caused one download per artifact, not one per request.
	for _, p := range []string{"/k", "/i", "/r"} {
		if n := f.blobSrv.count(p); n != 1 {
			t.Errorf("%s downloaded %d times", p, n)
		}
	}
	if got := testutil.ToFloat64(f.metrics.requests.WithLabelValues(RouteBoot, "404")); got != 1 {
		t.Errorf("boot 404s = %v, want 1", got)
	}
	if got := testutil.ToFloat64(f.metrics.requests.WithLabelValues(RouteArtifacts, "206")); got != 2 {
		t.Errorf("artifact 206s = %v, want 2", got)
	}
	if got := testutil.ToFloat64(f.metrics.bytes.WithLabelValues(RouteArtifacts)); got < float64(2*len(f.kernel)) {
		t.Errorf("artifact bytes = %v, want >= %d", got, 2*len(f.kernel))
	}
	w := httptest.NewRecorder()
	f.h.Probes().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != 200 || !strings.Contains(w.Body.String(), `kubefarm_pxe_http_requests_total{code="206",route="artifacts"} 2`) {
		t.Errorf("/metrics: %d\n%s", w.Code, w.Body.String())
	}
}

func TestProbes(t *testing.T) {
	f := newHandlerFixture(t, testr.New(t))
	ready := false
	f.h.cfg.Ready = func() bool { return ready }
	probe := func(method, path string) int {
		w := httptest.NewRecorder()
		f.h.Probes().ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w.Code
	}
	if code := probe("GET", "/healthz"); code != 503 {
		t.Errorf("/healthz before ready: %d, want 503", code)
	}
	ready = true
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/healthz", 200},
		{"GET", "/metrics", 200},
		{"POST", "/healthz", 405},
		{"GET", "/boot/02:00:00:00:00:01.ipxe", 404},
		{"GET", "/", 404},
	} {
		if code := probe(tc.method, tc.path); code != tc.code {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, code, tc.code)
		}
	}
}

func truncateBody(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

func FuzzRoutes(f *testing.F) {
	fx := newHandlerFixture(f, logr.Discard())
	k := sha(fx.kernel)
	// Warm the cache so the fuzzer can reach served artifacts too.
	if w := fx.do("GET", "/boot/02:00:00:00:00:01.ipxe", nil); w.Code != 200 {
		f.Fatalf("warm-up: %d", w.Code)
	}
	for _, s := range []string{
		"/boot/02:00:00:00:00:01.ipxe", "/boot/02-00-00-00-00-01.ipxe", "/artifacts/" + k,
		"/artifacts/../secret", "/artifacts/sha256:" + strings.Repeat("0", 64), "/ipxe/ipxe.efi",
		"/ipxe/../../secret", "/healthz", "/metrics", "/boot/.ipxe", "/artifacts/sha256:%2e%2e", "//", "/boot//x.ipxe",
	} {
		f.Add(s, "", "", byte(0), "")
		f.Add(s, "a=b", "bytes=0-10", byte(1), "")
	}
	f.Add("/report", "", "", byte(2), `{"mac":"02:00:00:00:00:01","bootID":"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0","imageDigest":"`+k+`"}`)
	f.Add("/config/02:00:00:00:00:01", "", "", byte(0), "")
	f.Add("/secret/02:00:00:00:00:01", "", "", byte(0), "")
	f.Add("/secret/${netX/mac}", "", "", byte(0), "")
	// The machine is armed, but the fuzzer's requests come from 192.0.2.1,
	// not its address: a secret is never issued to them.
	fx.h.cfg.Windows = NewBootWindows(time.Hour, nil)
	fx.h.cfg.Windows.Arm("02:00:00:00:00:01")
	fx.h.cfg.Recorder = &fakeRecorder{}
	f.Add("/heartbeat", "", "", byte(2), `{"mac":"02:00:00:00:00:01","bootID":"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0","rebootRequired":{"reason":"InteractiveLogin"}}`)
	allowed := map[string][]byte{
		"/artifacts/" + k:              fx.kernel,
		"/artifacts/" + sha(fx.initrd): fx.initrd,
		"/artifacts/" + sha(fx.rootfs): fx.rootfs,
		"/ipxe/ipxe.efi":               []byte("EFI binary"),
	}
	methods := []string{"GET", "HEAD", "POST", "PUT", "DELETE"}
	f.Fuzz(func(t *testing.T, path, query, rng string, method byte, body string) {
		r := httptest.NewRequest(methods[int(method)%len(methods)], "http://10.0.0.2:8080/", strings.NewReader(body))
		r.URL = &url.URL{Path: path, RawQuery: query}
		if rng != "" {
			r.Header.Set("Range", rng)
		}
		w := httptest.NewRecorder()
		fx.h.ServeHTTP(w, r)
		if w.Code >= 500 && w.Code != 503 {
			t.Fatalf("%q: code %d", path, w.Code)
		}
		got := w.Body.Bytes()
		if bytes.Contains(got, []byte("SECRET")) {
			t.Fatalf("%q served a file outside the cache", path)
		}
		if (w.Code == 200 || w.Code == 206) && r.Method != "HEAD" {
			switch {
			case path == "/heartbeat":
				if !bytes.HasPrefix(got, []byte(`{"reboot":`)) {
					t.Fatalf("%q: 200 without a heartbeat reply: %q", path, got)
				}
			case strings.HasPrefix(path, "/boot/"):
				if !bytes.HasPrefix(got, []byte("#!ipxe\n")) {
					t.Fatalf("%q: 200 without a script", path)
				}
			default:
				want, ok := allowed[path]
				if !ok {
					t.Fatalf("%q: served %d bytes from a path that is not an artifact", path, len(got))
				}
				if !bytes.Contains(want, got) {
					t.Fatalf("%q: got is not part of the artifact", path)
				}
			}
		}
	})
}

// TestCurlRange fetches a byte range with a real client over loopback.
func TestCurlRange(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("SKIPPED, NOT PASSED: curl not found; install the Debian package curl")
	}
	f := newHandlerFixture(t, testr.New(t))
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	// The script fetch caches the artifacts.
	resp, err := http.Get(srv.URL + "/boot/02:00:00:00:00:01.ipxe")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("script: %s", resp.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hdr := filepath.Join(t.TempDir(), "headers")
	out, err := exec.CommandContext(ctx, curl, "-sS", "--fail", "-r", "0-99", "-D", hdr, srv.URL+"/artifacts/"+sha(f.rootfs)).Output()
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	if !bytes.Equal(out, f.rootfs[:100]) {
		t.Fatalf("curl got %d bytes, not the first 100 of the rootfs", len(out))
	}
	h, _ := os.ReadFile(hdr)
	if !strings.Contains(string(h), " 206 ") || !strings.Contains(strings.ToLower(string(h)), "content-range: bytes 0-99/1000000") {
		t.Fatalf("headers:\n%s", h)
	}
	// And the whole file, to see the sendfile path end to end.
	full, err := exec.CommandContext(ctx, curl, "-sS", "--fail", srv.URL+"/artifacts/"+sha(f.rootfs)).Output()
	if err != nil || !bytes.Equal(full, f.rootfs) {
		t.Fatalf("full fetch: %v, %d bytes", err, len(full))
	}
}

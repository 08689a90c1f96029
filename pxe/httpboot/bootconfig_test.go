package httpboot

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

func TestNodeConfigFor(t *testing.T) {
	p := pool()
	p.Spec.Labels = map[string]string{"role": "worker", "zone": "a"}
	p.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "pool", Effect: corev1.TaintEffectNoSchedule}}
	p.Spec.Kubelet = kubefarmv1.KubeletSpec{MaxPods: 50}
	p.Spec.RegistryMirrors = []kubefarmv1.RegistryMirror{{Registry: "registry.k8s.io", Endpoints: []string{"http://10.0.0.1:5000"}}}
	p.Spec.Host = kubefarmv1.HostSettings{Timezone: "Europe/Prague", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAA k"}, RootPasswordHash: "$6$salt$hash"}
	p.Spec.Tags["gpu"] = kubefarmv1.TagSpec{
		Labels: map[string]string{"gpu": "true", "zone": "b"},
		Taints: []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}, {Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoExecute}},
	}
	m := machine("img1", &kubefarmv1.ImageRef{Name: "img1", Digest: dR}, "debug", "gpu")
	m.Spec.Cluster, m.Spec.Hostname = "c1", "node-1"

	got, err := NodeConfigFor(m, p)
	if err != nil {
		t.Fatal(err)
	}
	want := nodeconfig.NodeConfig{
		Machine: "t1/m1", Cluster: "c1", Hostname: "node-1", ImageDigest: dR,
		Labels: map[string]string{"role": "worker", "zone": "b", "gpu": "true"},
		Taints: []corev1.Taint{
			{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
			{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoExecute},
			nodeconfig.NetworkUnavailableTaint,
		},
		Kubelet:         kubefarmv1.KubeletSpec{MaxPods: 50},
		RegistryMirrors: []kubefarmv1.RegistryMirror{{Registry: "registry.k8s.io", Endpoints: []string{"http://10.0.0.1:5000"}}},
		// spec.host reaches the agent as it is.
		Timezone: "Europe/Prague", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAA k"}, RootPasswordHash: "$6$salt$hash",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	// The pool's rebootAfterLogin reaches the agent.
	p.Spec.Rollout.RebootAfterLogin = &metav1.Duration{Duration: 90 * time.Minute}
	if got, err := NodeConfigFor(m, p); err != nil || got.RebootAfterLogin == nil || got.RebootAfterLogin.Duration != 90*time.Minute {
		t.Errorf("rebootAfterLogin %v (%v), want 1h30m", got.RebootAfterLogin, err)
	} else if b, _ := json.Marshal(got); !strings.Contains(string(b), `"rebootAfterLogin":"1h30m0s"`) {
		t.Errorf("JSON %s", b)
	}

	if _, err := NodeConfigFor(machine("img1", nil, "nope"), p); err == nil {
		t.Error("undefined tag accepted")
	}
	other := machine("img1", nil)
	other.Spec.Pool = "elsewhere"
	if _, err := NodeConfigFor(other, p); err == nil {
		t.Error("machine of another pool accepted")
	}
}

func TestBootWindows(t *testing.T) {
	now := time.Unix(1000, 0)
	w := NewBootWindows(5*time.Minute, func() time.Time { return now })
	const mac, key = "02:00:00:00:00:01", "t1/m1"
	if _, ok, _ := w.Issue(mac, key); ok {
		t.Fatal("secret issued without an arm")
	}
	w.Arm(mac)
	if !w.Armed(mac) {
		t.Fatal("not armed after Arm")
	}
	s, ok, err := w.Issue(mac, key)
	if err != nil || !ok {
		t.Fatalf("Issue after Arm: %v %v", ok, err)
	}
	if _, ok, _ := w.Issue(mac, key); ok {
		t.Fatal("one arm issued two secrets")
	}
	if !w.Knows(key, s) || !w.Pending(key, s) {
		t.Fatal("the issued secret is not known or its window not open")
	}
	other, _ := bootsecret.Generate(nil)
	if w.Pending(key, other) || w.Knows(key, other) {
		t.Fatal("another secret opens the window")
	}
	if _, ok := w.Consume(key, other); ok {
		t.Fatal("window consumed with another secret")
	}
	if _, ok := w.Consume(key, s); !ok {
		t.Fatal("open window not consumed")
	}
	if _, ok := w.Consume(key, s); ok {
		t.Fatal("window used twice")
	}
	if !w.Knows(key, s) {
		t.Fatal("the boot's secret is forgotten once its configuration is served")
	}
	w.Restore(key, s)
	if _, ok := w.Consume(key, s); !ok {
		t.Fatal("restored window not open")
	}
	// Unissue puts the arm back and forgets the secret.
	w.Arm(mac)
	s2, _, _ := w.Issue(mac, key)
	w.Unissue(mac, key, s2)
	if w.Knows(key, s2) || !w.Armed(mac) {
		t.Fatal("Unissue left the secret or took the arm")
	}
	s3, ok, _ := w.Issue(mac, key)
	if !ok || w.Knows(key, s) {
		t.Fatal("a new boot's secret does not replace the last one")
	}
	// Arms and windows expire; a restore cannot extend a window past its TTL.
	now = now.Add(5*time.Minute + time.Second)
	if w.Pending(key, s3) {
		t.Fatal("window open after TTL")
	}
	if _, ok := w.Consume(key, s3); ok {
		t.Fatal("expired window consumed")
	}
	w.Restore(key, s3)
	if w.Pending(key, s3) {
		t.Fatal("restore extended an expired window")
	}
	w.Arm(mac)
	now = now.Add(5*time.Minute + time.Second)
	if _, ok, _ := w.Issue(mac, key); ok {
		t.Fatal("expired arm issued a secret")
	}
}

func TestBootReportValidate(t *testing.T) {
	good := bootproto.BootReport{MAC: "02-00-00-00-00-01", BootID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", ImageDigest: dR}
	if mac, err := good.Validate(); err != nil || mac != "02:00:00:00:00:01" {
		t.Fatalf("good report: %q, %v", mac, err)
	}
	for _, mut := range []func(*bootproto.BootReport){
		func(r *bootproto.BootReport) { r.MAC = "nope" },
		func(r *bootproto.BootReport) { r.BootID = "" },
		func(r *bootproto.BootReport) { r.BootID = strings.ToUpper(r.BootID) },
		func(r *bootproto.BootReport) { r.BootID = "0f1e2d3c04b5a-6978-8796-a5b4c3d2e1f0" },
		func(r *bootproto.BootReport) { r.ImageDigest = "sha256:abc" },
	} {
		r := good
		mut(&r)
		if _, err := r.Validate(); err == nil {
			t.Errorf("%+v accepted", r)
		}
	}
}

type fakeTokens struct {
	err error
	n   int
}

func (f *fakeTokens) Issue(_ context.Context, m *kubefarmv1.Machine) (string, error) {
	f.n++
	return "abcdef.0123456789abcdef", f.err
}

type fakeRecorder struct {
	mu    sync.Mutex
	recs  []kubefarmv1.BootRecord
	conds []metav1.Condition
	// also holds each RecordBoot's further conditions; reboots the
	// RequireReboot writes, which fail with rebootErr.
	also      [][]metav1.Condition
	reboots   []metav1.Condition
	rebootErr error
	// creds are RecordCredential's writes, which fail with credErr.
	creds   []kubefarmv1.BootCredential
	credErr error
}

func (f *fakeRecorder) RecordBoot(_ context.Context, m *kubefarmv1.Machine, rec kubefarmv1.BootRecord, network metav1.Condition, also ...metav1.Condition) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recs = append(f.recs, rec)
	f.conds = append(f.conds, network)
	f.also = append(f.also, also)
	// What the API write does, seen through the fake.
	m.Status.LastBoot = &rec
	meta.SetStatusCondition(&m.Status.Conditions, network)
	for _, c := range also {
		meta.SetStatusCondition(&m.Status.Conditions, c)
	}
	return nil
}

func (f *fakeRecorder) RecordCredential(_ context.Context, m *kubefarmv1.Machine, c kubefarmv1.BootCredential) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.credErr != nil {
		return f.credErr
	}
	f.creds = append(f.creds, c)
	m.Status.BootCredential = &c
	return nil
}

func (f *fakeRecorder) RequireReboot(_ context.Context, m *kubefarmv1.Machine, c metav1.Condition) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rebootErr != nil {
		return f.rebootErr
	}
	f.reboots = append(f.reboots, c)
	meta.SetStatusCondition(&m.Status.Conditions, c)
	return nil
}

func TestConfigAndReport(t *testing.T) {
	f := newHandlerFixture(t, testr.New(t))
	const mac, ip = "02:00:00:00:00:01", "10.0.0.11"
	f.machines.machines[mac].Spec.IP = ip
	f.machines.machines[mac].Spec.Hostname = "node-1"
	now := time.Unix(5000, 0)
	f.h.cfg.Windows = NewBootWindows(10*time.Minute, func() time.Time { return now })
	tokens := &fakeTokens{}
	rec := &fakeRecorder{}
	f.h.cfg.Recorder = rec

	var secret bootsecret.Secret
	req := func(method, path, from, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://10.0.0.2:8080"+path, strings.NewReader(body))
		r.RemoteAddr = from
		if secret != "" {
			bootsecret.SetHeader(r, secret)
		}
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, r)
		return w
	}
	cfg := "/config/" + mac
	mine := ip + ":40000"

	if w := req("GET", cfg, mine, ""); w.Code != 403 {
		t.Fatalf("before boot: %d, want 403", w.Code)
	}
	// Fetching the script opens nothing: a pod can do it.
	if w := req("GET", "/boot/"+mac+".ipxe", mine, ""); w.Code != 200 {
		t.Fatalf("script: %d", w.Code)
	}
	if w := req("GET", "/secret/"+mac, mine, ""); w.Code != 403 {
		t.Fatalf("secret without a DHCP answer: %d, want 403", w.Code)
	}
	secret = f.bootSecret(t, mac, mine)
	if len(rec.creds) != 1 || !secret.Matches(rec.creds[0].SHA256) {
		t.Fatalf("credential writes %+v, want the secret's hash", rec.creds)
	}
	// The secret is once per DHCP answer.
	if w := req("GET", "/secret/"+mac, mine, ""); w.Code != 403 {
		t.Fatalf("second secret: %d, want 403", w.Code)
	}
	// Window open, but no issuer: 503 and the window stays open.
	if w := req("GET", cfg, mine, ""); w.Code != 503 {
		t.Fatalf("no issuer: %d, want 503", w.Code)
	}
	f.h.cfg.Tokens = tokens
	for _, tc := range []struct{ name, path, from string }{
		{"other IP", cfg, "10.0.0.12:40000"},
		{"other MAC", "/config/02:00:00:00:00:02", mine},
		{"unknown MAC", "/config/02:00:00:00:00:99", mine},
		{"bad MAC", "/config/../../x", mine},
	} {
		if w := req("GET", tc.path, tc.from, ""); w.Code != 403 || w.Body.String() != "forbidden\n" {
			t.Errorf("%s: %d %q, want 403 forbidden", tc.name, w.Code, w.Body.String())
		}
	}
	// Without the secret, or with another, nothing.
	kept := secret
	for name, s := range map[string]bootsecret.Secret{"no secret": "", "another secret": mustSecret(t)} {
		secret = s
		if w := req("GET", cfg, mine, ""); w.Code != 403 {
			t.Errorf("config with %s: %d, want 403", name, w.Code)
		}
	}
	secret = kept
	// Issuer failure keeps the window.
	tokens.err = errors.New("tenant API down")
	if w := req("GET", cfg, mine, ""); w.Code != 503 {
		t.Fatalf("issuer failure: %d, want 503", w.Code)
	}
	tokens.err = nil
	w := req("GET", cfg, mine, "")
	if w.Code != 200 || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("config: %d %v", w.Code, w.Header())
	}
	var nc nodeconfig.NodeConfig
	if err := json.Unmarshal(w.Body.Bytes(), &nc); err != nil {
		t.Fatal(err)
	}
	if nc.JoinToken != "abcdef.0123456789abcdef" || nc.Hostname != "node-1" || nc.Machine != "t1/m1" {
		t.Errorf("config: %+v", nc)
	}
	if w := req("GET", cfg, mine, ""); w.Code != 403 {
		t.Fatalf("second use: %d, want 403", w.Code)
	}
	// A new boot's window expires.
	stale := secret
	secret = f.bootSecret(t, mac, mine)
	now = now.Add(11 * time.Minute)
	if w := req("GET", cfg, mine, ""); w.Code != 403 {
		t.Fatalf("expired window: %d, want 403", w.Code)
	}

	// Reports: the last boot's secret is refused.
	good := `{"mac":"` + mac + `","bootID":"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0","imageDigest":"` + sha(f.rootfs) + `"}`
	cur := secret
	for name, s := range map[string]bootsecret.Secret{"no secret": "", "the last boot's secret": stale} {
		secret = s
		if w := req("POST", "/report", mine, good); w.Code != 403 {
			t.Errorf("report with %s: %d, want 403", name, w.Code)
		}
	}
	secret = cur
	for _, tc := range []struct {
		name, method, from, body string
		code                     int
	}{
		{"GET", "GET", mine, "", 405},
		{"other IP", "POST", "10.0.0.12:1", good, 403},
		{"garbage", "POST", mine, "{", 400},
		{"unknown field", "POST", mine, `{"mac":"` + mac + `","x":1}`, 400},
		{"bad digest", "POST", mine, strings.Replace(good, "sha256:", "md5:", 1), 400},
		{"too large", "POST", mine, `{"mac":"` + strings.Repeat(" ", 5000) + `"}`, 400},
		{"failed boot with a verdict", "POST", mine, strings.Replace(good, `"}`, `","error":"x","network":{"verified":true,"reason":"ok"}}`, 1), 400},
		{"failed boot, error too long", "POST", mine, strings.Replace(good, `"}`, `","error":"`+strings.Repeat("x", bootproto.MaxBootError+1)+`"}`, 1), 400},
		{"failed boot, unprintable error", "POST", mine, strings.Replace(good, `"}`, `","error":"a\u0007b"}`, 1), 400},
		{"failed boot is no boot record", "POST", mine, strings.Replace(good, `"}`, `","error":"rootfs digest mismatch"}`, 1), 204},
		{"good", "POST", mine, good, 204},
		{"repeat", "POST", mine, good, 204},
	} {
		if w := req(tc.method, "/report", tc.from, tc.body); w.Code != tc.code {
			t.Errorf("report %s: %d, want %d (%s)", tc.name, w.Code, tc.code, w.Body.String())
		}
	}
	if len(rec.recs) != 1 || rec.recs[0].BootID != "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0" || rec.recs[0].ImageDigest != sha(f.rootfs) {
		t.Errorf("recorded %+v, want one record", rec.recs)
	}
}

// slowWriter stands for the API behind /report and /config: its writes
// take a while and, like client-go, give up when their context ends.
type slowWriter struct {
	delay time.Duration
	mu    sync.Mutex
	calls int
	recs  []kubefarmv1.BootRecord
}

func (s *slowWriter) RecordCredential(ctx context.Context, _ *kubefarmv1.Machine, _ kubefarmv1.BootCredential) error {
	return s.write(ctx)
}

func (s *slowWriter) write(ctx context.Context) error {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		return errors.New("API write without a deadline")
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(s.delay):
		return nil
	}
}

func (s *slowWriter) RecordBoot(ctx context.Context, _ *kubefarmv1.Machine, rec kubefarmv1.BootRecord, _ metav1.Condition, _ ...metav1.Condition) error {
	if err := s.write(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, rec)
	return nil
}

func (s *slowWriter) RequireReboot(ctx context.Context, _ *kubefarmv1.Machine, _ metav1.Condition) error {
	return s.write(ctx)
}

func (s *slowWriter) done() (calls int, recs []kubefarmv1.BootRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.recs
}

func (s *slowWriter) Issue(ctx context.Context, _ *kubefarmv1.Machine) (string, error) {
	return "abcdef.0123456789abcdef", s.write(ctx)
}

// halfClose sends a raw HTTP/1.1 request to addr, shuts its sending side
// down at once, as busybox nc does when its input ends, and reads the
// answer.
func halfClose(t *testing.T, addr, method, path, body string, secret bootsecret.Secret) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := method + " " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nConnection: close\r\nAuthorization: Bearer " + string(secret) + "\r\n"
	if body != "" {
		req += "Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"+body); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp
}

// TestAPIWritesSurviveHalfClose: a client that half-closes its connection
// after the request still waits for the answer. net/http cancels the
// request's context when it reads that EOF; the API writes of /report and
// /config must not be abandoned because of it (the write may land while
// the client is told 503, and its retry ends the same way).
func TestAPIWritesSurviveHalfClose(t *testing.T) {
	f := newHandlerFixture(t, testr.New(t))
	const mac = "02:00:00:00:00:01"
	m := f.machines.machines[mac]
	m.Spec.IP = "127.0.0.1" // the test's client connects from loopback
	m.Spec.Hostname = "node-1"
	// Long enough for the server to have read the client's EOF, which
	// cancels the request's context, before the write returns.
	api := &slowWriter{delay: 300 * time.Millisecond}
	f.h.cfg.Recorder = api
	f.h.cfg.Tokens = api
	f.h.cfg.Windows = NewBootWindows(10*time.Minute, time.Now)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")

	report := `{"mac":"` + mac + `","bootID":"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0","imageDigest":"` + sha(f.rootfs) + `"}`
	secret := mustSecret(t)
	m.Status.BootCredential = &kubefarmv1.BootCredential{SHA256: secret.Hash()}
	resp := halfClose(t, addr, http.MethodPost, "/report", report, secret)
	if resp.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(resp.Body)
		t.Errorf("report from a half-closed connection: %s %q, want 204", resp.Status, b)
	}
	if _, recs := api.done(); len(recs) != 1 || recs[0].BootID != "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0" {
		t.Errorf("recorded %+v, want the boot", recs)
	}

	f.h.cfg.Windows.Arm(mac)
	secret, _, err := f.h.cfg.Windows.Issue(mac, "t1/m1")
	if err != nil {
		t.Fatal(err)
	}
	resp = halfClose(t, addr, http.MethodGet, "/config/"+mac, "", secret)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "abcdef.0123456789abcdef") {
		t.Errorf("config from a half-closed connection: %s %q, want 200 with the token", resp.Status, b)
	}
	if calls, _ := api.done(); calls != 2 {
		t.Errorf("%d API writes, want 2", calls)
	}
}

// The pool's `all` tag reaches every machine's labels, taints and kernel
// arguments, before the machine's own tags.
func TestAllTag(t *testing.T) {
	p := pool()
	p.Spec.Tags["all"] = kubefarmv1.TagSpec{
		Labels:     map[string]string{"farm": "all", "gpu": "no"},
		Taints:     []corev1.Taint{{Key: "farm", Effect: corev1.TaintEffectPreferNoSchedule}},
		KernelArgs: []string{"all=1"},
	}
	p.Spec.Tags["gpu"] = kubefarmv1.TagSpec{Labels: map[string]string{"gpu": "yes"}, KernelArgs: []string{"nouveau.modeset=0"}}
	m := machine("new", nil, "gpu")
	m.Spec.Cluster = "c1"
	cfg, err := NodeConfigFor(m, p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Labels["farm"] != "all" || cfg.Labels["gpu"] != "yes" {
		t.Errorf("labels %v: want the all tag's, overridden by the machine's gpu tag", cfg.Labels)
	}
	if len(cfg.Taints) != 2 || cfg.Taints[0].Key != "farm" || cfg.Taints[1] != nodeconfig.NetworkUnavailableTaint {
		t.Errorf("taints %v: want the all tag's, then the network-unavailable taint", cfg.Taints)
	}
	img := image("new", digestOf('a'), digestOf('b'), digestOf('c'))
	script, err := Script(m, img, p, base)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(script, "quiet all=1 nouveau.modeset=0 ") {
		t.Errorf("kernel arguments: want the pool's, the all tag's, then gpu's, in order; script:\n%s", script)
	}
}

// TestSecretNotRecorded: when the secret's hash cannot be written to the
// Machine's status, /secret answers 503 and forgets the secret (no replica
// could check that boot's heartbeats), and the arm is kept so that the
// machine's retry gets one.
func TestSecretNotRecorded(t *testing.T) {
	f := newHandlerFixture(t, testr.New(t))
	const mac, ip = "02:00:00:00:00:01", "10.0.0.11"
	f.machines.machines[mac].Spec.IP = ip
	f.h.cfg.Windows = NewBootWindows(10*time.Minute, nil)
	rec := &fakeRecorder{credErr: errors.New("API down")}
	f.h.cfg.Recorder = rec
	f.h.cfg.Windows.Arm(mac)
	r := httptest.NewRequest("GET", "http://10.0.0.2:8080/secret/"+mac, nil)
	r.RemoteAddr = ip + ":40000"
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	if w.Code != 503 || bytes.Contains(w.Body.Bytes(), []byte(bootsecret.ArchivePath)) {
		t.Fatalf("secret with the status write failing: %d, want 503 without the archive", w.Code)
	}
	if !f.h.cfg.Windows.Armed(mac) {
		t.Fatal("the failed issue took the arm")
	}
	rec.credErr = nil
	s := f.bootSecret(t, mac, ip+":40000")
	if len(rec.creds) != 1 || !s.Matches(rec.creds[0].SHA256) || !f.h.cfg.Windows.Knows("t1/m1", s) {
		t.Fatalf("the retry's secret is not the one recorded: %+v", rec.creds)
	}
}

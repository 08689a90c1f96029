package imagecheck_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/fetchguard"
	"github.com/kubefarm/kubefarm/internal/testing/accepts"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
	"github.com/kubefarm/kubefarm/pxe/events"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
	"github.com/kubefarm/kubefarm/pxe/imagecheck"
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// blobServer serves files by path; a path in down answers 503.
type blobServer struct {
	*httptest.Server
	mu    sync.Mutex
	files map[string][]byte
	down  map[string]*atomic.Bool
}

func newBlobServer(t *testing.T) *blobServer {
	s := &blobServer{files: map[string][]byte{}, down: map[string]*atomic.Bool{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		b, ok := s.files[r.URL.Path]
		d := s.down[r.URL.Path]
		s.mu.Unlock()
		switch {
		case d != nil && d.Load():
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
		case ok:
			_, _ = w.Write(b)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *blobServer) add(path string, b []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[path] = b
	return s.URL + path
}

// image is a BootImage of three random artifacts served by srv under
// /<name>/<artifact>.
func image(t *testing.T, srv *blobServer, name string) (*kubefarmv1.BootImage, map[string][]byte) {
	data := map[string][]byte{"kernel": randomBytes(t, 4096), "initrd": randomBytes(t, 8192), "rootfs": randomBytes(t, 70_000)}
	art := func(a string) kubefarmv1.Artifact {
		return kubefarmv1.Artifact{Digest: sha(data[a]), URL: srv.add("/"+name+"/"+a, data[a])}
	}
	return &kubefarmv1.BootImage{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kubefarmv1.BootImageSpec{
			KubeletVersion: "v1.34.4",
			Kernel:         art("kernel"), Initrd: art("initrd"), Rootfs: art("rootfs"),
		},
	}, data
}

// TestArtifactsVerified runs the controller over a real API server, a real
// informer cache and the real artifact store, against artifacts served
// over HTTP: a good image becomes ArtifactsVerified=True and is cached, one
// whose rootfs is not what its digest says becomes False with
// DigestMismatch naming the rootfs, and one whose initrd is unavailable is
// False with ArtifactFetchFailed until the source comes back, then True
// (the retry with backoff). Each change is an event on the BootImage.
func TestArtifactsVerified(t *testing.T) {
	env := testenv.StartT(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := zap.New(zap.WriteTo(testWriter{t}))

	srv := newBlobServer(t)
	good, goodData := image(t, srv, "good")
	bad, _ := image(t, srv, "bad")
	// The rootfs URL of "bad" serves other bytes than its digest names.
	srv.add("/bad/rootfs", []byte("a rootfs someone replaced"))
	flaky, _ := image(t, srv, "flaky")
	initrdDown := &atomic.Bool{}
	initrdDown.Store(true)
	srv.mu.Lock()
	srv.down["/flaky/initrd"] = initrdDown
	srv.mu.Unlock()

	// The blob server listens on 127.0.0.1, which is refused unless
	// allowed.
	guard := fetchguard.New(fetchguard.Options{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	store := runController(t, ctx, env, guard, log)

	for _, bi := range []*kubefarmv1.BootImage{good, bad, flaky} {
		if err := env.Client.Create(ctx, bi); err != nil {
			t.Fatalf("creating BootImage %s: %v", bi.Name, err)
		}
	}
	waitFor := func(name string, status metav1.ConditionStatus, reason string) *kubefarmv1.BootImage {
		t.Helper()
		return waitForCondition(t, ctx, env, name, status, reason)
	}

	t.Run("good image is verified and prefetched", func(t *testing.T) {
		got := waitFor("good", metav1.ConditionTrue, kubefarmv1.ReasonArtifactsCached)
		msg := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionArtifactsVerified).Message
		for _, s := range []string{"kernel", "(4.0 KiB)", "initrd", "(8.0 KiB)", "rootfs", "(68.4 KiB)"} {
			if !strings.Contains(msg, s) {
				t.Errorf("message %q lacks %q", msg, s)
			}
		}
		for a, b := range goodData {
			if !store.Has(sha(b)) {
				t.Errorf("%s is not in the cache", a)
			}
		}
		var owners []string
		for _, mf := range got.ManagedFields {
			if mf.Subresource == "status" {
				owners = append(owners, mf.Manager)
			}
		}
		if len(owners) != 1 || owners[0] != imagecheck.FieldOwner {
			t.Errorf("status field managers %v, want only %s", owners, imagecheck.FieldOwner)
		}
	})

	t.Run("digest mismatch names the artifact, not what it got", func(t *testing.T) {
		got := waitFor("bad", metav1.ConditionFalse, kubefarmv1.ReasonDigestMismatch)
		msg := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionArtifactsVerified).Message
		if !strings.Contains(msg, "rootfs (spec.rootfs.url): the content does not match the digest "+bad.Spec.Rootfs.Digest) {
			t.Errorf("message %q does not name the rootfs, its field and its digest", msg)
		}
		if received := sha([]byte("a rootfs someone replaced")); strings.Contains(msg, strings.TrimPrefix(received, "sha256:")) {
			t.Errorf("message %q names the received content's digest", msg)
		}
		if strings.Contains(msg, "kernel") || strings.Contains(msg, "initrd") {
			t.Errorf("message %q names artifacts that verified", msg)
		}
		if store.Has(bad.Spec.Rootfs.Digest) {
			t.Error("the mismatched rootfs is in the cache")
		}
	})

	t.Run("fetch failure is retried until it succeeds", func(t *testing.T) {
		got := waitFor("flaky", metav1.ConditionFalse, kubefarmv1.ReasonArtifactFetchFailed)
		msg := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionArtifactsVerified).Message
		if !strings.Contains(msg, "initrd "+flaky.Spec.Initrd.Digest+" (spec.initrd.url)") || !strings.Contains(msg, "HTTP 503 (Service Unavailable)") {
			t.Errorf("message %q does not name the initrd and its 503", msg)
		}
		if strings.Contains(msg, "maintenance") {
			t.Errorf("message %q carries the response body", msg)
		}
		initrdDown.Store(false)
		waitFor("flaky", metav1.ConditionTrue, kubefarmv1.ReasonArtifactsCached)
	})

	t.Run("each transition is an event on the BootImage", func(t *testing.T) {
		waitForEvents(t, ctx, env, map[string]string{
			"good/ArtifactsVerifiedArtifactsCached":      corev1.EventTypeNormal,
			"good/ReadyArtifactsCached":                  corev1.EventTypeNormal,
			"bad/ArtifactsVerifiedDigestMismatch":        corev1.EventTypeWarning,
			"flaky/ArtifactsVerifiedArtifactFetchFailed": corev1.EventTypeWarning,
			"flaky/ArtifactsVerifiedArtifactsCached":     corev1.EventTypeNormal,
		})
	})
}

// TestArtifactAddressRefused runs the controller as kubefarm-pxe does,
// its store's guard denying the defaults and the API server's own
// addresses (resolved from the rest.Config's host), over a real API
// server. A BootImage whose URLs point at a loopback address and two
// whose URLs and repository point at the API server itself become
// ArtifactsVerified=False with ArtifactAddressRefused, the message naming
// each artifact, its spec field, the address and its class, with a Warning
// event; the loopback server never sees a connection, and nothing is
// cached.
func TestArtifactAddressRefused(t *testing.T) {
	env := testenv.StartT(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := zap.New(zap.WriteTo(testWriter{t}))

	apiAddrs, err := fetchguard.HostAddrs(ctx, nil, env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	// A loopback listener on another address than the API server's, so
	// that its refusal is for being loopback.
	lnIP := "127.0.0.2"
	for _, a := range apiAddrs {
		if a.String() == lnIP {
			t.Fatalf("the API server listens on %s; the test needs another loopback address", lnIP)
		}
	}
	srv := accepts.NewServer(t, lnIP, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	store := runController(t, ctx, env, fetchguard.New(fetchguard.Options{APIServer: apiAddrs}), log)

	data := []byte("kernel, initrd or rootfs")
	art := func(base, path string) kubefarmv1.Artifact {
		return kubefarmv1.Artifact{Digest: sha([]byte(path)), URL: base + path}
	}
	images := []*kubefarmv1.BootImage{
		{ObjectMeta: metav1.ObjectMeta{Name: "loopback"}, Spec: kubefarmv1.BootImageSpec{KubeletVersion: "v1.34.4",
			Kernel: art(srv.URL, "/kernel"), Initrd: art(srv.URL, "/initrd"), Rootfs: art(srv.URL, "/rootfs")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "apiserver-url"}, Spec: kubefarmv1.BootImageSpec{KubeletVersion: "v1.34.4",
			Kernel: art(env.Config.Host, "/version"), Initrd: art(env.Config.Host, "/api"), Rootfs: art(env.Config.Host, "/openapi/v2")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "apiserver-registry"}, Spec: kubefarmv1.BootImageSpec{KubeletVersion: "v1.34.4",
			Repository: u.Host + "/kubefarm/node",
			Kernel:     kubefarmv1.Artifact{Digest: sha(data)}, Initrd: kubefarmv1.Artifact{Digest: sha(data)}, Rootfs: kubefarmv1.Artifact{Digest: sha(data)}}},
	}
	for _, bi := range images {
		if err := env.Client.Create(ctx, bi); err != nil {
			t.Fatalf("creating BootImage %s: %v", bi.Name, err)
		}
	}

	apiHost := u.Hostname()
	for _, tc := range []struct {
		image  string
		msgHas []string
	}{
		{"loopback", []string{
			"kernel " + sha([]byte("/kernel")) + " (spec.kernel.url): refused to connect: 127.0.0.2 is a loopback address (127.0.0.0/8)",
			"initrd " + sha([]byte("/initrd")) + " (spec.initrd.url): refused to connect: 127.0.0.2 is a loopback address",
			"rootfs " + sha([]byte("/rootfs")) + " (spec.rootfs.url): refused to connect: 127.0.0.2 is a loopback address",
		}},
		{"apiserver-url", []string{
			"kernel " + sha([]byte("/version")) + " (spec.kernel.url): refused to connect: " + apiHost + " is the admin cluster's API server",
			"rootfs " + sha([]byte("/openapi/v2")) + " (spec.rootfs.url): refused to connect: " + apiHost + " is the admin cluster's API server",
		}},
		{"apiserver-registry", []string{
			"kernel " + sha(data) + " (spec.repository): refused to connect: " + apiHost + " is the admin cluster's API server",
		}},
	} {
		t.Run(tc.image, func(t *testing.T) {
			got := waitForCondition(t, ctx, env, tc.image, metav1.ConditionFalse, kubefarmv1.ReasonArtifactAddressRefused)
			msg := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionArtifactsVerified).Message
			if !strings.HasPrefix(msg, "source address refused: ") {
				t.Errorf("message %q", msg)
			}
			for _, s := range tc.msgHas {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q lacks %q", msg, s)
				}
			}
		})
	}
	if n := srv.Accepted(t); n != 0 {
		t.Errorf("the loopback server accepted %d connections", n)
	}
	for _, d := range []string{sha(data), sha([]byte("/kernel")), sha([]byte("/version"))} {
		if store.Has(d) {
			t.Errorf("%s is cached", d)
		}
	}
	waitForEvents(t, ctx, env, map[string]string{
		"loopback/ArtifactsVerifiedArtifactAddressRefused":           corev1.EventTypeWarning,
		"apiserver-url/ArtifactsVerifiedArtifactAddressRefused":      corev1.EventTypeWarning,
		"apiserver-registry/ArtifactsVerifiedArtifactAddressRefused": corev1.EventTypeWarning,
	})
}

// runController runs the controller over env with a store guarded by
// guard, until the test ends, and returns the store.
func runController(t *testing.T, ctx context.Context, env *testenv.Env, guard *fetchguard.Guard, log logr.Logger) *httpboot.Store {
	t.Helper()
	store, err := httpboot.NewStore(httpboot.StoreConfig{Dir: t.TempDir(), Guard: guard, NameOptions: []name.Option{name.Insecure}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	rec, stopEvents, err := events.StartAPI(env.Config, env.Scheme, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := imagecheck.New(c, &imagecheck.Reconciler{Reader: c, Client: env.Client, Store: store, Recorder: imagecheck.CoreRecorder(rec)},
		imagecheck.Options{BaseDelay: 50 * time.Millisecond, MaxDelay: 500 * time.Millisecond}, log)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait(); stopEvents() })
	wg.Add(2)
	go func() { defer wg.Done(); _ = c.Start(runCtx) }()
	go func() {
		defer wg.Done()
		if err := ctl.Start(runCtx); err != nil {
			t.Errorf("controller: %v", err)
		}
	}()
	return store
}

// waitForCondition polls name's ArtifactsVerified until it has status and
// reason, and checks that Ready mirrors it.
func waitForCondition(t *testing.T, ctx context.Context, env *testenv.Env, name string, status metav1.ConditionStatus, reason string) *kubefarmv1.BootImage {
	t.Helper()
	var got kubefarmv1.BootImage
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, types.NamespacedName{Name: name}, &got); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionArtifactsVerified)
		return c != nil && c.Status == status && c.Reason == reason, nil
	})
	if err != nil {
		t.Fatalf("BootImage %s: %v waiting for ArtifactsVerified=%s %s; conditions %+v", name, err, status, reason, got.Status.Conditions)
	}
	v := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionArtifactsVerified)
	r := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionReady)
	if r == nil || r.Status != v.Status || r.Reason != v.Reason || r.Message != v.Message {
		t.Errorf("BootImage %s: Ready %+v does not mirror ArtifactsVerified %+v", name, r, v)
	}
	if v.ObservedGeneration != got.Generation {
		t.Errorf("BootImage %s: observedGeneration %d, generation %d", name, v.ObservedGeneration, got.Generation)
	}
	return &got
}

// waitForEvents polls the BootImages' events until each of want
// ("<image>/<reason>") was recorded, and checks their types.
func waitForEvents(t *testing.T, ctx context.Context, env *testenv.Env, want map[string]string) {
	t.Helper()
	seen := map[string]string{}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var list corev1.EventList
		if err := env.Client.List(ctx, &list, client.InNamespace(metav1.NamespaceDefault)); err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "BootImage" {
				seen[e.InvolvedObject.Name+"/"+e.Reason] = e.Type
			}
		}
		for k := range want {
			if _, ok := seen[k]; !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("events: %v; have %v, want %v", err, seen, want)
	}
	for k, typ := range want {
		if seen[k] != typ {
			t.Errorf("event %s is %s, want %s", k, seen[k], typ)
		}
	}
}

// testWriter sends the controller's log to the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

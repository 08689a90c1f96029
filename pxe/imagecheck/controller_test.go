package imagecheck_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testenv"
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

	store, err := httpboot.NewStore(httpboot.StoreConfig{Dir: t.TempDir()})
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
	defer stopEvents()
	ctl, err := imagecheck.New(c, &imagecheck.Reconciler{Reader: c, Client: env.Client, Store: store, Recorder: imagecheck.CoreRecorder(rec)},
		imagecheck.Options{BaseDelay: 50 * time.Millisecond, MaxDelay: 500 * time.Millisecond}, log)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Add(2)
	go func() { defer wg.Done(); _ = c.Start(runCtx) }()
	go func() {
		defer wg.Done()
		if err := ctl.Start(runCtx); err != nil {
			t.Errorf("controller: %v", err)
		}
	}()

	for _, bi := range []*kubefarmv1.BootImage{good, bad, flaky} {
		if err := env.Client.Create(ctx, bi); err != nil {
			t.Fatalf("creating BootImage %s: %v", bi.Name, err)
		}
	}

	// waitFor polls name's ArtifactsVerified until it has status and reason.
	waitFor := func(name string, status metav1.ConditionStatus, reason string) *kubefarmv1.BootImage {
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

	t.Run("digest mismatch names the artifact", func(t *testing.T) {
		got := waitFor("bad", metav1.ConditionFalse, kubefarmv1.ReasonDigestMismatch)
		msg := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionArtifactsVerified).Message
		if !strings.Contains(msg, "rootfs "+bad.Spec.Rootfs.Digest) || !strings.Contains(msg, "content has digest "+sha([]byte("a rootfs someone replaced"))) {
			t.Errorf("message %q does not name the rootfs and what it got", msg)
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
		if !strings.Contains(msg, "initrd "+flaky.Spec.Initrd.Digest) || !strings.Contains(msg, "503") {
			t.Errorf("message %q does not name the initrd and its 503", msg)
		}
		initrdDown.Store(false)
		waitFor("flaky", metav1.ConditionTrue, kubefarmv1.ReasonArtifactsCached)
	})

	t.Run("each transition is an event on the BootImage", func(t *testing.T) {
		want := map[string]string{
			"good/ArtifactsVerifiedArtifactsCached":      corev1.EventTypeNormal,
			"good/ReadyArtifactsCached":                  corev1.EventTypeNormal,
			"bad/ArtifactsVerifiedDigestMismatch":        corev1.EventTypeWarning,
			"flaky/ArtifactsVerifiedArtifactFetchFailed": corev1.EventTypeWarning,
			"flaky/ArtifactsVerifiedArtifactsCached":     corev1.EventTypeNormal,
		}
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
	})
}

// testWriter sends the controller's log to the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

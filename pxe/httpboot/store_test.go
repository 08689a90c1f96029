package httpboot

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/fetchguard"
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func randomBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// blobServer serves fixed blobs by path and counts requests per path. When
// gate is non-nil every response waits on it, so a test can pile up
// concurrent Ensure calls before the first download can finish.
type blobServer struct {
	*httptest.Server
	blobs map[string][]byte
	gate  chan struct{}
	mu    sync.Mutex
	hits  map[string]int
}

func newBlobServer(t testing.TB, blobs map[string][]byte) *blobServer {
	b := &blobServer{blobs: blobs, hits: map[string]int{}}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.hits[r.URL.Path]++
		b.mu.Unlock()
		if b.gate != nil {
			<-b.gate
		}
		data, ok := b.blobs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(data)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *blobServer) count(p string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits[p]
}

// loopbackSources is a guard that lets the store reach this test's
// servers, which listen on 127.0.0.1 (refused by default).
func loopbackSources() *fetchguard.Guard {
	return fetchguard.New(fetchguard.Options{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
}

func newStore(t *testing.T, cfg StoreConfig) *Store {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Guard == nil {
		cfg.Guard = loopbackSources()
	}
	s, err := NewStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func cached(t *testing.T, s *Store, d string) []byte {
	t.Helper()
	f, err := s.Open(d)
	if err != nil {
		t.Fatalf("Open(%s): %v", d, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// leftovers lists every file in the cache that is not a verified artifact.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	tmp, _ := os.ReadDir(filepath.Join(dir, "tmp"))
	for _, e := range tmp {
		out = append(out, "tmp/"+e.Name())
	}
	return out
}

func TestStoreHTTP(t *testing.T) {
	good := randomBytes(t, 100_000)
	srv := newBlobServer(t, map[string][]byte{"/good": good, "/evil": []byte("not what was promised")})
	s := newStore(t, StoreConfig{})
	ctx := context.Background()

	if err := s.Ensure(ctx, kubefarmv1.Artifact{Digest: sha(good), URL: srv.URL + "/good"}, ""); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cached(t, s, sha(good)), good) {
		t.Fatal("cached content differs")
	}
	if n, err := s.Size(sha(good)); err != nil || n != int64(len(good)) {
		t.Fatalf("Size = %d, %v; want %d", n, err, len(good))
	}
	if _, err := s.Size(sha([]byte("never fetched"))); !errors.Is(err, ErrNotCached) {
		t.Fatalf("Size of an uncached digest: %v, want ErrNotCached", err)
	}
	// Cached digests are not fetched again.
	if err := s.Ensure(ctx, kubefarmv1.Artifact{Digest: sha(good), URL: srv.URL + "/good"}, ""); err != nil {
		t.Fatal(err)
	}
	if n := srv.count("/good"); n != 1 {
		t.Errorf("downloads = %d, want 1", n)
	}

	t.Run("digest mismatch leaves nothing", func(t *testing.T) {
		want := sha([]byte("the real kernel"))
		err := s.Ensure(ctx, kubefarmv1.Artifact{Digest: want, URL: srv.URL + "/evil"}, "")
		if err == nil || !strings.Contains(err.Error(), "the content does not match the digest "+want) || !errors.Is(err, ErrDigestMismatch) {
			t.Fatalf("err = %v, want a digest mismatch (ErrDigestMismatch)", err)
		}
		// What was received is not described, not even by its digest.
		if got := sha([]byte("not what was promised")); strings.Contains(err.Error(), strings.TrimPrefix(got, "sha256:")) {
			t.Fatalf("err = %v names the received content's digest", err)
		}
		if s.Has(want) {
			t.Fatal("mismatched content is in the cache")
		}
		if l := leftovers(t, s.cfg.Dir); len(l) != 0 {
			t.Fatalf("temporary files left: %v", l)
		}
	})
	t.Run("404", func(t *testing.T) {
		d := sha([]byte("x"))
		err := s.Ensure(ctx, kubefarmv1.Artifact{Digest: d, URL: srv.URL + "/missing"}, "")
		var se *StatusError
		if !errors.As(err, &se) || se.Code != http.StatusNotFound || errors.Is(err, ErrDigestMismatch) {
			t.Fatalf("err = %v, want a 404 that is no digest mismatch", err)
		}
		if !strings.Contains(err.Error(), "HTTP 404 (Not Found)") || strings.Contains(err.Error(), "page not found") {
			t.Fatalf("err = %v, want the status code and not the body", err)
		}
	})
	t.Run("size bound", func(t *testing.T) {
		small := newStore(t, StoreConfig{MaxSize: 1000})
		err := small.Ensure(ctx, kubefarmv1.Artifact{Digest: sha(good), URL: srv.URL + "/good"}, "")
		if err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Fatalf("err = %v, want a size error", err)
		}
		if small.Has(sha(good)) || len(leftovers(t, small.cfg.Dir)) != 0 {
			t.Fatal("oversized download left files behind")
		}
	})
	t.Run("bad digest and URL", func(t *testing.T) {
		for _, a := range []kubefarmv1.Artifact{
			{Digest: "sha256:abc", URL: srv.URL + "/good"},
			{Digest: "../../x", URL: srv.URL + "/good"},
			{Digest: sha([]byte("y"))},
			{Digest: sha([]byte("y")), URL: "file:///etc/passwd"},
		} {
			if err := s.Ensure(ctx, a, ""); err == nil {
				t.Errorf("Ensure(%+v) succeeded", a)
			}
		}
	})
	t.Run("existing digest never overwritten", func(t *testing.T) {
		// A second Ensure must leave the very same inode in place, read-only,
		// so a reader mid-transfer never sees the file change.
		p := filepath.Join(s.cfg.Dir, "sha256", strings.TrimPrefix(sha(good), "sha256:"))
		fi1, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Ensure(ctx, kubefarmv1.Artifact{Digest: sha(good), URL: srv.URL + "/good"}, ""); err != nil {
			t.Fatal(err)
		}
		fi2, _ := os.Stat(p)
		if !os.SameFile(fi1, fi2) || fi1.Mode().Perm() != 0o444 {
			t.Fatalf("cached file replaced or writable: %v", fi2.Mode())
		}
	})
}

func TestStoreConcurrentEnsureDownloadsOnce(t *testing.T) {
	data := randomBytes(t, 1<<20)
	srv := newBlobServer(t, map[string][]byte{"/blob": data})
	srv.gate = make(chan struct{})
	s := newStore(t, StoreConfig{})
	a := kubefarmv1.Artifact{Digest: sha(data), URL: srv.URL + "/blob"}

	const n = 16
	errs := make(chan error, n)
	var started sync.WaitGroup
	for i := 0; i < n; i++ {
		started.Add(1)
		go func() {
			started.Done()
			errs <- s.Ensure(context.Background(), a, "")
		}()
	}
	started.Wait()
	// Release the server only once every caller is waiting on the shared
	// download: the in-flight map must hold the digest for all of them.
	waitFor(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inflight[strings.TrimPrefix(a.Digest, "sha256:")] != nil && srv.count("/blob") == 1
	})
	close(srv.gate)
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := srv.count("/blob"); got != 1 {
		t.Fatalf("downloads = %d, want 1", got)
	}
	if !bytes.Equal(cached(t, s, a.Digest), data) {
		t.Fatal("content differs")
	}
}

// TestStoreCallerGivesUp checks that a caller whose context ends stops
// waiting while the shared download carries on for the others.
func TestStoreCallerGivesUp(t *testing.T) {
	data := randomBytes(t, 4096)
	srv := newBlobServer(t, map[string][]byte{"/blob": data})
	srv.gate = make(chan struct{})
	s := newStore(t, StoreConfig{})
	a := kubefarmv1.Artifact{Digest: sha(data), URL: srv.URL + "/blob"}

	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- s.Ensure(ctx, a, "") }()
	waitFor(t, func() bool { return srv.count("/blob") == 1 })
	cancel()
	if err := <-first; err != context.Canceled {
		t.Fatalf("cancelled caller: err = %v", err)
	}
	second := make(chan error, 1)
	go func() { second <- s.Ensure(context.Background(), a, "") }()
	close(srv.gate)
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if got := srv.count("/blob"); got != 1 {
		t.Fatalf("downloads = %d, want 1", got)
	}
}

func TestStoreOCI(t *testing.T) {
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	repoName := host + "/kubefarm/node"
	repo, err := name.NewRepository(repoName, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	// A gzip stream as the blob: the cache must hold the blob's bytes (what
	// the digest names), not the uncompressed content.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(randomBytes(t, 50_000))
	_ = zw.Close()
	blob := gz.Bytes()
	if err := remote.WriteLayer(repo, static.NewLayer(blob, types.DockerLayer)); err != nil {
		t.Fatal(err)
	}

	s := newStore(t, StoreConfig{NameOptions: []name.Option{name.Insecure}})
	d := sha(blob)
	if err := s.Ensure(context.Background(), kubefarmv1.Artifact{Digest: d}, repoName); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cached(t, s, d), blob) {
		t.Fatal("cached blob differs from the uploaded blob")
	}
	// A digest the repository does not hold fails and caches nothing.
	missing := sha([]byte("absent"))
	if err := s.Ensure(context.Background(), kubefarmv1.Artifact{Digest: missing}, repoName); err == nil {
		t.Fatal("missing blob: no error")
	}
	if s.Has(missing) || len(leftovers(t, s.cfg.Dir)) != 0 {
		t.Fatal("missing blob left files behind")
	}
}

// TestStoreOCIDigestMismatch: a registry that answers a blob request with
// other bytes is reported as ErrDigestMismatch (go-containerregistry's own
// check fires first; its error type is internal, so this pins how the store
// recognises it).
func TestStoreOCIDigestMismatch(t *testing.T) {
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		if strings.Contains(r.URL.Path, "/blobs/") {
			_, _ = w.Write([]byte("not the blob that was asked for"))
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(reg.Close)
	repoName := strings.TrimPrefix(reg.URL, "http://") + "/kubefarm/node"
	s := newStore(t, StoreConfig{NameOptions: []name.Option{name.Insecure}})
	d := sha([]byte("the real blob"))
	err := s.Ensure(context.Background(), kubefarmv1.Artifact{Digest: d}, repoName)
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("err = %v, want ErrDigestMismatch", err)
	}
	if got := sha([]byte("not the blob that was asked for")); err.Error() != "the content does not match the digest "+d || strings.Contains(err.Error(), strings.TrimPrefix(got, "sha256:")) {
		t.Fatalf("err = %q, want only the expected digest named", err)
	}
	if s.Has(d) || len(leftovers(t, s.cfg.Dir)) != 0 {
		t.Fatal("mismatched blob left files behind")
	}
}

func TestStoreRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tmp", "half"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	newStore(t, StoreConfig{Dir: dir})
	if l := leftovers(t, dir); len(l) != 0 {
		t.Fatalf("stale temps kept: %v", l)
	}
}

// waitFor polls state that another goroutine changes. It is a check on
// that state, not a sleep standing in for one; it gives up after 10s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		runtime.Gosched()
	}
}

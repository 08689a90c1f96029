package httpboot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/fetchguard"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
)

// ErrNotCached is returned by Open for a digest the cache does not hold.
var ErrNotCached = errors.New("artifact not in cache")

// ErrDigestMismatch is wrapped by Ensure's error when the source delivered
// content whose sha256 is not the artifact's digest: the source is wrong,
// not merely unreachable. It covers both sources, the URL (checked here)
// and the OCI blob (checked by go-containerregistry while reading). The
// error names the expected digest only: the digest of what was received
// would tell a BootImage's author the content of whatever the source made
// kubefarm-pxe fetch (and a second BootImage naming that digest would get
// it cached and served).
var ErrDigestMismatch = errors.New("the content does not match the digest")

// StatusError is Ensure's error when a source answered with another HTTP
// status than success. It carries the code alone: the status line's text
// and the body are the server's to choose, and a condition or event must
// not carry what a source was made to say.
type StatusError struct {
	Code int
}

func (e *StatusError) Error() string {
	if t := http.StatusText(e.Code); t != "" {
		return fmt.Sprintf("the source answered HTTP %d (%s)", e.Code, t)
	}
	return fmt.Sprintf("the source answered HTTP %d", e.Code)
}

// sourceError is err as Ensure returns it: what failed, never what the
// server sent. go-containerregistry's transport.Error prints the response
// body, and a url.Error the URL, which after a redirect is the server's
// (a pre-signed blob URL, or any text it likes); both are cut down here. A
// guard's refusal is returned as it is, for errors.As.
func sourceError(err error) error {
	var refused *fetchguard.RefusedError
	if errors.As(err, &refused) {
		return refused
	}
	var te *transport.Error
	if errors.As(err, &te) {
		return &StatusError{Code: te.StatusCode}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// ggcrVerifyPkg is the package of go-containerregistry's digest check error
// (internal, so it is recognised by its type's package and name; pinned by
// TestStoreOCIDigestMismatch).
const ggcrVerifyPkg = "github.com/google/go-containerregistry/internal/verify"

// isRegistryDigestMismatch reports whether err is, or wraps,
// go-containerregistry's verify.Error.
func isRegistryDigestMismatch(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if t := reflect.TypeOf(err); t.PkgPath() == ggcrVerifyPkg && t.Name() == "Error" {
			return true
		}
	}
	return false
}

// StoreConfig configures a Store.
type StoreConfig struct {
	// Dir is the cache directory. Files live in Dir/sha256/<hex>; downloads
	// are written under Dir/tmp first, on the same file system, so that the
	// final rename is atomic.
	Dir string
	// MaxSize bounds one artifact (default 4 GiB: a generous rootfs). A
	// download past it is abandoned, so a wrong URL cannot fill the disk.
	MaxSize int64
	// Timeout bounds one download (default 30 minutes).
	Timeout time.Duration
	// Guard decides which addresses downloads may connect to (default:
	// fetchguard.New with no options, which refuses loopback, link-local,
	// unspecified, multicast and cloud metadata addresses). Every
	// connection of both sources goes through its dialer: the URL's, each
	// redirect's, the registry's, its token realm's and its blob
	// redirects'.
	Guard *fetchguard.Guard
	// RemoteOptions are passed to go-containerregistry for OCI blobs, e.g.
	// remote.WithAuthFromKeychain. A remote.WithTransport among them is
	// overridden by the guarded transport.
	RemoteOptions []remote.Option
	// NameOptions parse repository references, e.g. name.Insecure for a
	// registry served over plain HTTP.
	NameOptions []name.Option
}

// Store is the local content-addressed artifact cache.
type Store struct {
	cfg  StoreConfig
	root *os.Root // Dir/sha256: opened once, so reads cannot leave it

	// transport is the guarded transport of both sources; client, over
	// it, fetches URLs (no total timeout: Timeout bounds the download).
	transport http.RoundTripper
	client    *http.Client

	mu       sync.Mutex
	inflight map[string]*download
}

type download struct {
	done chan struct{}
	err  error
}

// NewStore creates the cache layout under cfg.Dir and removes temporary
// files left by a previous process that died mid-download.
func NewStore(cfg StoreConfig) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("a cache directory is required")
	}
	if cfg.MaxSize <= 0 {
		cfg.MaxSize = 4 << 30
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Minute
	}
	if cfg.Guard == nil {
		cfg.Guard = fetchguard.New(fetchguard.Options{})
	}
	for _, d := range []string{"sha256", "tmp"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	stale, _ := filepath.Glob(filepath.Join(cfg.Dir, "tmp", "*"))
	for _, f := range stale {
		_ = os.Remove(f)
	}
	root, err := os.OpenRoot(filepath.Join(cfg.Dir, "sha256"))
	if err != nil {
		return nil, err
	}
	tr := cfg.Guard.Transport()
	return &Store{cfg: cfg, root: root, transport: tr, client: fetchguard.Client(tr), inflight: map[string]*download{}}, nil
}

// Close releases the cache directory.
func (s *Store) Close() error { return s.root.Close() }

// Open returns the cached file for digest, or ErrNotCached.
func (s *Store) Open(digest string) (*os.File, error) {
	h, ok := bootproto.DigestHex(digest)
	if !ok {
		return nil, ErrNotCached
	}
	f, err := s.root.Open(h)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotCached
	}
	return f, err
}

// Has reports whether digest is cached.
func (s *Store) Has(digest string) bool {
	h, ok := bootproto.DigestHex(digest)
	if !ok {
		return false
	}
	_, err := s.root.Stat(h)
	return err == nil
}

// Size is the size in bytes of the cached file for digest, or ErrNotCached.
func (s *Store) Size(digest string) (int64, error) {
	h, ok := bootproto.DigestHex(digest)
	if !ok {
		return 0, ErrNotCached
	}
	fi, err := s.root.Stat(h)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, ErrNotCached
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// Ensure makes artifact a available in the cache: from the OCI repository
// when one is given (the blob with that digest), else from a.URL. The
// content is verified against the digest before it becomes visible; a
// cached digest is never downloaded or written again.
//
// Concurrent calls for one digest share one download. The download runs on
// its own context bounded by Timeout, so a caller that gives up (ctx done)
// does not fail the download for the others; it just stops waiting.
func (s *Store) Ensure(ctx context.Context, a kubefarmv1.Artifact, repository string) error {
	h, ok := bootproto.DigestHex(a.Digest)
	if !ok {
		return fmt.Errorf("invalid digest %q", a.Digest)
	}
	if s.Has(a.Digest) {
		return nil
	}
	s.mu.Lock()
	d, running := s.inflight[h]
	if !running {
		d = &download{done: make(chan struct{})}
		s.inflight[h] = d
		go func() {
			d.err = s.fetch(a, h, repository)
			s.mu.Lock()
			delete(s.inflight, h)
			s.mu.Unlock()
			close(d.done)
		}()
	}
	s.mu.Unlock()
	select {
	case <-d.done:
		return d.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store) fetch(a kubefarmv1.Artifact, h, repository string) error {
	// Checked again under the in-flight entry: a download that finished
	// between Has and taking the lock must not be repeated.
	if s.Has(a.Digest) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	body, err := s.source(ctx, a, repository)
	if err != nil {
		return err
	}
	defer body.Close()

	tmp, err := os.CreateTemp(filepath.Join(s.cfg.Dir, "tmp"), h+".*")
	if err != nil {
		return err
	}
	// Removing the temp file is right on every path: on success it has
	// been hard-linked to its final name first.
	defer os.Remove(tmp.Name())
	defer tmp.Close()

	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, sum), io.LimitReader(body, s.cfg.MaxSize+1))
	if err != nil {
		if isRegistryDigestMismatch(err) {
			// Its text has the received content's digest: dropped.
			return fmt.Errorf("%w %s", ErrDigestMismatch, a.Digest)
		}
		return fmt.Errorf("downloading %s: %w", a.Digest, sourceError(err))
	}
	if n > s.cfg.MaxSize {
		return fmt.Errorf("downloading %s: larger than %d bytes", a.Digest, s.cfg.MaxSize)
	}
	if hex.EncodeToString(sum.Sum(nil)) != h {
		return fmt.Errorf("%w %s", ErrDigestMismatch, a.Digest)
	}
	if err := tmp.Chmod(0o444); err != nil {
		return err
	}
	// Sync before publishing: after a crash the name must never point at
	// a file whose blocks did not make it to disk.
	if err := tmp.Sync(); err != nil {
		return err
	}
	// Link, not rename: link fails if the name exists, so a cached digest
	// is never replaced, even by identical bytes under a reader's feet.
	if err := os.Link(tmp.Name(), filepath.Join(s.cfg.Dir, "sha256", h)); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// source opens the artifact's bytes.
func (s *Store) source(ctx context.Context, a kubefarmv1.Artifact, repository string) (io.ReadCloser, error) {
	if repository != "" {
		ref, err := name.NewDigest(repository+"@"+a.Digest, s.cfg.NameOptions...)
		if err != nil {
			return nil, fmt.Errorf("repository %q: %w", repository, err)
		}
		// The guarded transport last, so that no option replaces it.
		opts := append(append([]remote.Option{remote.WithContext(ctx)}, s.cfg.RemoteOptions...), remote.WithTransport(s.transport))
		layer, err := remote.Layer(ref, opts...)
		if err != nil {
			return nil, fmt.Errorf("blob %s: %w", ref, sourceError(err))
		}
		// Compressed is the blob exactly as stored, which is what the
		// digest names; Uncompressed would gunzip it.
		rc, err := layer.Compressed()
		if err != nil {
			return nil, fmt.Errorf("blob %s: %w", ref, sourceError(err))
		}
		return rc, nil
	}
	if a.URL == "" {
		return nil, fmt.Errorf("artifact %s has neither a repository nor a URL", a.Digest)
	}
	if !strings.HasPrefix(a.URL, "http://") && !strings.HasPrefix(a.URL, "https://") {
		return nil, fmt.Errorf("artifact %s: URL must be http or https", a.Digest)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", a.Digest, sourceError(err))
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("artifact %s: %w", a.Digest, &StatusError{Code: resp.StatusCode})
	}
	return resp.Body, nil
}

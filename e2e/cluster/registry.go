package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ServeRegistry runs an OCI registry on each of addrs with blobs on disk
// under dir, until one listener fails. It is the `registry` subcommand of
// cmd/e2e-cluster, started by Up.
func ServeRegistry(dir string, addrs ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	handler := registry.New(registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)))
	errs := make(chan error, len(addrs))
	for _, a := range addrs {
		srv := &http.Server{Addr: a, Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		go func() { errs <- fmt.Errorf("registry on %s: %w", a, srv.ListenAndServe()) }()
	}
	return <-errs
}

func (c *Cluster) startRegistry(ctx context.Context) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := c.start("registry", []string{self, "registry", "--addr", c.RegistryAddr, "--addr", BootRegistryAddr, "--dir", c.path("registry")}); err != nil {
		return err
	}
	for _, a := range []string{c.RegistryAddr, BootRegistryAddr} {
		if err := c.waitHTTP(ctx, "registry", "http://"+a+"/v2/", nil); err != nil {
			return err
		}
	}
	return nil
}

// ImageFile is one file of an image layer.
type ImageFile struct {
	Path    string // inside the image
	Source  string // on the host; empty means Content
	Content string
	Mode    int64
	// HashContent keys the image cache on Source's bytes rather than its
	// size and modification time (for small inputs copied from packages).
	HashContent bool
}

// Image is an image the cluster's pods pull, under its usual name.
type Image struct {
	Ref        string // e.g. registry.k8s.io/pause:3.10
	Files      []ImageFile
	Entrypoint []string
}

// PushImages builds each image (or takes it from the cache when its inputs
// did not change) and pushes it to the local registry under its usual
// repository path, where containerd's mirror configuration finds it. It
// returns the digest of each image by reference, so that a workload can be
// pinned to exactly what was just built (a warm bring-up with a rebuilt
// image must roll the pods, which an unchanged tag would not).
func (c *Cluster) PushImages(ctx context.Context, images []Image) (map[string]string, error) {
	digests := map[string]string{}
	for _, im := range images {
		start := time.Now()
		img, err := c.cachedImage(im)
		if err != nil {
			return nil, fmt.Errorf("building %s: %w", im.Ref, err)
		}
		d, err := img.Digest()
		if err != nil {
			return nil, fmt.Errorf("digest of %s: %w", im.Ref, err)
		}
		digests[im.Ref] = d.String()
		ref, err := name.ParseReference(im.Ref)
		if err != nil {
			return nil, err
		}
		// registry.k8s.io/pause:3.10 is served as 127.0.0.1:5001/pause:3.10.
		local, err := name.ParseReference(c.RegistryAddr+"/"+ref.Context().RepositoryStr()+":"+ref.Identifier(), name.Insecure)
		if err != nil {
			return nil, err
		}
		if err := remote.Write(local, img, remote.WithContext(ctx)); err != nil {
			return nil, fmt.Errorf("pushing %s: %w", im.Ref, err)
		}
		fmt.Printf("  image %s (%.1fs)\n", im.Ref, time.Since(start).Seconds())
	}
	return digests, nil
}

// cachedImage keeps built images as OCI layouts in CacheDir, keyed by a
// hash of the inputs, so a warm bring-up pushes without re-compressing.
func (c *Cluster) cachedImage(im Image) (v1.Image, error) {
	key, err := inputsKey(im)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(c.CacheDir(), "images", key)
	if p, err := layout.FromPath(dir); err == nil {
		if idx, err := p.ImageIndex(); err == nil {
			if m, err := idx.IndexManifest(); err == nil && len(m.Manifests) == 1 {
				return p.Image(m.Manifests[0].Digest)
			}
		}
	}
	img, err := buildImage(im)
	if err != nil {
		return nil, err
	}
	_ = os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return nil, err
	}
	return img, p.AppendImage(img)
}

// CacheDir survives Down, so that a warm Up skips image builds.
func (c *Cluster) CacheDir() string { return c.StateDir + "-cache" }

func inputsKey(im Image) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%q\x00", im.Ref, im.Entrypoint)
	for _, f := range im.Files {
		fmt.Fprintf(h, "%s\x00%d\x00%s\x00", f.Path, f.Mode, f.Content)
		if f.Source != "" {
			if f.HashContent {
				if err := hashFile(h, f.Source); err != nil {
					return "", err
				}
				continue
			}
			st, err := os.Stat(f.Source)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(h, "%s\x00%d\x00%d\x00", f.Source, st.Size(), st.ModTime().UnixNano())
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

func hashFile(h io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return err
	}
	fmt.Fprintf(h, "%s\x00sha256:%x\x00", path, sum.Sum(nil))
	return nil
}

// WriteLayouts writes each image (from the cache when its inputs did not
// change) as an OCI image layout in dir/<repository base name>, e.g.
// dir/kubefarm-pxe, with its reference in the index's
// org.opencontainers.image.ref.name annotation, for skopeo, crane or
// `ctr images import` to take from there.
func (c *Cluster) WriteLayouts(dir string, images []Image) error {
	for _, im := range images {
		img, err := c.cachedImage(im)
		if err != nil {
			return fmt.Errorf("building %s: %w", im.Ref, err)
		}
		ref, err := name.ParseReference(im.Ref)
		if err != nil {
			return err
		}
		out := filepath.Join(dir, filepath.Base(ref.Context().RepositoryStr()))
		if err := os.RemoveAll(out); err != nil {
			return err
		}
		p, err := layout.Write(out, empty.Index)
		if err != nil {
			return err
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": im.Ref,
		})); err != nil {
			return fmt.Errorf("writing %s: %w", out, err)
		}
		d, err := img.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("  %s %s -> %s\n", im.Ref, d, out)
	}
	return nil
}

func buildImage(im Image) (v1.Image, error) {
	// The layer is built in memory: tarball layers are read lazily, after
	// this function returns, and the largest binary is ~100 MiB.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range im.Files {
		// Parent directories first, as container runtimes expect.
		parts := strings.Split(strings.TrimPrefix(filepath.Dir(f.Path), "/"), "/")
		for i := range parts {
			d := strings.Join(parts[:i+1], "/")
			if d == "" || d == "." || dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
				return nil, err
			}
		}
		if err := addFile(tw, f); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.Entrypoint = im.Entrypoint
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	// Force the layer to be compressed and digested now, so that the
	// cached layout holds the final bytes.
	if _, err := img.Digest(); err != nil {
		return nil, err
	}
	return img, nil
}

func addFile(tw *tar.Writer, f ImageFile) error {
	mode := f.Mode
	if mode == 0 {
		mode = 0o644
	}
	name := strings.TrimPrefix(f.Path, "/")
	if f.Source == "" {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(f.Content)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := io.WriteString(tw, f.Content)
		return err
	}
	src, err := os.Open(f.Source)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return errors.New(f.Source + " is not a regular file")
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: st.Size(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}
